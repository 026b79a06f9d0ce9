// Command batchinfer is a batch inference worker over a sharded input set
// that survives spot interruptions without ever writing a shard's output
// twice or partly:
//
//	go run ./examples/batchinfer
//
// It generates the input shards, then scores them shard by shard with a
// small fixed model. Each shard's output is written atomically (a
// temporary file, fsync, rename), and the set of finished shards is the
// checkpoint. A simulated spot interruption (an in-process fake metadata
// server, as in examples/train) stops the first run; the worker commits the
// done-set, exits as a real one would (exit code 75), is run again,
// restores the done-set and carries on with the next shard. At the end it
// checks that every shard's output is there exactly once, and that no shard
// was processed twice.
//
// Flags:
//
//	-dir DIR               work directory: in/, out/ and the checkpoint
//	                       store ckpt/ (default ./spotsafe-batchinfer)
//	-shards N              input shards (default 120)
//	-records N             records per shard (default 200)
//	-shard-time D          minimum time to score one shard (default 15ms)
//	-simulate PROVIDER     aws, gcp, azure, alibaba, tencent, or none (default aws)
//	-interrupt-after D     when the simulated notice appears (default 700ms)
//	-keep                  keep earlier outputs and checkpoints and resume
//
// Unlike examples/train, the restart happens in the same process (a loop
// around spot.Run); in production the scheduler restarts the process.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/spot"
)

const (
	features = 16
	maxRuns  = 5
	// partDone is the checkpoint: a bitmap of finished shards.
	partDone = "done.bitmap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	dir            string
	shards         int
	records        int
	shardTime      time.Duration
	simulate       string
	interruptAfter time.Duration
	keep           bool
}

func parse(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("batchinfer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", "spotsafe-batchinfer", "work directory (in/, out/, ckpt/)")
	fs.IntVar(&c.shards, "shards", 120, "input shards")
	fs.IntVar(&c.records, "records", 200, "records per shard")
	fs.DurationVar(&c.shardTime, "shard-time", 15*time.Millisecond, "minimum time to score one shard")
	fs.StringVar(&c.simulate, "simulate", "aws", "provider to simulate (aws, gcp, azure, alibaba, tencent) or none")
	fs.DurationVar(&c.interruptAfter, "interrupt-after", 700*time.Millisecond, "when the simulated notice appears")
	fs.BoolVar(&c.keep, "keep", false, "keep earlier outputs and checkpoints, and resume")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.shards <= 0 || c.records <= 0:
		return nil, errors.New("-shards and -records must be positive")
	case c.interruptAfter < 0 || c.shardTime < 0:
		return nil, errors.New("durations must not be negative")
	case c.simulate != "none" && !slices.Contains(noticetest.Providers(), c.simulate):
		return nil, fmt.Errorf("-simulate %q: want one of %s, or none", c.simulate, strings.Join(noticetest.Providers(), ", "))
	}
	return c, nil
}

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "batchinfer:", err)
		return 2
	}
	code, err := batch(ctx, c, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "batchinfer:", err)
	}
	return code
}

func batch(ctx context.Context, c *config, stdout, stderr io.Writer) (int, error) {
	in, out := filepath.Join(c.dir, "in"), filepath.Join(c.dir, "out")
	if !c.keep {
		for _, d := range []string{in, out, filepath.Join(c.dir, "ckpt")} {
			if err := os.RemoveAll(d); err != nil {
				return 1, err
			}
		}
	}
	if err := generate(in, c.shards, c.records); err != nil {
		return 1, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 1, err
	}
	store, err := filestore.New(filepath.Join(c.dir, "ckpt"), nil)
	if err != nil {
		return 1, err
	}
	defer store.Close()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	var fake noticetest.Fake
	if c.simulate != "none" {
		fake, err = noticetest.New(c.simulate, nil)
		if err != nil {
			return 1, err
		}
		defer fake.Close()
		kind := notice.KindTerminate
		if c.simulate == "gcp" || c.simulate == "azure" {
			kind = notice.KindPreempt
		}
		appear := time.Now().Add(c.interruptAfter)
		fake.Schedule(kind, appear, appear.Add(noticetest.NominalNotice(c.simulate, kind)))
		fmt.Fprintf(stdout, "batchinfer: %d shards of %d records; simulated %s %s notice in %v\n", c.shards, c.records, c.simulate, kind, c.interruptAfter)
	}

	w := &worker{c: c, in: in, out: out, processed: make(map[int]int)}
	code := spot.ExitFailed
	for attempt := 1; attempt <= maxRuns; attempt++ {
		opts := &spot.Options{Store: store, Logger: log.With("run", attempt), Interval: 300 * time.Millisecond,
			PollInterval: 100 * time.Millisecond, Provider: spot.ProviderAuto}
		if fake != nil {
			opts.Provider, opts.Endpoint = c.simulate, fake.URL()
		}
		err := spot.Run(ctx, w.work, opts)
		code = spot.ExitCode(err)
		fmt.Fprintf(stdout, "run %d: exit code %d (%d shards done)\n", attempt, code, w.doneCount)
		if code != spot.ExitInterrupted && code != spot.ExitSaveFailed || fake == nil || ctx.Err() != nil {
			if err != nil && code == spot.ExitFailed {
				return code, err
			}
			break
		}
		fake.Clear() // the next "instance" has no notice
	}
	if code != spot.ExitFinished {
		return code, nil
	}
	if err := w.verify(); err != nil {
		return spot.ExitFailed, err
	}
	fmt.Fprintf(stdout, "all %d shards scored exactly once; outputs in %s\n", c.shards, out)
	return spot.ExitFinished, nil
}

