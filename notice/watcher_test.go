package notice_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
)

// scripted is a Source whose answers a test sets; it stands in for a
// provider only where the behaviour under test is the Watcher's own
// (dedup inside a snapshot, health accounting, updates).
type scripted struct {
	mu      sync.Mutex
	notices []notice.Notice
	err     error
	polls   int
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Poll(ctx context.Context) ([]notice.Notice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	if s.err != nil {
		return nil, s.err
	}
	return append([]notice.Notice(nil), s.notices...), nil
}

func (s *scripted) set(err error, ns ...notice.Notice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.notices = err, ns
}

type recorder struct {
	mu     sync.Mutex
	events []notice.Event
}

func (r *recorder) add(e notice.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) get() []notice.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notice.Event(nil), r.events...)
}

func watch(t *testing.T, w *notice.Watcher) (*recorder, func()) {
	t.Helper()
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx, rec.add) }()
	stop := func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return rec, stop
}

func TestWatcherDedupUpdateCancel(t *testing.T) {
	src := &scripted{}
	w := notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{Interval: 5 * time.Millisecond})
	rec, stop := watch(t, w)

	now := time.Now()
	n := notice.Notice{ID: "a", Provider: "scripted", Kind: notice.KindStop, Deadline: now.Add(time.Minute), Observed: now}
	src.set(nil, n, n) // a duplicate inside one snapshot counts once
	require.Eventually(t, func() bool { return len(rec.get()) == 1 }, 2*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // many polls of the same notice
	require.Len(t, rec.get(), 1)

	moved := n
	moved.Deadline = n.Deadline.Add(10 * time.Second)
	moved.Observed = now.Add(time.Second)
	src.set(nil, moved)
	require.Eventually(t, func() bool { return len(rec.get()) == 2 }, 2*time.Second, time.Millisecond)

	src.set(nil)
	require.Eventually(t, func() bool { return len(rec.get()) == 3 }, 2*time.Second, time.Millisecond)
	stop()

	es := rec.get()
	assert.Equal(t, notice.EventNotice, es[0].Type)
	assert.Equal(t, notice.EventUpdated, es[1].Type)
	assert.True(t, es[1].Notice.Deadline.Equal(moved.Deadline))
	assert.True(t, es[1].Notice.Observed.Equal(now), "an update keeps the first observation")
	assert.Equal(t, notice.EventCanceled, es[2].Type)
	assert.Equal(t, "a", es[2].Notice.ID)
}

func TestWatcherErrorsKeepNoticesAndHealth(t *testing.T) {
	src := &scripted{}
	w := notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{Interval: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	rec, stop := watch(t, w)
	n := notice.Notice{ID: "a", Provider: "scripted", Kind: notice.KindTerminate, Observed: time.Now()}
	src.set(nil, n)
	require.Eventually(t, func() bool { return len(rec.get()) == 1 }, 2*time.Second, time.Millisecond)

	boom := fmt.Errorf("poll: %w", notice.ErrTransient)
	src.set(boom)
	require.Eventually(t, func() bool { return w.Health()[0].Degraded() }, 2*time.Second, time.Millisecond)
	h := w.Health()[0]
	assert.Equal(t, "scripted", h.Source)
	assert.ErrorIs(t, h.LastError, notice.ErrTransient)
	assert.Len(t, rec.get(), 1, "errors must not cancel a notice")

	src.set(nil, n)
	require.Eventually(t, func() bool { return w.Health()[0].ConsecutiveFailures == 0 }, 2*time.Second, time.Millisecond)
	assert.NoError(t, w.Health()[0].LastError)
	assert.False(t, w.Health()[0].LastSuccess.IsZero())
	stop()
	assert.Len(t, rec.get(), 1, "recovery must not repeat the notice")
}

func TestWatcherAckUnsupported(t *testing.T) {
	w := notice.NewWatcher([]notice.Source{&scripted{}}, nil)
	err := w.Ack(context.Background(), notice.Notice{Provider: "scripted"})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestSignalSource(t *testing.T) {
	s := notice.NewSignalSource(&notice.SignalOptions{Signals: []os.Signal{syscall.SIGUSR1}, Grace: 7 * time.Second})
	defer s.Close()
	w := notice.NewWatcher([]notice.Source{s}, nil)
	rec, stop := watch(t, w)

	before := time.Now()
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
	require.Eventually(t, func() bool { return len(rec.get()) == 1 }, 2*time.Second, time.Millisecond)
	// A second signal (Slurm sends SIGTERM twice) keeps the first deadline.
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
	time.Sleep(50 * time.Millisecond)
	stop()

	es := rec.get()
	require.Len(t, es, 1)
	n := es[0].Notice
	assert.Equal(t, "signal", n.Provider)
	assert.Equal(t, notice.KindTerminate, n.Kind)
	assert.True(t, n.Final())
	assert.Equal(t, "SIGUSR1", n.Detail["signal"])
	assert.WithinDuration(t, before.Add(7*time.Second), n.Deadline, time.Second)
	assert.InDelta(t, 7, n.Remaining(n.Observed).Seconds(), 0.01)
}

func TestKindNames(t *testing.T) {
	for k := notice.KindTerminate; k <= notice.KindMaintenance; k++ {
		got, err := notice.ParseKind(k.String())
		require.NoError(t, err)
		assert.Equal(t, k, got)
	}
	_, err := notice.ParseKind("explode")
	assert.Error(t, err)
	assert.True(t, notice.KindPreempt.Final())
	assert.False(t, notice.KindRebalance.Final())
	assert.Equal(t, "kind(0)", notice.Kind(0).String())
}
