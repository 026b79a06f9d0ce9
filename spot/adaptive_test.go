package spot_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/spot"
)

// TestAdaptiveInterval: the interruption count and run time survive
// restarts in checkpoint metadata, and the adaptive interval shortens as
// interruptions are observed.
func TestAdaptiveInterval(t *testing.T) {
	store := memstore.New()
	fake, src := fakeSource(t, "alibaba")
	var lastRuntime float64
	for run := 1; run <= 3; run++ {
		var fired atomic.Bool
		w := &worker{total: 1 << 40, size: 64, delay: time.Millisecond}
		w.onStep = func(s int64) {
			if s >= 5+w.started && fired.CompareAndSwap(false, true) {
				fake.Interrupt(notice.KindTerminate, time.Now().Add(time.Minute))
			}
		}
		err := spot.Run(t.Context(), w.run, &spot.Options{Store: store, Sources: []notice.Source{src}, NoSignals: true})
		require.True(t, interrupted(t, err).Committed, "run %d: %v", run, err)
		fake.Clear()

		m, err := checkpoint.NewManager(store, nil)
		require.NoError(t, err)
		cp, err := m.Latest(t.Context())
		require.NoError(t, err)
		require.NoError(t, m.Close(t.Context()))
		md := cp.Metadata()
		assert.Equal(t, strconv.Itoa(run), md[spot.MetaInterruptions], "run %d", run)
		assert.Equal(t, string(spot.ReasonEmergency), md[spot.MetaReason])
		assert.NotEmpty(t, md[spot.MetaNotice])
		rt, err := strconv.ParseFloat(md[spot.MetaRuntime], 64)
		require.NoError(t, err)
		assert.Greater(t, rt, lastRuntime, "run time accumulates over runs")
		lastRuntime = rt
	}

	// The same job on a store with three interruptions and on a fresh one.
	// The snapshot takes ~20 ms, so the measured cost is stable.
	interval := func(store checkpoint.Store) time.Duration {
		var got time.Duration
		err := spot.Run(t.Context(), func(ctx context.Context, job *spot.Job) error {
			start := int64(0)
			if r := job.Restored(); r != nil {
				start = r.Step
			}
			job.SetSnapshot(func(int64) ([]checkpoint.Part, error) {
				time.Sleep(20 * time.Millisecond)
				return []checkpoint.Part{checkpoint.Bytes("acc", []byte("x")), checkpoint.Bytes("blob", make([]byte, 64))}, nil
			})
			if err := job.Checkpoint(ctx, start+1); err != nil {
				return err
			}
			got = job.Interval()
			return nil
		}, &spot.Options{Store: store, Provider: spot.ProviderNone, NoSignals: true, Adaptive: true, MTBI: time.Hour})
		require.NoError(t, err)
		return got
	}
	fresh, seasoned := interval(memstore.New()), interval(store)
	assert.Positive(t, seasoned)
	// Young: sqrt(2·C·M); M is 4x smaller after 3 interruptions, so the
	// interval about halves.
	assert.Less(t, seasoned, fresh*3/4, "fresh %v, after 3 interruptions %v", fresh, seasoned)
	assert.LessOrEqual(t, fresh, spot.OptimalInterval(200*time.Millisecond, time.Hour+time.Minute))
	assert.GreaterOrEqual(t, fresh, spot.OptimalInterval(20*time.Millisecond, time.Hour))
}

// TestEventsOrderAndNoLeaks: the final event comes after every checkpoint
// event, and Run leaves no goroutine behind.
func TestEventsOrderAndNoLeaks(t *testing.T) {
	before := -1
	for i := range 4 {
		if i == 1 {
			// After a first run: os/signal starts its own goroutine once.
			before = runtime.NumGoroutine()
		}
		rec := &recorder{}
		w := &worker{total: 200, size: 1 << 20, noCkptEnd: true}
		err := spot.Run(t.Context(), w.run, &spot.Options{
			Store: memstore.New(), Provider: spot.ProviderNone, EverySteps: 50, OnEvent: rec.on,
		})
		require.NoError(t, err)
		kinds := rec.kinds()
		require.NotEmpty(t, kinds)
		assert.Equal(t, spot.EventFinished, kinds[len(kinds)-1], "%v", kinds)
		assert.Len(t, rec.all(spot.EventFinished), 1)
		fin, _ := rec.find(spot.EventFinished)
		commits := rec.all(spot.EventCheckpointCommitted)
		require.NotEmpty(t, commits)
		assert.Equal(t, commits[len(commits)-1].Step, fin.Step, "the finished event reports the newest commit")
	}
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, after, before, "goroutines left behind")
}
