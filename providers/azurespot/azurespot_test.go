package azurespot_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/azurespot"
)

func harness() noticetest.Harness {
	return noticetest.Harness{
		Provider: "azure",
		NewFake: func(t testing.TB) noticetest.Fake {
			return newFake(t)
		},
		NewSource: func(t testing.TB, f noticetest.Fake) notice.Source {
			return azurespot.New(&azurespot.Options{Endpoint: f.URL(), RequestTimeout: time.Second})
		},
		Kinds: []notice.Kind{
			notice.KindPreempt, notice.KindTerminate, notice.KindReboot,
			notice.KindRedeploy, notice.KindFreeze,
		},
		ProviderDeadline: func(notice.Kind) bool { return true },
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	noticetest.RunConformance(t, harness())
}

func BenchmarkDetection(b *testing.B) {
	noticetest.BenchmarkDetection(b, harness(), 0)
}

func newFake(t testing.TB) *noticetest.Azure {
	t.Helper()
	f, err := noticetest.NewAzure(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

func newSource(f *noticetest.Azure, opts *azurespot.Options) *azurespot.Source {
	o := azurespot.Options{RequestTimeout: time.Second}
	if opts != nil {
		o = *opts
	}
	if o.Endpoint == "" {
		o.Endpoint = f.URL()
	}
	return azurespot.New(&o)
}

func poll(t *testing.T, s *azurespot.Source) ([]notice.Notice, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Poll(ctx)
}

func mustPoll(t *testing.T, s *azurespot.Source) []notice.Notice {
	t.Helper()
	ns, err := poll(t, s)
	require.NoError(t, err)
	return ns
}

// deadline returns a time n seconds ahead, whole seconds (RFC 1123 has no
// fractions).
func deadline(d time.Duration) time.Time { return time.Now().Add(d).Truncate(time.Second).UTC() }

func TestEventForAnotherVMIgnored(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SetVMName("vmss_3")
	src := newSource(f, nil)
	f.AddEvent(noticetest.AzureEvent{EventType: "Preempt", Resources: []string{"vmss_4"}, NotBefore: deadline(time.Minute)})

	assert.Empty(t, mustPoll(t, src), "an event for vmss_4 reached vmss_3")
	assert.Equal(t, "vmss_3", src.VMName(), "name learned from /metadata/instance/compute/name")

	// Our own event next to it is reported, alone.
	own := f.AddEvent(noticetest.AzureEvent{EventType: "Preempt", NotBefore: deadline(time.Minute)})
	ns := mustPoll(t, src)
	require.Len(t, ns, 1)
	assert.Equal(t, own, ns[0].ID)
}

func TestEventFilteredByConfiguredName(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	// The fake would say "spotsafe-vm-0"; the option wins and no name
	// request is made.
	src := newSource(f, &azurespot.Options{VMName: "worker-7", RequestTimeout: time.Second})
	f.AddEvent(noticetest.AzureEvent{EventType: "Reboot", NotBefore: deadline(time.Hour)}) // for spotsafe-vm-0
	mine := f.AddEvent(noticetest.AzureEvent{EventType: "Reboot", Resources: []string{"worker-7"}, NotBefore: deadline(time.Hour)})
	before := f.Requests()
	ns := mustPoll(t, src)
	require.Len(t, ns, 1)
	assert.Equal(t, mine, ns[0].ID)
	assert.Equal(t, 1, f.Requests()-before, "only the scheduled-events request")
}

func TestBroadcastEventKept(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SetVMName("WestNO_1")
	src := newSource(f, nil)
	nb := deadline(15 * time.Minute)
	id := f.AddEvent(noticetest.AzureEvent{
		EventType: "Freeze",
		// Names are case-insensitive on Azure.
		Resources:         []string{"WestNO_0", "westno_1", "WestNO_2"},
		NotBefore:         nb,
		Description:       "Host maintenance",
		DurationInSeconds: 9,
	})
	ns := mustPoll(t, src)
	require.Len(t, ns, 1)
	n := ns[0]
	assert.Equal(t, id, n.ID)
	assert.Equal(t, notice.KindFreeze, n.Kind)
	assert.False(t, n.Final())
	assert.True(t, n.Deadline.Equal(nb), "deadline %v, want %v", n.Deadline, nb)
	assert.Equal(t, "WestNO_0,westno_1,WestNO_2", n.Detail["resources"])
	assert.Equal(t, "9", n.Detail["duration_seconds"])
	assert.Equal(t, "Host maintenance", n.Detail["description"])
	assert.Equal(t, "Platform", n.Detail["source"])
	assert.Equal(t, "Scheduled", n.Detail["status"])
	assert.Contains(t, n.Detail["raw"], id)
}

func TestVMNameUnknownKeepsEvents(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	// An endpoint that serves scheduled events but refuses the name path
	// (as a proxy or an old IMDS might): the source keeps every event.
	mux := http.NewServeMux()
	target, err := url.Parse(f.URL())
	require.NoError(t, err)
	mux.Handle("/metadata/scheduledevents", proxyTo(target))
	mux.HandleFunc("/", http.NotFound)
	front := httptest.NewServer(mux)
	t.Cleanup(front.Close)

	src := newSource(f, &azurespot.Options{Endpoint: front.URL, RequestTimeout: time.Second})
	id := f.AddEvent(noticetest.AzureEvent{EventType: "Redeploy", Resources: []string{"someone-else"}, NotBefore: deadline(10 * time.Minute)})
	ns := mustPoll(t, src)
	require.Len(t, ns, 1, "with no name, events for any VM are kept")
	assert.Equal(t, id, ns[0].ID)
	assert.Equal(t, notice.KindRedeploy, ns[0].Kind)
	assert.Empty(t, src.VMName())
}

func TestUnknownEventType(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, nil)
	f.AddEvent(noticetest.AzureEvent{EventType: "LiveMigrate", NotBefore: deadline(time.Hour)})
	ns := mustPoll(t, src)
	require.Len(t, ns, 1)
	assert.Equal(t, notice.KindMaintenance, ns[0].Kind)
	assert.Equal(t, "LiveMigrate", ns[0].Detail["type"])
}

func TestStartedKeepsDeadline(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, nil)
	nb := deadline(5 * time.Minute)
	id := f.AddEvent(noticetest.AzureEvent{EventType: "Terminate", NotBefore: nb})
	first := mustPoll(t, src)
	require.Len(t, first, 1)
	require.True(t, first[0].Deadline.Equal(nb))

	require.True(t, f.StartEvent(id))
	ns := mustPoll(t, src)
	require.Len(t, ns, 1)
	n := ns[0]
	assert.Equal(t, "Started", n.Detail["status"])
	assert.Empty(t, n.Detail["not_before"], "the fake serves NotBefore \"\" once Started")
	assert.True(t, n.Deadline.Equal(nb), "deadline after Started = %v, want the announced %v", n.Deadline, nb)
	assert.True(t, n.Observed.Equal(first[0].Observed))
	assert.Equal(t, notice.KindTerminate, n.Kind)
}

func TestFirstSeenStartedUsesObservation(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, nil)
	// Hardware failures go straight to Started.
	f.AddEvent(noticetest.AzureEvent{EventType: "Redeploy", EventStatus: "Started"})
	before := time.Now()
	ns := mustPoll(t, src)
	after := time.Now()
	require.Len(t, ns, 1)
	d := ns[0].Deadline
	assert.False(t, d.Before(before) || d.After(after), "deadline %v not in [%v, %v]", d, before, after)
	assert.True(t, d.Equal(ns[0].Observed))
	// And it stays put.
	time.Sleep(20 * time.Millisecond)
	again := mustPoll(t, src)
	require.Len(t, again, 1)
	assert.True(t, again[0].Deadline.Equal(d))
}

