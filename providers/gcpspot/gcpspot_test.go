package gcpspot_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/gcpspot"
)

// testWait is the timeout_sec the tests use, so that a hanging GET that is
// not woken by a change still ends quickly.
const testWait = 2 * time.Second

func harness(wait time.Duration) noticetest.Harness {
	return noticetest.Harness{
		Provider: "gcp",
		NewFake: func(t testing.TB) noticetest.Fake {
			f, err := noticetest.NewGCP(nil)
			require.NoError(t, err)
			return f
		},
		NewSource: func(t testing.TB, f noticetest.Fake) notice.Source {
			return gcpspot.New(&gcpspot.Options{Endpoint: f.URL(), WaitTimeout: wait, HTTPClient: client(t)})
		},
		Kinds:            []notice.Kind{notice.KindPreempt, notice.KindTerminate, notice.KindMigrate},
		ProviderDeadline: func(notice.Kind) bool { return false },
		Nominal: func(k notice.Kind) time.Duration {
			if k == notice.KindPreempt {
				return gcpspot.DefaultPreemptNotice
			}
			return gcpspot.DefaultMaintenanceNotice
		},
	}
}

func TestConformance(t *testing.T) {
	noticetest.RunConformance(t, harness(testWait))
}

func BenchmarkDetection(b *testing.B) {
	noticetest.BenchmarkDetection(b, harness(gcpspot.DefaultWaitTimeout), 0)
}

func newFake(t testing.TB) *noticetest.GCP {
	t.Helper()
	f, err := noticetest.NewGCP(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

// client returns the default metadata client, whose idle connections are
// closed when the test ends: the Go transport may keep a spare connection
// that never carried a request, and http.Server.Shutdown waits for such a
// connection as if it were busy.
func client(t testing.TB) *http.Client {
	c := metaclient.NewHTTPClient(0)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func newSource(t testing.TB, f *noticetest.GCP, opts *gcpspot.Options) *gcpspot.Source {
	o := gcpspot.Options{WaitTimeout: testWait}
	if opts != nil {
		o = *opts
	}
	if o.Endpoint == "" {
		o.Endpoint = f.URL()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = client(t)
	}
	return gcpspot.New(&o)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitHanging waits until the fake holds n hanging GETs.
func waitHanging(t *testing.T, f *noticetest.GCP, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return f.Hanging() == n }, 5*time.Second, time.Millisecond,
		"fake never held %d hanging GETs (holds %d)", n, f.Hanging())
}

type waitResult struct {
	ns  []notice.Notice
	err error
	at  time.Time
}

func startWait(ctx context.Context, src *gcpspot.Source) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		ns, err := src.Wait(ctx)
		ch <- waitResult{ns, err, time.Now()}
	}()
	return ch
}

func TestPollKinds(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		kind       notice.Kind
		nominal    time.Duration
	}{
		{gcpspot.KeyPreempted, "TRUE", notice.KindPreempt, 7 * time.Second},
		{gcpspot.KeyMaintenanceEvent, "TERMINATE_ON_HOST_MAINTENANCE", notice.KindTerminate, 11 * time.Second},
		{gcpspot.KeyMaintenanceEvent, "SHUTDOWN_ON_HOST_MAINTENANCE", notice.KindTerminate, 11 * time.Second},
		{gcpspot.KeyMaintenanceEvent, "MIGRATE_ON_HOST_MAINTENANCE", notice.KindMigrate, 11 * time.Second},
	} {
		t.Run(tc.value, func(t *testing.T) {
			f := newFake(t)
			src := newSource(t, f, &gcpspot.Options{PreemptNotice: 7 * time.Second, MaintenanceNotice: 11 * time.Second})
			f.SetValue(tc.key, tc.value)
			before := time.Now()
			ns, err := src.Poll(ctxT(t))
			require.NoError(t, err)
			require.Len(t, ns, 1)
			n := ns[0]
			assert.Equal(t, tc.kind, n.Kind)
			assert.Equal(t, "gcp", n.Provider)
			assert.False(t, n.Observed.Before(before), "observed %v before the request %v", n.Observed, before)
			assert.Equal(t, n.Observed.Add(tc.nominal), n.Deadline)
			assert.Equal(t, tc.key, n.Detail["key"])
			assert.Equal(t, tc.value, n.Detail["value"])
			assert.Equal(t, noticetest.GCPETag(tc.value), n.Detail["etag"])
			assert.Contains(t, n.ID, tc.key)
		})
	}
}

