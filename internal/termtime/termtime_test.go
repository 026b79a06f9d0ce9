package termtime

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/internal/metaclient"
	"github.com/spotsafe/spotsafe/notice"
)

const path = "/spot/termination-time"

// server answers path with whatever status and body are set.
type server struct {
	mu     sync.Mutex
	status int
	body   string
}

func (s *server) set(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path != path {
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(s.status)
	fmt.Fprint(w, s.body)
}

func parseUTC(body string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(body))
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time: %w", notice.ErrMalformed)
	}
	return t.UTC(), nil
}

func setup(t *testing.T) (*server, func() ([]notice.Notice, error)) {
	t.Helper()
	srv := &server{status: http.StatusNotFound}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	p := &Poller{Package: "testspot", Provider: "test", Path: path, Parse: parseUTC}
	client := metaclient.NewHTTPClient(metaclient.DefaultTimeout)
	return srv, func() ([]notice.Notice, error) {
		resp, req, err := metaclient.Get(context.Background(), client, ts.URL+path, nil)
		require.NoError(t, err)
		return p.Handle(resp, req)
	}
}

func TestHandleNoticeAndObserved(t *testing.T) {
	srv, poll := setup(t)

	ns, err := poll()
	require.NoError(t, err)
	assert.Empty(t, ns, "404: nothing scheduled")

	deadline := time.Date(2026, 12, 1, 2, 3, 4, 0, time.FixedZone("x", 3600))
	raw := deadline.Format(time.RFC3339)
	srv.set(http.StatusOK, raw)
	before := time.Now()
	ns, err = poll()
	require.NoError(t, err)
	require.Len(t, ns, 1)
	n := ns[0]
	assert.Equal(t, "test/terminate/2026-12-01T01:03:04Z", n.ID)
	assert.Equal(t, "test", n.Provider)
	assert.Equal(t, notice.KindTerminate, n.Kind)
	assert.True(t, n.Deadline.Equal(deadline))
	assert.Equal(t, map[string]string{"termination_time": "2026-12-01T01:03:04Z", "raw": raw}, n.Detail)
	assert.False(t, n.Observed.Before(before))

	time.Sleep(2 * time.Millisecond)
	ns, err = poll()
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.Equal(t, n.Observed, ns[0].Observed, "same notice keeps its first observation")

	later := deadline.Add(time.Minute).Format(time.RFC3339)
	srv.set(http.StatusOK, later)
	ns, err = poll()
	require.NoError(t, err)
	require.Len(t, ns, 1)
	assert.True(t, ns[0].Observed.After(n.Observed), "a new time is a new observation")

	// A 404 forgets: the same time again counts as newly observed.
	srv.set(http.StatusNotFound, "")
	_, err = poll()
	require.NoError(t, err)
	srv.set(http.StatusOK, later)
	again, err := poll()
	require.NoError(t, err)
	require.Len(t, again, 1)
	assert.True(t, again[0].Observed.After(ns[0].Observed))
}

func TestHandleErrors(t *testing.T) {
	srv, poll := setup(t)

	srv.set(http.StatusOK, "soon")
	ns, err := poll()
	assert.Empty(t, ns)
	require.ErrorIs(t, err, notice.ErrMalformed)
	assert.Contains(t, err.Error(), "testspot: GET "+path)

	srv.set(http.StatusInternalServerError, "oops")
	ns, err = poll()
	assert.Empty(t, ns)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "testspot: "), err.Error())
	var se *metaclient.StatusError
	assert.ErrorAs(t, err, &se)
}

func TestParseIn(t *testing.T) {
	plus8 := time.FixedZone("UTC+8", 8*3600)
	got, ok := ParseIn("2026-12-01 10:00:00", plus8, time.RFC3339, "2006-01-02 15:04:05")
	require.True(t, ok)
	assert.Equal(t, time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), got)
	assert.Equal(t, time.UTC, got.Location())

	got, ok = ParseIn("2026-12-01T10:00:00+01:00", plus8, "2006-01-02 15:04:05", time.RFC3339)
	require.True(t, ok, "a later layout is tried")
	assert.Equal(t, time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), got)

	for _, s := range []string{"", "soon", "0001-01-01 00:00:00", "1999-12-31 23:59:59"} {
		_, ok := ParseIn(s, time.UTC, "2006-01-02 15:04:05", time.RFC3339)
		assert.False(t, ok, s)
	}
}