func TestISONotBeforeAccepted(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 4, 11, 22, 26, 58, 0, time.UTC)
	for _, raw := range []string{
		"2026-04-11T22:26:58Z",
		"2026-04-11T22:26:58.000Z",
		"2026-04-12T00:26:58+02:00",
		"2026-04-11T22:26:58", // no zone: UTC
		"Sat, 11 Apr 2026 22:26:58 GMT",
		"Mon, 11 Apr 2026 22:26:58 GMT", // PROTOCOLS.md's example has the wrong weekday
	} {
		t.Run(raw, func(t *testing.T) {
			f := newFake(t)
			src := newSource(f, nil)
			f.AddEvent(noticetest.AzureEvent{EventType: "Preempt", NotBeforeRaw: raw})
			ns := mustPoll(t, src)
			require.Len(t, ns, 1)
			assert.True(t, ns[0].Deadline.Equal(want), "NotBefore %q → %v, want %v", raw, ns[0].Deadline, want)
			assert.Equal(t, time.UTC, ns[0].Deadline.Location())
		})
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, nil)
	good := f.AddEvent(noticetest.AzureEvent{EventType: "Reboot", NotBefore: deadline(time.Hour)})
	first := mustPoll(t, src)
	require.Len(t, first, 1)

	f.Inject(noticetest.FailGarbage, 1)
	ns, err := poll(t, src)
	assert.Empty(t, ns)
	require.ErrorIs(t, err, notice.ErrMalformed)

	for _, bad := range []string{"tomorrow", "11/04/2026 22:26:58", "Sat, 11 Apr 2026 22:26:58 PST", "2026-13-45T99:00:00Z"} {
		id := f.AddEvent(noticetest.AzureEvent{EventType: "Preempt", NotBeforeRaw: bad})
		ns, err = poll(t, src)
		assert.Empty(t, ns, "NotBefore %q", bad)
		require.ErrorIs(t, err, notice.ErrMalformed, "NotBefore %q", bad)
		assert.Contains(t, err.Error(), "NotBefore")
		require.True(t, f.RemoveEvent(id))
	}

	// A bad time in another VM's event does not concern us.
	f.AddEvent(noticetest.AzureEvent{EventType: "Freeze", Resources: []string{"other"}, NotBeforeRaw: "garbage"})
	after := mustPoll(t, src)
	require.Len(t, after, 1)
	// The failed polls left the good event's state alone.
	assert.Equal(t, good, after[0].ID)
	assert.True(t, after[0].Observed.Equal(first[0].Observed))
}