// worker scores shards in order. Its state is the done-set.
type worker struct {
	c         *config
	in, out   string
	done      []bool
	doneCount int
	processed map[int]int // shard -> times scored, over every run
}

func (w *worker) work(ctx context.Context, job *spot.Job) error {
	w.done = make([]bool, w.c.shards)
	if r := job.Restored(); r != nil {
		b, err := r.ReadPart(ctx, partDone)
		if err != nil {
			return err
		}
		if err := unpackBits(w.done, b); err != nil {
			return fmt.Errorf("checkpoint %d: %w", r.Step, err)
		}
	}
	// An output that exists is final (it was renamed into place whole),
	// even if the done-set that lists it was not committed.
	for i := range w.done {
		if !w.done[i] {
			if _, err := os.Stat(w.outPath(i)); err == nil {
				w.done[i] = true
			}
		}
	}
	w.doneCount = count(w.done)
	job.SetSnapshot(func(int64) ([]checkpoint.Part, error) {
		return []checkpoint.Part{checkpoint.Bytes(partDone, packBits(w.done))}, nil
	})
	step := int64(w.doneCount)
	for i := range w.done {
		if w.done[i] {
			continue
		}
		// A safe point: shards before i are done and their outputs final.
		if err := job.Step(ctx, step); err != nil {
			return err
		}
		err := w.score(ctx, i)
		if errors.Is(err, context.Canceled) {
			// Cancelled mid-shard (the notice came and the shard took too
			// long): nothing of it was written, so the state is still
			// that of step: one more safe point lets the runner save.
			return job.Step(ctx, step)
		}
		if err != nil {
			return err
		}
		w.done[i] = true
		w.doneCount++
		step++
	}
	return job.Checkpoint(ctx, step)
}

func (w *worker) outPath(i int) string {
	return filepath.Join(w.out, fmt.Sprintf("shard-%04d.jsonl", i))
}
func (w *worker) inPath(i int) string { return filepath.Join(w.in, fmt.Sprintf("shard-%04d.bin", i)) }

// score runs the model over shard i and writes its output atomically.
func (w *worker) score(ctx context.Context, i int) error {
	start := time.Now()
	recs, err := readShard(w.inPath(i), w.c.records)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(w.out, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriter(tmp)
	for r, x := range recs {
		fmt.Fprintf(bw, "{\"shard\":%d,\"record\":%d,\"score\":%.9f}\n", i, r, predict(x))
	}
	// The "model" takes its time; the context may end it.
	t := time.NewTimer(time.Until(start.Add(w.c.shardTime)))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		tmp.Close()
		return ctx.Err()
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), w.outPath(i)); err != nil {
		return err
	}
	w.processed[i]++
	return nil
}

// verify checks every output against the inputs, and that no shard was
// scored twice.
func (w *worker) verify() error {
	for i := range w.c.shards {
		if n := w.processed[i]; n > 1 {
			return fmt.Errorf("shard %d scored %d times", i, n)
		}
		recs, err := readShard(w.inPath(i), w.c.records)
		if err != nil {
			return err
		}
		f, err := os.Open(w.outPath(i))
		if err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		sc := bufio.NewScanner(f)
		r := 0
		for sc.Scan() {
			var line struct {
				Shard, Record int
				Score         float64
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				f.Close()
				return fmt.Errorf("shard %d line %d: %w", i, r, err)
			}
			if line.Shard != i || line.Record != r || r >= len(recs) || math.Abs(line.Score-predict(recs[r])) > 1e-9 {
				f.Close()
				return fmt.Errorf("shard %d line %d: unexpected %s", i, r, sc.Text())
			}
			r++
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return err
		}
		if r != len(recs) {
			return fmt.Errorf("shard %d: %d output records, want %d", i, r, len(recs))
		}
	}
	return nil
}

// model is a fixed logistic regression.
var model = func() [features]float64 {
	var w [features]float64
	r := rand.New(rand.NewPCG(42, 42))
	for i := range w {
		w[i] = r.NormFloat64()
	}
	return w
}()

func predict(x [features]float64) float64 {
	z := 0.0
	for i, v := range x {
		z += v * model[i]
	}
	return 1 / (1 + math.Exp(-z))
}

// generate writes the input shards unless they exist: records of
// little-endian float64 features.
func generate(dir string, shards, records int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range shards {
		path := filepath.Join(dir, fmt.Sprintf("shard-%04d.bin", i))
		if _, err := os.Stat(path); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		r := rand.New(rand.NewPCG(uint64(i), 7))
		buf := make([]byte, 0, records*features*8)
		for range records * features {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(r.NormFloat64()))
		}
		if err := os.WriteFile(path, buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func readShard(path string, records int) ([][features]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) != records*features*8 {
		return nil, fmt.Errorf("%s: %d bytes, want %d (-records changed? use a fresh -dir)", path, len(b), records*features*8)
	}
	out := make([][features]float64, records)
	for r := range out {
		for j := range features {
			out[r][j] = math.Float64frombits(binary.LittleEndian.Uint64(b[(r*features+j)*8:]))
		}
	}
	return out, nil
}

func packBits(done []bool) []byte {
	b := make([]byte, (len(done)+7)/8)
	for i, d := range done {
		if d {
			b[i/8] |= 1 << (i % 8)
		}
	}
	return b
}

func unpackBits(done []bool, b []byte) error {
	if len(b) != (len(done)+7)/8 {
		return fmt.Errorf("done-set of %d bytes for %d shards (-shards changed? use a fresh -dir)", len(b), len(done))
	}
	for i := range done {
		done[i] = b[i/8]&(1<<(i%8)) != 0
	}
	return nil
}

func count(done []bool) int {
	n := 0
	for _, d := range done {
		if d {
			n++
		}
	}
	return n
}
