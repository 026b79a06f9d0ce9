package tencentspot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/tencentspot"
)

var harness = noticetest.Harness{
	Provider: "tencent",
	NewFake: func(t testing.TB) noticetest.Fake {
		f, err := noticetest.NewTencent(nil)
		require.NoError(t, err)
		return f
	},
	NewSource: func(t testing.TB, f noticetest.Fake) notice.Source {
		return tencentspot.New(&tencentspot.Options{Endpoint: f.URL()})
	},
	Kinds: []notice.Kind{notice.KindTerminate},
}

func TestConformance(t *testing.T) {
	noticetest.RunConformance(t, harness)
}

// The same suite with the fake writing the D/M/Y variant.
func TestConformanceDMY(t *testing.T) {
	h := harness
	h.NewFake = func(t testing.TB) noticetest.Fake {
		f, err := noticetest.NewTencent(nil)
		require.NoError(t, err)
		f.SetTimeLayout("02/01/2006 15:04:05")
		return f
	}
	noticetest.RunConformance(t, h)
}

func newFake(t *testing.T) *noticetest.Tencent {
	t.Helper()
	f, err := noticetest.NewTencent(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

func poll(t *testing.T, src *tencentspot.Source) ([]notice.Notice, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return src.Poll(ctx)
}

// The documented example: 2018-08-18 12:05:33 in UTC+8 is 04:05:33 UTC.
func TestTimeZoneConversion(t *testing.T) {
	got, err := tencentspot.ParseTime("2018-08-18 12:05:33")
	require.NoError(t, err)
	assert.Equal(t, "2018-08-18T04:05:33Z", got.Format(time.RFC3339))
	assert.Equal(t, time.UTC, got.Location())

	// Through the wire: the fake writes local UTC+8 time, the notice says UTC.
	f := newFake(t)
	f.Interrupt(notice.KindTerminate, time.Date(2018, 8, 18, 4, 5, 33, 0, time.UTC))
	src := tencentspot.New(&tencentspot.Options{Endpoint: f.URL()})
	ns, err := poll(t, src)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	n := ns[0]
	assert.Equal(t, "2018-08-18 12:05:33", n.Detail["raw"])
	assert.Equal(t, "2018-08-18T04:05:33Z", n.Deadline.Format(time.RFC3339))
	assert.Equal(t, "tencent/terminate/2018-08-18T04:05:33Z", n.ID)
	assert.Equal(t, notice.KindTerminate, n.Kind)
	assert.Equal(t, "tencent", n.Provider)
}

func TestParseTime(t *testing.T) {
	want := time.Date(2018, 8, 18, 4, 5, 33, 0, time.UTC)
	for _, in := range []string{
		"2018-08-18 12:05:33",
		"2018-08-18 12:05:33\n",
		"18/08/2018 12:05:33", // D/M/Y of localized documentation
		"2018-08-18T12:05:33+08:00",
		"2018-08-18T04:05:33Z",
		"2018-08-18T12:05:33", // no zone: UTC+8 like the documented form
	} {
		got, err := tencentspot.ParseTime(in)
		require.NoError(t, err, in)
		assert.True(t, got.Equal(want), "%q: got %v want %v", in, got, want)
		assert.Equal(t, time.UTC, got.Location())
	}
	// Across midnight and a year boundary.
	got, err := tencentspot.ParseTime("2019-01-01 07:59:59")
	require.NoError(t, err)
	assert.Equal(t, "2018-12-31T23:59:59Z", got.Format(time.RFC3339))
}

func TestParseTimeGarbage(t *testing.T) {
	for _, bad := range []string{
		"", "none", "08/18/2018 12:05:33", "2018-08-18", "12:05:33", "2018-08-18 25:05:33",
		"0001-01-01 00:00:00", noticetest.GarbageBody,
	} {
		_, err := tencentspot.ParseTime(bad)
		require.Error(t, err, bad)
		assert.True(t, errors.Is(err, notice.ErrMalformed), "%q: %v", bad, err)
	}
}

// A 200 with garbage is an error and no notice.
func TestGarbageNoNotice(t *testing.T) {
	f := newFake(t)
	f.Interrupt(notice.KindTerminate, time.Now().Add(time.Minute))
	f.SetTimeLayout("Mon Jan 2 15:04:05 2006") // a layout the client does not know
	src := tencentspot.New(&tencentspot.Options{Endpoint: f.URL()})
	ns, err := poll(t, src)
	assert.Empty(t, ns)
	require.ErrorIs(t, err, notice.ErrMalformed)
	assert.Contains(t, err.Error(), "termination time")

	f.SetTimeLayout("")
	ns, err = poll(t, src)
	require.NoError(t, err)
	assert.Len(t, ns, 1)
}

func TestProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := newFake(t)
	require.NoError(t, tencentspot.New(&tencentspot.Options{Endpoint: f.URL()}).Probe(ctx))

	ali, err := noticetest.NewAlibaba(nil)
	require.NoError(t, err)
	t.Cleanup(ali.Close)
	err = tencentspot.New(&tencentspot.Options{Endpoint: ali.URL()}).Probe(ctx)
	require.Error(t, err, "an Alibaba server (instance id i-...) is not Tencent")
	assert.Contains(t, err.Error(), "not a CVM instance id")

	f.Close()
	start := time.Now()
	err = tencentspot.New(&tencentspot.Options{Endpoint: f.URL()}).Probe(ctx)
	require.ErrorIs(t, err, notice.ErrTransient)
	assert.Less(t, time.Since(start), time.Second)
}

func TestOptions(t *testing.T) {
	assert.Equal(t, 300*time.Millisecond, tencentspot.New(&tencentspot.Options{PollInterval: 300 * time.Millisecond}).PollInterval())
	assert.Equal(t, time.Duration(0), tencentspot.New(nil).PollInterval())
	assert.Equal(t, "tencent", tencentspot.New(nil).Name())
}

// BenchmarkDetection measures notice-to-event latency through a Watcher at
// the default 1 s poll interval.
func BenchmarkDetection(b *testing.B) {
	noticetest.BenchmarkDetection(b, harness, 0)
}
