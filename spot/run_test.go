package spot_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers"
	"github.com/spotsafe/spotsafe/spot"
)

// fakeSource starts a provider's fake metadata server and the provider's
// real source pointed at it, polling fast.
func fakeSource(t *testing.T, provider string) (noticetest.Fake, notice.Source) {
	t.Helper()
	f, err := noticetest.New(provider, nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	src, err := providers.NewSource(provider, &providers.SourceOptions{Endpoint: f.URL(), PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	return f, src
}

// finalKind is the provider's spot interruption.
func finalKind(provider string) notice.Kind {
	switch provider {
	case "gcp", "azure":
		return notice.KindPreempt
	}
	return notice.KindTerminate
}

func TestRunFinishesAndResumes(t *testing.T) {
	store := memstore.New()
	rec := &recorder{}
	w := &worker{total: 60, size: 1024, delay: time.Millisecond}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: store, Provider: spot.ProviderNone, NoSignals: true, EverySteps: 20, OnEvent: rec.on,
	})
	require.NoError(t, err)
	assert.Equal(t, spot.ExitFinished, spot.ExitCode(err))
	assert.Nil(t, w.restored)

	var steps []int64
	for _, e := range rec.all(spot.EventCheckpointCommitted) {
		steps = append(steps, e.Step)
		assert.Positive(t, e.Bytes)
	}
	assert.Equal(t, []int64{20, 40, 60}, steps, "periodic every 20 steps plus the final checkpoint")
	kinds := rec.kinds()
	assert.Equal(t, spot.EventStarted, kinds[0])
	assert.Equal(t, spot.EventFinished, kinds[len(kinds)-1])

	// A second run restores the final checkpoint and has nothing to do.
	resume(t, store, w, 60)
}

func TestRunPeriodicByTime(t *testing.T) {
	store := memstore.New()
	rec := &recorder{}
	w := &worker{total: 200, size: 64, delay: 2 * time.Millisecond, noCkptEnd: true}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: store, Provider: spot.ProviderNone, NoSignals: true, Interval: 100 * time.Millisecond, OnEvent: rec.on,
	})
	require.NoError(t, err)
	commits := rec.all(spot.EventCheckpointCommitted)
	require.NotEmpty(t, commits, "a 100 ms interval over ~400 ms of work takes checkpoints")
	for _, c := range commits {
		assert.Equal(t, spot.ReasonPeriodic, c.Reason)
	}
}

// TestProviderInterruption is the end-to-end cycle on every provider's
// fake metadata server: train, receive the provider's spot notice, commit
// the emergency checkpoint at the step reached, exit with 75, resume with
// zero lost steps and end with the state of an uninterrupted run.
func TestProviderInterruption(t *testing.T) {
	for _, p := range noticetest.Providers() {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			fake, src := fakeSource(t, p)
			store := memstore.New()
			rec := &recorder{}
			var fired atomic.Bool
			w := &worker{total: 100000, size: 4096, delay: time.Millisecond}
			w.onStep = func(s int64) {
				if s == 30 && fired.CompareAndSwap(false, true) {
					fake.Interrupt(finalKind(p), time.Now().Add(noticetest.NominalNotice(p, finalKind(p))))
				}
			}
			err := spot.Run(t.Context(), w.run, &spot.Options{
				Store: store, Sources: []notice.Source{src}, NoSignals: true, EverySteps: 10, OnEvent: rec.on,
			})
			ie := interrupted(t, err)
			assert.True(t, ie.Committed, "emergency checkpoint committed: %v", err)
			assert.False(t, ie.Reduced)
			assert.Equal(t, p, ie.Notice.Provider)
			assert.Equal(t, spot.ExitInterrupted, spot.ExitCode(err))
			assert.Equal(t, w.reached, ie.Step, "zero steps lost")
			assert.Greater(t, ie.Step, int64(30))
			assert.Positive(t, ie.NoticeToCommit)
			var cause *spot.NoticeError
			require.ErrorAs(t, w.ctxCause, &cause, "the work's context is cancelled with the notice as cause")
			assert.Equal(t, p, cause.Notice.Provider)

			n, ok := rec.find(spot.EventNotice)
			require.True(t, ok)
			assert.True(t, n.Urgent)
			in, ok := rec.find(spot.EventInterrupted)
			require.True(t, ok)
			assert.Equal(t, ie.Step, in.Step)

			// The restarted run: no notice any more.
			fake.Clear()
			w.total = ie.Step + 20
			resume(t, store, w, ie.Step)
		})
	}
}