// The identity is (key, value, ETag of the first observation); Observed and
// the deadline stay those of the first observation; a new value is a new
// notice.
func TestIdentity(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, nil)
	ctx := ctxT(t)
	f.Interrupt(notice.KindTerminate, time.Time{})
	ns, err := src.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	first := ns[0]

	time.Sleep(20 * time.Millisecond)
	ns, err = src.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.Equal(t, first, ns[0])

	f.Interrupt(notice.KindMigrate, time.Time{})
	ns, err = src.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.Equal(t, notice.KindMigrate, ns[0].Kind)
	assert.NotEqual(t, first.ID, ns[0].ID)
	assert.True(t, ns[0].Observed.After(first.Observed))

	// Both keys at once: two notices, preempted first.
	f.SetValue(gcpspot.KeyPreempted, "TRUE")
	ns, err = src.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 2)
	assert.Equal(t, notice.KindPreempt, ns[0].Kind)
	assert.Equal(t, notice.KindMigrate, ns[1].Kind)
}

func TestWaitWakesOnChange(t *testing.T) {
	f := newFake(t)
	// A long timeout_sec: only the change can end the wait quickly.
	src := newSource(t, f, &gcpspot.Options{WaitTimeout: 30 * time.Second})
	ctx := ctxT(t)
	ns, err := src.Poll(ctx)
	require.NoError(t, err)
	require.Empty(t, ns)

	for _, kind := range []notice.Kind{notice.KindPreempt, notice.KindTerminate} {
		ch := startWait(ctx, src)
		waitHanging(t, f, 2)
		t0 := time.Now()
		f.Interrupt(kind, time.Time{})
		r := <-ch
		el := r.at.Sub(t0)
		require.NoError(t, r.err)
		require.Len(t, r.ns, 1)
		assert.Equal(t, kind, r.ns[0].Kind)
		t.Logf("%s: hanging GET woke %v after the change", kind, el)
		assert.Less(t, el, 500*time.Millisecond, "Wait woke too late")
		// The cancelled sibling request is gone from the server too.
		waitHanging(t, f, 0)

		ch = startWait(ctx, src)
		waitHanging(t, f, 2)
		f.Clear()
		r = <-ch
		require.NoError(t, r.err)
		assert.Empty(t, r.ns)
	}
}

// A change between two requests is not missed: Wait sends the last ETag,
// and the server answers at once because it differs.
func TestWaitSendsLastETag(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, &gcpspot.Options{WaitTimeout: 30 * time.Second})
	ctx := ctxT(t)
	ns, err := src.Poll(ctx)
	require.NoError(t, err)
	require.Empty(t, ns)

	f.Interrupt(notice.KindPreempt, time.Time{}) // while nobody is waiting
	start := time.Now()
	ns, err = src.Wait(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1, "the change made before Wait was missed")
	assert.Equal(t, notice.KindPreempt, ns[0].Kind)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// timeout_sec: without a change the server answers the same value after
// the timeout, and Wait returns the same notices without error.
func TestWaitTimeoutSameAnswer(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, &gcpspot.Options{WaitTimeout: time.Second})
	ctx := ctxT(t)
	f.Interrupt(notice.KindPreempt, time.Time{})
	first, err := src.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, first, 1)

	before := f.Requests()
	start := time.Now()
	ns, err := src.Wait(ctx)
	el := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, first, ns)
	assert.GreaterOrEqual(t, el, 900*time.Millisecond, "Wait returned before timeout_sec without a change")
	assert.Less(t, el, 5*time.Second)
	assert.Equal(t, 2, f.Requests()-before, "one hanging GET per key")
}

// A client whose own Timeout is shorter than WaitTimeout lowers timeout_sec
// instead of failing every hanging GET.
func TestShortClientTimeoutLowersWait(t *testing.T) {
	f := newFake(t)
	var logs bytes.Buffer
	src := newSource(t, f, &gcpspot.Options{
		HTTPClient:  &http.Client{Timeout: 2 * time.Second},
		WaitTimeout: time.Minute,
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	ctx := ctxT(t)
	_, err := src.Poll(ctx)
	require.NoError(t, err)
	start := time.Now()
	ns, err := src.Wait(ctx)
	require.NoError(t, err)
	assert.Empty(t, ns)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Contains(t, logs.String(), "lowering timeout_sec")
}

func TestRetriesShort503Burst(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, nil)
	ctx := ctxT(t)
	f.Interrupt(notice.KindPreempt, time.Time{})
	f.Inject(noticetest.FailUnavailable, 3)
	before := f.Requests()
	ns, err := src.Poll(ctx)
	require.NoError(t, err, "a 503 burst within the retry budget must be absorbed")
	require.Len(t, ns, 1)
	assert.Equal(t, 5, f.Requests()-before, "3 failed + 2 good requests")

	// The same inside Wait.
	f.Inject(noticetest.FailUnavailable, 4)
	f.Clear()
	ns, err = src.Wait(ctx)
	require.NoError(t, err)
	assert.Empty(t, ns)

	// A longer outage ends the Poll with a transient error.
	f.Inject(noticetest.FailUnavailable, 1000)
	_, err = src.Poll(ctx)
	require.ErrorIs(t, err, notice.ErrTransient)
	var se *metaclient.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusServiceUnavailable, se.Code)
}

