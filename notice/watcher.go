package notice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults used by [NewWatcher] for zero [WatcherOptions] fields.
const (
	DefaultInterval   = time.Second
	DefaultMaxBackoff = 5 * time.Second
	// degradedAfter consecutive failures mark a source as degraded.
	degradedAfter = 3
)

// WatcherOptions configures a [Watcher]. The zero value is usable.
type WatcherOptions struct {
	// Interval between polls of a source that is not a [Waiter] and does not
	// say otherwise through [Intervaler]. Default 1 s: metadata endpoints are
	// link-local and cheap, and a 30 s notice cannot afford slow polling.
	Interval time.Duration
	// MaxBackoff caps the wait between retries of a failing source.
	// Default 5 s.
	MaxBackoff time.Duration
	// Logger receives state changes (notices, a source failing or
	// recovering). Nil discards.
	Logger *slog.Logger
}

// Health is a snapshot of one source's state.
type Health struct {
	Source string `json:"source"`
	// LastSuccess is when a poll last succeeded; zero if never.
	LastSuccess time.Time `json:"last_success,omitzero"`
	// LastError is the most recent failure, nil after a success.
	LastError error `json:"-"`
	// ConsecutiveFailures counts failures since the last success.
	ConsecutiveFailures int `json:"consecutive_failures"`
	// Polls counts every completed poll, failed or not.
	Polls int `json:"polls"`
}

// Degraded reports whether the source has failed several times in a row:
// notices from it may be late or missed.
func (h Health) Degraded() bool { return h.ConsecutiveFailures >= degradedAfter }

// Watcher merges sources into one stream of events. Create it with
// [NewWatcher]; it is safe for concurrent use.
type Watcher struct {
	sources []Source
	opts    WatcherOptions
	log     *slog.Logger

	mu     sync.Mutex
	health []Health
}

// NewWatcher returns a Watcher over sources. opts may be nil.
func NewWatcher(sources []Source, opts *WatcherOptions) *Watcher {
	w := &Watcher{sources: sources}
	if opts != nil {
		w.opts = *opts
	}
	if w.opts.Interval <= 0 {
		w.opts.Interval = DefaultInterval
	}
	if w.opts.MaxBackoff <= 0 {
		w.opts.MaxBackoff = DefaultMaxBackoff
	}
	w.log = w.opts.Logger
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.health = make([]Health, len(sources))
	for i, s := range sources {
		w.health[i].Source = s.Name()
	}
	return w
}

// Health returns a snapshot of every source's health, in source order.
func (w *Watcher) Health() []Health {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Health(nil), w.health...)
}

// Ack asks the source that produced n to approve it early, if the source
// supports it ([Acker]). It returns an error wrapping errors.ErrUnsupported
// otherwise.
func (w *Watcher) Ack(ctx context.Context, n Notice) error {
	for _, s := range w.sources {
		if s.Name() != n.Provider {
			continue
		}
		if a, ok := s.(Acker); ok {
			return a.Ack(ctx, n)
		}
	}
	return fmt.Errorf("notice: ack %s notice: %w", n.Provider, errors.ErrUnsupported)
}

type snapshot struct {
	src     int
	notices []Notice
	// partial: the poll also failed. Its notices are reported when new,
	// but a notice missing from it is not canceled.
	partial bool
}

// Watch polls every source until ctx ends, calling fn for each event. fn is
// called from Watch's goroutine, one event at a time, so it needs no locking;
// a slow fn delays later events but not polling. Watch never returns because a
// source fails: failures are retried with backoff and shown by [Watcher.Health].
// It returns ctx's error once every goroutine it started has ended.
func (w *Watcher) Watch(ctx context.Context, fn func(Event)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snaps := make(chan snapshot)
	var wg sync.WaitGroup
	for i := range w.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, i, snaps)
		}()
	}
	defer wg.Wait()

	current := make([]map[string]Notice, len(w.sources))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case s := <-snaps:
			if current[s.src] == nil {
				current[s.src] = make(map[string]Notice)
			}
			w.diff(current[s.src], s.notices, s.partial, fn)
		}
	}
}

// diff compares the known notices of one source with a new snapshot and
// reports the differences. A partial snapshot cancels nothing.
func (w *Watcher) diff(known map[string]Notice, now []Notice, partial bool, fn func(Event)) {
	at := time.Now()
	seen := make(map[string]bool, len(now))
	for _, n := range now {
		if seen[n.ID] {
			continue
		}
		seen[n.ID] = true
		old, ok := known[n.ID]
		switch {
		case !ok:
			known[n.ID] = n
			w.log.Info("interruption notice", "notice", n)
			fn(Event{Type: EventNotice, Notice: n, At: at})
		case old.Kind != n.Kind || absDur(old.Deadline.Sub(n.Deadline)) > time.Second:
			n.Observed = old.Observed
			known[n.ID] = n
			w.log.Info("interruption notice updated", "notice", n)
			fn(Event{Type: EventUpdated, Notice: n, At: at})
		}
	}
	for id, old := range known {
		if !seen[id] && !partial {
			delete(known, id)
			w.log.Info("interruption notice canceled", "notice", old)
			fn(Event{Type: EventCanceled, Notice: old, At: at})
		}
	}
}

// run owns the polling of one source until ctx ends.
func (w *Watcher) run(ctx context.Context, i int, out chan<- snapshot) {
	src := w.sources[i]
	interval := w.opts.Interval
	if iv, ok := src.(Intervaler); ok && iv.PollInterval() > 0 {
		interval = iv.PollInterval()
	}
	waiter, _ := src.(Waiter)

	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = min(interval/2, 250*time.Millisecond)
	bo.MaxInterval = w.opts.MaxBackoff
	bo.MaxElapsedTime = 0 // never give up
	bo.Reset()

	first := true
	for {
		var (
			notices []Notice
			err     error
		)
		if first || waiter == nil {
			notices, err = src.Poll(ctx)
		} else {
			notices, err = waiter.Wait(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		if err != nil {
			wait = bo.NextBackOff()
			w.failed(i, err, wait)
			if len(notices) > 0 {
				select {
				case out <- snapshot{src: i, notices: notices, partial: true}:
				case <-ctx.Done():
					return
				}
			}
		} else {
			first = false
			bo.Reset()
			w.succeeded(i)
			select {
			case out <- snapshot{src: i, notices: notices}:
			case <-ctx.Done():
				return
			}
			if waiter != nil {
				continue
			}
			wait = interval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (w *Watcher) failed(i int, err error, retry time.Duration) {
	w.mu.Lock()
	h := &w.health[i]
	h.Polls++
	h.ConsecutiveFailures++
	h.LastError = err
	n := h.ConsecutiveFailures
	w.mu.Unlock()
	// Log the first failure and then sparsely, so a long outage is visible
	// without flooding the log.
	if n == 1 || n == degradedAfter || n%60 == 0 {
		w.log.Warn("metadata poll failed", "provider", w.health[i].Source, "failures", n, "retry_in", retry, "err", err)
	}
}

func (w *Watcher) succeeded(i int) {
	w.mu.Lock()
	h := &w.health[i]
	h.Polls++
	recovered := h.ConsecutiveFailures
	h.ConsecutiveFailures = 0
	h.LastError = nil
	h.LastSuccess = time.Now()
	w.mu.Unlock()
	if recovered > 0 {
		w.log.Info("metadata poll recovered", "provider", w.health[i].Source, "after_failures", recovered)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
