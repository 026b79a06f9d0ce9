package providers_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers"
)

// Detect the cloud and watch its notices. Here the "cloud" is a fake Tencent
// metadata server; on a real instance, Detect(ctx, nil) needs no options.
func ExampleDetect() {
	fake, err := noticetest.New("tencent", nil)
	if err != nil {
		panic(err)
	}
	defer fake.Close()

	d, err := providers.Detect(context.Background(), &providers.DetectOptions{
		Endpoint: fake.URL(),
		Getenv:   func(string) string { return "" }, // ignore SPOTSAFE_* for a reproducible example
	})
	switch {
	case errors.Is(err, providers.ErrNoCloud):
		fmt.Println("no cloud: rely on SIGTERM")
		return
	case err != nil:
		panic(err)
	}
	fmt.Println(d.Provider, "via", d.Via)

	// A program would now run a Watcher over d.Source (and a SignalSource).
	w := notice.NewWatcher([]notice.Source{d.Source}, nil)
	_ = w
	// Output: tencent via probe
}
