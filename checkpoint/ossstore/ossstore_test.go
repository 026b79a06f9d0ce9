package ossstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aliyun/aliyun-oss-go-sdk/oss"
	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/ossstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/objstoretest"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

const bucket = "ckpt"

func startOSS(t testing.TB) *s3fake.Server {
	return s3fake.Start(t, &s3fake.Options{Dialect: s3fake.OSS})
}

func newClient(t testing.TB, endpoint string) *oss.Client {
	t.Helper()
	c, err := oss.New(endpoint, "AK", "SK")
	require.NoError(t, err)
	return c
}

func fastRetry() backoff.BackOff { return backoff.NewConstantBackOff(5 * time.Millisecond) }

// small makes multipart and parallel reads kick in at test-friendly sizes.
func small(prefix string) *ossstore.Options {
	return &ossstore.Options{Prefix: prefix, PartSize: 1 << 20, MultipartThreshold: 1 << 20, Concurrency: 4, Backoff: fastRetry}
}

func newStore(t testing.TB, srv *s3fake.Server, opts *ossstore.Options) *ossstore.Store {
	t.Helper()
	s, err := ossstore.New(newClient(t, srv.URL), bucket, opts)
	require.NoError(t, err)
	return s
}

func randomBytes(n int) []byte { return objstoretest.RandomBytes(n, 11) }

func read(t *testing.T, ctx context.Context, s checkpoint.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(ctx, key)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

func TestConformance(t *testing.T) {
	srv := startOSS(t)
	var n atomic.Int32
	storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small(fmt.Sprintf("conf-%03d", n.Add(1))))
	})
}

// TestManager runs the checkpoint Manager's whole cycle (save, restore,
// retention, racing writers, failed saves) on the OSS store.
func TestManager(t *testing.T) {
	srv := startOSS(t)
	var n atomic.Int32
	storetest.RunManagerTests(t, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small(fmt.Sprintf("mgr-%03d", n.Add(1))))
	})
}

// traffic records what the fake server saw.
type traffic struct {
	mu         sync.Mutex
	parts      int
	forbid     map[string]int // request kind -> count of x-oss-forbid-overwrite: true
	rangedGets []http.Header
}

func watch(srv *s3fake.Server) *traffic {
	tr := &traffic{forbid: map[string]int{}}
	srv.OnRequest(func(r *http.Request) {
		q := r.URL.Query()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		kind := r.Method
		switch {
		case r.Method == http.MethodPut && q.Has("partNumber"):
			kind = "part"
			tr.parts++
		case r.Method == http.MethodPost && q.Has("uploads"):
			kind = "initiate"
		case r.Method == http.MethodPost && q.Has("uploadId"):
			kind = "complete"
		case r.Method == http.MethodGet && r.Header.Get("Range") != "":
			tr.rangedGets = append(tr.rangedGets, r.Header.Clone())
		}
		if r.Header.Get("x-oss-forbid-overwrite") == "true" {
			tr.forbid[kind]++
		}
	})
	return tr
}

func TestMultipartPutAndParallelGet(t *testing.T) {
	srv := startOSS(t)
	s := newStore(t, srv, small("job"))
	ctx := context.Background()
	tr := watch(srv)
	data := randomBytes(5<<20 + 12345)
	require.NoError(t, s.Put(ctx, "0001/model", bytes.NewReader(data), int64(len(data))))
	tr.mu.Lock()
	assert.Equal(t, 6, tr.parts, "5 MiB + a bit in 1 MiB parts")
	tr.mu.Unlock()
	got := read(t, ctx, s, "0001/model")
	assert.True(t, bytes.Equal(data, got), "content differs after multipart round trip")
	tr.mu.Lock()
	require.Len(t, tr.rangedGets, 6, "one ranged GET per 1 MiB chunk")
	for _, h := range tr.rangedGets[1:] {
		assert.NotEmpty(t, h.Get("If-Match"), "later ranges must be pinned to the first response's ETag")
	}
	tr.mu.Unlock()
	ok, err := s.Bucket().IsObjectExist("job/0001/model")
	require.NoError(t, err)
	assert.True(t, ok, "the object sits under the prefix")
}

