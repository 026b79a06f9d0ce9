package main

// The checkpoint commands: ls, verify, restore, prune. They work on any
// store URL whose store package is linked in (file and mem here; cloud
// stores register in their own files).

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	_ "github.com/spotsafe/spotsafe/checkpoint/filestore"
	_ "github.com/spotsafe/spotsafe/checkpoint/memstore"
)

// ckptCmd holds what every checkpoint command parses and opens.
type ckptCmd struct {
	name, usage string
	fs          *flag.FlagSet
	prefix      *string
}

func newCkptCmd(name, usage string) *ckptCmd {
	c := &ckptCmd{name: name, usage: usage, fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard)
	c.prefix = c.fs.String("prefix", "", "key prefix of the checkpoints inside the store (ManagerOptions.Prefix)")
	return c
}

// parse parses args and checks the number of positional arguments.
func (c *ckptCmd) parse(args []string, stderr io.Writer, positional ...string) ([]string, error) {
	pos, err := parseInterspersed(c.fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: spotsafe %s\n\n", c.usage)
			c.fs.SetOutput(stderr)
			c.fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError(err.Error())
	}
	if len(pos) != len(positional) {
		return nil, usageError(fmt.Sprintf("want %s, got %d argument(s)", strings.Join(positional, " and "), len(pos)))
	}
	return pos, nil
}

// open opens the store and a Manager over it; close releases both.
func (c *ckptCmd) open(ctx context.Context, rawURL string, stderr io.Writer, opts *checkpoint.ManagerOptions) (m *checkpoint.Manager, closeFn func(), err error) {
	st, err := checkpoint.Open(ctx, rawURL)
	if err != nil {
		return nil, nil, err
	}
	if opts == nil {
		opts = &checkpoint.ManagerOptions{}
	}
	opts.Prefix = *c.prefix
	opts.Keep = -1 // the commands never delete on their own
	// Warnings (a checkpoint skipped at restore, a retried store call)
	// go to the operator.
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err = checkpoint.NewManager(st, opts)
	if err != nil {
		closeStore(st)
		return nil, nil, err
	}
	return m, func() {
		m.Close(context.WithoutCancel(ctx))
		closeStore(st)
	}, nil
}

func closeStore(st checkpoint.Store) {
	if c, ok := st.(io.Closer); ok {
		c.Close()
	}
}

// stepFlag is an optional --step N.
type stepFlag struct {
	set  bool
	step int64
}

func (s *stepFlag) String() string {
	if !s.set {
		return ""
	}
	return fmt.Sprint(s.step)
}

func (s *stepFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("not a step number: %q", v)
	}
	s.set, s.step = true, n
	return nil
}

