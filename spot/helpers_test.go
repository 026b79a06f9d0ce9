package spot_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/spot"
)

// model is a deterministic toy state: an accumulator folded over the steps
// and a blob of size bytes that every step touches, so that a resumed run
// reaches exactly the state of an uninterrupted one.
type model struct {
	acc  uint64
	blob []byte
}

func newModel(size int) *model { return &model{acc: 1, blob: make([]byte, size)} }

func (m *model) step(s int64) {
	m.acc = m.acc*6364136223846793005 + uint64(s) + 1442695040888963407
	if len(m.blob) > 0 {
		m.blob[int(s)%len(m.blob)] += byte(m.acc >> 56)
	}
}

// replay is the state after steps [0, n) from scratch.
func replay(size int, n int64) *model {
	m := newModel(size)
	for s := range n {
		m.step(s)
	}
	return m
}

func (m *model) accBytes() []byte { return binary.LittleEndian.AppendUint64(nil, m.acc) }

func (m *model) parts(int64) ([]checkpoint.Part, error) {
	return []checkpoint.Part{checkpoint.Bytes("acc", m.accBytes()), checkpoint.Bytes("blob", m.blob)}, nil
}

func (m *model) smallParts(int64) ([]checkpoint.Part, error) {
	return []checkpoint.Part{checkpoint.Bytes("acc", m.accBytes())}, nil
}

// load restores from a full checkpoint, or from a reduced one (acc only)
// plus, if there is one, the blob of its base.
func (m *model) load(ctx context.Context, r *spot.Restored) error {
	acc, err := r.ReadPart(ctx, "acc")
	if err != nil {
		return err
	}
	m.acc = binary.LittleEndian.Uint64(acc)
	src := r.Checkpoint
	if r.Reduced {
		if r.Base == nil {
			return nil
		}
		src = r.Base
	}
	blob, err := src.ReadPart(ctx, "blob")
	if err != nil {
		return err
	}
	if len(blob) != len(m.blob) {
		return fmt.Errorf("blob of %d bytes, want %d", len(blob), len(m.blob))
	}
	copy(m.blob, blob)
	return nil
}

// worker is a training-like loop over model.
type worker struct {
	total     int64
	size      int
	delay     time.Duration                // per step
	grow      func(int64) int              // blob size from this step on (0: no change)
	onStep    func(int64)                  // called after Step returned nil
	noSmall   bool                         // do not offer a smaller snapshot
	noCkptEnd bool                         // no final checkpoint
	hold      func(context.Context, int64) // called after onStep, with the work's context

	mu        sync.Mutex
	m         *model
	started   int64 // first step of this run
	reached   int64 // highest step passed to Step (the state of that step is the newest)
	restored  *spot.Restored
	ctxCause  error
	stepError error
}

func (w *worker) run(ctx context.Context, job *spot.Job) error {
	m := newModel(w.size)
	start := int64(0)
	if r := job.Restored(); r != nil {
		if err := m.load(ctx, r); err != nil {
			return err
		}
		start = r.Step
	}
	w.mu.Lock()
	w.m, w.started, w.restored, w.reached = m, start, job.Restored(), start
	w.mu.Unlock()
	job.SetSnapshot(m.parts)
	if !w.noSmall {
		job.SetSmallSnapshot(m.smallParts)
	}
	for s := start; s < w.total; s++ {
		w.mu.Lock()
		w.reached = s
		w.mu.Unlock()
		if err := job.Step(ctx, s); err != nil {
			w.mu.Lock()
			w.stepError, w.ctxCause = err, context.Cause(ctx)
			w.mu.Unlock()
			return err
		}
		if w.onStep != nil {
			w.onStep(s)
		}
		if w.hold != nil {
			w.hold(ctx, s)
		}
		if w.grow != nil {
			if n := w.grow(s); n > len(m.blob) {
				m.blob = append(m.blob, make([]byte, n-len(m.blob))...)
			}
		}
		m.step(s)
		if w.delay > 0 {
			if err := sleepCtx(ctx, w.delay); err != nil {
				// A cancelled sleep leaves the state of step s+1 intact.
				continue
			}
		}
	}
	if w.noCkptEnd {
		return nil
	}
	return job.Checkpoint(ctx, w.total)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []spot.Event
}

func (r *recorder) on(e spot.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []spot.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []spot.EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

func (r *recorder) find(k spot.EventKind) (spot.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == k {
			return e, true
		}
	}
	return spot.Event{}, false
}

func (r *recorder) all(k spot.EventKind) []spot.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []spot.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// interrupted asserts err is a committed interruption and returns it.
func interrupted(t *testing.T, err error) *spot.InterruptedError {
	t.Helper()
	var ie *spot.InterruptedError
	require.True(t, errors.As(err, &ie), "want *InterruptedError, got %v", err)
	return ie
}

// resume runs w again on store until it finishes, checks that it restored
// step want and that its final state equals an uninterrupted run's.
func resume(t *testing.T, store checkpoint.Store, w *worker, want int64) {
	t.Helper()
	w2 := &worker{total: w.total, size: w.size, grow: w.grow}
	err := spot.Run(t.Context(), w2.run, &spot.Options{Store: store, Provider: spot.ProviderNone, NoSignals: true})
	require.NoError(t, err)
	require.NotNil(t, w2.restored, "nothing restored")
	require.Equal(t, want, w2.restored.Step)
	ref := newModel(w.size)
	for s := range w.total {
		if w.grow != nil {
			if n := w.grow(s); n > len(ref.blob) {
				ref.blob = append(ref.blob, make([]byte, n-len(ref.blob))...)
			}
		}
		ref.step(s)
	}
	require.Equal(t, ref.acc, w2.m.acc, "accumulator differs from an uninterrupted run")
	if !w2.restored.Reduced {
		require.Equal(t, ref.blob, w2.m.blob, "blob differs from an uninterrupted run")
	}
}

// testLogger logs to t when SPOT_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SPOT_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// chunked is a store that hands the stores below it at most 32 KiB per
// Read, as a network connection does, so that a throttled store's progress
// reflects its rate. Use it over storetest.Faulty.
type chunked struct{ *storetest.Faulty }

func (c chunked) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return c.Faulty.Put(ctx, key, smallReads{r}, size)
}

func (c chunked) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return c.Faulty.PutIfAbsent(ctx, key, smallReads{r}, size)
}

type smallReads struct{ r io.Reader }

func (s smallReads) Read(p []byte) (int, error) {
	if len(p) > 32<<10 {
		p = p[:32<<10]
	}
	return s.r.Read(p)
}
