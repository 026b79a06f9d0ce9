package awsspot_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/awsspot"
)

func harness() noticetest.Harness {
	return noticetest.Harness{
		Provider: "aws",
		NewFake: func(t testing.TB) noticetest.Fake {
			f, err := noticetest.NewAWS(nil)
			require.NoError(t, err)
			return f
		},
		NewSource: func(t testing.TB, f noticetest.Fake) notice.Source {
			return awsspot.New(fastOptions(f.URL()))
		},
		// Rebalance is left out: it carries no deadline (Deadline stays
		// zero), which the suite's deadline check cannot express; it is
		// tested in TestRebalance.
		Kinds: []notice.Kind{
			notice.KindTerminate, notice.KindStop, notice.KindHibernate,
			notice.KindReboot, notice.KindMaintenance,
		},
		// Every kind the fake serves carries the deadline on the wire:
		// instance-action "time" or a scheduled event's NotBefore.
		ProviderDeadline: func(notice.Kind) bool { return true },
	}
}

func TestConformance(t *testing.T) {
	noticetest.RunConformance(t, harness())
}

func TestRequireTokensConformance(t *testing.T) {
	// The same behaviour with HttpTokens=required, as on AL2023 AMIs.
	h := harness()
	h.NewFake = func(t testing.TB) noticetest.Fake {
		f, err := noticetest.NewAWS(nil)
		require.NoError(t, err)
		f.RequireTokens(true)
		return f
	}
	noticetest.RunConformance(t, h)
}

func TestInstanceAction(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	deadline := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, tc := range []struct {
		kind   notice.Kind
		action string
	}{
		{notice.KindTerminate, "terminate"},
		{notice.KindStop, "stop"},
		{notice.KindHibernate, "hibernate"},
	} {
		f.Interrupt(tc.kind, deadline)
		n := only(t, mustPoll(t, src))
		assert.Equal(t, tc.kind, n.Kind)
		assert.True(t, n.Final())
		assert.Equal(t, "spot-"+tc.action+"-2031-05-06T07:08:09Z", n.ID)
		assert.True(t, n.Deadline.Equal(deadline), "deadline %v", n.Deadline)
		assert.Equal(t, tc.action, n.Detail["action"])
		assert.Equal(t, "2031-05-06T07:08:09Z", n.Detail["time"])
		assert.JSONEq(t, fmt.Sprintf(`{"action":%q,"time":"2031-05-06T07:08:09Z"}`, tc.action), n.Detail["raw"])
	}
}

func TestRebalance(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	at := time.Date(2030, 10, 27, 8, 22, 0, 0, time.UTC)
	f.SetRebalance(at)
	n := only(t, mustPoll(t, src))
	assert.Equal(t, notice.KindRebalance, n.Kind)
	assert.False(t, n.Final(), "rebalance is advisory")
	assert.True(t, n.Deadline.IsZero(), "rebalance announces no deadline, got %v", n.Deadline)
	assert.Equal(t, "rebalance-2030-10-27T08:22:00Z", n.ID)
	assert.Equal(t, "2030-10-27T08:22:00Z", n.Detail["notice_time"])
	time.Sleep(10 * time.Millisecond)
	again := only(t, mustPoll(t, src))
	assert.Equal(t, n.ID, again.ID)
	assert.True(t, n.Observed.Equal(again.Observed), "Observed moved")

	// Through the Fake interface the notice time is the appear time.
	f.Clear()
	f.Interrupt(notice.KindRebalance, time.Now().Add(time.Hour))
	n = only(t, mustPoll(t, src))
	assert.Equal(t, notice.KindRebalance, n.Kind)
	assert.WithinDuration(t, time.Now(), mustTime(t, n.Detail["notice_time"]), 2*time.Second)

	// A rebalance recommendation and a Spot notice coexist.
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	f.SetRebalance(at)
	ns := mustPoll(t, src)
	require.Len(t, ns, 2)
	assert.Equal(t, notice.KindTerminate, ns[0].Kind)
	assert.Equal(t, notice.KindRebalance, ns[1].Kind)
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return v
}

