package alibabaspot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/alibabaspot"
)

var harness = noticetest.Harness{
	Provider: "alibaba",
	NewFake: func(t testing.TB) noticetest.Fake {
		f, err := noticetest.NewAlibaba(nil)
		require.NoError(t, err)
		return f
	},
	NewSource: func(t testing.TB, f noticetest.Fake) notice.Source {
		return alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL()})
	},
	Kinds: []notice.Kind{notice.KindTerminate},
}

func TestConformance(t *testing.T) {
	noticetest.RunConformance(t, harness)
}

// The same suite against a server in hardened-only mode: every request
// must carry a token.
func TestConformanceHardened(t *testing.T) {
	h := harness
	h.NewFake = func(t testing.TB) noticetest.Fake {
		f, err := noticetest.NewAlibaba(nil)
		require.NoError(t, err)
		f.RequireTokens(true)
		return f
	}
	noticetest.RunConformance(t, h)
}

func newFake(t *testing.T) *noticetest.Alibaba {
	t.Helper()
	f, err := noticetest.NewAlibaba(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

func poll(t *testing.T, src *alibabaspot.Source) ([]notice.Notice, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return src.Poll(ctx)
}

func TestNoticeFields(t *testing.T) {
	f := newFake(t)
	src := alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL() + "/"})
	deadline := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	f.Interrupt(notice.KindTerminate, deadline)
	ns, err := poll(t, src)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	n := ns[0]
	assert.Equal(t, "alibaba", n.Provider)
	assert.Equal(t, notice.KindTerminate, n.Kind)
	assert.True(t, n.Final())
	assert.True(t, n.Deadline.Equal(deadline), "deadline %v", n.Deadline)
	assert.Equal(t, time.UTC, n.Deadline.Location())
	assert.Equal(t, "alibaba/terminate/2031-05-06T07:08:09Z", n.ID)
	assert.Equal(t, "2031-05-06T07:08:09Z", n.Detail["raw"])
	// A new time is a new notice.
	f.Interrupt(notice.KindTerminate, deadline.Add(time.Minute))
	ns2, err := poll(t, src)
	require.NoError(t, err)
	require.Len(t, ns2, 1)
	assert.NotEqual(t, n.ID, ns2[0].ID)
}

// An instance switched to hardened mode: the source had fallen back to plain
// requests (no token API), a plain GET now gets 403, and the source acquires
// a token and retries once.
func TestHardenedTokenlessRefused(t *testing.T) {
	f := newFake(t)
	f.DisableTokenAPI(true)
	src := alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL()})
	ns, err := poll(t, src)
	require.NoError(t, err)
	require.Empty(t, ns)
	require.Equal(t, 0, f.TokenRequests(), "a 404 on the token PUT is not counted as a token request")

	f.DisableTokenAPI(false)
	f.RequireTokens(true)
	deadline := time.Now().Add(5 * time.Minute).Truncate(time.Second)
	f.Interrupt(notice.KindTerminate, deadline)
	before := f.Requests()
	ns, err = poll(t, src)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.True(t, ns[0].Deadline.Equal(deadline))
	assert.Equal(t, 1, f.TokenRequests())
	assert.Equal(t, 3, f.Requests()-before, "refused GET, token PUT, GET with token")

	// The token is reused.
	_, err = poll(t, src)
	require.NoError(t, err)
	assert.Equal(t, 1, f.TokenRequests())
}

// A token the server no longer accepts (401) is replaced once, not retried
// forever (PROTOCOLS 8.2).
func TestStaleTokenRenewedOnce(t *testing.T) {
	f := newFake(t)
	f.RequireTokens(true)
	src := alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL()})
	_, err := poll(t, src)
	require.NoError(t, err)
	require.Equal(t, 1, f.TokenRequests())

	f.ExpireTokens()
	deadline := time.Now().Add(5 * time.Minute).Truncate(time.Second)
	f.Interrupt(notice.KindTerminate, deadline)
	before := f.Requests()
	ns, err := poll(t, src)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.Equal(t, 2, f.TokenRequests())
	assert.Equal(t, 3, f.Requests()-before, "stale GET (401), token PUT, GET")
}

