package noticetest_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
)

// eastCall sends one request to an Alibaba or Tencent fake.
func eastCall(t *testing.T, method, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

const (
	aliTermination = "/latest/meta-data/instance/spot/termination-time"
	aliToken       = "/latest/api/token"
	aliTTL         = "X-aliyun-ecs-metadata-token-ttl-seconds"
	aliTokenHdr    = "X-aliyun-ecs-metadata-token"
)

func TestAlibabaFakeProtocol(t *testing.T) {
	f, err := noticetest.NewAlibaba(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	u := f.URL()

	code, hdr, body := eastCall(t, "GET", u+aliTermination, nil)
	assert.Equal(t, 404, code)
	assert.Contains(t, hdr.Get("Content-Type"), "text/html")
	assert.Contains(t, body, "404")

	f.Interrupt(notice.KindTerminate, time.Date(2015, 1, 5, 18, 2, 0, 0, time.FixedZone("x", 3600)))
	code, _, body = eastCall(t, "GET", u+aliTermination, nil)
	assert.Equal(t, 200, code)
	assert.Equal(t, "2015-01-05T17:02:00Z", body, "UTC, documented layout")

	for path, want := range map[string]string{
		"/latest/meta-data/instance-id": noticetest.AlibabaInstanceID,
		"/latest/meta-data/region-id":   noticetest.AlibabaRegionID,
		"/latest/meta-data/zone-id":     noticetest.AlibabaZoneID,
	} {
		code, _, body = eastCall(t, "GET", u+path, nil)
		assert.Equal(t, 200, code, path)
		assert.Equal(t, want, body, path)
	}
	code, _, _ = eastCall(t, "GET", u+"/latest/meta-data/placement/region", nil)
	assert.Equal(t, 404, code, "an AWS/Tencent key")

	// Tokens.
	for _, ttl := range []string{"", "0", "21601", "abc"} {
		code, _, _ = eastCall(t, "PUT", u+aliToken, map[string]string{aliTTL: ttl})
		assert.Equal(t, 400, code, "ttl %q", ttl)
	}
	code, _, _ = eastCall(t, "GET", u+aliToken, nil)
	assert.Equal(t, 405, code)
	code, _, _ = eastCall(t, "PUT", u+aliToken, map[string]string{aliTTL: "60", "X-Forwarded-For": "10.0.0.1"})
	assert.Equal(t, 403, code)
	code, hdr, tok := eastCall(t, "PUT", u+aliToken, map[string]string{aliTTL: "60"})
	require.Equal(t, 200, code)
	assert.NotEmpty(t, tok)
	assert.Equal(t, "60", hdr.Get(aliTTL))
	assert.Equal(t, 5, f.TokenRequests(), "every PUT that reached the token handler")

	// Hardened mode.
	f.RequireTokens(true)
	code, _, _ = eastCall(t, "GET", u+aliTermination, nil)
	assert.Equal(t, 403, code, "plain GET in hardened mode")
	code, _, _ = eastCall(t, "GET", u+aliTermination, map[string]string{aliTokenHdr: tok})
	assert.Equal(t, 200, code)
	code, _, _ = eastCall(t, "GET", u+aliTermination, map[string]string{aliTokenHdr: "forged"})
	assert.Equal(t, 401, code)
	f.ExpireTokens()
	code, _, _ = eastCall(t, "GET", u+aliTermination, map[string]string{aliTokenHdr: tok})
	assert.Equal(t, 401, code, "expired token")

	f.DisableTokenAPI(true)
	code, _, _ = eastCall(t, "PUT", u+aliToken, map[string]string{aliTTL: "60"})
	assert.Equal(t, 404, code)

	// Faults hit the notice path only.
	f.RequireTokens(false)
	f.Inject(noticetest.FailServerError, 1)
	code, _, _ = eastCall(t, "GET", u+"/latest/meta-data/instance-id", nil)
	assert.Equal(t, 200, code)
	code, _, _ = eastCall(t, "GET", u+aliTermination, nil)
	assert.Equal(t, 500, code)
	code, _, _ = eastCall(t, "GET", u+aliTermination, nil)
	assert.Equal(t, 200, code)
}

// A token expires after its TTL on the fake's own clock.
func TestAlibabaFakeTokenTTL(t *testing.T) {
	f, err := noticetest.NewAlibaba(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	f.RequireTokens(true)
	code, _, tok := eastCall(t, "PUT", f.URL()+aliToken, map[string]string{aliTTL: "1"})
	require.Equal(t, 200, code)
	code, _, _ = eastCall(t, "GET", f.URL()+aliTermination, map[string]string{aliTokenHdr: tok})
	assert.Equal(t, 404, code, "valid token, no notice")
	time.Sleep(1100 * time.Millisecond)
	code, _, _ = eastCall(t, "GET", f.URL()+aliTermination, map[string]string{aliTokenHdr: tok})
	assert.Equal(t, 401, code, "expired")
}

func TestTencentFakeProtocol(t *testing.T) {
	f, err := noticetest.NewTencent(nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	u := f.URL()
	const path = "/latest/meta-data/spot/termination-time"

	code, _, _ := eastCall(t, "GET", u+path, nil)
	assert.Equal(t, 404, code)
	f.Interrupt(notice.KindTerminate, time.Date(2018, 8, 18, 4, 5, 33, 0, time.UTC))
	code, _, body := eastCall(t, "GET", u+path, nil)
	assert.Equal(t, 200, code)
	assert.Equal(t, "2018-08-18 12:05:33", body, "UTC+8 local time, no zone")
	f.SetTimeLayout("02/01/2006 15:04:05")
	_, _, body = eastCall(t, "GET", u+path, nil)
	assert.Equal(t, "18/08/2018 12:05:33", body)
	f.SetTimeLayout("")
	_, _, body = eastCall(t, "GET", u+path, nil)
	assert.Equal(t, "2018-08-18 12:05:33", body)

	for p, want := range map[string]string{
		"/latest/meta-data/instance-id":      noticetest.TencentInstanceID,
		"/latest/meta-data/placement/region": noticetest.TencentRegion,
		"/latest/meta-data/placement/zone":   noticetest.TencentZone,
	} {
		code, _, body = eastCall(t, "GET", u+p, nil)
		assert.Equal(t, 200, code, p)
		assert.Equal(t, want, body, p)
	}
	code, _, _ = eastCall(t, "PUT", u+"/latest/api/token", nil)
	assert.Equal(t, 405, code, "no token mode")

	f.Clear()
	code, _, _ = eastCall(t, "GET", u+path, nil)
	assert.Equal(t, 404, code)
}

func TestNew(t *testing.T) {
	assert.Equal(t, []string{"aws", "gcp", "azure", "alibaba", "tencent"}, noticetest.Providers())
	for _, p := range noticetest.Providers() {
		f, err := noticetest.New(p, nil)
		require.NoError(t, err, p)
		resp, err := http.Get(f.URL() + "/")
		require.NoError(t, err, p)
		resp.Body.Close()
		assert.Positive(t, f.Requests(), p)
		f.Close()
	}
	_, err := noticetest.New("oracle", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "oracle")

	// A listen address in use is an error, not a panic.
	f, err := noticetest.New("tencent", nil)
	require.NoError(t, err)
	defer f.Close()
	_, err = noticetest.New("alibaba", &noticetest.ServerOptions{Listen: f.URL()[len("http://"):]})
	require.Error(t, err)
}

func TestNominalNotice(t *testing.T) {
	for _, tc := range []struct {
		provider string
		kind     notice.Kind
		want     time.Duration
	}{
		{"aws", notice.KindTerminate, 2 * time.Minute},
		{"aws", notice.KindStop, 2 * time.Minute},
		{"aws", notice.KindHibernate, 0},
		{"aws", notice.KindRebalance, 0},
		{"gcp", notice.KindPreempt, 30 * time.Second},
		{"gcp", notice.KindTerminate, time.Minute},
		{"gcp", notice.KindMigrate, time.Minute},
		{"azure", notice.KindPreempt, 30 * time.Second},
		{"azure", notice.KindFreeze, 15 * time.Minute},
		{"azure", notice.KindRedeploy, 10 * time.Minute},
		{"alibaba", notice.KindTerminate, 5 * time.Minute},
		{"tencent", notice.KindTerminate, 2 * time.Minute},
		{"oracle", notice.KindTerminate, 0},
	} {
		assert.Equal(t, tc.want, noticetest.NominalNotice(tc.provider, tc.kind), "%s %s", tc.provider, tc.kind)
	}
}