// TestSignal: a SIGUSR1 (Slurm's --signal) with a 30 s grace period is a
// final notice like a provider's.
func TestSignal(t *testing.T) {
	store := memstore.New()
	var sent atomic.Bool
	w := &worker{total: 100000, size: 2048, delay: time.Millisecond}
	w.onStep = func(s int64) {
		if s == 20 && sent.CompareAndSwap(false, true) {
			require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: store, Provider: spot.ProviderNone, Signals: []os.Signal{syscall.SIGUSR1}, Grace: 30 * time.Second,
	})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.Equal(t, "signal", ie.Notice.Provider)
	assert.Equal(t, "SIGUSR1", ie.Notice.Detail["signal"])
	assert.WithinDuration(t, ie.Notice.Observed.Add(30*time.Second), ie.Notice.Deadline, time.Millisecond)
	assert.Equal(t, w.reached, ie.Step, "zero steps lost")
	assert.Equal(t, spot.ExitInterrupted, spot.ExitCode(err))
	w.total = ie.Step + 10
	resume(t, store, w, ie.Step)
}

// TestReducedWhenFullWillNotFit: the store is slow, the state has grown
// since the checkpoint that measured the throughput, and a 30 s notice
// leaves too little time: the runner says so in advance and saves the
// smaller snapshot, which the next run restores together with its base.
func TestReducedWhenFullWillNotFit(t *testing.T) {
	t.Parallel()
	fake, src := fakeSource(t, "gcp") // GCP: 30 s from observation
	const rate = 1 << 20              // 1 MiB/s
	faulty := storetest.NewFaulty(memstore.New(), storetest.Slow(storetest.OpWrite, rate, 0))
	rec := &recorder{}
	var fired atomic.Bool
	w := &worker{total: 100000, size: 256 << 10, delay: time.Millisecond}
	w.grow = func(s int64) int {
		if s >= 15 {
			return 40 << 20 // 40 s at 1 MiB/s: more than the 25 s the notice leaves
		}
		return 0
	}
	w.onStep = func(s int64) {
		if s == 40 && fired.CompareAndSwap(false, true) {
			fake.Interrupt(notice.KindPreempt, time.Now().Add(30*time.Second))
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: chunked{faulty}, Sources: []notice.Source{src}, NoSignals: true, EverySteps: 10, OnEvent: rec.on,
		Manager: &checkpoint.ManagerOptions{Keep: -1}, Logger: testLogger(t),
	})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.True(t, ie.Reduced, "the smaller snapshot was saved")
	assert.Equal(t, w.reached, ie.Step)
	assert.Equal(t, spot.ExitInterrupted, spot.ExitCode(err))
	assert.Less(t, ie.NoticeToCommit, 20*time.Second)

	nf, ok := rec.find(spot.EventWillNotFit)
	require.True(t, ok, "the runner says in advance that the full state will not fit")
	assert.True(t, nf.Reduced)
	assert.Greater(t, nf.Estimate, nf.Remaining)
	assert.GreaterOrEqual(t, nf.Bytes, int64(40<<20))
	assert.Positive(t, nf.Throughput)

	// The resumed run gets the reduced checkpoint plus the full one of
	// step 10 as its base; the accumulator (the reduced state) is exact.
	faulty.Reset()
	fake.Clear()
	w2 := &worker{total: ie.Step + 5, size: 256 << 10, grow: w.grow}
	require.NoError(t, spot.Run(t.Context(), w2.run, &spot.Options{Store: faulty, Provider: spot.ProviderNone, NoSignals: true}))
	require.NotNil(t, w2.restored)
	assert.True(t, w2.restored.Reduced)
	require.NotNil(t, w2.restored.Base)
	assert.Equal(t, int64(10), w2.restored.Base.Step)
	assert.Equal(t, replay(0, w2.total).acc, w2.m.acc)
}

// TestNoticeDuringPeriodicUpload: a notice arrives while a periodic upload
// is running; both fit, so the periodic one finishes and the emergency
// checkpoint of the step reached commits after it.
func TestNoticeDuringPeriodicUpload(t *testing.T) {
	t.Parallel()
	fake, src := fakeSource(t, "azure")
	// 2 MiB at 4 MiB/s: the periodic upload runs for ~0.5 s.
	faulty := storetest.NewFaulty(memstore.New())
	rec := &recorder{}
	var fired atomic.Bool
	w := &worker{total: 100000, size: 2 << 20, delay: time.Millisecond}
	w.onStep = func(s int64) {
		if s == 9 {
			faulty.Inject(storetest.Slow(storetest.OpWrite, 4<<20, 0))
		}
		if s == 12 && fired.CompareAndSwap(false, true) {
			fake.Interrupt(notice.KindPreempt, time.Now().Add(30*time.Second))
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: chunked{faulty}, Sources: []notice.Source{src}, NoSignals: true, EverySteps: 10, OnEvent: rec.on,
		Logger: testLogger(t),
	})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.Equal(t, w.reached, ie.Step, "zero steps lost")
	var committed []int64
	for _, e := range rec.all(spot.EventCheckpointCommitted) {
		committed = append(committed, e.Step)
	}
	assert.Equal(t, []int64{10, ie.Step}, committed, "the periodic upload finished, then the emergency one")
	faulty.Reset()
	fake.Clear()
	w.total = ie.Step + 3
	resume(t, faulty, w, ie.Step)
}