func TestForbidOverwrite(t *testing.T) {
	srv := startOSS(t)
	s := newStore(t, srv, small(""))
	ctx := context.Background()
	tr := watch(srv)
	for _, size := range []int{1000, 3 << 20} { // single PutObject and multipart
		key := fmt.Sprintf("k-%d", size)
		first, second := randomBytes(size), randomBytes(size+1)
		require.NoError(t, s.PutIfAbsent(ctx, key, bytes.NewReader(first), int64(len(first))))
		err := s.PutIfAbsent(ctx, key, bytes.NewReader(second), -1)
		require.ErrorIs(t, err, fs.ErrExist, "size %d", size)
		assert.NotErrorIs(t, err, fs.ErrNotExist)
		var se oss.ServiceError
		require.ErrorAs(t, err, &se, "the SDK's error must stay reachable")
		assert.Equal(t, http.StatusConflict, se.StatusCode)
		assert.Equal(t, "FileAlreadyExists", se.Code)
		assert.True(t, bytes.Equal(first, read(t, ctx, s, key)), "the loser overwrote the winner")
	}
	tr.mu.Lock()
	assert.Equal(t, 2, tr.forbid[http.MethodPut], "single conditional PutObjects")
	assert.Equal(t, 2, tr.forbid["initiate"], "conditional InitiateMultipartUpload")
	assert.Equal(t, 1, tr.forbid["complete"], "the second multipart upload stops at initiate")
	assert.Zero(t, tr.forbid["part"])
	tr.mu.Unlock()

	// The check at complete time: the key appears while the upload runs.
	data := randomBytes(3 << 20)
	var once sync.Once
	srv.OnRequest(func(r *http.Request) {
		if r.URL.Query().Has("partNumber") {
			once.Do(func() {
				require.NoError(t, s.Put(ctx, "racy", strings.NewReader("winner"), 6))
			})
		}
	})
	err := s.PutIfAbsent(ctx, "racy", bytes.NewReader(data), int64(len(data)))
	require.ErrorIs(t, err, fs.ErrExist)
	assert.Equal(t, []byte("winner"), read(t, ctx, s, "racy"))
	res, err := s.Bucket().ListMultipartUploads()
	require.NoError(t, err)
	assert.Empty(t, res.Uploads, "the losing upload must be aborted")
}

func TestNotExistKeepsSDKError(t *testing.T) {
	srv := startOSS(t)
	s := newStore(t, srv, nil)
	ctx := context.Background()
	_, err := s.Get(ctx, "missing")
	require.ErrorIs(t, err, fs.ErrNotExist)
	var se oss.ServiceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusNotFound, se.StatusCode)
	err = s.Delete(ctx, "missing")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorAs(t, err, &se)
}

