package gcsstore_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/googleapi"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/gcsstore"
	"github.com/spotsafe/spotsafe/internal/netsim"
)

// small makes every upload path reachable with small objects: resumable
// uploads from 256 KiB, parallel composite uploads from 1 MiB in 256 KiB
// parts.
func small() *gcsstore.Options {
	return &gcsstore.Options{ChunkSize: 256 << 10, ParallelThreshold: 1 << 20, PartSize: 256 << 10, Concurrency: 4, RetryTimeout: 5 * time.Second}
}

func data(seed uint64, n int) []byte {
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

// stream hides every interface but io.Reader (no Seeker, no ReaderAt).
type stream struct{ io.Reader }

func readAll(t *testing.T, rc io.ReadCloser, err error) []byte {
	t.Helper()
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

func get(t *testing.T, s checkpoint.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	return readAll(t, rc, err)
}

func (f *fakeGCS) assertNoTemporaries(t *testing.T) {
	t.Helper()
	for _, n := range f.names(t, "") {
		assert.NotContains(t, n, gcsstore.TempDir, "temporary left behind")
	}
}

func TestRoundTrip(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, small())
	ctx := context.Background()
	sizes := []int{0, 1, 1000, 256<<10 - 1, 256 << 10, 256<<10 + 1, 700 << 10, 1 << 20, 5<<19 + 3}
	for _, n := range sizes {
		want := data(uint64(n), n)
		for _, kind := range []string{"bytes", "stream", "stream-unknown-size"} {
			t.Run(fmt.Sprintf("%d/%s", n, kind), func(t *testing.T) {
				key := fmt.Sprintf("rt/%d/%s", n, kind)
				var r io.Reader = bytes.NewReader(want)
				size := int64(n)
				switch kind {
				case "stream":
					r = stream{r}
				case "stream-unknown-size":
					r, size = stream{r}, -1
				}
				require.NoError(t, s.Put(ctx, key, r, size))
				assert.Equal(t, want, get(t, s, key))
				infos, err := s.List(ctx, key)
				require.NoError(t, err)
				require.Len(t, infos, 1)
				assert.Equal(t, int64(n), infos[0].Size)
				assert.False(t, infos[0].Modified.IsZero())
				if n > 10 {
					rc, err := s.GetRange(ctx, key, int64(n/2), 7)
					assert.Equal(t, want[n/2:n/2+7], readAll(t, rc, err))
				}
			})
		}
	}
	f.assertNoTemporaries(t)
}

// More than 32 parts need a tree of composes.
func TestCompositeTree(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, &gcsstore.Options{ParallelThreshold: 1 << 20, PartSize: 32 << 10, Concurrency: 4})
	var composes atomic.Int64
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if _, ok := composeTarget(r); ok {
			composes.Add(1)
		}
		return false
	})
	want := data(7, 70*(32<<10)+5) // 71 parts: 3 intermediates, then the key
	require.NoError(t, s.Put(context.Background(), "tree", bytes.NewReader(want), int64(len(want))))
	assert.Equal(t, want, get(t, s, "tree"))
	assert.EqualValues(t, 4, composes.Load())
	f.assertNoTemporaries(t)
}

func TestNotExist(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, small())
	ctx := context.Background()
	check := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		assert.ErrorIs(t, err, fs.ErrNotExist)
		assert.ErrorIs(t, err, storage.ErrObjectNotExist)
		var ge *googleapi.Error
		if assert.ErrorAs(t, err, &ge) {
			assert.Equal(t, http.StatusNotFound, ge.Code)
		}
	}
	_, err := s.Get(ctx, "missing")
	check(t, err)
	_, err = s.GetRange(ctx, "missing", 3, 4)
	check(t, err)
	_, err = s.GetRange(ctx, "missing", 0, 0)
	check(t, err)
	check(t, s.Delete(ctx, "missing"))

	require.NoError(t, s.Put(ctx, "there", strings.NewReader("x"), 1))
	require.NoError(t, s.Delete(ctx, "there"))
	_, err = s.Get(ctx, "there")
	check(t, err)
	check(t, s.Delete(ctx, "there"))
}

