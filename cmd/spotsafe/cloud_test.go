package main

// ls, verify, restore and prune through s3://, oss:// and gs:// URLs with
// custom endpoints, run in process against in-process servers: gofakes3
// (internal/s3fake, plain S3 and the OSS dialect) and fake-gcs-server.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

const (
	cloudBucket = "ckpt-cli"
	cloudPrefix = "team/run-7"
)

// cloudServer is a running fake cloud: the URL the CLI is given, a way to
// read an object by its full name in the bucket without going through any
// store (to see where the objects really landed), and the number of
// multipart uploads (S3, OSS) or composes (GCS) the server has seen.
type cloudServer struct {
	url     string
	raw     func(t *testing.T, name string) []byte
	uploads *atomic.Int64
}

func TestCloudURLs(t *testing.T) {
	isolateCloudEnv(t)
	for _, tc := range []struct {
		scheme string
		start  func(t *testing.T) cloudServer
	}{
		{"s3", startS3Cloud},
		{"oss", startOSSCloud},
		{"gs", startGCSCloud},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			srv := tc.start(t)
			require.True(t, strings.HasPrefix(srv.url, tc.scheme+"://"), srv.url)
			exerciseCkptCLI(t, srv)
		})
	}
}

// TestCloudURLErrors: a bad cloud URL is refused before any request, with
// an error naming what is wrong.
func TestCloudURLErrors(t *testing.T) {
	isolateCloudEnv(t)
	for _, tc := range []struct{ url, want string }{
		{"s3://b/p?endpoint=http://127.0.0.1:1&colour=blue", `"colour"`},
		{"s3://b/p?endpoint=ftp://127.0.0.1:1", "endpoint"},
		{"oss://b/p?endpoint=http://127.0.0.1:1&colour=blue", `"colour"`},
		{"oss:///p?endpoint=http://127.0.0.1:1", "no bucket"},
		{"gs://b/p?endpoint=http://127.0.0.1:1&colour=blue", "colour"},
		{"gs://b/p?endpoint=ftp://127.0.0.1:1", "endpoint"},
	} {
		for _, cmd := range []string{"ls", "verify"} {
			code, out, errOut := runCmd(t, cmd, tc.url)
			assert.Equal(t, 1, code, "%s %s: %s", cmd, tc.url, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.want, "%s %s", cmd, tc.url)
		}
	}
	// OSS has no credential chain beyond the environment: none is an error.
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "")
	code, _, errOut := runCmd(t, "ls", "oss://b/p?endpoint=http://127.0.0.1:1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no credentials")
}

// isolateCloudEnv gives the SDKs test credentials and keeps their default
// chains away from the machine's config files and metadata services.
func isolateCloudEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":               "AK",
		"AWS_SECRET_ACCESS_KEY":           "SK",
		"AWS_SESSION_TOKEN":               "",
		"AWS_REGION":                      "",
		"AWS_DEFAULT_REGION":              "",
		"AWS_PROFILE":                     "",
		"AWS_ENDPOINT_URL":                "",
		"AWS_ENDPOINT_URL_S3":             "",
		"AWS_CONFIG_FILE":                 filepath.Join(dir, "aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE":     filepath.Join(dir, "aws-credentials"),
		"AWS_EC2_METADATA_DISABLED":       "true",
		"OSS_ACCESS_KEY_ID":               "AK",
		"OSS_ACCESS_KEY_SECRET":           "SK",
		"OSS_SESSION_TOKEN":               "",
		"OSS_ENDPOINT":                    "",
		"OSS_REGION":                      "",
		"ALIBABA_CLOUD_ACCESS_KEY_ID":     "",
		"ALIBABA_CLOUD_ACCESS_KEY_SECRET": "",
		"ALIBABA_CLOUD_SECURITY_TOKEN":    "",
		"STORAGE_EMULATOR_HOST":           "",
		"GOOGLE_APPLICATION_CREDENTIALS":  "",
	} {
		t.Setenv(k, v)
	}
}

func startS3Cloud(t *testing.T) cloudServer {
	srv := s3fake.Start(t, nil)
	return cloudServer{
		url:     "s3://" + cloudBucket + "/" + cloudPrefix + "?endpoint=" + srv.URL + "&region=eu-west-1&part_size=5MiB&concurrency=2",
		raw:     pathStyleGet(srv.URL),
		uploads: countMultipart(srv),
	}
}

func startOSSCloud(t *testing.T) cloudServer {
	srv := s3fake.Start(t, &s3fake.Options{Dialect: s3fake.OSS})
	return cloudServer{
		url:     "oss://" + cloudBucket + "/" + cloudPrefix + "?endpoint=" + srv.URL + "&part_size=1MiB&concurrency=2",
		raw:     pathStyleGet(srv.URL),
		uploads: countMultipart(srv),
	}
}

// countMultipart counts InitiateMultipartUpload requests (POST ?uploads).
func countMultipart(srv *s3fake.Server) *atomic.Int64 {
	var n atomic.Int64
	srv.OnRequest(func(r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Query().Has("uploads") {
			n.Add(1)
		}
	})
	return &n
}

