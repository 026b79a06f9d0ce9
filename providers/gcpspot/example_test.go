package gcpspot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/gcpspot"
)

// A Watcher over the GCE source: the hanging GETs report a preemption as
// soon as the metadata server flips instance/preempted. On a real VM, leave
// Endpoint empty (http://169.254.169.254, or $GCE_METADATA_HOST).
func Example() {
	fake, err := noticetest.NewGCP(nil) // stands in for the metadata server
	if err != nil {
		panic(err)
	}
	defer fake.Close()

	src := gcpspot.New(&gcpspot.Options{Endpoint: fake.URL()})
	w := notice.NewWatcher([]notice.Source{src}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		time.Sleep(100 * time.Millisecond)
		fake.Interrupt(notice.KindPreempt, time.Time{}) // preempted = TRUE
	}()
	_ = w.Watch(ctx, func(e notice.Event) {
		fmt.Println(e.Type, e.Notice.Kind, "final:", e.Notice.Final(), "left:", e.Notice.Remaining(e.Notice.Observed))
		cancel()
	})
	// Output: notice preempt final: true left: 30s
}

// Probe tells whether the process runs on GCE; Instance says what kind of VM.
func ExampleSource_Instance() {
	fake, err := noticetest.NewGCP(nil)
	if err != nil {
		panic(err)
	}
	defer fake.Close()

	src := gcpspot.New(&gcpspot.Options{Endpoint: fake.URL()})
	ctx := context.Background()
	if err := src.Probe(ctx); err != nil {
		fmt.Println("not on GCE:", err)
		return
	}
	in, err := src.Instance(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(in.Zone, in.Region, in.MachineType, "spot:", in.Spot())
	// Output: us-central1-a us-central1 n1-standard-4 spot: true
}
