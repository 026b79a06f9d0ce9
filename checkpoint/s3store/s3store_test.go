package s3store_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/s3store"
	"github.com/spotsafe/spotsafe/internal/objstoretest"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

const bucket = "ckpt"

// newClient builds a client for an S3-compatible endpoint the way the s3://
// opener does, with fast retries so that failure tests stay quick.
func newClient(endpoint string) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("AK", "SK", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 3
			o.MaxBackoff = 20 * time.Millisecond
		}),
		RequestChecksumCalculation:                aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation:                aws.ResponseChecksumValidationWhenRequired,
		DisableLogOutputChecksumValidationSkipped: true,
	})
}

// small are options that make multipart and parallel reads kick in at
// test-friendly sizes.
func small(prefix string) *s3store.Options {
	return &s3store.Options{Prefix: prefix, PartSize: 5 << 20, MultipartThreshold: 5 << 20, Concurrency: 4}
}

func newStore(t testing.TB, srv *s3fake.Server, opts *s3store.Options) *s3store.Store {
	t.Helper()
	s, err := s3store.New(newClient(srv.URL), bucket, opts)
	require.NoError(t, err)
	return s
}

func randomBytes(n int) []byte { return objstoretest.RandomBytes(n, 7) }

func read(t *testing.T, ctx context.Context, s checkpoint.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(ctx, key)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

// traffic records what the fake server saw.
type traffic struct {
	mu         sync.Mutex
	parts      int
	completes  []http.Header
	rangedGets []http.Header
}

func watch(srv *s3fake.Server) *traffic {
	tr := &traffic{}
	srv.OnRequest(func(r *http.Request) {
		q := r.URL.Query()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		switch {
		case r.Method == http.MethodPut && q.Has("partNumber"):
			tr.parts++
		case r.Method == http.MethodPost && q.Has("uploadId"):
			tr.completes = append(tr.completes, r.Header.Clone())
		case r.Method == http.MethodGet && r.Header.Get("Range") != "":
			tr.rangedGets = append(tr.rangedGets, r.Header.Clone())
		}
	})
	return tr
}

func TestMultipartPutAndParallelGet(t *testing.T) {
	srv := s3fake.Start(t, nil)
	s := newStore(t, srv, small("job"))
	ctx := context.Background()
	tr := watch(srv)
	data := randomBytes(23 << 20) // 5 parts of 5 MiB
	require.NoError(t, s.Put(ctx, "0001/model", bytes.NewReader(data), int64(len(data))))
	tr.mu.Lock()
	assert.Equal(t, 5, tr.parts, "a 23 MiB object in 5 MiB parts")
	require.Len(t, tr.completes, 1)
	assert.Empty(t, tr.completes[0].Get("If-None-Match"), "plain Put must not be conditional")
	tr.mu.Unlock()

	got := read(t, ctx, s, "0001/model")
	assert.True(t, bytes.Equal(data, got), "content differs after multipart round trip")
	tr.mu.Lock()
	require.Len(t, tr.rangedGets, 5, "one ranged GET per 5 MiB chunk")
	for _, h := range tr.rangedGets[1:] {
		assert.NotEmpty(t, h.Get("If-Match"), "later ranges must be pinned to the first response's ETag")
	}
	tr.mu.Unlock()

	// The object sits under the prefix in the bucket.
	head, err := s.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("job/0001/model")})
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), aws.ToInt64(head.ContentLength))

	// A range crossing chunk boundaries.
	rc, err := s.GetRange(ctx, "0001/model", 4<<20, 12<<20)
	require.NoError(t, err)
	part, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data[4<<20:16<<20], part), "range content differs")
}