func TestPutIfAbsent(t *testing.T) {
	for _, n := range []int{10, 600 << 10, 3 << 20} { // single, resumable, composite
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			s := f.store(t, small())
			ctx := context.Background()
			first, second := data(1, n), data(2, n)
			require.NoError(t, s.PutIfAbsent(ctx, "m", bytes.NewReader(first), int64(n)))
			err := s.PutIfAbsent(ctx, "m", bytes.NewReader(second), int64(n))
			require.Error(t, err)
			assert.ErrorIs(t, err, fs.ErrExist)
			var ge *googleapi.Error
			if assert.ErrorAs(t, err, &ge) {
				assert.Equal(t, http.StatusPreconditionFailed, ge.Code)
			}
			assert.Equal(t, first, get(t, s, "m"))
			f.assertNoTemporaries(t)

			require.NoError(t, s.Put(ctx, "m", bytes.NewReader(second), int64(n)), "plain Put overwrites")
			assert.Equal(t, second, get(t, s, "m"))
		})
	}
}

// Every request that creates an object carries ifGenerationMatch: 0 for a
// fresh key, the replaced generation for an overwrite.
func TestPreconditionsOnEveryWrite(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, small())
	ctx := context.Background()
	var (
		mu   sync.Mutex
		seen = map[string][]string{} // object -> ifGenerationMatch of each creating request
	)
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		name, ok := composeTarget(r)
		if !ok && isUpload(r) && r.URL.Query().Get("upload_id") == "" {
			name, ok = uploadName(r), true
		}
		if ok {
			mu.Lock()
			seen[name] = append(seen[name], r.URL.Query().Get("ifGenerationMatch"))
			mu.Unlock()
		}
		return false
	})
	generation := func(name string) string {
		o, err := f.srv.GetObject(bucket, name)
		require.NoError(t, err)
		return fmt.Sprint(o.Generation)
	}
	for _, tc := range []struct {
		name string
		n    int
		r    func([]byte) io.Reader
	}{
		{"small", 100, func(b []byte) io.Reader { return bytes.NewReader(b) }},
		{"small-stream", 100, func(b []byte) io.Reader { return stream{bytes.NewReader(b)} }},
		{"resumable", 600 << 10, func(b []byte) io.Reader { return bytes.NewReader(b) }},
		{"composite", 2 << 20, func(b []byte) io.Reader { return bytes.NewReader(b) }},
		{"composite-stream", 2 << 20, func(b []byte) io.Reader { return stream{bytes.NewReader(b)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "pre/" + tc.name
			require.NoError(t, s.Put(ctx, key, tc.r(data(1, tc.n)), int64(tc.n)))
			old := generation(key)
			require.NoError(t, s.Put(ctx, key, tc.r(data(2, tc.n)), int64(tc.n)))
			assert.Equal(t, data(2, tc.n), get(t, s, key))

			mu.Lock()
			got := seen[key]
			mu.Unlock()
			require.NotEmpty(t, got)
			assert.Equal(t, "0", got[0], "first write: DoesNotExist")
			assert.Equal(t, old, got[len(got)-1], "overwrite: GenerationMatch of the replaced object")
			for _, g := range got {
				assert.NotEmpty(t, g, "a write without a precondition")
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	parts := 0
	for name, gens := range seen {
		if strings.Contains(name, gcsstore.TempDir) {
			parts++
			assert.Equal(t, []string{"0"}, gens, "temporary %s", name)
		}
	}
	assert.Positive(t, parts, "composite uploads sent parts")
}

// flipAt flips the byte at offset at of a request body, as a bad NIC or
// proxy would.
type flipAt struct {
	io.ReadCloser
	at, off int64
}

func (f *flipAt) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if f.at >= f.off && f.at < f.off+int64(n) {
		p[f.at-f.off] ^= 0xff
	}
	f.off += int64(n)
	return n, err
}

// Bytes corrupted on the way to the server never become the object: a
// single-request upload carries the CRC32C in its metadata and the server
// refuses it; a composite part is checked against the CRC32C the server
// computed, and the compose carries the CRC32C of the whole.
func TestCorruptionInTransit(t *testing.T) {
	for _, n := range []int{20_000, 3 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			s := f.store(t, small())
			var once atomic.Bool
			f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
				if isUpload(r) && !once.Swap(true) {
					r.Body = &flipAt{ReadCloser: r.Body, at: 10_000} // past the JSON metadata part
				}
				return false
			})
			err := s.Put(context.Background(), "c", bytes.NewReader(data(3, n)), int64(n))
			require.Error(t, err)
			assert.True(t, once.Load())
			if n < 1<<20 {
				var ge *googleapi.Error
				if assert.ErrorAs(t, err, &ge, "the server refuses the upload") {
					assert.Equal(t, http.StatusBadRequest, ge.Code)
				}
			}
			assert.Regexp(t, `(?i)crc32c|checksum`, err.Error())
			_, err = s.Get(context.Background(), "c")
			assert.ErrorIs(t, err, fs.ErrNotExist)
			f.assertNoTemporaries(t)
		})
	}
}

