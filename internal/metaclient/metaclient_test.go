package metaclient_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
)

// TestNoProxy shows that the metadata transport never uses HTTP_PROXY, even
// for a link-local target that Go's default transport would proxy. Every
// dial is redirected to a loopback server, which records whether the
// request arrived in proxy form (absolute URI); no traffic leaves loopback.
func TestNoProxy(t *testing.T) {
	var uris []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uris = append(uris, r.RequestURI)
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, k := range []string{"HTTP_PROXY", "http_proxy"} {
		t.Setenv(k, "http://proxy.invalid:3128")
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	toLoopback := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}

	ours := metaclient.NewHTTPClient(time.Second)
	tr := ours.Transport.(*http.Transport).Clone()
	tr.DialContext = toLoopback
	ours.Transport = tr
	resp, _, err := metaclient.Get(context.Background(), ours, "http://169.254.169.254/latest/meta-data/instance-id", nil)
	require.NoError(t, err)
	require.Equal(t, 200, resp.Code)

	// Control: a transport that honours the environment sends the same
	// request in proxy form.
	control := &http.Client{Transport: &http.Transport{
		Proxy:       func(*http.Request) (*url.URL, error) { return url.Parse(os.Getenv("HTTP_PROXY")) },
		DialContext: toLoopback,
	}}
	r2, err := control.Get("http://169.254.169.254/latest/meta-data/instance-id")
	require.NoError(t, err)
	r2.Body.Close()

	require.Len(t, uris, 2)
	assert.Equal(t, "/latest/meta-data/instance-id", uris[0], "metadata client went through the proxy")
	assert.Equal(t, "http://169.254.169.254/latest/meta-data/instance-id", uris[1], "control did not use the proxy")
}

func TestClassification(t *testing.T) {
	codes := map[int]bool{200: false, 404: false, 401: false, 429: true, 500: true, 503: true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://other.invalid/x", http.StatusFound)
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", metaclient.MaxBody+1)))
		case "/reset":
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
		default:
			var code int
			_, _ = fmtSscan(r.URL.Path[1:], &code)
			w.WriteHeader(code)
			_, _ = w.Write([]byte("<html>error page</html>"))
		}
	}))
	defer srv.Close()
	c := metaclient.NewHTTPClient(time.Second)
	ctx := context.Background()
	for code, transient := range codes {
		resp, req, err := metaclient.Get(ctx, c, srv.URL+"/"+itoa(code), nil)
		require.NoError(t, err)
		err = resp.Err(req)
		if code == 200 {
			assert.NoError(t, err)
			continue
		}
		var se *metaclient.StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, code, se.Code)
		assert.Empty(t, se.Body, "HTML error pages are dropped")
		assert.Equal(t, transient, errors.Is(err, notice.ErrTransient), "code %d", code)
	}

	_, _, err := metaclient.Get(ctx, c, srv.URL+"/redirect", nil)
	assert.ErrorContains(t, err, "refusing redirect")

	_, _, err = metaclient.Get(ctx, c, srv.URL+"/big", nil)
	assert.ErrorIs(t, err, notice.ErrMalformed)

	_, _, err = metaclient.Get(ctx, c, srv.URL+"/reset", nil)
	assert.ErrorIs(t, err, notice.ErrTransient)
	var te *metaclient.TransientError
	assert.ErrorAs(t, err, &te)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = metaclient.Get(cctx, c, srv.URL+"/200", nil)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, notice.ErrTransient, "a cancelled caller is not a metadata failure")

	// Nothing listens: refused quickly, transient.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, _, err = metaclient.Get(ctx, c, "http://"+addr+"/", nil)
	assert.ErrorIs(t, err, notice.ErrTransient)
}

func itoa(n int) string { return strconv.Itoa(n) }

func fmtSscan(s string, n *int) (int, error) {
	v, err := strconv.Atoi(s)
	*n = v
	return 1, err
}