func TestScheduledEvents(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	nb := time.Date(2030, 1, 21, 9, 0, 43, 0, time.UTC)
	na := nb.Add(17 * time.Minute)
	want := map[string]notice.Kind{
		"instance-reboot":     notice.KindReboot,
		"system-reboot":       notice.KindReboot,
		"instance-stop":       notice.KindStop,
		"instance-retirement": notice.KindTerminate,
		"system-maintenance":  notice.KindMaintenance,
		"something-new":       notice.KindMaintenance,
	}
	ids := map[string]string{}
	for code := range want {
		ids[f.AddScheduledEvent(noticetest.AWSScheduledEvent{Code: code, Description: "desc " + code, NotBefore: nb, NotAfter: na})] = code
	}
	// Degraded hardware: no NotAfter, days ahead.
	stopID := f.AddScheduledEvent(noticetest.AWSScheduledEvent{Code: "instance-stop", NotBefore: nb.Add(72 * time.Hour)})
	doneID := f.AddScheduledEvent(noticetest.AWSScheduledEvent{Code: "system-reboot", NotBefore: nb, State: "completed"})

	ns := mustPoll(t, src)
	require.Len(t, ns, len(want)+1)
	for _, n := range ns {
		assert.NotEqual(t, doneID, n.ID, "completed event returned")
		if n.ID == stopID {
			assert.Equal(t, notice.KindStop, n.Kind)
			assert.True(t, n.NotAfter.IsZero())
			assert.True(t, n.Deadline.Equal(nb.Add(72*time.Hour)))
			continue
		}
		code, ok := ids[n.ID]
		require.True(t, ok, "unknown id %s", n.ID)
		assert.Equal(t, want[code], n.Kind, code)
		assert.Equal(t, code, n.Detail["code"])
		assert.Equal(t, "desc "+code, n.Detail["description"])
		assert.Equal(t, "active", n.Detail["state"])
		assert.Equal(t, "21 Jan 2030 09:00:43 GMT", n.Detail["not_before"])
		assert.True(t, n.Deadline.Equal(nb), "deadline %v", n.Deadline)
		assert.True(t, n.NotAfter.Equal(na), "not after %v", n.NotAfter)
	}
}

func TestScheduledEventCanceled(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	id := f.AddScheduledEvent(noticetest.AWSScheduledEvent{Code: "instance-retirement", NotBefore: time.Now().Add(48 * time.Hour)})
	w := watch(t, src, 20*time.Millisecond)
	w.waitFor(t, "notice", func(es []notice.Event) bool { return len(es) >= 1 })
	require.True(t, f.SetScheduledEventState(id, "canceled"))
	es := w.waitFor(t, "canceled", func(es []notice.Event) bool { return len(es) >= 2 })
	time.Sleep(100 * time.Millisecond)
	es = w.get()
	require.Len(t, es, 2, "events %v", es)
	assert.Equal(t, notice.EventNotice, es[0].Type)
	assert.Equal(t, notice.EventCanceled, es[1].Type)
	assert.Equal(t, id, es[0].Notice.ID)
	assert.Equal(t, id, es[1].Notice.ID)
	assert.Equal(t, notice.KindTerminate, es[0].Notice.Kind)
}