// runLs lists the step directories with their status.
func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCkptCmd("ls", "ls URL [--json] [--prefix P]")
	asJSON := c.fs.Bool("json", false, "print a JSON array")
	pos, err := c.parse(args, stderr, "URL")
	if err != nil {
		return err
	}
	m, done, err := c.open(ctx, pos[0], stderr, nil)
	if err != nil {
		return err
	}
	defer done()
	infos, err := m.List(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]lsEntry, len(infos))
		for i, in := range infos {
			out[i] = newLsEntry(in)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(infos) == 0 {
		fmt.Fprintf(stdout, "no checkpoints in %s\n", pos[0])
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATUS\tCREATED\tSIZE\tPARTS\tNOTE")
	for _, in := range infos {
		note := ""
		switch in.Status {
		case checkpoint.StatusIncomplete:
			note = "no manifest: an interrupted or running save"
		case checkpoint.StatusCorrupt:
			note = problem(in.Err)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", in.Step, in.Status, in.Created.UTC().Format(time.RFC3339), humanBytes(in.Bytes), in.Parts, note)
	}
	return tw.Flush()
}

// lsEntry is one element of `ls --json`.
type lsEntry struct {
	Step     int64              `json:"step"`
	Status   checkpoint.Status  `json:"status"`
	Created  time.Time          `json:"created"`
	Bytes    int64              `json:"bytes"`
	Parts    int                `json:"parts"`
	Problem  string             `json:"problem,omitempty"`
	Writer   *checkpoint.Writer `json:"writer,omitempty"`
	Metadata map[string]string  `json:"metadata,omitempty"`
}

func newLsEntry(in checkpoint.Info) lsEntry {
	e := lsEntry{Step: in.Step, Status: in.Status, Created: in.Created.UTC(), Bytes: in.Bytes, Parts: in.Parts}
	if in.Err != nil {
		e.Problem = problem(in.Err)
	}
	if in.Manifest != nil {
		e.Writer = &in.Manifest.Writer
		e.Metadata = in.Manifest.Metadata
	}
	return e
}

// problem says what is wrong, without the "checkpoint: step N:" prefix
// that the listing already shows.
func problem(err error) string {
	var ce *checkpoint.CorruptError
	if errors.As(err, &ce) {
		what := "manifest"
		if ce.Part != "" {
			what = fmt.Sprintf("part %q", ce.Part)
		}
		s := what + ": " + ce.Reason
		if ce.Err != nil {
			s += ": " + ce.Err.Error()
		}
		return s
	}
	return err.Error()
}

// runVerify checks every committed checkpoint, or one, byte for byte.
func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCkptCmd("verify", "verify URL [--step N] [--prefix P]")
	var step stepFlag
	c.fs.Var(&step, "step", "verify only this step")
	pos, err := c.parse(args, stderr, "URL")
	if err != nil {
		return err
	}
	m, done, err := c.open(ctx, pos[0], stderr, nil)
	if err != nil {
		return err
	}
	defer done()

	var steps []checkpoint.Info
	if step.set {
		steps = []checkpoint.Info{{Step: step.step}}
	} else {
		infos, err := m.List(ctx)
		if err != nil {
			return err
		}
		steps = infos
	}
	ok, corrupt, committed := 0, 0, 0
	for _, in := range steps {
		if in.Status == checkpoint.StatusIncomplete {
			fmt.Fprintf(stdout, "step %d: incomplete, not a checkpoint (no manifest: an interrupted or running save; retention removes it after a newer commit)\n", in.Step)
			continue
		}
		err := m.Verify(ctx, in.Step)
		switch {
		case err == nil:
			committed++
			ok++
			info := ""
			if in.Manifest != nil {
				info = fmt.Sprintf(" (%d parts, %s)", in.Parts, humanBytes(in.Bytes))
			}
			fmt.Fprintf(stdout, "step %d: ok%s\n", in.Step, info)
		case errors.Is(err, checkpoint.ErrCorrupt):
			committed++
			corrupt++
			fmt.Fprintf(stdout, "step %d: CORRUPT: %s\n", in.Step, problem(err))
		case errors.Is(err, checkpoint.ErrIncomplete):
			fmt.Fprintf(stdout, "step %d: incomplete, not a checkpoint (no manifest: an interrupted or running save)\n", in.Step)
			return &exitError{code: 1, err: fmt.Errorf("step %d is not committed", in.Step)}
		case errors.Is(err, checkpoint.ErrNoCheckpoint):
			return &exitError{code: 1, err: fmt.Errorf("no checkpoint at step %d", in.Step)}
		default:
			return err
		}
	}
	if committed == 0 {
		return &exitError{code: 1, err: fmt.Errorf("no committed checkpoints in %s", pos[0])}
	}
	if corrupt > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d checkpoints corrupt", corrupt, committed)}
	}
	fmt.Fprintf(stdout, "%d checkpoint(s) verified\n", ok)
	return nil
}