// The checksums that make GCS refuse corrupted data are on the wire: on
// the last chunk of a resumable upload (X-Goog-Hash; the fake does not
// check it) and in the destination of a compose.
func TestCRC32COnTheWire(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, small())
	var (
		mu     sync.Mutex
		hashes []string
		crcs   []string
	)
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if h := r.Header.Get("X-Goog-Hash"); isUpload(r) && h != "" {
			hashes = append(hashes, h)
		}
		if _, ok := composeTarget(r); ok {
			body, err := io.ReadAll(r.Body)
			assert.NoError(t, err)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct{ Destination struct{ Crc32c string } }
			assert.NoError(t, json.Unmarshal(body, &req))
			crcs = append(crcs, req.Destination.Crc32c)
		}
		return false
	})
	crc := func(b []byte) string {
		return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))))
	}
	resumable, composite := data(30, 700<<10), data(31, 2<<20)
	require.NoError(t, s.Put(context.Background(), "r", stream{bytes.NewReader(resumable)}, -1))
	require.NoError(t, s.Put(context.Background(), "c", bytes.NewReader(composite), int64(len(composite))))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"crc32c=" + crc(resumable)}, hashes)
	assert.Equal(t, []string{crc(composite)}, crcs)
}

// blocking yields n bytes of b, then blocks until release is closed and
// fails with err.
type blocking struct {
	b       []byte
	n       int
	off     int
	started chan struct{}
	release chan struct{}
	err     error
	once    sync.Once
}

func (r *blocking) Read(p []byte) (int, error) {
	if r.off >= r.n {
		r.once.Do(func() { close(r.started) })
		<-r.release
		return 0, r.err
	}
	k := copy(p, r.b[r.off:r.n])
	r.off += k
	return k, nil
}

// A Put cancelled in the middle, or whose reader fails, leaves no object,
// keeps the previous one, and leaves no temporaries.
func TestCancelledPutLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n, stop int
		cancel  bool
	}{
		{"single/cancel", 200 << 10, 100 << 10, true},
		{"resumable/cancel", 900 << 10, 600 << 10, true}, // two chunks already sent
		{"composite/cancel", 3 << 20, 2 << 20, true},
		{"single/reader-error", 200 << 10, 100 << 10, false},
		{"resumable/reader-error", 900 << 10, 600 << 10, false},
		{"composite/reader-error", 3 << 20, 2 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			s := f.store(t, small())
			old := data(9, 10)
			require.NoError(t, s.Put(context.Background(), "old", bytes.NewReader(old), 10))

			for _, key := range []string{"fresh", "old"} {
				ctx, cancel := context.WithCancel(context.Background())
				r := &blocking{b: data(4, tc.n), n: tc.stop, started: make(chan struct{}), release: make(chan struct{}), err: errors.New("disk on fire")}
				errc := make(chan error, 1)
				go func() { errc <- s.Put(ctx, key, r, int64(tc.n)) }()
				<-r.started
				if tc.cancel {
					cancel()
					r.err = context.Canceled
				}
				close(r.release)
				err := <-errc
				cancel()
				require.Error(t, err)
				if tc.cancel {
					assert.ErrorIs(t, err, context.Canceled)
				} else {
					assert.ErrorContains(t, err, "disk on fire")
				}
			}
			_, err := s.Get(context.Background(), "fresh")
			assert.ErrorIs(t, err, fs.ErrNotExist)
			assert.Equal(t, old, get(t, s, "old"))
			f.assertNoTemporaries(t)
		})
	}
}

