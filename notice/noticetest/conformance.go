package noticetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// Harness tells [RunConformance] how to build a provider's fake and source.
type Harness struct {
	// Provider is what the source's Name() and its notices' Provider say.
	Provider string
	// NewFake starts a fake server; the suite closes it.
	NewFake func(t testing.TB) Fake
	// NewSource returns a source that talks to f. It should poll fast
	// (short timeouts) so that the suite runs quickly.
	NewSource func(t testing.TB, f Fake) notice.Source
	// Kinds the provider can announce through the fake; the first is the
	// default interruption.
	Kinds []notice.Kind
	// ProviderDeadline reports whether the protocol carries the deadline
	// for kind (the notice's Deadline must then equal the fake's); when it
	// does not, the source computes observed + Nominal(kind). Nil means
	// always.
	ProviderDeadline func(kind notice.Kind) bool
	// Nominal is the provider's nominal notice for kind, used where
	// ProviderDeadline is false.
	Nominal func(kind notice.Kind) time.Duration
}

// RunConformance runs the behaviour every provider source must have, through
// the public Source interface and a real Watcher.
func RunConformance(t *testing.T, h Harness) {
	t.Helper()
	if len(h.Kinds) == 0 {
		t.Fatal("noticetest: Harness.Kinds is empty")
	}
	kind := h.Kinds[0]
	poll := func(t *testing.T, src notice.Source) ([]notice.Notice, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return src.Poll(ctx)
	}
	setup := func(t *testing.T) (Fake, notice.Source) {
		f := h.NewFake(t)
		t.Cleanup(f.Close)
		return f, h.NewSource(t, f)
	}

	t.Run("NoNotice", func(t *testing.T) {
		_, src := setup(t)
		if src.Name() != h.Provider {
			t.Errorf("Name() = %q, want %q", src.Name(), h.Provider)
		}
		for range 3 {
			ns, err := poll(t, src)
			if err != nil {
				t.Fatalf("Poll with no notice: %v", err)
			}
			if len(ns) != 0 {
				t.Fatalf("Poll with no notice returned %v", ns)
			}
		}
	})

	t.Run("Kinds", func(t *testing.T) {
		for _, k := range h.Kinds {
			t.Run(k.String(), func(t *testing.T) {
				f, src := setup(t)
				deadline := time.Now().Add(2 * time.Minute).Truncate(time.Second)
				before := time.Now()
				f.Interrupt(k, deadline)
				ns, err := poll(t, src)
				after := time.Now()
				if err != nil {
					t.Fatalf("Poll: %v", err)
				}
				n := only(t, ns)
				if n.Provider != h.Provider || n.Kind != k || n.Final() != k.Final() {
					t.Fatalf("notice = %+v, want provider %s kind %s", n, h.Provider, k)
				}
				if n.ID == "" || n.Observed.IsZero() {
					t.Fatalf("notice lacks ID or Observed: %+v", n)
				}
				checkDeadline(t, h, n, deadline, before, after)
			})
		}
	})

	t.Run("StableIdentity", func(t *testing.T) {
		f, src := setup(t)
		f.Interrupt(kind, time.Now().Add(2*time.Minute).Truncate(time.Second))
		first := only(t, mustPoll(t, src))
		for range 4 {
			time.Sleep(20 * time.Millisecond)
			n := only(t, mustPoll(t, src))
			if n.ID != first.ID || !n.Deadline.Equal(first.Deadline) || !n.Observed.Equal(first.Observed) {
				t.Fatalf("repeated poll changed the notice:\n first %+v\n later %+v", first, n)
			}
		}
	})

	t.Run("Cleared", func(t *testing.T) {
		f, src := setup(t)
		f.Interrupt(kind, time.Now().Add(2*time.Minute))
		only(t, mustPoll(t, src))
		f.Clear()
		if ns := mustPoll(t, src); len(ns) != 0 {
			t.Fatalf("after Clear, Poll returned %v", ns)
		}
	})

	t.Run("ScheduledLater", func(t *testing.T) {
		f, src := setup(t)
		f.Schedule(kind, time.Now().Add(300*time.Millisecond), time.Now().Add(2*time.Minute))
		if ns := mustPoll(t, src); len(ns) != 0 {
			t.Fatalf("notice visible before its time: %v", ns)
		}
		time.Sleep(350 * time.Millisecond)
		only(t, mustPoll(t, src))
	})

	if h.hasDeadline(kind) {
		t.Run("DeadlineInPast", func(t *testing.T) {
			f, src := setup(t)
			past := time.Now().Add(-time.Minute).Truncate(time.Second)
			f.Interrupt(kind, past)
			n := only(t, mustPoll(t, src))
			if !n.Deadline.Equal(past) || n.Remaining(time.Now()) >= 0 {
				t.Fatalf("past deadline: got %v (remaining %v), want %v", n.Deadline, n.Remaining(time.Now()), past)
			}
		})
	}

	for _, fl := range []Failure{FailServerError, FailUnavailable, FailThrottle, FailReset} {
		t.Run("Transient/"+fl.String(), func(t *testing.T) {
			f, src := setup(t)
			f.Interrupt(kind, time.Now().Add(2*time.Minute))
			f.Inject(fl, 1000)
			ns, err := poll(t, src)
			if err == nil || len(ns) != 0 {
				t.Fatalf("persistent %s: Poll = %v, %v; want an error and no notice", fl, ns, err)
			}
			if !errors.Is(err, notice.ErrTransient) {
				t.Fatalf("persistent %s: error %v does not match notice.ErrTransient", fl, err)
			}
			f.Inject(0, 0)
			only(t, mustPoll(t, src))
		})
	}

	t.Run("Garbage", func(t *testing.T) {
		f, src := setup(t)
		f.Inject(FailGarbage, 1000)
		ns, err := poll(t, src)
		if len(ns) != 0 {
			t.Fatalf("garbage body made a notice: %v", ns)
		}
		if !errors.Is(err, notice.ErrMalformed) {
			t.Fatalf("garbage body: error %v does not match notice.ErrMalformed", err)
		}
		f.Inject(0, 0)
		if ns := mustPoll(t, src); len(ns) != 0 {
			t.Fatalf("after garbage, Poll returned %v", ns)
		}
	})

	t.Run("Hang", func(t *testing.T) {
		f, src := setup(t)
		f.Inject(FailHang, 1000)
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		ns, err := src.Poll(ctx)
		if err == nil || len(ns) != 0 {
			t.Fatalf("hanging server: Poll = %v, %v; want an error", ns, err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("Poll ignored its context for %v", el)
		}
		f.Inject(0, 0)
	})

	t.Run("Watcher", func(t *testing.T) {
		f, src := setup(t)
		w := notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{Interval: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
		var (
			mu     sync.Mutex
			events []notice.Event
		)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- w.Watch(ctx, func(e notice.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			})
		}()
		count := func() []notice.Event {
			mu.Lock()
			defer mu.Unlock()
			return append([]notice.Event(nil), events...)
		}
		waitFor := func(what string, cond func([]notice.Event) bool) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for !cond(count()) {
				if time.Now().After(deadline) {
					cancel()
					<-done
					t.Fatalf("timed out waiting for %s; events: %v", what, count())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		f.Interrupt(kind, time.Now().Add(2*time.Minute))
		waitFor("notice", func(es []notice.Event) bool { return len(es) >= 1 })
		// Failures while the notice is present neither cancel nor repeat it.
		f.Inject(FailServerError, 3)
		time.Sleep(300 * time.Millisecond)
		f.Clear()
		waitFor("canceled", func(es []notice.Event) bool { return len(es) >= 2 })
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
		es := count()
		if len(es) != 2 || es[0].Type != notice.EventNotice || es[1].Type != notice.EventCanceled || es[0].Notice.ID != es[1].Notice.ID {
			t.Fatalf("events = %v, want one notice then its cancellation", es)
		}
	})
}

func checkDeadline(t *testing.T, h Harness, n notice.Notice, want, before, after time.Time) {
	t.Helper()
	if h.hasDeadline(n.Kind) {
		if !n.Deadline.Equal(want) {
			t.Fatalf("deadline = %v, want the fake's %v", n.Deadline, want)
		}
		return
	}
	nominal := h.Nominal(n.Kind)
	lo, hi := before.Add(nominal-time.Second), after.Add(nominal+time.Second)
	if n.Deadline.Before(lo) || n.Deadline.After(hi) {
		t.Fatalf("deadline = %v, want observed + %v in [%v, %v]", n.Deadline, nominal, lo, hi)
	}
}

func (h Harness) hasDeadline(k notice.Kind) bool {
	return h.ProviderDeadline == nil || h.ProviderDeadline(k)
}

func only(t testing.TB, ns []notice.Notice) notice.Notice {
	t.Helper()
	if len(ns) != 1 {
		t.Fatalf("got %d notices %v, want exactly 1", len(ns), ns)
	}
	return ns[0]
}

func mustPoll(t *testing.T, src notice.Source) []notice.Notice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := src.Poll(ctx)
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	return ns
}