func TestSlowFirstCall(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, &azurespot.Options{FirstCallTimeout: 10 * time.Second, RequestTimeout: 300 * time.Millisecond})
	f.SetFirstCallDelay(1500 * time.Millisecond)
	f.Interrupt(notice.KindPreempt, deadline(30*time.Second))

	start := time.Now()
	ns, err := poll(t, src)
	require.NoError(t, err, "a slow first call is not a failure")
	assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "the fake did not delay")
	require.Len(t, ns, 1)

	// Later calls are bounded by RequestTimeout.
	f.Inject(noticetest.FailHang, 1)
	start = time.Now()
	_, err = poll(t, src)
	el := time.Since(start)
	require.ErrorIs(t, err, notice.ErrTransient)
	assert.GreaterOrEqual(t, el, 250*time.Millisecond)
	assert.Less(t, el, 1200*time.Millisecond, "later call not bounded by the short timeout")
}

func TestFirstCallTimeout(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, &azurespot.Options{FirstCallTimeout: 200 * time.Millisecond, RequestTimeout: time.Second})
	f.SetFirstCallDelay(5 * time.Second)
	start := time.Now()
	_, err := poll(t, src)
	require.ErrorIs(t, err, notice.ErrTransient)
	assert.Less(t, time.Since(start), 2*time.Second)
	// Enablement went ahead anyway: the next call answers.
	assert.Empty(t, mustPoll(t, src))
}

// proxyTo forwards to target without adding X-Forwarded-For (which IMDS,
// and so the fake, refuses).
func proxyTo(target *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
}

// recorder sits in front of the fake and keeps what each request carried.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, query string
	header              http.Header
	body                string
}