// runRestore writes the newest valid checkpoint (or one step) into DIR.
func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCkptCmd("restore", "restore URL DIR [--step N] [--prefix P]")
	var step stepFlag
	c.fs.Var(&step, "step", "restore this step instead of the newest valid one")
	pos, err := c.parse(args, stderr, "URL", "DIR")
	if err != nil {
		return err
	}
	pr := newProgressPrinter(stderr)
	m, done, err := c.open(ctx, pos[0], stderr, &checkpoint.ManagerOptions{OnProgress: pr.update})
	if err != nil {
		return err
	}
	defer done()
	want := checkpoint.Newest
	if step.set {
		want = step.step
	}
	man, err := m.RestoreTo(ctx, pos[1], want)
	pr.finish()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored step %d (%d parts, %s) into %s\n", man.Step, len(man.Parts), humanBytes(man.Bytes()), pos[1])
	return nil
}

// runPrune applies retention now.
func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCkptCmd("prune", "prune URL --keep N [--keep-every K] [--prefix P]")
	keep := c.fs.Int("keep", 0, "how many of the newest valid checkpoints to keep (required, at least 1)")
	every := c.fs.Int64("keep-every", 0, "also keep every step that is a multiple of this")
	pos, err := c.parse(args, stderr, "URL")
	if err != nil {
		return err
	}
	if *keep < 1 {
		return usageError(fmt.Sprintf("--keep must be at least 1 (got %d)", *keep))
	}
	if *every < 0 {
		return usageError(fmt.Sprintf("--keep-every must not be negative (got %d)", *every))
	}
	m, done, err := c.open(ctx, pos[0], stderr, &checkpoint.ManagerOptions{KeepEvery: *every})
	if err != nil {
		return err
	}
	defer done()
	deleted, err := m.Prune(ctx, *keep)
	for _, s := range deleted {
		fmt.Fprintf(stdout, "deleted step %d\n", s)
	}
	if err != nil {
		return err
	}
	if len(deleted) == 0 {
		fmt.Fprintln(stdout, "nothing to delete")
	}
	return nil
}

// progressPrinter shows restore progress on stderr: a bar redrawn in
// place on a terminal, a plain line every 10% otherwise.
type progressPrinter struct {
	w    io.Writer
	tty  bool
	mu   sync.Mutex
	last checkpoint.Progress
	tens int64 // plain mode: last 10% mark printed
	bar  bool  // a bar is on screen
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	return &progressPrinter{w: w, tty: isTerminal(w), tens: -1}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progressPrinter) update(pr checkpoint.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.Step != p.last.Step && p.bar {
		fmt.Fprintln(p.w) // a fallback to an older step starts a new bar
		p.bar = false
	}
	if pr.Step != p.last.Step {
		p.tens = -1
	}
	p.last = pr
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", progressBar(pr, 30))
		p.bar = true
		return
	}
	tens := int64(100)
	if pr.Total > 0 {
		tens = pr.Done * 10 / pr.Total * 10
	}
	if tens > p.tens {
		p.tens = tens
		fmt.Fprintf(p.w, "restore step %d: %d%% (%s of %s)\n", pr.Step, tens, humanBytes(pr.Done), humanBytes(pr.Total))
	}
}

func (p *progressPrinter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar {
		fmt.Fprintln(p.w)
		p.bar = false
	}
}

// progressBar renders "step 12 [#######.......]  45%  115.2 MiB/256.0 MiB  1.2 GiB/s".
func progressBar(p checkpoint.Progress, width int) string {
	frac := 1.0
	if p.Total > 0 {
		frac = float64(p.Done) / float64(p.Total)
	}
	frac = min(max(frac, 0), 1)
	fill := int(frac * float64(width))
	rate := ""
	if s := p.Elapsed.Seconds(); s > 0 {
		rate = "  " + humanBytes(int64(float64(p.Done)/s)) + "/s"
	}
	return fmt.Sprintf("step %d [%s%s] %3.0f%%  %s/%s%s", p.Step,
		strings.Repeat("#", fill), strings.Repeat(".", width-fill), 100*frac,
		humanBytes(p.Done), humanBytes(p.Total), rate)
}

// humanBytes formats a size with binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