// A Put cancelled while the server holds its last request (the finalizing
// chunk or the compose) finalizes nothing.
func TestCancelledWhileFinalizing(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		last func(*http.Request) bool
	}{
		{"single", 1000, func(r *http.Request) bool { return isUpload(r) }},
		{"resumable", 600 << 10, func(r *http.Request) bool {
			return isUpload(r) && strings.HasSuffix(r.Header.Get("Content-Range"), fmt.Sprintf("/%d", 600<<10))
		}},
		{"composite", 2 << 20, func(r *http.Request) bool { _, ok := composeTarget(r); return ok }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			s := f.store(t, small())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			held := make(chan struct{})
			var once sync.Once
			f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
				if !tc.last(r) {
					return false
				}
				_, _ = io.Copy(io.Discard, r.Body)
				once.Do(func() { close(held) })
				<-r.Context().Done() // the client gave up
				return true
			})
			errc := make(chan error, 1)
			go func() { errc <- s.Put(ctx, "k", bytes.NewReader(data(5, tc.n)), int64(tc.n)) }()
			<-held
			cancel()
			assert.ErrorIs(t, <-errc, context.Canceled)
			f.setHook(nil)
			_, err := s.Get(context.Background(), "k")
			assert.ErrorIs(t, err, fs.ErrNotExist)
			f.assertNoTemporaries(t)
		})
	}
}

func TestSizeMismatch(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, small())
	ctx := context.Background()
	for _, n := range []int{1000, 600 << 10, 3 << 20} {
		b := data(6, n)
		for _, tc := range []struct {
			name string
			r    io.Reader
			size int64
		}{
			{"short-bytes", bytes.NewReader(b[:n-1]), int64(n)},
			{"long-bytes", bytes.NewReader(b), int64(n - 1)},
			{"short-stream", stream{bytes.NewReader(b[:n-1])}, int64(n)},
			{"long-stream", stream{bytes.NewReader(b)}, int64(n - 1)},
		} {
			t.Run(fmt.Sprintf("%d/%s", n, tc.name), func(t *testing.T) {
				err := s.Put(ctx, "k", tc.r, tc.size)
				require.Error(t, err)
				if strings.HasPrefix(tc.name, "short") {
					assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
				}
				_, err = s.Get(ctx, "k")
				assert.ErrorIs(t, err, fs.ErrNotExist)
			})
		}
	}
	f.assertNoTemporaries(t)
}

func TestList(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, &gcsstore.Options{Prefix: "run1"})
	other := f.store(t, &gcsstore.Options{Prefix: "run10/"})
	ctx := context.Background()
	for i, k := range []string{"c", "b/d", "ba", "a", "b/c", "b-"} {
		require.NoError(t, s.Put(ctx, k, bytes.NewReader(data(uint64(i), i)), int64(i)))
	}
	require.NoError(t, other.Put(ctx, "x", strings.NewReader("x"), 1))
	// A leftover of a crashed parallel upload.
	w := f.client(t).Bucket(bucket).Object("run1/" + gcsstore.TempDir + "/abc/p00000").NewWriter(ctx)
	_, _ = w.Write([]byte("tmp"))
	require.NoError(t, w.Close())

	keys := func(prefix string) []string {
		infos, err := s.List(ctx, prefix)
		require.NoError(t, err)
		var out []string
		for _, in := range infos {
			out = append(out, in.Key)
		}
		return out
	}
	assert.Equal(t, []string{"a", "b-", "b/c", "b/d", "ba", "c"}, keys(""))
	assert.Equal(t, []string{"b-", "b/c", "b/d", "ba"}, keys("b"))
	assert.Equal(t, []string{"b/c", "b/d"}, keys("b/"))
	assert.Empty(t, keys("."))
	assert.Empty(t, keys("zz"))
	infos, err := s.List(ctx, "b/d")
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.EqualValues(t, 1, infos[0].Size)
	assert.Equal(t, "run1/", s.Prefix())

	n, err := s.Sweep(ctx, time.Hour)
	require.NoError(t, err)
	assert.Zero(t, n, "a fresh temporary is kept")
	n, err = s.Sweep(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	f.assertNoTemporaries(t)
}