// TestNoticeDuringPeriodicUploadReplaced: the periodic upload in flight
// would not finish in time together with the new state, so it is abandoned
// for the emergency checkpoint. (A SIGUSR2 with a 3 s grace: a deadline
// exact to the nanosecond, where providers round to the second.)
func TestNoticeDuringPeriodicUploadReplaced(t *testing.T) {
	faulty := storetest.NewFaulty(memstore.New())
	rec := &recorder{}
	var fired atomic.Bool
	w := &worker{total: 100000, size: 1 << 20, delay: time.Millisecond}
	w.onStep = func(s int64) {
		if s == 19 {
			// From the second periodic save on, the store takes 1 MiB/s;
			// the first one measured a fast store.
			faulty.Inject(storetest.Slow(storetest.OpPut, 1<<20, 0))
		}
		if s == 22 && fired.CompareAndSwap(false, true) {
			// 3 s less the margin (a third) leaves 2 s: the new state
			// alone (1 MiB, ~1.25 s with the safety factor, at the rate
			// the running upload shows) fits, the rest of the running
			// one plus it does not.
			require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR2))
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: chunked{faulty}, Provider: spot.ProviderNone, Signals: []os.Signal{syscall.SIGUSR2}, Grace: 3 * time.Second,
		EverySteps: 10, OnEvent: rec.on, Logger: testLogger(t),
	})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.Equal(t, w.reached, ie.Step, "zero steps lost")
	var committed, failed []int64
	for _, e := range rec.all(spot.EventCheckpointCommitted) {
		committed = append(committed, e.Step)
	}
	for _, e := range rec.all(spot.EventCheckpointFailed) {
		failed = append(failed, e.Step)
		assert.ErrorIs(t, e.Err, context.Canceled)
	}
	assert.False(t, ie.Reduced, "the full state fits once the running upload is abandoned")
	assert.Equal(t, []int64{10, ie.Step}, committed)
	assert.Equal(t, []int64{20}, failed, "the running upload was abandoned")
}

// TestEmergencySaveFails: the store fails during the emergency save; the
// run ends with exit code 74 and the previous checkpoint stays restorable.
func TestEmergencySaveFails(t *testing.T) {
	t.Parallel()
	fake, src := fakeSource(t, "alibaba")
	faulty := storetest.NewFaulty(memstore.New())
	var fired atomic.Bool
	rec := &recorder{}
	w := &worker{total: 100000, size: 1024, delay: time.Millisecond}
	w.onStep = func(s int64) {
		if s == 25 && fired.CompareAndSwap(false, true) {
			require.Eventually(t, func() bool { _, ok := rec.find(spot.EventCheckpointCommitted); return ok },
				5*time.Second, time.Millisecond, "the periodic checkpoint of step 20 commits")
			faulty.Inject(storetest.FailAfterBytes(storetest.OpWrite, 10, nil))
			fake.Interrupt(notice.KindTerminate, time.Now().Add(5*time.Second))
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: faulty, Sources: []notice.Source{src}, NoSignals: true, EverySteps: 20, OnEvent: rec.on,
		Manager: &checkpoint.ManagerOptions{Attempts: 2},
	})
	ie := interrupted(t, err)
	assert.False(t, ie.Committed)
	assert.ErrorIs(t, err, spot.ErrSaveFailed)
	assert.ErrorIs(t, err, storetest.ErrInjected)
	assert.Equal(t, spot.ExitSaveFailed, spot.ExitCode(err))
	assert.Equal(t, int64(20), ie.Step, "the newest committed step is the periodic one")

	faulty.Reset()
	fake.Clear()
	w.total = 40
	resume(t, faulty, w, 20)
}