func TestAutoScalingTerminated(t *testing.T) {
	f := newFake(t)
	opts := fastOptions(f.URL())
	opts.LifecycleNotice = 90 * time.Second
	src := awsspot.New(opts)

	f.SetLifecycleState("InService")
	assert.Empty(t, mustPoll(t, src))

	f.SetLifecycleState("Terminated")
	before := time.Now()
	n := only(t, mustPoll(t, src))
	assert.Equal(t, notice.KindTerminate, n.Kind)
	assert.Equal(t, "Terminated", n.Detail["target_lifecycle_state"])
	assert.True(t, n.Deadline.Equal(n.Observed.Add(90*time.Second)), "deadline %v observed %v", n.Deadline, n.Observed)
	assert.WithinDuration(t, before, n.Observed, time.Second)
	for range 3 {
		time.Sleep(15 * time.Millisecond)
		again := only(t, mustPoll(t, src))
		assert.Equal(t, n.ID, again.ID, "identity moved")
		assert.True(t, n.Deadline.Equal(again.Deadline), "deadline drifted")
		assert.True(t, n.Observed.Equal(again.Observed), "observed drifted")
	}

	f.SetLifecycleState("InService")
	assert.Empty(t, mustPoll(t, src))
	f.SetLifecycleState("Warmed:Terminated")
	n2 := only(t, mustPoll(t, src))
	assert.NotEqual(t, n.ID, n2.ID, "a new termination is a new notice")
	f.SetLifecycleState("")
	assert.Empty(t, mustPoll(t, src), "404 means no state yet")
}

func TestPastTimestamps(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	past := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	f.Interrupt(notice.KindTerminate, past)
	id := f.AddScheduledEvent(noticetest.AWSScheduledEvent{Code: "system-reboot", NotBefore: past.Add(-time.Hour)})
	ns := mustPoll(t, src)
	require.Len(t, ns, 2)
	for _, n := range ns {
		assert.Less(t, n.Remaining(time.Now()), time.Duration(0), "%v", n)
	}
	assert.True(t, ns[0].Deadline.Equal(past))
	assert.Equal(t, id, ns[1].ID)
}

func TestMalformed(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	for _, body := range []string{
		`{"action":"terminate","time":"soon"}`,
		`{"action":"terminate"`,
		`{"action":"terminate","time":"2017-13-45T99:00:00Z"}`,
		`{"action":"","time":"2017-09-18T08:22:00Z"}`,
		`["terminate"]`,
		`<html>not json</html>`,
	} {
		f.SetRaw("spot/instance-action", body)
		ns, err := poll(t, src)
		assert.ErrorIs(t, err, notice.ErrMalformed, "body %s", body)
		assert.Empty(t, ns, "body %s made a notice", body)
	}
	f.SetRaw("spot/instance-action", "")
	assert.Empty(t, mustPoll(t, src), "next poll works")

	for _, body := range []string{
		`[{"NotBefore":"someday","Code":"system-reboot","EventId":"instance-event-1","State":"active"}]`,
		`[{"NotBefore":"21 Jan 2030 09:00:43 GMT","NotAfter":"later","Code":"system-reboot","EventId":"instance-event-1","State":"active"}]`,
		`[{"NotBefore":"21 Jan 2030 09:00:43 GMT","Code":"system-reboot","State":"active"}]`,
		`{"NotBefore":"21 Jan 2030 09:00:43 GMT"}`,
	} {
		f.SetRaw("events/maintenance/scheduled", body)
		ns, err := poll(t, src)
		assert.ErrorIs(t, err, notice.ErrMalformed, "body %s", body)
		assert.Empty(t, ns, "body %s made a notice", body)
	}
	f.SetRaw("events/maintenance/scheduled", "")
	f.SetRaw("events/recommendations/rebalance", `{"noticeTime":""}`)
	_, err := poll(t, src)
	assert.ErrorIs(t, err, notice.ErrMalformed)
	f.SetRaw("events/recommendations/rebalance", "")
	f.SetRaw("autoscaling/target-lifecycle-state", "<html>")
	_, err = poll(t, src)
	assert.ErrorIs(t, err, notice.ErrMalformed)
	f.SetRaw("autoscaling/target-lifecycle-state", "")
	assert.Empty(t, mustPoll(t, src))
}