func TestRetriesTransientErrors(t *testing.T) {
	srv := startOSS(t)
	s := newStore(t, srv, &ossstore.Options{Attempts: 3, Backoff: fastRetry})
	ctx := context.Background()
	var failures atomic.Int32
	failures.Store(2)
	srv.OnRequest(func(r *http.Request) {
		if r.Method == http.MethodPut && failures.Add(-1) >= 0 {
			panic(http.ErrAbortHandler) // the client sees a cut connection
		}
	})
	require.NoError(t, s.Put(ctx, "flaky", strings.NewReader("data"), 4))
	assert.Equal(t, []byte("data"), read(t, ctx, s, "flaky"))

	failures.Store(5)
	err := s.Put(ctx, "flaky2", strings.NewReader("data"), 4)
	require.Error(t, err, "three cut connections in a row exhaust three attempts")
	_, err = s.Get(ctx, "flaky2")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// TestServerKilledMidUpload cuts the server off while a multipart upload is
// running: the Put fails, and once the server is back the object does not
// exist while an earlier object is intact.
func TestServerKilledMidUpload(t *testing.T) {
	srv := startOSS(t)
	objstoretest.KilledMidUpload(t, srv, newStore(t, srv, small("run")), 300<<10, 12<<20)
}

func TestCanceledPutAbortsUpload(t *testing.T) {
	srv := startOSS(t)
	s := newStore(t, srv, small(""))
	ctx, cancel := context.WithCancel(context.Background())
	var parts atomic.Int32
	srv.OnRequest(func(r *http.Request) {
		if r.URL.Query().Has("partNumber") && parts.Add(1) == 2 {
			cancel()
		}
	})
	data := randomBytes(8 << 20)
	err := s.Put(ctx, "obj", bytes.NewReader(data), int64(len(data)))
	require.ErrorIs(t, err, context.Canceled)
	srv.OnRequest(nil)
	res, err := s.Bucket().ListMultipartUploads()
	require.NoError(t, err)
	assert.Empty(t, res.Uploads, "a cancelled upload must be aborted")
	_, err = s.Get(context.Background(), "obj")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestNewRejectsBadInput(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1")
	for name, tc := range map[string]struct {
		client *oss.Client
		bucket string
		opts   *ossstore.Options
	}{
		"nil client":     {nil, "bkt", nil},
		"empty bucket":   {c, "", nil},
		"short bucket":   {c, "b", nil},
		"tiny part":      {c, "bkt", &ossstore.Options{PartSize: 1000}},
		"neg concurrent": {c, "bkt", &ossstore.Options{Concurrency: -1}},
		"neg attempts":   {c, "bkt", &ossstore.Options{Attempts: -1}},
		"bad prefix":     {c, "bkt", &ossstore.Options{Prefix: "a/./b"}},
		"unsafe prefix":  {c, "bkt", &ossstore.Options{Prefix: "a+b"}},
	} {
		_, err := ossstore.New(tc.client, tc.bucket, tc.opts)
		assert.Error(t, err, name)
	}
	s, err := ossstore.New(c, "bkt", nil)
	require.NoError(t, err)
	for _, key := range []string{"a b", "a+b", "100%", "é"} {
		assert.ErrorIs(t, s.Put(context.Background(), key, strings.NewReader("x"), 1), checkpoint.ErrInvalidKey, key)
	}
}

func clearOSSEnv(t *testing.T) {
	for _, k := range []string{"OSS_ENDPOINT", "OSS_REGION", "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN",
		"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"} {
		t.Setenv(k, "")
	}
}

func TestURLOpener(t *testing.T) {
	srv := startOSS(t)
	ctx := context.Background()
	for _, env := range [][2]string{
		{"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET"},
		{"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"},
	} {
		t.Run(env[0], func(t *testing.T) {
			clearOSSEnv(t)
			t.Setenv(env[0], "AK")
			t.Setenv(env[1], "SK")
			st, err := checkpoint.Open(ctx, "oss://"+bucket+"/team/"+env[0]+"?endpoint="+srv.URL+"&part_size=1MiB&concurrency=2")
			require.NoError(t, err)
			s, ok := st.(*ossstore.Store)
			require.True(t, ok, "oss:// must open an *ossstore.Store, got %T", st)
			data := randomBytes(5 << 20)
			require.NoError(t, s.Put(ctx, "0001/w", bytes.NewReader(data), int64(len(data))))
			assert.True(t, bytes.Equal(data, read(t, ctx, s, "0001/w")))
			ok, err = newStore(t, srv, nil).Bucket().IsObjectExist("team/" + env[0] + "/0001/w")
			require.NoError(t, err)
			assert.True(t, ok, "the URL path is the prefix")
		})
	}
	t.Run("endpoint from environment", func(t *testing.T) {
		clearOSSEnv(t)
		t.Setenv("OSS_ENDPOINT", srv.URL)
		t.Setenv("OSS_ACCESS_KEY_ID", "AK")
		t.Setenv("OSS_ACCESS_KEY_SECRET", "SK")
		st, err := checkpoint.Open(ctx, "oss://"+bucket+"/env")
		require.NoError(t, err)
		require.NoError(t, st.Put(ctx, "x", strings.NewReader("y"), 1))
	})
}

func TestURLOpenerRejectsBadURLs(t *testing.T) {
	clearOSSEnv(t)
	ctx := context.Background()
	_, err := checkpoint.Open(ctx, "oss://b/p?endpoint=http://127.0.0.1:1")
	assert.ErrorContains(t, err, "credentials")
	t.Setenv("OSS_ACCESS_KEY_ID", "AK")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "SK")
	_, err = checkpoint.Open(ctx, "oss://b/p")
	assert.ErrorContains(t, err, "endpoint")
	for _, u := range []string{
		"oss:///p?endpoint=http://127.0.0.1:1",
		"oss://b/p?endpoint=ftp://x",
		"oss://b/p?endpoint=http://127.0.0.1:1&part_size=10",
		"oss://b/p?endpoint=http://127.0.0.1:1&concurrency=x",
		"oss://b/p?endpoint=http://127.0.0.1:1&path_style=maybe",
		"oss://b/p?endpoint=http://127.0.0.1:1&colour=blue",
	} {
		_, err := checkpoint.Open(ctx, u)
		assert.Error(t, err, u)
	}
}

func Example() {
	// Credentials from OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET.
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, "oss://checkpoints/jobs/llm-7?region=cn-hangzhou")
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = store // hand it to the checkpoint manager, or use it directly
}

// TestManagerServerKilledMidSave kills the server while the Manager uploads
// a checkpoint's parts: the save fails without committing, and once the
// server is back a new Manager restores the previous checkpoint.
func TestManagerServerKilledMidSave(t *testing.T) {
	srv := startOSS(t)
	objstoretest.KilledMidSave(t, srv, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small("job"))
	}, 3<<20, 9<<20)
}