func TestGetRange(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, small())
	ctx := context.Background()
	b := data(8, 1000)
	require.NoError(t, s.Put(ctx, "r", bytes.NewReader(b), 1000))
	for _, tc := range []struct {
		off, n int64
		want   []byte
	}{
		{0, -1, b}, {0, 10, b[:10]}, {990, -1, b[990:]}, {990, 100, b[990:]},
		{999, 1, b[999:]}, {5, 0, nil}, {1000, -1, nil}, {1000, 5, nil}, {1000, 0, nil},
	} {
		rc, err := s.GetRange(ctx, "r", tc.off, tc.n)
		assert.Equal(t, string(tc.want), string(readAll(t, rc, err)), "GetRange(%d, %d)", tc.off, tc.n)
	}
	for _, tc := range [][2]int64{{1001, -1}, {1001, 5}, {1001, 0}, {-1, 5}} {
		_, err := s.GetRange(ctx, "r", tc[0], tc[1])
		assert.Error(t, err, "GetRange(%d, %d)", tc[0], tc[1])
		assert.NotErrorIs(t, err, fs.ErrNotExist)
	}
}

func TestInvalidKeys(t *testing.T) {
	f := newFake(t, netsim.Options{})
	s := f.store(t, &gcsstore.Options{Prefix: "p"})
	ctx := context.Background()
	before := f.requests.Load()
	for _, key := range []string{
		"", "/a", "a/", "a//b", "a/./b", "a/../b", "..", "a b", "ü", "a\x00b", `a\b`, "a#b", "a?b", "a*b", "a[1]",
		"a\nb", gcsstore.TempDir, gcsstore.TempDir + "/x", strings.Repeat("k", 1023),
	} {
		assert.ErrorIs(t, s.Put(ctx, key, strings.NewReader("x"), 1), checkpoint.ErrInvalidKey, "Put %q", key)
		assert.ErrorIs(t, s.PutIfAbsent(ctx, key, strings.NewReader("x"), 1), checkpoint.ErrInvalidKey, "PutIfAbsent %q", key)
		_, err := s.Get(ctx, key)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidKey, "Get %q", key)
		_, err = s.GetRange(ctx, key, 0, 1)
		assert.ErrorIs(t, err, checkpoint.ErrInvalidKey, "GetRange %q", key)
		assert.ErrorIs(t, s.Delete(ctx, key), checkpoint.ErrInvalidKey, "Delete %q", key)
	}
	assert.Equal(t, before, f.requests.Load(), "invalid keys never reach the server")
	for _, key := range []string{"a=b+c,d@e~f", "-x", "_.x", ".hidden", "x/.spotsafe-tmp", "A/9/z.json", strings.Repeat("k", 1022)} {
		require.NoError(t, s.Put(ctx, key, strings.NewReader("x"), 1), "Put %q", key)
		assert.Equal(t, "x", string(get(t, s, key)))
	}
	assert.Error(t, s.Put(ctx, "k", nil, 1))
	assert.Error(t, s.Put(ctx, "k", strings.NewReader("x"), -2))
}