func TestMalformedPathDoesNotHideOthers(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	f.SetRaw("events/maintenance/scheduled", `[{"NotBefore":"garbage","EventId":"x","State":"active"}]`)
	deadline := time.Now().Add(2 * time.Minute).Truncate(time.Second)
	f.Interrupt(notice.KindStop, deadline)

	ns, err := poll(t, src)
	require.ErrorIs(t, err, notice.ErrMalformed)
	n := only(t, ns)
	assert.Equal(t, notice.KindStop, n.Kind, "the Spot notice comes back with the error")

	// Through a Watcher: the notice is reported although every poll fails,
	// and a failing path never turns into a cancellation.
	w := watch(t, src, 20*time.Millisecond)
	es := w.waitFor(t, "notice", func(es []notice.Event) bool { return len(es) >= 1 })
	assert.Equal(t, notice.KindStop, es[0].Notice.Kind)
	time.Sleep(150 * time.Millisecond)
	assert.Len(t, w.get(), 1)
	h := w.w.Health()[0]
	assert.True(t, h.Degraded(), "a broken path shows in health: %+v", h)
	assert.ErrorIs(t, h.LastError, notice.ErrMalformed)
}

func TestLegacyTerminationTimeFallback(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	deadline := time.Now().Add(2 * time.Minute).Truncate(time.Second)
	f.Interrupt(notice.KindTerminate, deadline)
	good := only(t, mustPoll(t, src))

	f.SetRaw("spot/instance-action", `{"action":"terminate","time":`)
	ns, err := poll(t, src)
	require.ErrorIs(t, err, notice.ErrMalformed)
	n := only(t, ns)
	assert.Equal(t, good.ID, n.ID, "spot/termination-time gives the same identity")
	assert.True(t, n.Deadline.Equal(deadline))
	assert.True(t, n.Observed.Equal(good.Observed))

	// A termination-time that is not a time is no notice.
	f.Clear()
	f.SetRaw("spot/termination-time", "not-a-time")
	ns, err = poll(t, awsspot.New(fastOptions(f.URL())))
	require.ErrorIs(t, err, notice.ErrMalformed)
	assert.Empty(t, ns)
}

func TestSameNoticeOneEvent(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	w := watch(t, src, 5*time.Millisecond)
	f.SetRaw("spot/instance-action", `{"action":"terminate","time":"2030-01-01T00:00:00.123Z"}`)
	w.waitFor(t, "notice", func(es []notice.Event) bool { return len(es) >= 1 })
	// Millisecond jitter in "time" (aws-node-termination-handler#146) is
	// the same notice.
	f.SetRaw("spot/instance-action", `{"action":"terminate","time":"2030-01-01T00:00:00.456Z"}`)
	start := w.w.Health()[0].Polls
	for w.w.Health()[0].Polls < start+40 {
		time.Sleep(5 * time.Millisecond)
	}
	es := w.get()
	require.Len(t, es, 1, "events %v", es)
	assert.Equal(t, notice.EventNotice, es[0].Type)
	assert.Equal(t, "spot-terminate-2030-01-01T00:00:00Z", es[0].Notice.ID)
}

func TestEndpointDownThenUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	src := awsspot.New(fastOptions("http://" + addr))
	for range 2 {
		ns, err := poll(t, src)
		require.Error(t, err)
		assert.ErrorIs(t, err, notice.ErrTransient, "refused connection is transient")
		assert.Empty(t, ns)
	}

	f, err := noticetest.NewAWS(&noticetest.ServerOptions{Listen: addr})
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	t.Cleanup(f.Close)
	f.RequireTokens(true)
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	n := only(t, mustPoll(t, src))
	assert.Equal(t, notice.KindTerminate, n.Kind)
}

func TestErrorStreaksThenRecovery(t *testing.T) {
	for _, fl := range []noticetest.Failure{noticetest.FailServerError, noticetest.FailUnavailable, noticetest.FailThrottle, noticetest.FailReset} {
		t.Run(fl.String(), func(t *testing.T) {
			f := newFake(t)
			src := awsspot.New(fastOptions(f.URL()))
			f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
			f.Inject(fl, 12)
			w := watch(t, src, 10*time.Millisecond)
			es := w.waitFor(t, "notice after the streak", func(es []notice.Event) bool { return len(es) >= 1 })
			assert.Equal(t, notice.EventNotice, es[0].Type)
			deadline := time.Now().Add(5 * time.Second)
			for w.w.Health()[0].ConsecutiveFailures != 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			h := w.w.Health()[0]
			assert.Zero(t, h.ConsecutiveFailures, "recovered")
			assert.Greater(t, h.Polls, 2, "the streak was seen")
			time.Sleep(50 * time.Millisecond)
			assert.Len(t, w.get(), 1, "no duplicate or cancel after the streak")
		})
	}
}

