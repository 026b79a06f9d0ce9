package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/providers"
)

// watchTimeLayout is RFC 3339 with microseconds, always printed, in UTC ("Z").
const watchTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// watchHealthEvery is how often watch looks at the sources' health.
const watchHealthEvery = 250 * time.Millisecond

// runWatch prints every interruption notice, update and cancellation as it
// arrives, until --for elapses or the command is interrupted (both exit 0).
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	provider := fs.String("provider", "auto", "cloud to watch: auto (detect), "+strings.Join(providers.Names(), ", "))
	endpoint := fs.String("endpoint", "", "metadata base URL, e.g. one printed by `spotsafe fake` (default: the provider's own)")
	forDur := fs.Duration("for", 0, "stop after this long and exit 0 (default: until interrupted)")
	asJSON := fs.Bool("json", false, "print one JSON object per event")
	if err := fs.Parse(args); err != nil {
		return noticeCmdFlagError(fs, err, stderr, "watch [--provider auto|aws|gcp|azure|alibaba|tencent] [--endpoint URL] [--for DURATION] [--json]")
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if *provider != "auto" && !slices.Contains(providers.Names(), *provider) {
		return usageError(fmt.Sprintf("unknown provider %q (want auto, %s)", *provider, strings.Join(providers.Names(), ", ")))
	}
	if *forDur < 0 {
		return usageError(fmt.Sprintf("--for %v is negative", *forDur))
	}
	if *endpoint != "" {
		if err := checkMetadataEndpoint(*endpoint); err != nil {
			return usageError(err.Error())
		}
	}

	if *forDur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *forDur)
		defer cancel()
	}

	var (
		src              notice.Source
		name, where, how string
	)
	if *provider == "auto" {
		d, err := providers.Detect(ctx, &providers.DetectOptions{Endpoint: *endpoint})
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted, or --for elapsed, while detecting
			}
			return err
		}
		src, name, where, how = d.Source, d.Provider, d.Endpoint, "detected: "+d.Evidence
	} else {
		s, err := providers.NewSource(*provider, &providers.SourceOptions{Endpoint: *endpoint})
		if err != nil {
			return err
		}
		src, name, where, how = s, *provider, *endpoint, "--provider "+*provider
		if where == "" {
			where = providers.DefaultEndpoint(name)
		}
	}
	fmt.Fprintf(stderr, "spotsafe watch: watching %s at %s (%s); Ctrl-C to stop\n", name, where, how)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	w := notice.NewWatcher([]notice.Source{src}, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reportWatchHealth(ctx, w, stderr)
	}()
	err := w.Watch(ctx, func(e notice.Event) {
		if werr := printWatchEvent(stdout, e, *asJSON); werr != nil {
			cancel(werr)
		}
	})
	cancel(nil)
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("writing output: %w", cause)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil // --for elapsed or Ctrl-C: a normal end
	}
	return err
}

// watchEventJSON is one line of `watch --json`.
type watchEventJSON struct {
	Event    string `json:"event"`
	Provider string `json:"provider"`
	Kind     string `json:"kind"`
	ID       string `json:"id"`
	Final    bool   `json:"final"`
	// Deadline and RemainingSeconds are null when the provider gives no
	// deadline.
	Deadline         *string           `json:"deadline"`
	RemainingSeconds *float64          `json:"remaining_seconds"`
	NotAfter         string            `json:"not_after,omitempty"`
	Observed         string            `json:"observed"`
	At               string            `json:"at"`
	Detail           map[string]string `json:"detail"`
}

func printWatchEvent(w io.Writer, e notice.Event, asJSON bool) error {
	n := e.Notice
	if asJSON {
		line := watchEventJSON{
			Event:    e.Type.String(),
			Provider: n.Provider,
			Kind:     n.Kind.String(),
			ID:       n.ID,
			Final:    n.Final(),
			Observed: watchTime(n.Observed),
			At:       watchTime(e.At),
			Detail:   n.Detail,
		}
		if !n.Deadline.IsZero() {
			d := watchTime(n.Deadline)
			r := math.Round(n.Remaining(e.At).Seconds()*1000) / 1000
			line.Deadline, line.RemainingSeconds = &d, &r
		}
		if !n.NotAfter.IsZero() {
			line.NotAfter = watchTime(n.NotAfter)
		}
		if line.Detail == nil {
			line.Detail = map[string]string{}
		}
		b, err := json.Marshal(line)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}

	var b strings.Builder
	finality := "advisory"
	if n.Final() {
		finality = "final"
	}
	fmt.Fprintf(&b, "%s %-8s %s %s (%s)", watchTime(e.At), strings.ToUpper(e.Type.String()), n.Provider, n.Kind, finality)
	if n.Deadline.IsZero() {
		b.WriteString(" deadline unknown")
	} else {
		fmt.Fprintf(&b, " deadline %s (%s left)", watchTime(n.Deadline), n.Remaining(e.At).Round(100*time.Millisecond))
	}
	fmt.Fprintf(&b, " id=%s", n.ID)
	for _, k := range slices.Sorted(maps.Keys(n.Detail)) {
		if k != "raw" { // the response body: in --json output only
			fmt.Fprintf(&b, " %s=%q", k, n.Detail[k])
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// reportWatchHealth prints to stderr when a source becomes degraded (notices may
// be late or missed) and when it recovers.
func reportWatchHealth(ctx context.Context, w *notice.Watcher, stderr io.Writer) {
	degraded := map[string]bool{}
	t := time.NewTicker(watchHealthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, h := range w.Health() {
			switch {
			case h.Degraded() && !degraded[h.Source]:
				degraded[h.Source] = true
				fmt.Fprintf(stderr, "spotsafe watch: %s metadata DEGRADED after %d failed polls (notices may be missed): %v\n", h.Source, h.ConsecutiveFailures, h.LastError)
			case !h.Degraded() && degraded[h.Source]:
				degraded[h.Source] = false
				fmt.Fprintf(stderr, "spotsafe watch: %s metadata recovered\n", h.Source)
			}
		}
	}
}

func watchTime(t time.Time) string { return t.UTC().Format(watchTimeLayout) }

// checkMetadataEndpoint accepts http(s)://host[:port] with nothing after it but an
// optional "/".
func checkMetadataEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return fmt.Errorf("--endpoint %q: want http://host[:port]", s)
	}
	return nil
}

// noticeCmdFlagError turns a flag parsing failure into a usage error (exit 2), or
// prints the flags for -h (exit 0).
func noticeCmdFlagError(fs *flag.FlagSet, err error, stderr io.Writer, usage string) error {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "usage: spotsafe %s\n\n", usage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return err
	}
	return usageError(err.Error())
}
