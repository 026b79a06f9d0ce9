package awsspot_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/awsspot"
)

// BenchmarkDetection measures the time from the fake answering with a Spot
// notice to the Watcher's callback, at the default 1 s poll interval.
// Target: p99 <= interval + 50 ms. Run with a small -benchtime (20x takes
// about a minute).
func BenchmarkDetection(b *testing.B) {
	noticetest.BenchmarkDetection(b, harness(), 0)
}

// BenchmarkPoll measures one Poll (four GETs with a cached token) against
// the raw operation: one plain GET of spot/instance-action with the same
// transport. It reports poll/raw-get, the cost of reading every category.
func BenchmarkPoll(b *testing.B) {
	f, err := noticetest.NewAWS(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	f.Interrupt(notice.KindTerminate, time.Now().Add(time.Hour))
	ctx := context.Background()
	src := awsspot.New(&awsspot.Options{Endpoint: f.URL(), Getenv: noEnv})
	if _, err := src.Poll(ctx); err != nil {
		b.Fatal(err)
	}

	client := metaclient.NewHTTPClient(metaclient.DefaultTimeout)
	rawGet := func() {
		resp, err := client.Get(f.URL() + "/latest/meta-data/spot/instance-action")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("raw GET: %d", resp.StatusCode)
		}
	}
	rawGet()
	t0 := time.Now()
	for range b.N {
		rawGet()
	}
	raw := time.Since(t0)

	b.ResetTimer()
	for range b.N {
		if _, err := src.Poll(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed())/float64(raw), "poll/raw-get")
}