func TestHangLongerThanInterval(t *testing.T) {
	f := newFake(t)
	opts := fastOptions(f.URL())
	opts.Timeout = 150 * time.Millisecond
	src := awsspot.New(opts)
	f.Interrupt(notice.KindStop, time.Now().Add(2*time.Minute))
	w := watch(t, src, 20*time.Millisecond)
	w.waitFor(t, "notice", func(es []notice.Event) bool { return len(es) >= 1 })
	f.Inject(noticetest.FailHang, 2)
	start := w.w.Health()[0].Polls
	deadline := time.Now().Add(5 * time.Second)
	for {
		h := w.w.Health()[0]
		if h.Polls > start+5 && h.ConsecutiveFailures == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "polling did not resume after the hang: %+v", h)
		time.Sleep(10 * time.Millisecond)
	}
	es := w.get()
	require.Len(t, es, 1, "a hang is neither a cancel nor a new notice: %v", es)

	// A hang on a direct Poll ends at Timeout with a transient error.
	f.Inject(noticetest.FailHang, 1)
	t0 := time.Now()
	_, err := poll(t, src)
	assert.ErrorIs(t, err, notice.ErrTransient)
	assert.Less(t, time.Since(t0), time.Second)
}

func TestStaleTokenRetokensOnce(t *testing.T) {
	f := newFake(t)
	f.RequireTokens(true)
	src := awsspot.New(fastOptions(f.URL()))
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	only(t, mustPoll(t, src))
	require.Equal(t, 1, f.TokenPUTs())
	only(t, mustPoll(t, src))
	require.Equal(t, 1, f.TokenPUTs(), "token reused")

	f.ExpireTokens()
	only(t, mustPoll(t, src))
	assert.Equal(t, 2, f.TokenPUTs(), "exactly one re-token")
	assert.Equal(t, 1, f.Unauthorized(), "one 401, then the fresh token works on every path")
	only(t, mustPoll(t, src))
	assert.Equal(t, 2, f.TokenPUTs())
}

func TestPersistent401RetriesOnce(t *testing.T) {
	// An IMDS that issues tokens but rejects every one: one renewal and
	// retry, then a clear error, not a loop.
	var puts, gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			puts.Add(1)
			w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", "21600")
			fmt.Fprint(w, "tok")
			return
		}
		gets.Add(1)
		http.Error(w, "401 - Unauthorized", http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	src := awsspot.New(fastOptions(srv.URL))
	ns, err := poll(t, src)
	require.ErrorIs(t, err, notice.ErrUnavailable)
	assert.Contains(t, err.Error(), "401")
	assert.Empty(t, ns)
	assert.Equal(t, int32(2), puts.Load(), "initial token + one renewal")
	assert.Equal(t, int32(2), gets.Load(), "one GET + one retry, then the poll stops")
}

func TestTokenRefreshBeforeExpiry(t *testing.T) {
	f := newFake(t)
	f.RequireTokens(true)
	opts := fastOptions(f.URL())
	opts.TokenTTL = 2 * time.Second // refreshed 0.5 s early
	src := awsspot.New(opts)
	start := time.Now()
	mustPoll(t, src)
	require.Equal(t, 1, f.TokenPUTs())
	time.Sleep(time.Until(start.Add(time.Second)))
	mustPoll(t, src)
	assert.Equal(t, 1, f.TokenPUTs(), "still fresh at 1 s")
	time.Sleep(time.Until(start.Add(1600 * time.Millisecond)))
	mustPoll(t, src)
	assert.Equal(t, 2, f.TokenPUTs(), "renewed before the 2 s expiry")
	assert.Zero(t, f.Unauthorized(), "never sent an expired token")
}

