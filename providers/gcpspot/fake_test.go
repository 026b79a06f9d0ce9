package gcpspot_test

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

// The fake's hanging GET, spoken to directly (PROTOCOLS.md 2.2).
func TestFakeWaitForChange(t *testing.T) {
	f := newFake(t)
	c := client(t)
	get := func(query string) (code int, body, etag string, took time.Duration) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, f.URL()+noticetest.GCPPathPrefix+noticetest.GCPKeyPreempted+query, nil)
		require.NoError(t, err)
		req.Header.Set("Metadata-Flavor", "Google")
		start := time.Now()
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "Google", resp.Header.Get("Metadata-Flavor"))
		return resp.StatusCode, string(b), resp.Header.Get("ETag"), time.Since(start)
	}
	code, body, etag, _ := get("")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "FALSE", body)
	require.NotEmpty(t, etag)

	// Unchanged: blocks until timeout_sec, then the same value and ETag.
	code, body2, etag2, took := get("?wait_for_change=true&timeout_sec=1&last_etag=" + etag)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, body, body2)
	assert.Equal(t, etag, etag2)
	assert.GreaterOrEqual(t, took, 900*time.Millisecond)

	// A stale last_etag: answered at once.
	code, body, _, took = get("?wait_for_change=true&timeout_sec=30&last_etag=stale")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "FALSE", body)
	assert.Less(t, took, 5*time.Second)

	// Without last_etag: waits for a change after arrival.
	go func() {
		assert.Eventually(t, func() bool { return f.Hanging() == 1 }, 5*time.Second, time.Millisecond)
		f.Interrupt(notice.KindPreempt, time.Time{})
	}()
	code, body, etag2, _ = get("?wait_for_change=true&timeout_sec=30")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "TRUE", body)
	assert.NotEqual(t, etag, etag2)

	code, _, _, _ = get("?wait_for_change=true&timeout_sec=zero")
	assert.Equal(t, http.StatusBadRequest, code)
}

func TestFakeDirectories(t *testing.T) {
	f := newFake(t)
	c := client(t)
	get := func(path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, f.URL()+path, nil)
		require.NoError(t, err)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "computeMetadata/\n", body)
	code, body = get("/computeMetadata/v1/")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "instance/\nproject/\n", body)
	code, body = get("/computeMetadata/v1/instance/scheduling/")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "automatic-restart\non-host-maintenance\npreemptible\nprovisioning-model\n", body)
	code, _ = get("/computeMetadata/v1/instance/no-such-key")
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = get("/computeMetadata/v2/instance/id")
	assert.Equal(t, http.StatusNotFound, code)
}
