package alibabaspot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/alibabaspot"
)

// Poll a (fake) ECS metadata server once. On an instance, New(nil) talks to
// the real one at 100.100.100.200.
func ExampleSource_Poll() {
	fake, err := noticetest.NewAlibaba(nil)
	if err != nil {
		panic(err)
	}
	defer fake.Close()
	fake.RequireTokens(true) // hardened mode: the source gets a token on its own
	fake.Interrupt(notice.KindTerminate, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))

	src := alibabaspot.New(&alibabaspot.Options{Endpoint: fake.URL()})
	notices, err := src.Poll(context.Background())
	if err != nil {
		panic(err)
	}
	for _, n := range notices {
		fmt.Println(n.Provider, n.Kind, n.Final(), n.Deadline.Format(time.RFC3339))
	}
	// Output: alibaba terminate true 2030-01-02T03:04:05Z
}

// Watch for a reclamation with a Watcher, as a program would.
func ExampleNew() {
	fake, err := noticetest.NewAlibaba(nil)
	if err != nil {
		panic(err)
	}
	defer fake.Close()

	src := alibabaspot.New(&alibabaspot.Options{Endpoint: fake.URL(), PollInterval: 50 * time.Millisecond})
	w := notice.NewWatcher([]notice.Source{src}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	fake.Interrupt(notice.KindTerminate, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	_ = w.Watch(ctx, func(e notice.Event) {
		fmt.Println(e.Type, e.Notice.Kind, e.Notice.Deadline.Format(time.RFC3339))
		cancel()
	})
	// Output: notice terminate 2030-01-02T03:04:05Z
}