func (r *recorder) front(t *testing.T, backend string) string {
	target, err := url.Parse(backend)
	require.NoError(t, err)
	proxy := proxyTo(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, recorded{req.Method, req.URL.Path, req.URL.RawQuery, req.Header.Clone(), string(body)})
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

func TestAck(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	var rec recorder
	src := newSource(f, &azurespot.Options{Endpoint: rec.front(t, f.URL()), RequestTimeout: time.Second})
	nb := deadline(15 * time.Minute)
	id := f.AddEvent(noticetest.AzureEvent{EventType: "Reboot", EventSource: "User", NotBefore: nb})
	ns := mustPoll(t, src)
	require.Len(t, ns, 1)

	require.NoError(t, src.Ack(context.Background(), ns[0]))
	assert.Equal(t, []string{id}, f.Acked())

	var post *recorded
	for _, r := range rec.all() {
		if r.method == http.MethodPost {
			post = &r
		}
	}
	require.NotNil(t, post, "no POST sent")
	assert.Equal(t, "/metadata/scheduledevents", post.path)
	assert.Equal(t, "api-version=2020-07-01", post.query)
	assert.Equal(t, "true", post.header.Get("Metadata"))
	assert.Equal(t, "application/json", post.header.Get("Content-Type"))
	assert.JSONEq(t, `{"StartRequests":[{"EventId":"`+id+`"}]}`, post.body)

	// Every request carried the header, and none went through a proxy
	// header.
	for _, r := range rec.all() {
		assert.Equal(t, "true", r.header.Get("Metadata"), "%s %s", r.method, r.path)
	}

	// The fake moved the event to Started; the deadline is kept.
	after := mustPoll(t, src)
	require.Len(t, after, 1)
	assert.Equal(t, "Started", after[0].Detail["status"])
	assert.True(t, after[0].Deadline.Equal(nb))
}

func TestAckErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, nil)
	ctx := context.Background()

	err := src.Ack(ctx, notice.Notice{ID: "0A6C6D4B-0000-4000-8000-000000000000", Provider: "azure"})
	require.Error(t, err, "an EventId the service does not know")
	assert.Contains(t, err.Error(), "400")

	require.Error(t, src.Ack(ctx, notice.Notice{ID: "x", Provider: "aws"}))
	require.Error(t, src.Ack(ctx, notice.Notice{Provider: "azure"}))
	assert.Empty(t, f.Acked())

	// Through a Watcher, which routes by provider.
	f.Interrupt(notice.KindRedeploy, deadline(10*time.Minute))
	ns := mustPoll(t, src)
	require.Len(t, ns, 1)
	w := notice.NewWatcher([]notice.Source{src}, nil)
	require.NoError(t, w.Ack(ctx, ns[0]))
	assert.Equal(t, []string{ns[0].ID}, f.Acked())

	f.Inject(noticetest.FailServerError, 1)
	err = src.Ack(ctx, ns[0])
	require.ErrorIs(t, err, notice.ErrTransient)
}

// watch runs a Watcher over src and collects its events.
type watch struct {
	w      *notice.Watcher
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	events []notice.Event
}

func startWatch(t *testing.T, src notice.Source, interval time.Duration) *watch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wa := &watch{
		w:      notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{Interval: interval, MaxBackoff: 100 * time.Millisecond}),
		cancel: cancel,
		done:   make(chan error, 1),
	}
	go func() {
		wa.done <- wa.w.Watch(ctx, func(e notice.Event) {
			wa.mu.Lock()
			wa.events = append(wa.events, e)
			wa.mu.Unlock()
		})
	}()
	t.Cleanup(wa.stop)
	return wa
}

func (wa *watch) stop() {
	wa.cancel()
	<-wa.done
	wa.done <- context.Canceled // later stops return at once
}

func (wa *watch) get() []notice.Event {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	return append([]notice.Event(nil), wa.events...)
}