func TestV1FallbackSticky(t *testing.T) {
	for _, code := range []int{http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			f := newFake(t)
			f.DisableV2(code)
			var logs logBuffer
			opts := fastOptions(f.URL())
			opts.Logger = logs.logger()
			src := awsspot.New(opts)
			f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
			for range 4 {
				only(t, mustPoll(t, src))
			}
			assert.Equal(t, 1, f.TokenPUTs(), "fallback is sticky")
			assert.Equal(t, 1, logs.count("using IMDSv1"), "logged once")
			require.NoError(t, src.Probe(context.Background()))

			// IMDSv1 turned off later: back to tokens, which still fail.
			f.RequireTokens(true)
			_, err := poll(t, src)
			assert.ErrorIs(t, err, notice.ErrUnavailable)
			assert.Contains(t, err.Error(), fmt.Sprint(code))
			f.DisableV2(0)
			only(t, mustPoll(t, src))
		})
	}
}

func TestV1DisabledNoFallback(t *testing.T) {
	f := newFake(t)
	f.DisableV2(http.StatusForbidden)
	opts := fastOptions(f.URL())
	opts.Getenv = env(map[string]string{awsspot.EnvV1Disabled: "true"})
	src := awsspot.New(opts)
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	ns, err := poll(t, src)
	require.ErrorIs(t, err, notice.ErrUnavailable)
	assert.Empty(t, ns)
	assert.Contains(t, err.Error(), "IMDSv1 is disabled")
}

func TestTokenPUT400IsAnError(t *testing.T) {
	f := newFake(t)
	f.DisableV2(http.StatusBadRequest)
	src := awsspot.New(fastOptions(f.URL()))
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	for range 2 {
		ns, err := poll(t, src)
		require.Error(t, err)
		assert.ErrorIs(t, err, notice.ErrUnavailable)
		assert.NotErrorIs(t, err, notice.ErrTransient)
		assert.Contains(t, err.Error(), "400")
		assert.Empty(t, ns, "no IMDSv1 fallback after a 400")
	}
	assert.Equal(t, 2, f.TokenPUTs())
	assert.Equal(t, 2, f.Requests(), "nothing but the token PUTs")
}

func TestTokenPUTServerError(t *testing.T) {
	f := newFake(t)
	f.DisableV2(http.StatusServiceUnavailable)
	src := awsspot.New(fastOptions(f.URL()))
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	ns, err := poll(t, src)
	require.ErrorIs(t, err, notice.ErrTransient)
	assert.Contains(t, err.Error(), "503")
	assert.Empty(t, ns, "a 5xx on the token PUT is no reason to fall back to IMDSv1")
	assert.Equal(t, 1, f.TokenPUTs(), "one PUT per poll, not one per path")
	assert.Equal(t, 1, f.Requests())
	f.DisableV2(0)
	only(t, mustPoll(t, src))
}