func TestEnvMetadataHost(t *testing.T) {
	f := newFake(t)
	host := strings.TrimPrefix(f.URL(), "http://")
	t.Setenv(gcpspot.EnvMetadataHost, host)
	f.Interrupt(notice.KindPreempt, time.Time{})
	src := gcpspot.New(&gcpspot.Options{WaitTimeout: testWait, HTTPClient: client(t)})
	ns, err := src.Poll(ctxT(t))
	require.NoError(t, err)
	require.Len(t, ns, 1)
	require.NoError(t, src.Probe(ctxT(t)))

	// An explicit Endpoint wins over the environment.
	other := newFake(t)
	t.Setenv(gcpspot.EnvMetadataHost, strings.TrimPrefix(other.URL(), "http://"))
	src = gcpspot.New(&gcpspot.Options{Endpoint: f.URL(), HTTPClient: client(t)})
	ns, err = src.Poll(ctxT(t))
	require.NoError(t, err)
	require.Len(t, ns, 1)
	// And nil options read the environment too.
	before := other.Requests()
	ns, err = gcpspot.New(nil).Poll(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, ns)
	assert.Equal(t, 2, other.Requests()-before, "GCE_METADATA_HOST was not honoured")
}

// stripFlavor removes the Metadata-Flavor header, as a misconfigured proxy
// or sidecar would.
type stripFlavor struct{ next http.RoundTripper }

func (s stripFlavor) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("Metadata-Flavor")
	return s.next.RoundTrip(r)
}

func TestForbiddenIsUnavailable(t *testing.T) {
	f := newFake(t)
	client := metaclient.NewHTTPClient(0)
	client.Transport = stripFlavor{client.Transport}
	src := newSource(t, f, &gcpspot.Options{HTTPClient: client})
	before := f.Requests()
	ns, err := src.Poll(ctxT(t))
	assert.Empty(t, ns)
	require.ErrorIs(t, err, notice.ErrUnavailable)
	assert.NotErrorIs(t, err, notice.ErrTransient)
	assert.Equal(t, 2, f.Requests()-before, "403 must not be retried")
}

func TestFakeRefusesBadRequests(t *testing.T) {
	f := newFake(t)
	do := func(hdr map[string]string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, f.URL()+"/computeMetadata/v1/instance/preempted", nil)
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := do(nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, "Google", resp.Header.Get("Metadata-Flavor"))
	resp = do(map[string]string{"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = do(map[string]string{"Metadata-Flavor": "Google"})
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, noticetest.GCPETag("FALSE"), resp.Header.Get("ETag"))
}

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestEndpointDownThenUp(t *testing.T) {
	addr := deadAddr(t)
	c := metaclient.NewHTTPClient(0)
	src := gcpspot.New(&gcpspot.Options{Endpoint: "http://" + addr, WaitTimeout: testWait, HTTPClient: c})
	require.ErrorIs(t, src.Probe(ctxT(t)), notice.ErrTransient)

	w := notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{MaxBackoff: 100 * time.Millisecond})
	rec, stop := watch(t, w)
	require.Eventually(t, func() bool { return w.Health()[0].ConsecutiveFailures >= 1 }, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, w.Health()[0].LastError, notice.ErrTransient, "connection refused is transient")

	f, err := noticetest.NewGCP(&noticetest.ServerOptions{Listen: addr})
	require.NoError(t, err)
	t.Cleanup(func() {
		stop()
		c.CloseIdleConnections()
		f.Close()
	})
	f.Interrupt(notice.KindPreempt, time.Time{})
	rec.waitFor(t, 1)
	es := rec.get()
	assert.Equal(t, notice.EventNotice, es[0].Type)
	assert.Equal(t, notice.KindPreempt, es[0].Notice.Kind)
	assert.False(t, w.Health()[0].Degraded())
}

