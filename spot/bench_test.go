package spot_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers"
	"github.com/spotsafe/spotsafe/spot"
)

// BenchmarkNoticeToCommit measures, for a 64 MiB state on the file store
// (with fsync), the time from the moment the notice is observed to the
// commit of the emergency checkpoint, against a plain Put of the same
// 64 MiB to the same store. Metrics: notice_to_commit_ms, raw_put_ms and
// their ratio x_raw_put.
func BenchmarkNoticeToCommit(b *testing.B) {
	const size = 64 << 20
	store, err := filestore.New(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	fake, err := noticetest.New("alibaba", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer fake.Close()
	src, err := providers.NewSource("alibaba", &providers.SourceOptions{Endpoint: fake.URL(), PollInterval: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	state := make([]byte, size)
	for i := range state {
		state[i] = byte(i * 7)
	}
	ctx := context.Background()

	var total, raw time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		// The raw operation: one Put of the same bytes.
		start := time.Now()
		if err := store.Put(ctx, fmt.Sprintf("raw/%d", i), bytes.NewReader(state), size); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(start)

		var fired atomic.Bool
		err := spot.Run(ctx, func(ctx context.Context, job *spot.Job) error {
			job.SetSnapshot(func(int64) ([]checkpoint.Part, error) {
				return []checkpoint.Part{checkpoint.Bytes("state", state)}, nil
			})
			for s := int64(0); ; s++ {
				if err := job.Step(ctx, s); err != nil {
					return err
				}
				if s == 3 && fired.CompareAndSwap(false, true) {
					fake.Interrupt(notice.KindTerminate, time.Now().Add(5*time.Minute))
				}
				time.Sleep(100 * time.Microsecond) // a step
			}
		}, &spot.Options{
			Store: store, Sources: []notice.Source{src}, NoSignals: true, Interval: -1,
			Manager: &checkpoint.ManagerOptions{Prefix: fmt.Sprintf("run-%d", i), Keep: -1},
		})
		fake.Clear()
		var ie *spot.InterruptedError
		if !errors.As(err, &ie) || !ie.Committed {
			b.Fatalf("run %d: %v", i, err)
		}
		total += ie.NoticeToCommit
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(total.Milliseconds())/n, "notice_to_commit_ms")
	b.ReportMetric(float64(raw.Milliseconds())/n, "raw_put_ms")
	b.ReportMetric(total.Seconds()/raw.Seconds(), "x_raw_put")
}

// BenchmarkStep is the cost of a safe point when no checkpoint is due:
// what every step of a training loop pays.
func BenchmarkStep(b *testing.B) {
	err := spot.Run(context.Background(), func(ctx context.Context, job *spot.Job) error {
		b.ResetTimer()
		for i := range b.N {
			if err := job.Step(ctx, int64(i)); err != nil {
				return err
			}
		}
		b.StopTimer()
		return nil
	}, &spot.Options{Store: memstore.New(), Provider: spot.ProviderNone, NoSignals: true})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCheckpointOverhead measures the slowdown of a training loop from
// periodic asynchronous checkpoints, against the same loop under spot.Run
// without checkpoints and a plain loop without spot, in the same run.
//
// Scaled down from "a 1-minute interval": a step is ~1 ms of CPU work on a
// 256 KiB vector, the state is 8 MiB (vector plus 7.75 MiB of "weights"),
// and the interval is 60 ms, i.e. 60 steps per checkpoint, so the capture
// copies 8 MiB every 60 ms of work. On a real job the ratio of the bytes
// captured per interval to the memory bandwidth is what sets the overhead;
// this one captures (8 MiB / 60 ms) ≈ 133 MB/s of work time, more than a
// 1 GB state every minute (17 MB/s) or a 10 GB one (170 MB/s). Uploads go
// to the file store with fsync, competing for the same CPUs.
//
// Metrics: ms/step of each variant and overhead_pct of periodic over none.
// Run with -benchtime=1x: each iteration trains 2000 steps per variant,
// interleaved and repeated, keeping the best time of each.
func BenchmarkCheckpointOverhead(b *testing.B) {
	const (
		steps    = 2000
		vec      = 32 << 10 // float64s: 256 KiB
		weights  = 8<<20 - 8*vec
		interval = 60 * time.Millisecond
	)
	dir := b.TempDir()
	store, err := filestore.New(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()

	x := make([]float64, vec)
	for i := range x {
		x[i] = float64(i%97) / 97
	}
	w := make([]byte, weights)
	// iters is calibrated so that one step takes about 1 ms.
	work := func(iters int) {
		for range iters {
			for i := range x {
				x[i] = math.FMA(x[i], 0.999, 0.001)
			}
		}
	}
	iters := 1
	for {
		start := time.Now()
		work(iters)
		if d := time.Since(start); d >= time.Millisecond/2 {
			iters = max(1, int(float64(iters)*float64(time.Millisecond)/float64(d)))
			break
		}
		iters *= 2
	}
	snapshot := func(int64) ([]checkpoint.Part, error) {
		vb := make([]byte, 0, 8*vec)
		for _, f := range x {
			vb = binary.LittleEndian.AppendUint64(vb, math.Float64bits(f))
		}
		return []checkpoint.Part{checkpoint.Bytes("vec", vb), checkpoint.Bytes("weights", w)}, nil
	}
	plain := func() time.Duration {
		start := time.Now()
		for range steps {
			work(iters)
		}
		return time.Since(start)
	}
	var commits atomic.Int64
	var blocked time.Duration // inside Step, periodic variant
	underSpot := func(iv time.Duration, prefix string) time.Duration {
		var d, inStep time.Duration
		err := spot.Run(context.Background(), func(ctx context.Context, job *spot.Job) error {
			job.SetSnapshot(snapshot)
			start := time.Now()
			for s := range int64(steps) {
				t := time.Now()
				if err := job.Step(ctx, s); err != nil {
					return err
				}
				inStep += time.Since(t)
				work(iters)
			}
			d = time.Since(start)
			return nil
		}, &spot.Options{
			Store: store, Provider: spot.ProviderNone, NoSignals: true, Interval: iv,
			Manager: &checkpoint.ManagerOptions{Prefix: prefix, Keep: 2},
			OnEvent: func(e spot.Event) {
				if e.Kind == spot.EventCheckpointCommitted {
					commits.Add(1)
				}
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		if iv > 0 {
			blocked += inStep
		}
		return d
	}

	best := [3]time.Duration{math.MaxInt64, math.MaxInt64, math.MaxInt64}
	b.ResetTimer()
	for i := range b.N {
		for r := range 3 {
			best[0] = min(best[0], plain())
			best[1] = min(best[1], underSpot(-1, fmt.Sprintf("none-%d-%d", i, r)))
			best[2] = min(best[2], underSpot(interval, fmt.Sprintf("periodic-%d-%d", i, r)))
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return d.Seconds() * 1000 / steps }
	b.ReportMetric(ms(best[0]), "plain_ms/step")
	b.ReportMetric(ms(best[1]), "none_ms/step")
	b.ReportMetric(ms(best[2]), "periodic_ms/step")
	b.ReportMetric(100*(best[2].Seconds()/best[1].Seconds()-1), "overhead_pct")
	// The part of the overhead the loop waits for (snapshot and capture),
	// as opposed to uploads competing for the CPUs.
	b.ReportMetric(100*blocked.Seconds()/float64(3*b.N)/best[2].Seconds(), "blocked_pct")
	b.ReportMetric(float64(commits.Load())/float64(3*b.N), "checkpoints/run")
}