func (wa *watch) waitFor(t *testing.T, what string, within time.Duration, cond func([]notice.Event) bool) {
	t.Helper()
	end := time.Now().Add(within)
	for !cond(wa.get()) {
		if time.Now().After(end) {
			t.Fatalf("no %s within %v; events %v; health %+v", what, within, wa.get(), wa.w.Health())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDisappearingEventCanceled(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	wa := startWatch(t, newSource(f, nil), 20*time.Millisecond)
	id := f.AddEvent(noticetest.AzureEvent{EventType: "Preempt", NotBefore: deadline(30 * time.Second)})
	wa.waitFor(t, "notice", 3*time.Second, func(es []notice.Event) bool { return len(es) >= 1 })
	require.True(t, f.RemoveEvent(id))
	wa.waitFor(t, "cancellation", 3*time.Second, func(es []notice.Event) bool { return len(es) >= 2 })
	es := wa.get()
	require.Len(t, es, 2)
	assert.Equal(t, notice.EventNotice, es[0].Type)
	assert.Equal(t, notice.EventCanceled, es[1].Type)
	assert.Equal(t, id, es[1].Notice.ID)
	assert.Equal(t, notice.KindPreempt, es[1].Notice.Kind)
}

func TestSameEventManyPollsOneEvent(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	wa := startWatch(t, newSource(f, nil), 10*time.Millisecond)
	id := f.AddEvent(noticetest.AzureEvent{EventType: "Terminate", NotBefore: deadline(10 * time.Minute)})
	wa.waitFor(t, "notice", 3*time.Second, func(es []notice.Event) bool { return len(es) >= 1 })
	start := f.Requests()
	incBefore := f.Incarnation()
	time.Sleep(150 * time.Millisecond)
	// Scheduled → Started bumps the incarnation; the notice is the same.
	require.True(t, f.StartEvent(id))
	time.Sleep(150 * time.Millisecond)
	wa.stop()
	assert.GreaterOrEqual(t, f.Requests()-start, 10, "the watcher should have polled many times")
	assert.Greater(t, f.Incarnation(), incBefore)
	es := wa.get()
	require.Len(t, es, 1, "events: %v", es)
	assert.Equal(t, id, es[0].Notice.ID)
}

func TestTransientStreaksThenRecovery(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, nil)
	f.Interrupt(notice.KindPreempt, deadline(30*time.Second))
	for _, fl := range []noticetest.Failure{noticetest.FailServerError, noticetest.FailUnavailable, noticetest.FailThrottle, noticetest.FailReset} {
		// Plenty queued: net/http retries a GET whose reused connection
		// was reset, consuming two faults per poll.
		f.Inject(fl, 100)
		for range 3 {
			ns, err := poll(t, src)
			assert.Empty(t, ns)
			require.ErrorIs(t, err, notice.ErrTransient, "%s", fl)
		}
		f.Inject(0, 0)
	}
	require.Len(t, mustPoll(t, src), 1)

	// The same through a Watcher: one notice after the streak, health
	// recovered.
	f2 := newFake(t)
	f2.Inject(noticetest.FailServerError, 4)
	f2.Inject(noticetest.FailThrottle, 4)
	f2.Interrupt(notice.KindPreempt, deadline(30*time.Second))
	wa := startWatch(t, newSource(f2, nil), 10*time.Millisecond)
	wa.waitFor(t, "notice", 5*time.Second, func(es []notice.Event) bool { return len(es) >= 1 })
	h := wa.w.Health()[0]
	assert.Zero(t, h.ConsecutiveFailures)
	assert.GreaterOrEqual(t, h.Polls, 9)
	assert.Len(t, wa.get(), 1)
}

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code int
		want error
	}{
		{http.StatusBadRequest, notice.ErrUnavailable},
		{http.StatusForbidden, notice.ErrUnavailable},
		{http.StatusNotFound, notice.ErrUnavailable},
		{http.StatusMethodNotAllowed, notice.ErrUnavailable},
		{http.StatusGone, notice.ErrTransient},
		{http.StatusTooManyRequests, notice.ErrTransient},
		{http.StatusInternalServerError, notice.ErrTransient},
		{http.StatusBadGateway, notice.ErrTransient},
	} {
		t.Run(http.StatusText(tc.code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, `{"error":"status under test"}`, tc.code)
			}))
			t.Cleanup(srv.Close)
			src := azurespot.New(&azurespot.Options{Endpoint: srv.URL, VMName: "vm", RequestTimeout: time.Second})
			ns, err := poll(t, src)
			assert.Empty(t, ns)
			require.ErrorIs(t, err, tc.want)
			other := notice.ErrTransient
			if tc.want == notice.ErrTransient {
				other = notice.ErrUnavailable
			}
			assert.NotErrorIs(t, err, other)
		})
	}
}

func TestMissingHeaderIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	// A client whose transport drops the header, as a misconfigured proxy
	// would: the real protocol answers 400.
	strip := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Del("Metadata")
		return http.DefaultTransport.RoundTrip(r)
	})}
	src := newSource(f, &azurespot.Options{HTTPClient: strip, VMName: "vm", RequestTimeout: time.Second})
	_, err := poll(t, src)
	require.ErrorIs(t, err, notice.ErrUnavailable)
	assert.Contains(t, err.Error(), "metadata header")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestEndpointDownThenUp(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	src := azurespot.New(&azurespot.Options{Endpoint: "http://" + addr, RequestTimeout: 500 * time.Millisecond})
	_, err = poll(t, src)
	require.ErrorIs(t, err, notice.ErrTransient, "connection refused is transient")

	wa := startWatch(t, src, 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, wa.get())
	require.Positive(t, wa.w.Health()[0].ConsecutiveFailures)

	f, err := noticetest.NewAzure(&noticetest.ServerOptions{Listen: addr})
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	t.Cleanup(f.Close)
	f.Interrupt(notice.KindPreempt, deadline(30*time.Second))
	wa.waitFor(t, "notice", 5*time.Second, func(es []notice.Event) bool { return len(es) >= 1 })
	assert.Equal(t, notice.KindPreempt, wa.get()[0].Notice.Kind)
	assert.Equal(t, f.VMName(), src.VMName(), "name learned once IMDS answered")
}