func TestNewRejectsBadInput(t *testing.T) {
	f := newFake(t, netsim.Options{})
	c := f.client(t)
	_, err := gcsstore.New(nil, bucket, nil)
	assert.Error(t, err)
	for _, b := range []string{"", "ab", "AB-c", "-abc", "abc-", "a..b", "ab c", "a/b", strings.Repeat("a", 64), "é-bucket"} {
		_, err := gcsstore.New(c, b, nil)
		assert.ErrorIs(t, err, gcsstore.ErrInvalidBucket, "bucket %q", b)
	}
	for _, b := range []string{"abc", "my-bucket_1", "a.b.c", strings.Repeat("a", 63)} {
		_, err := gcsstore.New(c, b, nil)
		assert.NoError(t, err, "bucket %q", b)
	}
	_, err = gcsstore.New(c, bucket, &gcsstore.Options{Prefix: "a b"})
	assert.ErrorIs(t, err, checkpoint.ErrInvalidKey)
	s, err := gcsstore.New(c, bucket, nil)
	require.NoError(t, err)
	assert.Equal(t, bucket, s.Bucket())
	assert.Empty(t, s.Prefix())
	assert.NoError(t, s.Close(), "Close leaves a caller's client open")
	require.NoError(t, s.Put(context.Background(), "still-open", strings.NewReader("x"), 1))
}

// Transient errors (503 before the server saw anything) are retried: the
// preconditions make every write safe to repeat.
func TestRetriesTransientErrors(t *testing.T) {
	for _, n := range []int{1000, 600 << 10, 2 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			s := f.store(t, small())
			var failed atomic.Int64
			f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
				_, compose := composeTarget(r)
				if (isUpload(r) || compose) && failed.Add(1)%2 == 1 { // every other write request
					unavailable(w, r)
					return true
				}
				return false
			})
			want := data(10, n)
			require.NoError(t, s.PutIfAbsent(context.Background(), "k", bytes.NewReader(want), int64(n)))
			f.setHook(nil)
			assert.Equal(t, want, get(t, s, "k"))
			assert.Greater(t, failed.Load(), int64(1))
			f.assertNoTemporaries(t)
		})
	}
}

// When the server commits a write but the response is lost, the retry gets
// 412; the upload recognizes its own object instead of reporting a
// conflict.
func TestLostResponseIsNotAConflict(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		hit  func(*http.Request) bool
	}{
		{"single", 1000, isUpload},
		{"part", 2 << 20, func(r *http.Request) bool {
			return isUpload(r) && strings.Contains(uploadName(r), gcsstore.TempDir)
		}},
		{"compose", 2 << 20, func(r *http.Request) bool { _, ok := composeTarget(r); return ok }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			s := f.store(t, small())
			var once atomic.Bool
			f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
				if !tc.hit(r) || once.Swap(true) {
					return false
				}
				rec := httptest.NewRecorder()
				f.serve(rec, r) // commits
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			})
			want := data(11, tc.n)
			require.NoError(t, s.PutIfAbsent(context.Background(), "k", bytes.NewReader(want), int64(tc.n)))
			assert.True(t, once.Load())
			assert.Equal(t, want, get(t, s, "k"))
			f.assertNoTemporaries(t)
		})
	}
}

// Retries stop at RetryTimeout, and ctx bounds everything.
func TestRetryDeadline(t *testing.T) {
	f := newFake(t, netsim.Options{})
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		_, compose := composeTarget(r)
		if isUpload(r) || compose {
			unavailable(w, r)
			return true
		}
		return false
	})
	opts := small()
	opts.RetryTimeout = 300 * time.Millisecond
	s := f.store(t, opts)
	for _, n := range []int{1000, 2 << 20} {
		start := time.Now()
		err := s.Put(context.Background(), "k", bytes.NewReader(data(1, n)), int64(n))
		require.Error(t, err)
		var ge *googleapi.Error
		if assert.ErrorAs(t, err, &ge) {
			assert.Equal(t, http.StatusServiceUnavailable, ge.Code)
		}
		assert.Less(t, time.Since(start), 20*time.Second, "retries ignored RetryTimeout")
	}
	patient := f.store(t, &gcsstore.Options{RetryTimeout: time.Hour, ParallelThreshold: 1 << 20, PartSize: 256 << 10})
	for _, n := range []int{1000, 2 << 20} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := patient.Put(ctx, "k", bytes.NewReader(data(1, n)), int64(n))
		cancel()
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
	f.setHook(nil)
	f.assertNoTemporaries(t)
}