// TestLateWorker: a worker stuck in a long step is cancelled early enough
// to save; if it reaches Step afterwards the checkpoint is taken.
func TestLateWorker(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	fake, src := fakeSource(t, "tencent")
	rec := &recorder{}
	w := &worker{total: 100000, size: 512}
	var fired atomic.Bool
	w.onStep = func(s int64) {
		if s == 5 && fired.CompareAndSwap(false, true) {
			fake.Interrupt(notice.KindTerminate, time.Now().Add(3*time.Second))
		}
	}
	// Step 6 takes "forever" unless its context is cancelled.
	w.hold = func(ctx context.Context, s int64) {
		if s == 6 {
			<-ctx.Done()
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: store, Sources: []notice.Source{src}, NoSignals: true, OnEvent: rec.on,
	})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.Equal(t, int64(7), ie.Step, "the step reached after the cancellation is saved")
	late, ok := rec.find(spot.EventLate)
	require.True(t, ok)
	assert.Positive(t, late.Remaining)
	var cause *spot.NoticeError
	require.ErrorAs(t, w.ctxCause, &cause)
	assert.True(t, cause.Late)
}

// TestWorkerReturnsWithoutSafePoint: after a final notice the worker
// returns an error of its own without reaching Step: 74, ErrNoSafePoint.
func TestWorkerReturnsWithoutSafePoint(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	fake, src := fakeSource(t, "aws")
	boom := errors.New("boom")
	err := spot.Run(t.Context(), func(ctx context.Context, job *spot.Job) error {
		m := newModel(16)
		job.SetSnapshot(m.parts)
		for s := int64(0); ; s++ {
			if err := job.Step(ctx, s); err != nil {
				return err
			}
			if s == 3 {
				require.NoError(t, job.Checkpoint(ctx, s))
				fake.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
				for len(job.Notices()) == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				return boom // instead of reaching Step
			}
		}
	}, &spot.Options{Store: store, Sources: []notice.Source{src}, NoSignals: true})
	ie := interrupted(t, err)
	assert.False(t, ie.Committed)
	assert.Equal(t, int64(3), ie.Step)
	assert.ErrorIs(t, err, spot.ErrNoSafePoint)
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, spot.ExitSaveFailed, spot.ExitCode(err))
}

// TestAdvisoryNotice: a rebalance recommendation and a final notice days
// ahead each take an early checkpoint and the work goes on.
func TestAdvisoryNotice(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	fake, src := fakeSource(t, "aws")
	rec := &recorder{}
	w := &worker{total: 400, size: 256, delay: time.Millisecond}
	w.onStep = func(s int64) {
		switch s {
		case 50:
			fake.Interrupt(notice.KindRebalance, time.Time{})
		case 200:
			fake.Interrupt(notice.KindStop, time.Now().Add(72*time.Hour))
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: store, Sources: []notice.Source{src}, NoSignals: true, Interval: -1, OnEvent: rec.on,
	})
	require.NoError(t, err, "advisory notices do not stop the work")
	var early []int64
	for _, e := range rec.all(spot.EventCheckpointCommitted) {
		if e.Reason == spot.ReasonAdvisory {
			early = append(early, e.Step)
		}
	}
	require.Len(t, early, 2, "one early checkpoint per notice")
	assert.Greater(t, early[0], int64(50))
	assert.Less(t, early[0], int64(200))
	assert.Greater(t, early[1], int64(200))
	for _, e := range rec.all(spot.EventNotice) {
		assert.False(t, e.Urgent, "%v", e.Notice)
	}
}

func TestBadInput(t *testing.T) {
	ctx := t.Context()
	noop := func(context.Context, *spot.Job) error { return nil }
	base := func() *spot.Options {
		return &spot.Options{Store: memstore.New(), Provider: spot.ProviderNone, NoSignals: true}
	}
	assert.ErrorContains(t, spot.Run(ctx, nil, base()), "nil work function")
	o := base()
	o.StoreURL = "mem://x"
	assert.ErrorContains(t, spot.Run(ctx, noop, o), "not both")
	o = base()
	o.EverySteps = -1
	assert.ErrorContains(t, spot.Run(ctx, noop, o), "EverySteps")
	o = base()
	o.Provider = "oracle"
	assert.ErrorContains(t, spot.Run(ctx, noop, o), "unknown provider")
	o = &spot.Options{StoreURL: "nosuch://x", Provider: spot.ProviderNone, NoSignals: true}
	assert.ErrorIs(t, spot.Run(ctx, noop, o), checkpoint.ErrUnknownScheme)

	// Steps must not decrease; a due checkpoint needs a snapshot function.
	err := spot.Run(ctx, func(ctx context.Context, job *spot.Job) error {
		require.NoError(t, job.Step(ctx, 5))
		return job.Step(ctx, 4)
	}, base())
	assert.ErrorContains(t, err, "must not decrease")
	err = spot.Run(ctx, func(ctx context.Context, job *spot.Job) error {
		return job.Checkpoint(ctx, 1)
	}, base())
	assert.ErrorIs(t, err, spot.ErrNoSnapshot)
	assert.Equal(t, spot.ExitFailed, spot.ExitCode(err))

	// A snapshot function's error reaches the worker.
	bad := errors.New("cannot serialize")
	o = base()
	o.Snapshot = func(int64) ([]checkpoint.Part, error) { return nil, bad }
	err = spot.Run(ctx, func(ctx context.Context, job *spot.Job) error { return job.Checkpoint(ctx, 1) }, o)
	assert.ErrorIs(t, err, bad)
}