func TestMalformedValue(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, nil)
	ctx := ctxT(t)
	f.SetValue(gcpspot.KeyMaintenanceEvent, "REBOOT_SOMETIME")
	ns, err := src.Poll(ctx)
	require.ErrorIs(t, err, notice.ErrMalformed)
	assert.Empty(t, ns)
	assert.Contains(t, err.Error(), "REBOOT_SOMETIME")

	// Reported once: a bad maintenance-event must not hide preempted.
	f.SetValue(gcpspot.KeyPreempted, "TRUE")
	ns, err = src.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.Equal(t, notice.KindPreempt, ns[0].Kind)

	// A different bad value is reported again, also from Wait.
	f.SetValue(gcpspot.KeyMaintenanceEvent, "")
	ns, err = src.Wait(ctx)
	require.ErrorIs(t, err, notice.ErrMalformed)
	assert.Empty(t, ns)

	f.ResetKey(gcpspot.KeyMaintenanceEvent)
	ns, err = src.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1)
}

func TestKeyNotServed(t *testing.T) {
	f := newFake(t)
	var logs bytes.Buffer
	src := newSource(t, f, &gcpspot.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := ctxT(t)
	f.DeleteKey(gcpspot.KeyMaintenanceEvent)
	for range 2 {
		ns, err := src.Poll(ctx)
		require.NoError(t, err, "404 means unsupported, not an error")
		assert.Empty(t, ns)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "not served"), "404 logged once: %s", logs.String())

	// Wait hangs on the one key left.
	ch := startWait(ctx, src)
	waitHanging(t, f, 1)
	f.Interrupt(notice.KindPreempt, time.Time{})
	r := <-ch
	require.NoError(t, r.err)
	require.Len(t, r.ns, 1)
	assert.Equal(t, notice.KindPreempt, r.ns[0].Kind)

	// With neither key served, Wait re-polls after PollInterval.
	f.DeleteKey(gcpspot.KeyPreempted)
	src = newSource(t, f, &gcpspot.Options{PollInterval: 50 * time.Millisecond, WaitTimeout: testWait})
	_, err := src.Poll(ctx)
	require.NoError(t, err)
	f.ResetKey(gcpspot.KeyPreempted)
	ns, err := src.Wait(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1, "a key that comes back is seen again")
}

func goroutinesIn(pkg string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, pkg) {
			n++
		}
	}
	return n
}

func TestWaitHonoursContext(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, &gcpspot.Options{WaitTimeout: 30 * time.Second})
	_, err := src.Poll(ctxT(t))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	ch := startWait(ctx, src)
	waitHanging(t, f, 2)
	assert.GreaterOrEqual(t, goroutinesIn("gcpspot.(*Source)"), 2, "two hanging GETs")
	cancel()
	select {
	case r := <-ch:
		require.ErrorIs(t, r.err, context.Canceled)
		assert.Empty(t, r.ns)
	case <-time.After(2 * time.Second):
		t.Fatal("Wait ignored its context")
	}
	assert.Zero(t, goroutinesIn("gcpspot.(*Source)"), "a goroutine outlived Wait")
	waitHanging(t, f, 0)

	// Also while retrying: cancelling during backoff ends Wait.
	f.Inject(noticetest.FailUnavailable, 1000)
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err = src.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, goroutinesIn("gcpspot.(*Source)"))
}

type recorder struct {
	mu     sync.Mutex
	events []notice.Event
}

func (r *recorder) get() []notice.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notice.Event(nil), r.events...)
}

func (r *recorder) waitFor(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.get()) >= n }, 10*time.Second, 5*time.Millisecond,
		"want %d events, have %v", n, r.get())
}

// watch runs w until stop is called or the test ends.
func watch(t *testing.T, w *notice.Watcher) (rec *recorder, stop func()) {
	rec = &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Watch(ctx, func(e notice.Event) {
			rec.mu.Lock()
			rec.events = append(rec.events, e)
			rec.mu.Unlock()
		})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Watch returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return rec, stop
}