// Killing the server in the middle of an upload leaves the previous object
// readable and the new key absent; temporaries that could not be deleted
// while the server was down are invisible to List and removed by Sweep.
func TestServerKilledMidUpload(t *testing.T) {
	for _, n := range []int{900 << 10, 3 << 20} { // resumable, composite
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			opts := small()
			opts.RetryTimeout = 500 * time.Millisecond
			s := f.store(t, opts)
			ctx := context.Background()
			prev := data(12, n)
			require.NoError(t, s.PutIfAbsent(ctx, "step1/data", bytes.NewReader(prev), int64(n)))

			var got atomic.Int64
			var once sync.Once
			reached := make(chan struct{})
			f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
				if isUpload(r) {
					r.Body = countingBody{ReadCloser: r.Body, n: &got, limit: int64(n / 2), once: &once, reached: reached}
				}
				return false
			})
			errc := make(chan error, 1)
			go func() { errc <- s.PutIfAbsent(ctx, "step2/data", bytes.NewReader(data(13, n)), int64(n)) }()
			<-reached
			f.kill()
			err := <-errc
			require.Error(t, err)
			f.setHook(nil)
			f.start()

			_, err = s.Get(ctx, "step2/data")
			assert.ErrorIs(t, err, fs.ErrNotExist, "no partial commit")
			assert.Equal(t, prev, get(t, s, "step1/data"))
			infos, err := s.List(ctx, "")
			require.NoError(t, err)
			require.Len(t, infos, 1)
			assert.Equal(t, "step1/data", infos[0].Key)
			_, err = s.Sweep(ctx, 0)
			require.NoError(t, err)
			f.assertNoTemporaries(t)
			// And the store works again.
			require.NoError(t, s.PutIfAbsent(ctx, "step2/data", bytes.NewReader(data(13, n)), int64(n)))
		})
	}
}

// Concurrent overwrites of one key all succeed (a writer that loses the
// generation race was superseded) and leave one writer's bytes whole; of
// concurrent PutIfAbsent calls exactly one wins.
func TestConcurrentWriters(t *testing.T) {
	for _, n := range []int{1000, 2 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			s := f.store(t, small())
			ctx := context.Background()
			const writers = 4
			var wg sync.WaitGroup
			errs := make([]error, writers)
			won := make([]error, writers)
			for i := range writers {
				wg.Go(func() {
					errs[i] = s.Put(ctx, "shared", bytes.NewReader(data(uint64(100+i), n)), int64(n))
					won[i] = s.PutIfAbsent(ctx, "once", bytes.NewReader(data(uint64(200+i), n)), int64(n))
				})
			}
			wg.Wait()
			for _, err := range errs {
				assert.NoError(t, err)
			}
			got := get(t, s, "shared")
			match := false
			for i := range writers {
				match = match || bytes.Equal(got, data(uint64(100+i), n))
			}
			assert.True(t, match, "the object is one writer's bytes")
			winners := 0
			for i, err := range won {
				if err == nil {
					winners++
					assert.Equal(t, data(uint64(200+i), n), get(t, s, "once"))
				} else {
					assert.ErrorIs(t, err, fs.ErrExist)
				}
			}
			assert.Equal(t, 1, winners)
			f.assertNoTemporaries(t)
		})
	}
}

// A Store remembers the generations it wrote; when another writer changed
// the object since, the remembered one is refused and Put recovers.
func TestOverwriteAfterAnotherWriter(t *testing.T) {
	for _, n := range []int{1000, 2 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake(t, netsim.Options{})
			a, b := f.store(t, small()), f.store(t, small())
			ctx := context.Background()
			for i, s := range []*gcsstore.Store{a, b, a, a, b} {
				want := data(uint64(40+i), n)
				require.NoError(t, s.Put(ctx, "k", bytes.NewReader(want), int64(n)), "write %d", i)
				assert.Equal(t, want, get(t, a, "k"), "after write %d", i)
			}
			require.NoError(t, b.Delete(ctx, "k"))
			require.NoError(t, a.Put(ctx, "k", bytes.NewReader(data(50, n)), int64(n)), "after another writer's delete")
			assert.Equal(t, data(50, n), get(t, b, "k"))
			f.assertNoTemporaries(t)
		})
	}
}