func TestHopLimit(t *testing.T) {
	t.Run("V1Disabled", func(t *testing.T) {
		f := newFake(t)
		f.RequireTokens(true)
		f.DropTokenPUT(true)
		src := awsspot.New(fastOptions(f.URL()))
		f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
		start := time.Now()
		ns, err := poll(t, src)
		require.Error(t, err)
		assert.Empty(t, ns)
		assert.ErrorIs(t, err, notice.ErrUnavailable)
		assert.Contains(t, err.Error(), "--http-put-response-hop-limit 2")
		assert.Contains(t, err.Error(), "hostNetwork")
		assert.Less(t, time.Since(start), 2*time.Second, "bounded by TokenTimeout")
		require.ErrorIs(t, src.Probe(context.Background()), notice.ErrUnavailable)

		// The fix applied: tokens flow again.
		f.DropTokenPUT(false)
		only(t, mustPoll(t, src))
	})
	t.Run("V1DisabledByOption", func(t *testing.T) {
		f := newFake(t)
		f.DropTokenPUT(true)
		opts := fastOptions(f.URL())
		opts.DisableV1 = true
		src := awsspot.New(opts)
		_, err := poll(t, src)
		require.ErrorIs(t, err, notice.ErrUnavailable)
		assert.Contains(t, err.Error(), "hop-limit 2")
		assert.Equal(t, 1, f.TokenPUTs())
	})
	t.Run("V1Allowed", func(t *testing.T) {
		f := newFake(t)
		f.DropTokenPUT(true)
		var logs logBuffer
		opts := fastOptions(f.URL())
		opts.Logger = logs.logger()
		src := awsspot.New(opts)
		f.Interrupt(notice.KindStop, time.Now().Add(2*time.Minute))
		start := time.Now()
		for range 5 {
			n := only(t, mustPoll(t, src))
			assert.Equal(t, notice.KindStop, n.Kind)
		}
		assert.Equal(t, 1, f.TokenPUTs(), "IMDSv1 for a while, not a timeout every poll")
		assert.Less(t, time.Since(start), time.Second, "one TokenTimeout, not five")
		assert.Equal(t, 1, logs.count("level=WARN"), "logged loudly once: %s", logs.buf.String())
		assert.Equal(t, 1, logs.count("IMDSv2 token request timed out"))
		assert.Contains(t, logs.buf.String(), "--http-put-response-hop-limit 2")
	})
}

func TestNoXForwardedForNoProxy(t *testing.T) {
	f := newFake(t)
	// The fake refuses X-Forwarded-For, like IMDS.
	req, err := http.NewRequest(http.MethodPut, f.URL()+"/latest/api/token", nil)
	require.NoError(t, err)
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	req.Header.Set("X-Forwarded-For", "10.1.2.3")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	rec := &recordingTransport{base: metaclient.NewHTTPClient(0).Transport}
	opts := fastOptions(f.URL())
	opts.HTTPClient = &http.Client{Transport: rec}
	src := awsspot.New(opts)
	f.RequireTokens(true)
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))
	only(t, mustPoll(t, src))
	f.ExpireTokens()
	only(t, mustPoll(t, src))
	require.NoError(t, src.Probe(context.Background()))

	reqs := rec.all()
	var puts int
	for _, r := range reqs {
		assert.Empty(t, r.Header.Values("X-Forwarded-For"), "%s %s", r.Method, r.URL)
		if r.Method == http.MethodPut {
			puts++
			assert.Equal(t, "21600", r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		} else {
			assert.NotEmpty(t, r.Header.Get("X-aws-ec2-metadata-token"), "GET %s without token", r.URL.Path)
		}
	}
	assert.Equal(t, 2, puts)
	assert.Greater(t, len(reqs), 8)
}

func TestEnvironment(t *testing.T) {
	f := newFake(t)
	f.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))

	t.Run("Endpoint", func(t *testing.T) {
		src := awsspot.New(&awsspot.Options{Getenv: env(map[string]string{awsspot.EnvEndpoint: f.URL() + "/"})})
		assert.Equal(t, f.URL(), src.Endpoint())
		only(t, mustPoll(t, src))
	})
	t.Run("OptionBeatsEnv", func(t *testing.T) {
		src := awsspot.New(&awsspot.Options{Endpoint: f.URL(), Getenv: env(map[string]string{awsspot.EnvEndpoint: "http://192.0.2.1"})})
		assert.Equal(t, f.URL(), src.Endpoint())
	})
	t.Run("Defaults", func(t *testing.T) {
		assert.Equal(t, awsspot.DefaultEndpoint, awsspot.New(&awsspot.Options{Getenv: noEnv}).Endpoint())
		src := awsspot.New(&awsspot.Options{Getenv: env(map[string]string{awsspot.EnvEndpointMode: "IPv6"})})
		assert.Equal(t, awsspot.DefaultEndpointIPv6, src.Endpoint())
	})
	t.Run("Disabled", func(t *testing.T) {
		before := f.Requests()
		src := awsspot.New(&awsspot.Options{Endpoint: f.URL(), Getenv: env(map[string]string{awsspot.EnvDisabled: "TRUE"})})
		ns, err := poll(t, src)
		require.ErrorIs(t, err, notice.ErrUnavailable)
		assert.Contains(t, err.Error(), awsspot.EnvDisabled)
		assert.Empty(t, ns)
		assert.ErrorIs(t, src.Probe(context.Background()), notice.ErrUnavailable)
		assert.Equal(t, before, f.Requests(), "no request when disabled")
	})
	t.Run("BadConfig", func(t *testing.T) {
		for name, o := range map[string]*awsspot.Options{
			"mode":     {Getenv: env(map[string]string{awsspot.EnvEndpointMode: "IPv5"})},
			"scheme":   {Endpoint: "ftp://169.254.169.254", Getenv: noEnv},
			"path":     {Endpoint: "http://169.254.169.254/latest", Getenv: noEnv},
			"nohost":   {Endpoint: "http://", Getenv: noEnv},
			"ttl-low":  {Endpoint: f.URL(), TokenTTL: time.Millisecond, Getenv: noEnv},
			"ttl-high": {Endpoint: f.URL(), TokenTTL: 7 * time.Hour, Getenv: noEnv},
		} {
			_, err := poll(t, awsspot.New(o))
			assert.ErrorIs(t, err, notice.ErrUnavailable, name)
		}
	})
}