func TestConditionalMultipartIsEnforced(t *testing.T) {
	srv := s3fake.Start(t, nil)
	s := newStore(t, srv, small(""))
	ctx := context.Background()
	first, second := randomBytes(11<<20), randomBytes(12<<20)
	tr := watch(srv)
	require.NoError(t, s.PutIfAbsent(ctx, "big", bytes.NewReader(first), int64(len(first))))
	err := s.PutIfAbsent(ctx, "big", bytes.NewReader(second), int64(len(second)))
	require.ErrorIs(t, err, fs.ErrExist)
	assert.NotErrorIs(t, err, fs.ErrNotExist)
	var ae smithy.APIError
	require.ErrorAs(t, err, &ae, "the SDK's error must stay reachable")
	assert.Equal(t, "PreconditionFailed", ae.ErrorCode())
	assert.True(t, bytes.Equal(first, read(t, ctx, s, "big")), "the loser overwrote the winner")

	tr.mu.Lock()
	require.Len(t, tr.completes, 2)
	for _, h := range tr.completes {
		assert.Equal(t, "*", h.Get("If-None-Match"), "CompleteMultipartUpload must carry the condition")
	}
	tr.mu.Unlock()

	// The losing upload was aborted: no multipart upload is left over.
	ups, err := s.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	require.NoError(t, err)
	assert.Empty(t, ups.Uploads, "the failed upload must be aborted")
}

func TestSmallPutIfAbsentUsesOnePut(t *testing.T) {
	srv := s3fake.Start(t, nil)
	s := newStore(t, srv, nil)
	ctx := context.Background()
	var puts atomic.Int32
	var cond atomic.Int32
	srv.OnRequest(func(r *http.Request) {
		if r.Method == http.MethodPut {
			puts.Add(1)
			if r.Header.Get("If-None-Match") == "*" && !r.URL.Query().Has("partNumber") {
				cond.Add(1)
			}
		}
	})
	manifest := []byte(`{"version":1}`)
	require.NoError(t, s.PutIfAbsent(ctx, "0002/MANIFEST.json", bytes.NewReader(manifest), -1))
	err := s.PutIfAbsent(ctx, "0002/MANIFEST.json", bytes.NewReader([]byte("other")), 5)
	require.ErrorIs(t, err, fs.ErrExist)
	assert.Equal(t, int32(2), puts.Load())
	assert.Equal(t, int32(2), cond.Load(), "both attempts must be single conditional PutObjects")
	assert.Equal(t, manifest, read(t, ctx, s, "0002/MANIFEST.json"))
}

func TestNotExistKeepsSDKError(t *testing.T) {
	srv := s3fake.Start(t, nil)
	s := newStore(t, srv, nil)
	ctx := context.Background()
	_, err := s.Get(ctx, "missing")
	require.ErrorIs(t, err, fs.ErrNotExist)
	var ae smithy.APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "NoSuchKey", ae.ErrorCode())

	_, err = s.GetRange(ctx, "missing", 10, 10)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	err = s.Delete(ctx, "missing")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorAs(t, err, &ae)
}

func TestKeysOutsideSafeSet(t *testing.T) {
	srv := s3fake.Start(t, nil)
	s := newStore(t, srv, nil)
	ctx := context.Background()
	for _, key := range []string{"a b", "a+b", "a%20b", "ü", "a?b", "a#b", "a*b"} {
		err := s.Put(ctx, key, strings.NewReader("x"), 1)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidKey, "Put(%q)", key)
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidKey, "Get(%q)", key)
	}
	_, err := s.List(ctx, "a b")
	assert.ErrorIs(t, err, checkpoint.ErrInvalidKey)
}

func TestNewRejectsBadInput(t *testing.T) {
	c := newClient("http://127.0.0.1:1")
	for name, tc := range map[string]struct {
		client *s3.Client
		bucket string
		opts   *s3store.Options
	}{
		"nil client":     {nil, "b", nil},
		"empty bucket":   {c, "", nil},
		"slash bucket":   {c, "a/b", nil},
		"tiny part":      {c, "b", &s3store.Options{PartSize: 1 << 20}},
		"neg concurrent": {c, "b", &s3store.Options{Concurrency: -1}},
		"neg threshold":  {c, "b", &s3store.Options{MultipartThreshold: -5}},
		"bad prefix":     {c, "b", &s3store.Options{Prefix: "a/../b"}},
		"unsafe prefix":  {c, "b", &s3store.Options{Prefix: "a b"}},
	} {
		_, err := s3store.New(tc.client, tc.bucket, tc.opts)
		assert.Error(t, err, name)
	}
}