func TestWatcherEvents(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, &gcpspot.Options{WaitTimeout: time.Second})
	w := notice.NewWatcher([]notice.Source{src}, nil)
	rec, _ := watch(t, w)
	require.Eventually(t, func() bool { return f.Hanging() == 2 }, 5*time.Second, time.Millisecond)

	f.Interrupt(notice.KindPreempt, time.Time{})
	rec.waitFor(t, 1)
	// Hanging GETs time out and are renewed: no repeated event.
	time.Sleep(1300 * time.Millisecond)
	require.Len(t, rec.get(), 1)

	f.Interrupt(notice.KindTerminate, time.Time{}) // preempted back to FALSE, maintenance TERMINATE
	rec.waitFor(t, 3)
	f.Clear()
	rec.waitFor(t, 4)
	time.Sleep(100 * time.Millisecond)

	es := rec.get()
	require.Len(t, es, 4, "events: %v", es)
	assert.Equal(t, notice.EventNotice, es[0].Type)
	assert.Equal(t, notice.KindPreempt, es[0].Notice.Kind)
	// Order within one snapshot: new notices first, then cancellations.
	var canceledPreempt, newTerminate notice.Event
	for _, e := range es[1:3] {
		switch e.Type {
		case notice.EventCanceled:
			canceledPreempt = e
		case notice.EventNotice:
			newTerminate = e
		}
	}
	assert.Equal(t, es[0].Notice.ID, canceledPreempt.Notice.ID)
	assert.Equal(t, notice.KindTerminate, newTerminate.Notice.Kind)
	assert.Equal(t, notice.EventCanceled, es[3].Type)
	assert.Equal(t, newTerminate.Notice.ID, es[3].Notice.ID)
	assert.Zero(t, w.Health()[0].ConsecutiveFailures)
}

func TestProbe(t *testing.T) {
	f := newFake(t)
	require.NoError(t, newSource(t, f, nil).Probe(ctxT(t)))

	// Another cloud's metadata server at the same address.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("latest\n"))
	}))
	defer other.Close()
	err := gcpspot.New(&gcpspot.Options{Endpoint: other.URL}).Probe(ctxT(t))
	require.ErrorIs(t, err, notice.ErrUnavailable)

	err = gcpspot.New(&gcpspot.Options{Endpoint: "http://" + deadAddr(t)}).Probe(ctxT(t))
	require.ErrorIs(t, err, notice.ErrTransient)

	// A server that never answers: Probe gives up on its own.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer hang.Close()
	start := time.Now()
	err = gcpspot.New(&gcpspot.Options{Endpoint: hang.URL}).Probe(context.Background())
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestInstance(t *testing.T) {
	f := newFake(t)
	src := newSource(t, f, nil)
	in, err := src.Instance(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, gcpspot.Instance{
		ID:                "4520031799277581759",
		Name:              "spotsafe-fake",
		Zone:              "us-central1-a",
		Region:            "us-central1",
		MachineType:       "n1-standard-4",
		Preemptible:       true,
		ProvisioningModel: "SPOT",
	}, in)
	assert.True(t, in.Spot())

	f.DeleteKey("instance/scheduling/provisioning-model")
	f.SetValue("instance/scheduling/preemptible", "FALSE")
	f.SetValue("instance/zone", "projects/1/zones/europe-west4-b")
	in, err = src.Instance(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, "europe-west4", in.Region)
	assert.Empty(t, in.ProvisioningModel)
	assert.False(t, in.Spot())

	f.DeleteKey("instance/id")
	_, err = src.Instance(ctxT(t))
	require.ErrorIs(t, err, notice.ErrUnavailable)
}

// pollOnly hides the source's Waiter, so that the Watcher polls it every
// interval like a provider without hanging GETs: the baseline that
// BenchmarkDetection's hanging GETs are compared with.
type pollOnly struct{ notice.Source }

func BenchmarkDetectionPolling(b *testing.B) {
	h := harness(gcpspot.DefaultWaitTimeout)
	newSrc := h.NewSource
	h.NewSource = func(t testing.TB, f noticetest.Fake) notice.Source { return pollOnly{newSrc(t, f)} }
	noticetest.BenchmarkDetection(b, h, 0)
}

// A server that ignores wait_for_change answers at once with the same
// ETag; Wait must then pace itself instead of letting the Watcher spin.
func TestWaitPacesServerWithoutHangingGET(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		w.Header().Set("Metadata-Flavor", "Google")
		w.Header().Set("ETag", "same")
		if strings.HasSuffix(r.URL.Path, "preempted") {
			_, _ = w.Write([]byte("FALSE"))
			return
		}
		_, _ = w.Write([]byte("NONE"))
	}))
	defer srv.Close()
	src := gcpspot.New(&gcpspot.Options{Endpoint: srv.URL, PollInterval: 100 * time.Millisecond, HTTPClient: client(t)})
	ctx := ctxT(t)
	_, err := src.Poll(ctx)
	require.NoError(t, err)
	start := time.Now()
	for range 5 {
		ns, err := src.Wait(ctx)
		require.NoError(t, err)
		assert.Empty(t, ns)
	}
	assert.GreaterOrEqual(t, time.Since(start), 450*time.Millisecond, "Wait did not pace an unchanged answer")
	mu.Lock()
	defer mu.Unlock()
	assert.LessOrEqual(t, requests, 2+5*2)
}
