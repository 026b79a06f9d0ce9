package noticetest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// BenchmarkDetection measures detection latency: from the moment the fake
// starts answering with a notice to the event reaching a Watcher's callback,
// with the watcher polling every interval (0: the Watcher's default, 1 s).
// Each iteration schedules the notice at a random phase of the poll cycle.
// It reports p50-ms, p99-ms and max-ms; ns/op is not meaningful here.
func BenchmarkDetection(b *testing.B, h Harness, interval time.Duration) {
	f := h.NewFake(b)
	defer f.Close()
	src := h.NewSource(b, f)
	w := notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{Interval: interval})
	if interval <= 0 {
		interval = notice.DefaultInterval
	}
	events := make(chan notice.Event, 4)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = w.Watch(ctx, func(e notice.Event) {
			select {
			case events <- e:
			case <-ctx.Done():
			}
		})
	}()
	defer func() { cancel(); wg.Wait() }()

	next := func(want notice.EventType) {
		t := time.NewTimer(interval*5 + 5*time.Second)
		defer t.Stop()
		for {
			select {
			case e := <-events:
				if e.Type == want {
					return
				}
			case <-t.C:
				b.Fatalf("no %s event within %v", want, interval*5+5*time.Second)
			}
		}
	}
	kind := h.Kinds[0]
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(rand.N(interval))
		b.StartTimer()
		t0 := time.Now()
		f.Interrupt(kind, t0.Add(2*time.Minute))
		next(notice.EventNotice)
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		f.Clear()
		next(notice.EventCanceled)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return float64(lat[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1), "max-ms")
	b.ReportMetric(float64(interval)/float64(time.Millisecond), "interval-ms")
}