func TestProbe(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	require.NoError(t, src.Probe(context.Background()))
	puts := f.TokenPUTs()
	require.Equal(t, 1, puts)
	mustPoll(t, src)
	assert.Equal(t, puts, f.TokenPUTs(), "Poll reuses Probe's token")

	notEC2 := map[string]http.HandlerFunc{
		"404": func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
		"gce": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Metadata-Flavor", "Google")
			fmt.Fprint(w, "i-0123456789abcdef0")
		},
		"openstack-ish": func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				http.Error(w, "no", http.StatusMethodNotAllowed)
				return
			}
			fmt.Fprint(w, "instance-0000001b")
		},
	}
	for name, h := range notEC2 {
		srv := httptest.NewServer(h)
		err := awsspot.New(fastOptions(srv.URL)).Probe(context.Background())
		srv.Close()
		assert.Error(t, err, name)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	assert.Error(t, awsspot.New(fastOptions("http://"+addr)).Probe(context.Background()))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = awsspot.New(fastOptions(f.URL())).Probe(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestInstance(t *testing.T) {
	f := newFake(t)
	f.RequireTokens(true)
	src := awsspot.New(fastOptions(f.URL()))
	in, err := src.Instance(context.Background())
	require.NoError(t, err)
	assert.Equal(t, awsspot.Instance{
		ID: noticetest.AWSInstanceID, Type: noticetest.AWSInstanceType, Region: noticetest.AWSRegion,
		AvailabilityZone: noticetest.AWSAvailabilityZone, LifeCycle: "spot",
	}, in)
	assert.True(t, in.Spot())
	f.SetLifeCycle("on-demand")
	in, err = src.Instance(context.Background())
	require.NoError(t, err)
	assert.False(t, in.Spot())
	f.SetLifeCycle("")
	in, err = src.Instance(context.Background())
	require.NoError(t, err, "instance-life-cycle is optional")
	assert.Empty(t, in.LifeCycle)
}

func TestCanceledContext(t *testing.T) {
	f := newFake(t)
	src := awsspot.New(fastOptions(f.URL()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ns, err := src.Poll(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, ns)
	assert.Zero(t, f.Requests())

	f.Inject(noticetest.FailHang, 1)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = src.Poll(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(t0), 400*time.Millisecond, "Poll must follow ctx, not its own timeout")
}

func TestNameAndInterval(t *testing.T) {
	src := awsspot.New(&awsspot.Options{PollInterval: 5 * time.Second, Getenv: noEnv})
	assert.Equal(t, "aws", src.Name())
	var iv notice.Intervaler = src
	assert.Equal(t, 5*time.Second, iv.PollInterval())
	assert.Zero(t, awsspot.New(nil).PollInterval())
}