func TestCanceledGetStopsParallelRead(t *testing.T) {
	srv := s3fake.Start(t, nil)
	s := newStore(t, srv, small(""))
	data := randomBytes(30 << 20)
	require.NoError(t, s.Put(context.Background(), "obj", bytes.NewReader(data), int64(len(data))))
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := s.Get(ctx, "obj")
	require.NoError(t, err)
	buf := make([]byte, 1<<20)
	_, err = io.ReadFull(rc, buf)
	require.NoError(t, err)
	cancel()
	_, err = io.ReadAll(rc)
	assert.ErrorIs(t, err, context.Canceled)
	require.NoError(t, rc.Close())
}

// TestServerKilledMidUpload cuts the server off while a multipart upload is
// running: the Put fails, and once the server is back the object does not
// exist while an earlier object is intact.
func TestServerKilledMidUpload(t *testing.T) {
	srv := s3fake.Start(t, nil)
	objstoretest.KilledMidUpload(t, srv, newStore(t, srv, small("run")), 1<<20, 40<<20)
}

func TestURLOpener(t *testing.T) {
	srv := s3fake.Start(t, nil)
	isolateAWSEnv(t)
	ctx := context.Background()
	st, err := checkpoint.Open(ctx, "s3://"+bucket+"/team/run-7?endpoint="+srv.URL+"&part_size=5MiB&concurrency=2")
	require.NoError(t, err)
	s, ok := st.(*s3store.Store)
	require.True(t, ok, "s3:// must open an *s3store.Store, got %T", st)
	assert.Equal(t, bucket, s.Bucket())
	data := randomBytes(12 << 20) // multipart through the opener's client
	require.NoError(t, s.Put(ctx, "0001/w", bytes.NewReader(data), int64(len(data))))
	assert.True(t, bytes.Equal(data, read(t, ctx, s, "0001/w")))

	// The prefix from the URL path is applied in the bucket.
	raw := newClient(srv.URL)
	out, err := raw.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	require.NoError(t, err)
	require.Len(t, out.Contents, 1)
	assert.Equal(t, "team/run-7/0001/w", aws.ToString(out.Contents[0].Key))
}

func TestURLOpenerRejectsBadURLs(t *testing.T) {
	isolateAWSEnv(t)
	ctx := context.Background()
	for _, u := range []string{
		"s3:///prefix?endpoint=http://127.0.0.1:1",
		"s3://b/p?endpoint=ftp://x",
		"s3://b/p?endpoint=http://127.0.0.1:1&part_size=1MiB",
		"s3://b/p?endpoint=http://127.0.0.1:1&part_size=abc",
		"s3://b/p?endpoint=http://127.0.0.1:1&concurrency=0",
		"s3://b/p?endpoint=http://127.0.0.1:1&max_attempts=-1",
		"s3://b/p?endpoint=http://127.0.0.1:1&colour=blue",
		"s3://b/p", // no region anywhere
		"s3://b/a b?region=eu-west-1",
	} {
		_, err := checkpoint.Open(ctx, u)
		assert.Error(t, err, u)
	}
	_, err := checkpoint.Open(ctx, "s3://b/p?colour=blue&region=x")
	assert.ErrorContains(t, err, "colour")
}

// isolateAWSEnv points the SDK's default chain at test credentials and
// away from the machine's config and instance metadata.
func isolateAWSEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AK")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SK")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func Example() {
	// A store on a MinIO server (credentials from AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY); on AWS, use ?region=... and no endpoint.
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, "s3://checkpoints/jobs/llm-7?endpoint=http://minio.internal:9000")
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = store // hand it to checkpoint.NewManager, or use it directly
}