// TestCallerCancel: cancelling Run's context (not a notice) fails the run.
func TestCallerCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	w := &worker{total: 1 << 40, size: 16, delay: time.Millisecond}
	w.onStep = func(s int64) {
		if s == 10 {
			cancel()
		}
	}
	err := spot.Run(ctx, w.run, &spot.Options{Store: memstore.New(), Provider: spot.ProviderNone, NoSignals: true})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, spot.ErrInterrupted)
	assert.Equal(t, spot.ExitFailed, spot.ExitCode(err))
}

func TestEventJSON(t *testing.T) {
	for k := spot.EventRestored; k <= spot.EventFinished; k++ {
		b, err := k.MarshalText()
		require.NoError(t, err)
		var got spot.EventKind
		require.NoError(t, got.UnmarshalText(b))
		assert.Equal(t, k, got)
	}
	var k spot.EventKind
	assert.Error(t, k.UnmarshalText([]byte("nonsense")))
}

// TestNoticeDuringExplicitCheckpoint: a final notice while Checkpoint waits
// for its (slow) upload turns it into the emergency checkpoint.
func TestNoticeDuringExplicitCheckpoint(t *testing.T) {
	t.Parallel()
	fake, src := fakeSource(t, "alibaba")
	faulty := storetest.NewFaulty(memstore.New(), storetest.Slow(storetest.OpPut, 1<<20, 0))
	m := newModel(1 << 20) // ~1 s at 1 MiB/s
	err := spot.Run(t.Context(), func(ctx context.Context, job *spot.Job) error {
		job.SetSnapshot(m.parts)
		for s := int64(0); s < 5; s++ {
			if err := job.Step(ctx, s); err != nil {
				return err
			}
			m.step(s)
		}
		time.AfterFunc(100*time.Millisecond, func() { fake.Interrupt(notice.KindTerminate, time.Now().Add(time.Minute)) })
		return job.Checkpoint(ctx, 5)
	}, &spot.Options{Store: chunked{faulty}, Sources: []notice.Source{src}, NoSignals: true, Interval: -1})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.Equal(t, int64(5), ie.Step)
	assert.Equal(t, spot.ExitInterrupted, spot.ExitCode(err))
}

// TestSwitchToSmallWhileUploading: the store was fast when measured but
// is slow now; the emergency upload's own progress shows that the full
// state will not commit in time, and the runner switches to the smaller
// snapshot while it still can.
func TestSwitchToSmallWhileUploading(t *testing.T) {
	t.Parallel()
	fake, src := fakeSource(t, "gcp")
	faulty := storetest.NewFaulty(memstore.New())
	rec := &recorder{}
	var fired atomic.Bool
	w := &worker{total: 100000, size: 4 << 20, delay: time.Millisecond}
	w.onStep = func(s int64) {
		if s == 15 && fired.CompareAndSwap(false, true) {
			require.Eventually(t, func() bool { _, ok := rec.find(spot.EventCheckpointCommitted); return ok },
				5*time.Second, time.Millisecond)
			faulty.Inject(storetest.Slow(storetest.OpPut, 128<<10, 0)) // 4 MiB: 32 s
			fake.Interrupt(notice.KindPreempt, time.Now().Add(30*time.Second))
		}
	}
	err := spot.Run(t.Context(), w.run, &spot.Options{
		Store: chunked{faulty}, Sources: []notice.Source{src}, NoSignals: true, EverySteps: 10, OnEvent: rec.on,
		Logger: testLogger(t),
	})
	ie := interrupted(t, err)
	require.True(t, ie.Committed, "%v", err)
	assert.True(t, ie.Reduced)
	assert.Equal(t, w.reached, ie.Step)
	assert.Less(t, ie.NoticeToCommit, 5*time.Second, "switched early, not at the deadline")
	nf, ok := rec.find(spot.EventWillNotFit)
	require.True(t, ok)
	assert.Less(t, nf.Throughput, float64(1<<20), "the rate the running upload showed")
}