// pathStyleGet reads an object with a plain GET (gofakes3 does not check
// signatures).
func pathStyleGet(endpoint string) func(t *testing.T, name string) []byte {
	return func(t *testing.T, name string) []byte {
		t.Helper()
		resp, err := http.Get(endpoint + "/" + cloudBucket + "/" + name)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", name, b)
		return b
	}
}

// startGCSCloud serves fake-gcs-server's handler on a loopback listener of
// its own, so that it can count compose requests.
func startGCSCloud(t *testing.T) cloudServer {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: cloudBucket})
	var composes atomic.Int64
	h := srv.HTTPHandler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/compose") {
			composes.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return cloudServer{
		uploads: &composes,
		url:     "gs://" + cloudBucket + "/" + cloudPrefix + "?endpoint=" + hs.URL + "&parallel_threshold=1M&part_size=1M&concurrency=2",
		raw: func(t *testing.T, name string) []byte {
			t.Helper()
			obj, err := srv.GetObject(cloudBucket, name)
			require.NoError(t, err, name)
			return obj.Content
		},
	}
}

// exerciseCkptCLI writes checkpoints 10, 20 and 30 (model.bin and
// sub/opt.bin each) and a leftover part of step 40 through the store the
// URL opens, then drives ls, verify, restore and prune with that URL.
// Step 20's model is over 16 MiB: above the S3 and OSS stores' default
// MultipartThreshold (multipart upload in the URLs' part sizes), above the
// GCS URL's parallel_threshold (composite upload), and above the Manager's
// default RangeSize (restore reads it in ranges).
func exerciseCkptCLI(t *testing.T, srv cloudServer) {
	ctx := context.Background()
	st, err := checkpoint.Open(ctx, srv.url)
	require.NoError(t, err)
	t.Cleanup(func() { closeStore(st) })
	m, err := checkpoint.NewManager(st, &checkpoint.ManagerOptions{Keep: -1})
	require.NoError(t, err)

	rng := rand.NewChaCha8([32]byte{7})
	want := map[int64]map[string][]byte{} // step -> part -> bytes
	for _, step := range []int64{10, 20, 30} {
		model := make([]byte, 200<<10+int(step)) // a different size per step
		if step == 20 {
			model = make([]byte, 17<<20+20)
		}
		_, _ = rng.Read(model)
		opt := bytes.Repeat([]byte{byte(step)}, 1000)
		want[step] = map[string][]byte{"model.bin": model, "sub/opt.bin": opt}
		u, err := m.SaveSnapshot(ctx, checkpoint.Snapshot{Step: step, Parts: []checkpoint.Part{
			checkpoint.Bytes("model.bin", model),
			checkpoint.Bytes("sub/opt.bin", opt),
		}, Metadata: map[string]string{"scheme": srv.url[:strings.Index(srv.url, ":")]}})
		require.NoError(t, err)
		require.NoError(t, u.Wait(ctx))
	}
	require.NoError(t, m.Close(ctx))
	assert.Equal(t, int64(1), srv.uploads.Load(), "step 20's model goes up in parts, nothing else does")
	// An interrupted save: a part and no manifest.
	require.NoError(t, st.Put(ctx, "000000000040/model.bin", strings.NewReader("partial"), 7))
	size := func(step int64) int64 { return int64(len(want[step]["model.bin"]) + len(want[step]["sub/opt.bin"])) }

	// The objects are where the URL says: bucket, then prefix.
	assert.True(t, bytes.Equal(want[20]["model.bin"], srv.raw(t, cloudPrefix+"/000000000020/model.bin")))
	var man checkpoint.Manifest
	require.NoError(t, json.Unmarshal(srv.raw(t, cloudPrefix+"/000000000030/"+checkpoint.ManifestName), &man))
	assert.Equal(t, int64(30), man.Step)

	// ls --json: every committed step valid, with its size and part count.
	entries := lsJSON(t, srv.url)
	require.Len(t, entries, 4)
	for i, step := range []int64{10, 20, 30} {
		e := entries[i]
		assert.Equal(t, step, e.Step)
		assert.Equal(t, "valid", e.Status, "step %d: %s", step, e.Problem)
		assert.Equal(t, size(step), e.Bytes, "step %d", step)
		assert.Equal(t, 2, e.Parts, "step %d", step)
		assert.Equal(t, srv.url[:strings.Index(srv.url, ":")], e.Metadata["scheme"])
		assert.False(t, e.Created.IsZero())
	}
	assert.Equal(t, int64(40), entries[3].Step)
	assert.Equal(t, "incomplete", entries[3].Status)
	assert.Equal(t, int64(7), entries[3].Bytes)

	code, out, errOut := runCmd(t, "verify", srv.url)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	for _, step := range []int64{10, 20, 30} {
		assert.Contains(t, out, "step "+itoa(step)+": ok (2 parts, "+humanBytes(size(step))+")")
	}
	assert.Contains(t, out, "step 40: incomplete")
	assert.Contains(t, out, "3 checkpoint(s) verified")

	// Step 30's optimizer state overwritten with other bytes of the same
	// length: verify reads the bytes and names the part; ls, which reads
	// only the listing and the manifests, cannot tell.
	bad := bytes.Repeat([]byte{0xEE}, len(want[30]["sub/opt.bin"]))
	require.NoError(t, st.Put(ctx, "000000000030/sub/opt.bin", bytes.NewReader(bad), int64(len(bad))))
	code, out, errOut = runCmd(t, "verify", srv.url)
	assert.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, out, `step 30: CORRUPT: part "sub/opt.bin": crc32c`)
	assert.Contains(t, out, "step 20: ok")
	assert.Contains(t, errOut, "1 of 3 checkpoints corrupt")
	code, out, errOut = runCmd(t, "verify", srv.url, "--step", "30")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, out, `part "sub/opt.bin"`)
	code, out, errOut = runCmd(t, "verify", srv.url, "--step", "20")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "step 20: ok")
	assert.Equal(t, "valid", lsJSON(t, srv.url)[2].Status, "same size: only verify sees it")

	// restore: the newest valid checkpoint is 20.
	dir := filepath.Join(t.TempDir(), "newest")
	code, out, errOut = runCmd(t, "restore", srv.url, dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "restored step 20 (2 parts, "+humanBytes(size(20))+") into "+dir)
	assert.Contains(t, errOut, "failed verification", "the skipped step 30 is reported")
	assertTree(t, want[20], dir)

	dir10 := filepath.Join(t.TempDir(), "step10")
	code, out, errOut = runCmd(t, "restore", srv.url, dir10, "--step", "10")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "restored step 10")
	assertTree(t, want[10], dir10)

	dir30 := filepath.Join(t.TempDir(), "step30")
	code, _, errOut = runCmd(t, "restore", "--step", "30", srv.url, dir30)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `part "sub/opt.bin" corrupt`)
	assertTree(t, nil, dir30) // nothing half-restored

	// A part of another size: ls sees that from the listing.
	short := want[10]["model.bin"][:100]
	require.NoError(t, st.Put(ctx, "000000000010/model.bin", bytes.NewReader(short), int64(len(short))))
	entries = lsJSON(t, srv.url)
	require.Len(t, entries, 4)
	assert.Equal(t, "corrupt", entries[0].Status)
	assert.Contains(t, entries[0].Problem, `part "model.bin": size 100, manifest says `+itoa(int64(len(want[10]["model.bin"]))))
	code, out, _ = runCmd(t, "ls", srv.url)
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^10\s+corrupt\s+.*part "model.bin": size 100`, out)

	// prune --keep 1: 30 is the newest valid by listing; 10 and 20 go, the
	// leftover 40 (newer than any commit) stays.
	code, out, errOut = runCmd(t, "prune", srv.url, "--keep", "1")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "deleted step 10\ndeleted step 20\n", out)
	objs, err := st.List(ctx, "")
	require.NoError(t, err)
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, "000000000030/") || strings.HasPrefix(k, "000000000040/"), "left after prune: %q", k)
	}
	assert.Contains(t, keys, "000000000030/"+checkpoint.ManifestName)
	entries = lsJSON(t, srv.url)
	require.Len(t, entries, 2)
	assert.Equal(t, []int64{30, 40}, []int64{entries[0].Step, entries[1].Step})
	code, out, _ = runCmd(t, "prune", srv.url, "--keep", "1")
	require.Equal(t, 0, code)
	assert.Equal(t, "nothing to delete\n", out)
}

// cloudLsEntry is what a script reads from `ls --json`, declared here
// rather than reusing lsEntry so that the test pins the JSON names.
type cloudLsEntry struct {
	Step     int64             `json:"step"`
	Status   string            `json:"status"`
	Created  time.Time         `json:"created"`
	Bytes    int64             `json:"bytes"`
	Parts    int               `json:"parts"`
	Problem  string            `json:"problem"`
	Metadata map[string]string `json:"metadata"`
}

func lsJSON(t *testing.T, url string) []cloudLsEntry {
	t.Helper()
	code, out, errOut := runCmd(t, "ls", url, "--json")
	require.Equal(t, 0, code, errOut)
	var entries []cloudLsEntry
	require.NoError(t, json.Unmarshal([]byte(out), &entries), out)
	return entries
}

// assertTree checks that dir holds exactly the files in want (no file at
// all, or no dir, when want is empty).
func assertTree(t *testing.T, want map[string][]byte, dir string) {
	t.Helper()
	got := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		got[filepath.ToSlash(rel)] = b
		return err
	})
	if len(want) == 0 && errors.Is(err, fs.ErrNotExist) {
		return
	}
	require.NoError(t, err)
	require.Len(t, got, len(want), "files in %s", dir)
	for name, w := range want {
		g, ok := got[name]
		require.True(t, ok, "%s missing from %s", name, dir)
		assert.True(t, bytes.Equal(w, g), "%s differs (%d bytes, want %d)", name, len(g), len(w))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