func TestHangLongerThanPollInterval(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	src := newSource(f, &azurespot.Options{RequestTimeout: 300 * time.Millisecond})
	wa := startWatch(t, src, 20*time.Millisecond)
	end := time.Now().Add(3 * time.Second)
	for wa.w.Health()[0].LastSuccess.IsZero() {
		require.True(t, time.Now().Before(end), "no successful poll")
		time.Sleep(5 * time.Millisecond)
	}
	f.Inject(noticetest.FailHang, 1)
	// Wait until the hang has begun (the request that takes it counts).
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	f.Interrupt(notice.KindPreempt, deadline(30*time.Second))
	wa.waitFor(t, "notice", 5*time.Second, func(es []notice.Event) bool { return len(es) >= 1 })
	el := time.Since(t0)
	assert.Less(t, el, 2*time.Second, "a hung request should cost one RequestTimeout, not the first-call timeout")
	h := wa.w.Health()[0]
	assert.Zero(t, h.ConsecutiveFailures)
	assert.Len(t, wa.get(), 1)
}

func TestProbe(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SetVMName("probe-vm")
	src := newSource(f, nil)
	require.NoError(t, src.Probe(context.Background()))
	assert.Equal(t, "probe-vm", src.VMName(), "Probe learns the name")

	// Another cloud's metadata server at the same address: AWS answers 404
	// with an HTML page; a server answering 200 with something else is not
	// Azure either.
	for name, h := range map[string]http.HandlerFunc{
		"404": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, "<html>404 - Not Found</html>")
		},
		"not-azure-json": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"instance-id":"i-0123"}`)
		},
	} {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		err := azurespot.New(&azurespot.Options{Endpoint: srv.URL}).Probe(context.Background())
		require.ErrorIs(t, err, notice.ErrUnavailable, name)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	err = azurespot.New(&azurespot.Options{Endpoint: "http://" + addr}).Probe(context.Background())
	require.ErrorIs(t, err, notice.ErrTransient)
}

func TestPollHonoursContext(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	// Even the patient first call ends with the caller's context.
	f.SetFirstCallDelay(time.Minute)
	src := newSource(f, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := src.Poll(ctx)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "err = %v", err)
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	src := azurespot.New(nil)
	assert.Equal(t, "azure", src.Name())
	assert.Zero(t, src.PollInterval(), "zero leaves the Watcher's default")
	assert.Equal(t, 3*time.Second, azurespot.New(&azurespot.Options{PollInterval: 3 * time.Second}).PollInterval())
}

// BenchmarkPoll compares one Poll (GET, parse, filter, dedup state) with a
// raw GET of the same document through the same transport, interleaved in
// one run. It reports both and their ratio.
func BenchmarkPoll(b *testing.B) {
	f := newFake(b)
	f.AddEvent(noticetest.AzureEvent{EventType: "Freeze", Resources: []string{"other-vm"}, NotBefore: deadline(time.Hour)})
	f.Interrupt(notice.KindPreempt, deadline(30*time.Second))
	src := azurespot.New(&azurespot.Options{Endpoint: f.URL()})
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	ctx := context.Background()
	if ns, err := src.Poll(ctx); err != nil || len(ns) != 1 {
		b.Fatalf("Poll = %v, %v", ns, err)
	}
	u := f.URL() + "/metadata/scheduledevents?api-version=2020-07-01"
	var raw, polled time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Metadata", "true")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t1 := time.Now()
		if _, err := src.Poll(ctx); err != nil {
			b.Fatal(err)
		}
		raw += t1.Sub(t0)
		polled += time.Since(t1)
	}
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-get-ns")
	b.ReportMetric(float64(polled.Nanoseconds())/float64(b.N), "poll-ns")
	b.ReportMetric(float64(polled)/float64(raw), "poll/raw")
}
