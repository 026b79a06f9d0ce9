package s3fake_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/internal/s3fake"
)

func do(t *testing.T, method, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOSSDialectForbidOverwrite(t *testing.T) {
	srv := s3fake.Start(t, &s3fake.Options{Dialect: s3fake.OSS})
	forbid := map[string]string{"x-oss-forbid-overwrite": "true"}
	code, _ := do(t, http.MethodPut, srv.URL+"/bkt/k", forbid, "one")
	require.Equal(t, http.StatusOK, code)
	code, body := do(t, http.MethodPut, srv.URL+"/bkt/k", forbid, "two")
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, body, "<Code>FileAlreadyExists</Code>")
	code, body = do(t, http.MethodPost, srv.URL+"/bkt/k?uploads", forbid, "")
	assert.Equal(t, http.StatusConflict, code, "initiate is checked too")
	_, body = do(t, http.MethodGet, srv.URL+"/bkt/k", nil, "")
	assert.Equal(t, "one", body)
	code, _ = do(t, http.MethodPut, srv.URL+"/bkt/k", nil, "three")
	assert.Equal(t, http.StatusOK, code, "without the header, PUT overwrites")
}

func TestKillAndRestartKeepObjects(t *testing.T) {
	srv := s3fake.Start(t, nil)
	code, _ := do(t, http.MethodPut, srv.URL+"/bkt/k", nil, "kept")
	require.Equal(t, http.StatusOK, code)
	srv.Kill()
	_, err := http.Get(srv.URL + "/bkt/k")
	require.Error(t, err, "a killed server must refuse connections")
	srv.Restart(t)
	_, body := do(t, http.MethodGet, srv.URL+"/bkt/k", nil, "")
	assert.Equal(t, "kept", body)
}

func TestSinkAnswersUploads(t *testing.T) {
	url := s3fake.StartSink(t, s3fake.Options{}.Netsim)
	code, body := do(t, http.MethodPost, url+"/bkt/k?uploads", nil, "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "<UploadId>")
	code, _ = do(t, http.MethodPut, url+"/bkt/k?partNumber=1&uploadId=x", nil, "data")
	assert.Equal(t, http.StatusOK, code)
	code, _ = do(t, http.MethodGet, url+"/bkt/k", nil, "")
	assert.Equal(t, http.StatusNotImplemented, code, "the sink stores nothing to read")
}
