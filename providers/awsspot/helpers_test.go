package awsspot_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/awsspot"
)

// noEnv keeps tests independent of the machine's AWS_EC2_METADATA_* vars.
func noEnv(string) string { return "" }

// env returns a Getenv that reads only vars.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// fastOptions talks to url with timeouts short enough for tests.
func fastOptions(url string) *awsspot.Options {
	return &awsspot.Options{
		Endpoint:     url,
		Timeout:      500 * time.Millisecond,
		TokenTimeout: 200 * time.Millisecond,
		Getenv:       noEnv,
	}
}

func newFake(t testing.TB) *noticetest.AWS {
	t.Helper()
	f, err := noticetest.NewAWS(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

func poll(t *testing.T, s *awsspot.Source) ([]notice.Notice, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Poll(ctx)
}

func mustPoll(t *testing.T, s *awsspot.Source) []notice.Notice {
	t.Helper()
	ns, err := poll(t, s)
	require.NoError(t, err)
	return ns
}

func only(t *testing.T, ns []notice.Notice) notice.Notice {
	t.Helper()
	require.Len(t, ns, 1, "notices: %v", ns)
	return ns[0]
}

// logBuffer is a slog handler's output, safe to read while the source logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), substr)
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// watching runs a Watcher over src until the test ends and collects its
// events.
type watching struct {
	w      *notice.Watcher
	mu     sync.Mutex
	events []notice.Event
}

func watch(t *testing.T, src notice.Source, interval time.Duration) *watching {
	t.Helper()
	wt := &watching{w: notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{Interval: interval, MaxBackoff: 100 * time.Millisecond})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wt.w.Watch(ctx, func(e notice.Event) {
			wt.mu.Lock()
			wt.events = append(wt.events, e)
			wt.mu.Unlock()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return wt
}

func (wt *watching) get() []notice.Event {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	return append([]notice.Event(nil), wt.events...)
}

// waitFor polls cond for up to 5 s.
func (wt *watching) waitFor(t *testing.T, what string, cond func([]notice.Event) bool) []notice.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		es := wt.get()
		if cond(es) {
			return es
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; events %v; health %+v", what, es, wt.w.Health())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recordingTransport wraps the source's transport and remembers every
// request's method, path and headers.
type recordingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Clone(context.Background()))
	r.mu.Unlock()
	return r.base.RoundTrip(req)
}

func (r *recordingTransport) all() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.reqs...)
}
