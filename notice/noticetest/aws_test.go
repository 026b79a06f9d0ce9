package noticetest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
)

// awsCall sends one request to the fake and returns status, headers, body.
func awsCall(t *testing.T, method, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

func newAWSFake(t *testing.T) *noticetest.AWS {
	t.Helper()
	f, err := noticetest.NewAWS(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

func awsToken(t *testing.T, f *noticetest.AWS, ttl string) string {
	t.Helper()
	code, h, body := awsCall(t, http.MethodPut, f.URL()+"/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": ttl})
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, ttl, h.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	require.NotEmpty(t, body)
	return body
}

func TestAWSFakeTokenPUT(t *testing.T) {
	f := newAWSFake(t)
	put := func(hdr map[string]string) int {
		code, _, _ := awsCall(t, http.MethodPut, f.URL()+"/latest/api/token", hdr)
		return code
	}
	ttl := "X-aws-ec2-metadata-token-ttl-seconds"
	assert.Equal(t, http.StatusBadRequest, put(nil), "missing TTL")
	for _, bad := range []string{"0", "21601", "-1", "abc", ""} {
		assert.Equal(t, http.StatusBadRequest, put(map[string]string{ttl: bad}), "TTL %q", bad)
	}
	assert.Equal(t, http.StatusForbidden, put(map[string]string{ttl: "60", "X-Forwarded-For": "10.0.0.1"}))
	code, _, _ := awsCall(t, http.MethodPut, f.URL()+"/2021-03-23/api/token", map[string]string{ttl: "60"})
	assert.Equal(t, http.StatusForbidden, code, "version-specific token path")
	code, _, _ = awsCall(t, http.MethodGet, f.URL()+"/latest/api/token", map[string]string{ttl: "60"})
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	tok1, tok2 := awsToken(t, f, "1"), awsToken(t, f, "21600")
	assert.NotEqual(t, tok1, tok2)
	assert.Equal(t, 9, f.TokenPUTs(), "PUTs to /latest/api/token, answered or not")

	for _, c := range []int{403, 404, 405} {
		f.DisableV2(c)
		assert.Equal(t, c, put(map[string]string{ttl: "60"}))
	}
	f.DisableV2(0)
	assert.Equal(t, http.StatusOK, put(map[string]string{ttl: "60"}))
}

func TestAWSFakeTokensAndV1(t *testing.T) {
	f := newAWSFake(t)
	id := f.URL() + "/latest/meta-data/instance-id"

	code, _, body := awsCall(t, http.MethodGet, id, nil)
	require.Equal(t, http.StatusOK, code, "IMDSv1 allowed by default")
	assert.Equal(t, noticetest.AWSInstanceID, body)

	f.RequireTokens(true)
	code, _, _ = awsCall(t, http.MethodGet, id, nil)
	assert.Equal(t, http.StatusUnauthorized, code, "token-less GET with HttpTokens=required")

	tok := awsToken(t, f, "60")
	code, h, body := awsCall(t, http.MethodGet, id, map[string]string{"X-aws-ec2-metadata-token": tok})
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, noticetest.AWSInstanceID, body)
	assert.Equal(t, "text/plain", h.Get("Content-Type"))
	left, err := strconv.Atoi(h.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	require.NoError(t, err)
	assert.InDelta(t, 59, left, 1)

	code, _, _ = awsCall(t, http.MethodGet, id, map[string]string{"X-aws-ec2-metadata-token": "bogus"})
	assert.Equal(t, http.StatusUnauthorized, code, "unknown token")
	code, _, _ = awsCall(t, http.MethodGet, id, map[string]string{"X-aws-ec2-metadata-token": tok, "X-Forwarded-For": "1.2.3.4"})
	assert.Equal(t, http.StatusForbidden, code, "X-Forwarded-For")

	f.ExpireTokens()
	code, _, _ = awsCall(t, http.MethodGet, id, map[string]string{"X-aws-ec2-metadata-token": tok})
	assert.Equal(t, http.StatusUnauthorized, code, "expired token")
	assert.Equal(t, 3, f.Unauthorized())

	short := awsToken(t, f, "1")
	time.Sleep(1100 * time.Millisecond)
	code, _, _ = awsCall(t, http.MethodGet, id, map[string]string{"X-aws-ec2-metadata-token": short})
	assert.Equal(t, http.StatusUnauthorized, code, "token past its TTL")
}

func TestAWSFakeTokenPUTDropped(t *testing.T) {
	f := newAWSFake(t)
	f.DropTokenPUT(true)
	req, err := http.NewRequest(http.MethodPut, f.URL()+"/latest/api/token", nil)
	require.NoError(t, err)
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	start := time.Now()
	_, err = (&http.Client{Timeout: 200 * time.Millisecond}).Do(req)
	require.Error(t, err, "a dropped token reply must look like a timeout")
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, 1, f.TokenPUTs())
}

func TestAWSFakeNotices(t *testing.T) {
	f := newAWSFake(t)
	base := f.URL() + "/latest/meta-data/"
	get := func(p string) (int, string) {
		code, h, body := awsCall(t, http.MethodGet, base+p, nil)
		if code == http.StatusNotFound {
			assert.Equal(t, "text/html", h.Get("Content-Type"))
			assert.Contains(t, body, "<title>404 - Not Found</title>")
		}
		return code, body
	}

	code, _ := get("spot/instance-action")
	assert.Equal(t, http.StatusNotFound, code)
	code, body := get("events/maintenance/scheduled")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, "[]", body)
	_, body = get("instance-action")
	assert.Equal(t, "none", body, "top-level instance-action is the bundling status")

	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Interrupt(notice.KindStop, deadline)
	code, body = get("spot/instance-action")
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"action":"stop","time":"2030-01-02T03:04:05Z"}`, body)
	code, _ = get("spot/termination-time")
	assert.Equal(t, http.StatusNotFound, code, "termination-time only for terminate")

	f.Interrupt(notice.KindTerminate, deadline)
	_, body = get("spot/termination-time")
	assert.Equal(t, "2030-01-02T03:04:05Z", body)
	_, body = get("spot/")
	assert.Equal(t, "instance-action\ntermination-time", body)

	f.Interrupt(notice.KindReboot, deadline)
	code, _ = get("spot/instance-action")
	assert.Equal(t, http.StatusNotFound, code)
	_, body = get("events/maintenance/scheduled")
	var evs []map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &evs))
	require.Len(t, evs, 1)
	assert.Equal(t, "2 Jan 2030 03:04:05 GMT", evs[0]["NotBefore"])
	assert.Equal(t, "instance-reboot", evs[0]["Code"])
	assert.Equal(t, "active", evs[0]["State"])
	assert.Regexp(t, `^instance-event-[0-9a-f]{17}$`, evs[0]["EventId"])

	f.Clear()
	id := f.AddScheduledEvent(noticetest.AWSScheduledEvent{Code: "instance-stop", NotBefore: deadline})
	require.True(t, f.SetScheduledEventState(id, "canceled"))
	_, body = get("events/maintenance/scheduled")
	evs = nil
	require.NoError(t, json.Unmarshal([]byte(body), &evs))
	require.Len(t, evs, 1)
	assert.Equal(t, "canceled", evs[0]["State"])
	_, hasNotAfter := evs[0]["NotAfter"]
	assert.False(t, hasNotAfter, "zero NotAfter is omitted")
	_, body = get("events/maintenance/history")
	assert.Contains(t, body, "[Canceled] ")

	f.SetRebalance(deadline)
	_, body = get("events/recommendations/rebalance")
	assert.JSONEq(t, `{"noticeTime":"2030-01-02T03:04:05Z"}`, body)
	f.SetLifecycleState("Terminated")
	_, body = get("autoscaling/target-lifecycle-state")
	assert.Equal(t, "Terminated", body)
	_, body = get("instance-life-cycle")
	assert.Equal(t, "spot", body)
	f.Clear()
	code, _ = get("events/recommendations/rebalance")
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = get("autoscaling/target-lifecycle-state")
	assert.Equal(t, http.StatusNotFound, code)
}

func TestAWSFakeFaultsOnlyOnNoticePaths(t *testing.T) {
	f := newAWSFake(t)
	f.Inject(noticetest.FailServerError, 1)
	code, _, _ := awsCall(t, http.MethodGet, f.URL()+"/latest/meta-data/instance-id", nil)
	assert.Equal(t, http.StatusOK, code, "identity paths are not faulted")
	code, _, _ = awsCall(t, http.MethodGet, f.URL()+"/latest/meta-data/spot/instance-action", nil)
	assert.Equal(t, http.StatusInternalServerError, code)
	code, _, _ = awsCall(t, http.MethodGet, f.URL()+"/latest/meta-data/spot/instance-action", nil)
	assert.Equal(t, http.StatusNotFound, code, "one failure only")
}