// A token is replaced before it expires, without a refused request.
func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	f := newFake(t)
	f.RequireTokens(true)
	src := alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL(), TokenTTL: time.Second})
	_, err := poll(t, src)
	require.NoError(t, err)
	require.Equal(t, 1, f.TokenRequests())
	time.Sleep(950 * time.Millisecond) // inside the early-refresh window
	before := f.Requests()
	_, err = poll(t, src)
	require.NoError(t, err)
	assert.Equal(t, 2, f.TokenRequests())
	assert.Equal(t, 2, f.Requests()-before, "token PUT, then one GET that is not refused")
}

// Hardened mode with no way to get a token: a clear error, bounded requests.
func TestHardenedWithoutTokenAPI(t *testing.T) {
	f := newFake(t)
	f.RequireTokens(true)
	f.DisableTokenAPI(true)
	src := alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL()})
	for range 3 {
		before := f.Requests()
		ns, err := poll(t, src)
		require.Empty(t, ns)
		require.ErrorIs(t, err, notice.ErrUnavailable)
		assert.Contains(t, err.Error(), "403")
		assert.LessOrEqual(t, f.Requests()-before, 3)
	}
}

func TestDisableTokens(t *testing.T) {
	f := newFake(t)
	src := alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL(), DisableTokens: true})
	_, err := poll(t, src)
	require.NoError(t, err)
	f.RequireTokens(true)
	_, err = poll(t, src)
	require.ErrorIs(t, err, notice.ErrUnavailable)
	assert.Equal(t, 0, f.TokenRequests())
}

func TestProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := newFake(t)
	require.NoError(t, alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL()}).Probe(ctx))

	hardened := newFake(t)
	hardened.RequireTokens(true)
	require.NoError(t, alibabaspot.New(&alibabaspot.Options{Endpoint: hardened.URL()}).Probe(ctx))

	tc, err := noticetest.NewTencent(nil)
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	require.Error(t, alibabaspot.New(&alibabaspot.Options{Endpoint: tc.URL()}).Probe(ctx), "a Tencent server is not Alibaba")

	f.Close() // nothing listens any more
	start := time.Now()
	err = alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL()}).Probe(ctx)
	require.ErrorIs(t, err, notice.ErrTransient)
	assert.Less(t, time.Since(start), time.Second)
}

func TestPollInterval(t *testing.T) {
	assert.Equal(t, 250*time.Millisecond, alibabaspot.New(&alibabaspot.Options{PollInterval: 250 * time.Millisecond}).PollInterval())
	assert.Equal(t, time.Duration(0), alibabaspot.New(nil).PollInterval())
	assert.Equal(t, "alibaba", alibabaspot.New(nil).Name())
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2015-01-05T18:02:00Z", time.Date(2015, 1, 5, 18, 2, 0, 0, time.UTC)},
		{"2015-01-05T18:02:00Z\n", time.Date(2015, 1, 5, 18, 2, 0, 0, time.UTC)},
		{"2015-01-05T18:02:00.5Z", time.Date(2015, 1, 5, 18, 2, 0, 5e8, time.UTC)},
		{"2015-01-06T02:02:00+08:00", time.Date(2015, 1, 5, 18, 2, 0, 0, time.UTC)},
		{"2015-01-05T18:02:00", time.Date(2015, 1, 5, 18, 2, 0, 0, time.UTC)},
	} {
		got, err := alibabaspot.ParseTime(tc.in)
		require.NoError(t, err, tc.in)
		assert.True(t, got.Equal(tc.want), "%q: got %v want %v", tc.in, got, tc.want)
		assert.Equal(t, time.UTC, got.Location())
	}
	for _, bad := range []string{"", "none", "2015-13-05T18:02:00Z", "0001-01-01T00:00:00Z", "1428254455", noticetest.GarbageBody} {
		_, err := alibabaspot.ParseTime(bad)
		require.Error(t, err, bad)
		assert.True(t, errors.Is(err, notice.ErrMalformed), "%q: %v", bad, err)
	}
}

// A 200 whose body is not a time makes no notice.
func TestMalformedBodyNoNotice(t *testing.T) {
	f := newFake(t)
	f.Interrupt(notice.KindTerminate, time.Now().Add(time.Minute))
	f.Inject(noticetest.FailGarbage, 1)
	src := alibabaspot.New(&alibabaspot.Options{Endpoint: f.URL()})
	ns, err := poll(t, src)
	assert.Empty(t, ns)
	require.ErrorIs(t, err, notice.ErrMalformed)
}

// BenchmarkDetection measures notice-to-event latency through a Watcher at
// the default 1 s poll interval.
func BenchmarkDetection(b *testing.B) {
	noticetest.BenchmarkDetection(b, harness, 0)
}
