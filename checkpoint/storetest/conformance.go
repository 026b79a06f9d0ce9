package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
)

// LargeSize is the size of the large round-trip object in a default run of
// [RunConformance]; with -short it is [LargeSizeShort].
const (
	LargeSize      = 64 << 20
	LargeSizeShort = 8 << 20
)

// RunConformance runs the behaviour every checkpoint.Store must have,
// through the public interface only. newStore is called once per subtest
// and must return an empty store that no other subtest uses: a fresh
// directory, a fresh in-memory store, or a cloud store rooted at a fresh
// prefix of a shared bucket. It may register cleanups with t.Cleanup.
//
// Optional capabilities are tested when the store has them:
// checkpoint.RangeGetter (GetRange) and checkpoint.ConditionalPutter
// (PutIfAbsent).
//
// The contract tested, beyond the Store documentation:
//   - every error from a cancelled context matches context.Canceled, and an
//     error returned by the caller's reader is wrapped (errors.Is finds it);
//   - a Put whose reader yields fewer bytes than size fails;
//   - invalid keys (see checkpoint.ValidateKey) fail with an error matching
//     checkpoint.ErrInvalidKey, for every method taking a key;
//   - GetRange: length < 0 reads to the end, a range running past the end
//     is cut at the end, length 0 reads nothing, an offset beyond the size
//     or a negative offset is an error; an offset equal to the size may give
//     an empty reader or an error;
//   - stores on a hierarchical file system may refuse a key that names a
//     "directory" of another key ("a/b" next to "a/b/c"); the refusal must be
//     an error and must leave the existing object intact.
func RunConformance(t *testing.T, newStore func(t *testing.T) checkpoint.Store) {
	t.Helper()
	c := &suite{newStore: newStore}
	t.Run("RoundTrip", c.testRoundTrip)
	t.Run("UnknownSize", c.testUnknownSize)
	t.Run("Overwrite", c.testOverwrite)
	t.Run("InvisibleUntilComplete", c.testInvisibleUntilComplete)
	t.Run("CanceledPut", c.testCanceledPut)
	t.Run("ReaderError", c.testReaderError)
	t.Run("ShortReader", c.testShortReader)
	t.Run("LongReader", c.testLongReader)
	t.Run("CanceledContext", c.testCanceledContext)
	t.Run("NotExist", c.testNotExist)
	t.Run("List", c.testList)
	t.Run("ListPaging", c.testListPaging)
	t.Run("KeyAndDirectory", c.testKeyAndDirectory)
	t.Run("AwkwardKeys", c.testAwkwardKeys)
	t.Run("InvalidKeys", c.testInvalidKeys)
	t.Run("ConcurrentKeys", c.testConcurrentKeys)
	t.Run("ConcurrentSameKey", c.testConcurrentSameKey)
	t.Run("ReadDuringOverwrite", c.testReadDuringOverwrite)
	t.Run("GetRange", c.testGetRange)
	t.Run("PutIfAbsent", c.testPutIfAbsent)
	t.Run("PutIfAbsentFailed", c.testPutIfAbsentFailed)
	t.Run("PutIfAbsentConcurrent", c.testPutIfAbsentConcurrent)
}

type suite struct {
	newStore func(t *testing.T) checkpoint.Store
}

// errBoom is what the suite's failing readers return.
var errBoom = errors.New("storetest: reader failed on purpose")

// store returns a fresh store and a context bounded so that a hung store
// fails the test instead of the whole run.
func (c *suite) store(t *testing.T) (checkpoint.Store, context.Context) {
	t.Helper()
	s := c.newStore(t)
	if s == nil {
		t.Fatal("storetest: newStore returned nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return s, ctx
}

// randomBytes returns n pseudo-random bytes, different for every (name, n).
func randomBytes(name string, n int) []byte {
	h := fnv.New64a()
	h.Write([]byte(name))
	var seed [32]byte
	for i := range 4 {
		v := h.Sum64() + uint64(i)*0x9e3779b97f4a7c15 + uint64(n)
		for j := range 8 {
			seed[i*8+j] = byte(v >> (8 * j))
		}
	}
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(seed).Read(b)
	return b
}

func mustPut(t *testing.T, ctx context.Context, s checkpoint.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

func read(ctx context.Context, s checkpoint.Store, key string) ([]byte, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return b, err
}

func mustGet(t *testing.T, ctx context.Context, s checkpoint.Store, key string) []byte {
	t.Helper()
	b, err := read(ctx, s, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return b
}

// checkContent fails unless key holds exactly want.
func checkContent(t *testing.T, ctx context.Context, s checkpoint.Store, key string, want []byte) {
	t.Helper()
	got := mustGet(t, ctx, s, key)
	if d := diff(got, want); d != "" {
		t.Fatalf("Get(%q): %s", key, d)
	}
}

// diff describes how got differs from want, or returns "".
func diff(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	n := min(len(got), len(want))
	for i := range n {
		if got[i] != want[i] {
			return fmt.Sprintf("got %d bytes, want %d; first difference at offset %d (%#02x, want %#02x)", len(got), len(want), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("got %d bytes, want %d; equal up to %d", len(got), len(want), n)
}

func checkNotExist(t *testing.T, ctx context.Context, s checkpoint.Store, key string) {
	t.Helper()
	b, err := read(ctx, s, key)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get(%q) = %d bytes, %v; want an error matching fs.ErrNotExist", key, len(b), err)
	}
}

func mustList(t *testing.T, ctx context.Context, s checkpoint.Store, prefix string) []checkpoint.ObjectInfo {
	t.Helper()
	objs, err := s.List(ctx, prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	if !sort.SliceIsSorted(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key }) {
		t.Fatalf("List(%q) is not sorted by key: %v", prefix, keysOf(objs))
	}
	for i := 1; i < len(objs); i++ {
		if objs[i].Key == objs[i-1].Key {
			t.Fatalf("List(%q) has %q twice", prefix, objs[i].Key)
		}
	}
	for _, o := range objs {
		if !strings.HasPrefix(o.Key, prefix) {
			t.Fatalf("List(%q) returned %q, which lacks the prefix", prefix, o.Key)
		}
	}
	return objs
}

func keysOf(objs []checkpoint.ObjectInfo) []string {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}

// checkKeys fails unless List(prefix) returns exactly want (sorted by the
// caller), and checks sizes against sizes when not nil.
func checkKeys(t *testing.T, ctx context.Context, s checkpoint.Store, prefix string, want []string, sizes map[string]int) {
	t.Helper()
	objs := mustList(t, ctx, s, prefix)
	got := keysOf(objs)
	if len(want) == 0 && len(got) == 0 {
		return
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("List(%q) = %q, want %q", prefix, got, want)
	}
	for _, o := range objs {
		if sz, ok := sizes[o.Key]; ok && o.Size != int64(sz) {
			t.Errorf("List(%q): %q has Size %d, want %d", prefix, o.Key, o.Size, sz)
		}
	}
}

// onlyReader hides every method but Read (WriterTo, Seeker, Len), so that
// stores are exercised with a plain stream, in uneven chunks.
type onlyReader struct {
	r     io.Reader
	chunk int
}

func (o *onlyReader) Read(p []byte) (int, error) {
	if o.chunk > 0 && len(p) > o.chunk {
		p = p[:o.chunk]
	}
	return o.r.Read(p)
}

// gateReader yields data[:at], then reports that it reached at (closing
// reached) and blocks until release is closed, then yields the rest and
// finally err (io.EOF when nil).
type gateReader struct {
	data    []byte
	at      int
	err     error
	off     int
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGateReader(data []byte, at int, err error) *gateReader {
	return &gateReader{data: data, at: at, err: err, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateReader) Read(p []byte) (int, error) {
	if g.off == g.at {
		g.once.Do(func() { close(g.reached) })
		<-g.release
	}
	end := len(g.data)
	if g.off < g.at {
		end = g.at
	}
	if g.off >= end {
		if g.err != nil {
			return 0, g.err
		}
		return 0, io.EOF
	}
	n := copy(p, g.data[g.off:end])
	g.off += n
	return n, nil
}

// gateWriterTo is a gateReader that also implements io.WriterTo, as
// in-memory readers do, so that stores taking that path are tested too.
type gateWriterTo struct{ *gateReader }

func (g gateWriterTo) WriteTo(w io.Writer) (int64, error) {
	var total int64
	buf := make([]byte, 64<<10)
	for {
		n, err := g.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// errReader yields data then fails with err instead of io.EOF.
type errReader struct {
	data []byte
	err  error
}

func (e *errReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

// putAsync runs Put in a goroutine; the returned channel yields its error.
func putAsync(ctx context.Context, s checkpoint.Store, key string, r io.Reader, size int64, ifAbsent bool) <-chan error {
	done := make(chan error, 1)
	go func() {
		if ifAbsent {
			done <- s.(checkpoint.ConditionalPutter).PutIfAbsent(ctx, key, r, size)
			return
		}
		done <- s.Put(ctx, key, r, size)
	}()
	return done
}

// wait waits for a Put started by putAsync, failing the test after a while.
func wait(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return within a minute", what)
		return nil
	}
}

// waitReached waits until a gateReader blocked, failing the test if the Put
// returned or a minute passed first.
func waitReached(t *testing.T, g *gateReader, done <-chan error, what string) {
	t.Helper()
	select {
	case <-g.reached:
	case err := <-done:
		t.Fatalf("%s returned (%v) before reading its input", what, err)
	case <-time.After(time.Minute):
		t.Fatalf("%s did not read %d bytes of its input within a minute", what, g.at)
	}
}

func (c *suite) testRoundTrip(t *testing.T) {
	large := LargeSize
	if testing.Short() {
		large = LargeSizeShort
	}
	for _, size := range []int{0, 1, 10, 4096, 1<<20 + 3, large} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			s, ctx := c.store(t)
			key := fmt.Sprintf("rt/%d.bin", size)
			data := randomBytes(t.Name(), size)
			var r io.Reader = bytes.NewReader(data)
			if size > 1 {
				// Exercise a plain stream for all but the tiny sizes;
				// bytes.Reader's extras are exercised elsewhere.
				r = &onlyReader{r: r, chunk: 100_003}
			}
			if err := s.Put(ctx, key, r, int64(size)); err != nil {
				t.Fatalf("Put(%d bytes): %v", size, err)
			}
			checkContent(t, ctx, s, key, data)
			objs := mustList(t, ctx, s, "rt/")
			if len(objs) != 1 || objs[0].Key != key || objs[0].Size != int64(size) {
				t.Fatalf("List(rt/) = %+v, want one object %q of %d bytes", objs, key, size)
			}
			if m := objs[0].Modified; m.IsZero() || time.Since(m) > 24*time.Hour || time.Until(m) > time.Hour {
				t.Errorf("List: Modified = %v, want about now (%v)", m, time.Now())
			}
			if rg, ok := s.(checkpoint.RangeGetter); ok && size >= 4096 {
				parallelRangeRead(t, ctx, rg, key, data)
			}
		})
	}
}

// parallelRangeRead reads key in four concurrent ranges, as a restore does.
func parallelRangeRead(t *testing.T, ctx context.Context, rg checkpoint.RangeGetter, key string, want []byte) {
	t.Helper()
	const n = 4
	got := make([]byte, len(want))
	chunk := (len(want) + n - 1) / n
	errs := make(chan error, n)
	for i := range n {
		go func() {
			off := i * chunk
			end := min(off+chunk, len(want))
			rc, err := rg.GetRange(ctx, key, int64(off), int64(end-off))
			if err != nil {
				errs <- fmt.Errorf("GetRange(%d, %d): %w", off, end-off, err)
				return
			}
			defer rc.Close()
			m, err := io.ReadFull(rc, got[off:end])
			if err != nil {
				errs <- fmt.Errorf("GetRange(%d, %d): read %d bytes: %w", off, end-off, m, err)
				return
			}
			if extra, _ := rc.Read(make([]byte, 1)); extra != 0 {
				errs <- fmt.Errorf("GetRange(%d, %d): more bytes than asked for", off, end-off)
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if d := diff(got, want); d != "" {
		t.Errorf("parallel ranged read: %s", d)
	}
}

func (c *suite) testUnknownSize(t *testing.T) {
	for _, size := range []int{0, 1, 5000, 17<<20 + 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			s, ctx := c.store(t)
			key := fmt.Sprintf("unknown/%d", size)
			data := randomBytes(t.Name(), size)
			if err := s.Put(ctx, key, &onlyReader{r: bytes.NewReader(data), chunk: 65_537}, -1); err != nil {
				t.Fatalf("Put(size -1, %d bytes): %v", size, err)
			}
			checkContent(t, ctx, s, key, data)
			checkKeys(t, ctx, s, "unknown/", []string{key}, map[string]int{key: size})
		})
	}
}

func (c *suite) testOverwrite(t *testing.T) {
	s, ctx := c.store(t)
	a := randomBytes("a", 3000)
	b := randomBytes("b", 1000)
	mustPut(t, ctx, s, "ow/key", a)
	mustPut(t, ctx, s, "ow/key", b)
	checkContent(t, ctx, s, "ow/key", b)
	checkKeys(t, ctx, s, "", []string{"ow/key"}, map[string]int{"ow/key": len(b)})
	// Back to a larger object: no stale tail of the smaller one, nor of
	// the first.
	c2 := randomBytes("c", 5000)
	mustPut(t, ctx, s, "ow/key", c2)
	checkContent(t, ctx, s, "ow/key", c2)
	checkKeys(t, ctx, s, "", []string{"ow/key"}, map[string]int{"ow/key": len(c2)})
	// And to empty.
	mustPut(t, ctx, s, "ow/key", nil)
	checkContent(t, ctx, s, "ow/key", nil)
	checkKeys(t, ctx, s, "", []string{"ow/key"}, map[string]int{"ow/key": 0})
}

func (c *suite) testInvisibleUntilComplete(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  []byte
		size int64
	}{
		{"New", nil, 1},
		{"NewUnknownSize", nil, -1},
		{"Overwrite", randomBytes("old", 7000), 1},
		{"OverwriteUnknownSize", randomBytes("old", 7000), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ctx := c.store(t)
			const key = "vis/obj"
			if tc.old != nil {
				mustPut(t, ctx, s, key, tc.old)
			}
			data := randomBytes(t.Name(), 300_000)
			size := tc.size
			if size > 0 {
				size = int64(len(data))
			}
			g := newGateReader(data, len(data)/2, nil)
			done := putAsync(ctx, s, key, g, size, false)
			released := false
			defer func() {
				if !released {
					close(g.release)
				}
			}()
			waitReached(t, g, done, "Put")
			check := func() {
				t.Helper()
				if tc.old == nil {
					checkNotExist(t, ctx, s, key)
					checkKeys(t, ctx, s, "", nil, nil)
				} else {
					checkContent(t, ctx, s, key, tc.old)
					checkKeys(t, ctx, s, "", []string{key}, map[string]int{key: len(tc.old)})
				}
			}
			check()
			// Still invisible a moment later (a store that commits in the
			// background would show up now).
			time.Sleep(20 * time.Millisecond)
			check()
			close(g.release)
			released = true
			if err := wait(t, done, "Put"); err != nil {
				t.Fatalf("Put after the reader resumed: %v", err)
			}
			checkContent(t, ctx, s, key, data)
			checkKeys(t, ctx, s, "", []string{key}, map[string]int{key: len(data)})
		})
	}
}

// checkUntouched fails unless key holds old (or does not exist when old is
// nil) and nothing else is listed.
func checkUntouched(t *testing.T, ctx context.Context, s checkpoint.Store, key string, old []byte) {
	t.Helper()
	if old == nil {
		checkNotExist(t, ctx, s, key)
		checkKeys(t, ctx, s, "", nil, nil)
		return
	}
	checkContent(t, ctx, s, key, old)
	checkKeys(t, ctx, s, "", []string{key}, map[string]int{key: len(old)})
}

// failCases are the starting states of the failing-Put tests: no object
// yet, or an old object that must survive.
var failCases = []struct {
	name string
	old  []byte
}{
	{"New", nil},
	{"Overwrite", randomBytes("old object", 5000)},
}

func (c *suite) testCanceledPut(t *testing.T) {
	for _, fc := range failCases {
		for _, tc := range []struct {
			size     int64
			writerTo bool
		}{{1, false}, {-1, false}, {1, true}} {
			size := tc.size
			t.Run(fmt.Sprintf("%s/size=%d/writerTo=%v", fc.name, size, tc.writerTo), func(t *testing.T) {
				s, ctx := c.store(t)
				const key = "cancel/obj"
				if fc.old != nil {
					mustPut(t, ctx, s, key, fc.old)
				}
				data := randomBytes(t.Name(), 400_000)
				if size > 0 {
					size = int64(len(data))
				}
				putCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				g := newGateReader(data, len(data)/2, nil)
				var r io.Reader = g
				if tc.writerTo {
					r = gateWriterTo{g}
				}
				done := putAsync(putCtx, s, key, r, size, false)
				waitReached(t, g, done, "Put")
				cancel()
				// The reader goes on as if nothing happened: the store
				// itself must notice the cancellation.
				close(g.release)
				err := wait(t, done, "Put with a cancelled context")
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Put with a context cancelled midway = %v, want an error matching context.Canceled", err)
				}
				checkUntouched(t, ctx, s, key, fc.old)
			})
		}
	}
}

func (c *suite) testReaderError(t *testing.T) {
	for _, fc := range failCases {
		for _, at := range []int{0, 100_000} {
			for _, size := range []int64{1, -1} {
				t.Run(fmt.Sprintf("%s/at=%d/size=%d", fc.name, at, size), func(t *testing.T) {
					s, ctx := c.store(t)
					const key = "rerr/obj"
					if fc.old != nil {
						mustPut(t, ctx, s, key, fc.old)
					}
					data := randomBytes(t.Name(), 250_000)
					if size > 0 {
						size = int64(len(data))
					}
					err := s.Put(ctx, key, &errReader{data: data[:at], err: errBoom}, size)
					if !errors.Is(err, errBoom) {
						t.Fatalf("Put with a reader failing after %d bytes = %v, want an error wrapping the reader's", at, err)
					}
					checkUntouched(t, ctx, s, key, fc.old)
				})
			}
		}
	}
	t.Run("AtEnd", func(t *testing.T) {
		// With an unknown size, an error instead of io.EOF after the
		// last byte still fails the Put.
		s, ctx := c.store(t)
		data := randomBytes(t.Name(), 10_000)
		err := s.Put(ctx, "rerr/end", &errReader{data: data, err: errBoom}, -1)
		if !errors.Is(err, errBoom) {
			t.Fatalf("Put(size -1) with a reader failing at the end = %v, want an error wrapping the reader's", err)
		}
		checkUntouched(t, ctx, s, "rerr/end", nil)
	})
}

func (c *suite) testShortReader(t *testing.T) {
	for _, fc := range failCases {
		for _, n := range []int{0, 1000} {
			t.Run(fmt.Sprintf("%s/%d", fc.name, n), func(t *testing.T) {
				s, ctx := c.store(t)
				const key = "short/obj"
				if fc.old != nil {
					mustPut(t, ctx, s, key, fc.old)
				}
				data := randomBytes(t.Name(), n)
				err := s.Put(ctx, key, &onlyReader{r: bytes.NewReader(data)}, int64(n)+1000)
				if err == nil {
					t.Fatalf("Put with size %d and a reader of %d bytes succeeded", n+1000, n)
				}
				checkUntouched(t, ctx, s, key, fc.old)
			})
		}
	}
}

func (c *suite) testLongReader(t *testing.T) {
	// A reader with more bytes than size: the store either fails (and
	// leaves nothing) or stores exactly the first size bytes.
	s, ctx := c.store(t)
	data := randomBytes(t.Name(), 3000)
	err := s.Put(ctx, "long/obj", &onlyReader{r: bytes.NewReader(data)}, 1000)
	if err != nil {
		checkUntouched(t, ctx, s, "long/obj", nil)
		return
	}
	checkContent(t, ctx, s, "long/obj", data[:1000])
}

func (c *suite) testCanceledContext(t *testing.T) {
	s, ctx := c.store(t)
	mustPut(t, ctx, s, "cc/old", []byte("old"))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want an error matching context.Canceled", op, err)
		}
	}
	check("Put", s.Put(canceled, "cc/new", bytes.NewReader([]byte("new")), 3))
	check("Put over an existing key", s.Put(canceled, "cc/old", bytes.NewReader([]byte("new")), 3))
	rc, err := s.Get(canceled, "cc/old")
	if err == nil {
		// Some stores open lazily; reading must then fail.
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	check("Get", err)
	_, err = s.List(canceled, "")
	check("List", err)
	check("Delete", s.Delete(canceled, "cc/old"))
	if cp, ok := s.(checkpoint.ConditionalPutter); ok {
		check("PutIfAbsent", cp.PutIfAbsent(canceled, "cc/new", bytes.NewReader([]byte("new")), 3))
	}
	checkContent(t, ctx, s, "cc/old", []byte("old"))
	checkKeys(t, ctx, s, "", []string{"cc/old"}, nil)
}

func (c *suite) testNotExist(t *testing.T) {
	s, ctx := c.store(t)
	mustPut(t, ctx, s, "ne/file", []byte("x"))
	mustPut(t, ctx, s, "ne/dir/obj", []byte("y"))
	rg, hasRange := s.(checkpoint.RangeGetter)
	for _, key := range []string{"missing", "ne/missing", "ne/file/below", "ne/dir", "ne/fil", "ne/dir/ob", "other/deep/missing"} {
		checkNotExist(t, ctx, s, key)
		if hasRange {
			rc, err := rg.GetRange(ctx, key, 0, 1)
			if err == nil {
				rc.Close()
			}
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("GetRange(%q) = %v, want an error matching fs.ErrNotExist", key, err)
			}
		}
		if err := s.Delete(ctx, key); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Delete(%q) = %v, want an error matching fs.ErrNotExist", key, err)
		}
	}
	// Deleting makes a key missing again; a second Delete says so.
	if err := s.Delete(ctx, "ne/file"); err != nil {
		t.Fatalf("Delete(ne/file): %v", err)
	}
	checkNotExist(t, ctx, s, "ne/file")
	if err := s.Delete(ctx, "ne/file"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("second Delete(ne/file) = %v, want an error matching fs.ErrNotExist", err)
	}
	checkContent(t, ctx, s, "ne/dir/obj", []byte("y"))
	checkKeys(t, ctx, s, "", []string{"ne/dir/obj"}, nil)
	// The last object under a "directory" goes, and a new one can come.
	if err := s.Delete(ctx, "ne/dir/obj"); err != nil {
		t.Fatalf("Delete(ne/dir/obj): %v", err)
	}
	checkKeys(t, ctx, s, "", nil, nil)
	mustPut(t, ctx, s, "ne/dir/obj2", []byte("z"))
	checkKeys(t, ctx, s, "", []string{"ne/dir/obj2"}, nil)
}

func (c *suite) testList(t *testing.T) {
	s, ctx := c.store(t)
	checkKeys(t, ctx, s, "", nil, nil)
	keys := []string{
		"a/b", "a/bc", "a/bd/x", "a/b-1", "a/b.x", "a/a", "a/c/d/e",
		"p/b/c", "p/b/d", "p/bc", "p/b-1", "p/b.x", "p/b_y/z", "pq",
		"z",
	}
	sizes := make(map[string]int)
	for i, k := range keys {
		data := randomBytes(k, i*37)
		sizes[k] = len(data)
		mustPut(t, ctx, s, k, data)
	}
	sorted := func(ks ...string) []string {
		out := append([]string(nil), ks...)
		sort.Strings(out)
		return out
	}
	all := sorted(keys...)
	checkKeys(t, ctx, s, "", all, sizes)
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"a/b", sorted("a/b", "a/bc", "a/bd/x", "a/b-1", "a/b.x")},
		{"a/b/", nil},
		{"a/bd/", []string{"a/bd/x"}},
		{"a/", sorted("a/a", "a/b", "a/bc", "a/bd/x", "a/b-1", "a/b.x", "a/c/d/e")},
		{"a", sorted("a/a", "a/b", "a/bc", "a/bd/x", "a/b-1", "a/b.x", "a/c/d/e")},
		{"a/c/d/e", []string{"a/c/d/e"}},
		{"a/c/d/e/", nil},
		// '-' and '.' sort before '/', '_' and letters after: a store
		// walking directories must still return key order.
		{"p/b", sorted("p/b/c", "p/b/d", "p/bc", "p/b-1", "p/b.x", "p/b_y/z")},
		{"p/b/", []string{"p/b/c", "p/b/d"}},
		{"p", sorted("p/b/c", "p/b/d", "p/bc", "p/b-1", "p/b.x", "p/b_y/z", "pq")},
		{"p/", sorted("p/b/c", "p/b/d", "p/bc", "p/b-1", "p/b.x", "p/b_y/z")},
		{"q", nil},
		{"missing/deep/", nil},
		{"z", []string{"z"}},
		{"zz", nil},
	} {
		checkKeys(t, ctx, s, tc.prefix, tc.want, sizes)
	}
	// Prefixes that are not valid keys find nothing (or are refused); they
	// never reach outside the store.
	for _, prefix := range []string{"../", "/", "..", "./a"} {
		objs, err := s.List(ctx, prefix)
		if err != nil && !errors.Is(err, checkpoint.ErrInvalidKey) {
			t.Errorf("List(%q) = %v, want no objects or an error matching checkpoint.ErrInvalidKey", prefix, err)
		}
		if len(objs) != 0 {
			t.Errorf("List(%q) = %q, want nothing", prefix, keysOf(objs))
		}
	}
	// Deleted objects leave the listing.
	for _, k := range []string{"a/bd/x", "p/b/c", "pq"} {
		if err := s.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
	}
	checkKeys(t, ctx, s, "", sorted("a/b", "a/bc", "a/b-1", "a/b.x", "a/a", "a/c/d/e", "p/b/d", "p/bc", "p/b-1", "p/b.x", "p/b_y/z", "z"), sizes)
	checkKeys(t, ctx, s, "p", sorted("p/b/d", "p/bc", "p/b-1", "p/b.x", "p/b_y/z"), sizes)
}

func (c *suite) testListPaging(t *testing.T) {
	// More keys than one page of a cloud listing (S3 and OSS: 1000).
	s, ctx := c.store(t)
	const n = 1100
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("page/%05d", i)
	}
	keys = append(keys, "page0", "pagf")
	work := make(chan string)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			var first error
			for k := range work {
				if first == nil {
					first = s.Put(ctx, k, strings.NewReader(k), int64(len(k)))
				}
			}
			errs <- first
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	sort.Strings(keys)
	checkKeys(t, ctx, s, "", keys, nil)
	checkKeys(t, ctx, s, "page/", keys[:n], nil)
	checkKeys(t, ctx, s, "page/010", keys[1000:n], nil)
}

func (c *suite) testKeyAndDirectory(t *testing.T) {
	s, ctx := c.store(t)
	for _, order := range [][2]string{{"n/b", "n/b/c"}, {"m/b/c", "m/b"}} {
		first, second := order[0], order[1]
		mustPut(t, ctx, s, first, []byte(first))
		err := s.Put(ctx, second, strings.NewReader(second), int64(len(second)))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, context.Canceled) {
				t.Errorf("Put(%q) next to %q = %v, which reads as a different failure", second, first, err)
			}
			t.Logf("store refuses %q next to %q: %v", second, first, err)
			checkContent(t, ctx, s, first, []byte(first))
			checkNotExist(t, ctx, s, second)
			checkKeys(t, ctx, s, first[:1], []string{first}, nil)
			continue
		}
		checkContent(t, ctx, s, first, []byte(first))
		checkContent(t, ctx, s, second, []byte(second))
		want := []string{first, second}
		sort.Strings(want)
		checkKeys(t, ctx, s, first[:1], want, nil)
	}
}

func (c *suite) testAwkwardKeys(t *testing.T) {
	s, ctx := c.store(t)
	keys := []string{
		"dots.in.the.name",
		"trailing.",
		".hidden",
		"dir/.hidden",
		"a..b",
		"dir/...",
		"-leading-dash",
		"_underscore_",
		"MiXeD-Case_09",
		"deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/leaf",
		"long/" + strings.Repeat("n", 200),
		strings.Repeat("seg-0123456789/", 50) + "end",
		"ckpt/000000000123/MANIFEST.json",
		"ckpt/000000000123/rank-0/model.safetensors",
	}
	sizes := make(map[string]int)
	for _, k := range keys {
		data := randomBytes(k, len(k))
		sizes[k] = len(data)
		mustPut(t, ctx, s, k, data)
	}
	for _, k := range keys {
		checkContent(t, ctx, s, k, randomBytes(k, len(k)))
	}
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	checkKeys(t, ctx, s, "", sorted, sizes)
	for _, k := range keys {
		if err := s.Delete(ctx, k); err != nil {
			t.Errorf("Delete(%q): %v", k, err)
		}
	}
	checkKeys(t, ctx, s, "", nil, nil)
}

// InvalidKeys returns keys every store must refuse with
// checkpoint.ErrInvalidKey (a new slice on each call).
func InvalidKeys() []string {
	return []string{
		"", "/", "/abs", "../x", "x/..", "a/../b", "..", ".", "./a", "a/./b",
		"a//b", "a/", "nul\x00byte", "back\\slash",
	}
}

func (c *suite) testInvalidKeys(t *testing.T) {
	s, ctx := c.store(t)
	rg, hasRange := s.(checkpoint.RangeGetter)
	cp, hasCond := s.(checkpoint.ConditionalPutter)
	check := func(op, key string, err error) {
		t.Helper()
		if !errors.Is(err, checkpoint.ErrInvalidKey) {
			t.Errorf("%s(%q) = %v, want an error matching checkpoint.ErrInvalidKey", op, key, err)
		}
	}
	for _, key := range InvalidKeys() {
		check("Put", key, s.Put(ctx, key, strings.NewReader("data"), 4))
		rc, err := s.Get(ctx, key)
		if err == nil {
			rc.Close()
		}
		check("Get", key, err)
		check("Delete", key, s.Delete(ctx, key))
		if hasRange {
			rc, err := rg.GetRange(ctx, key, 0, 1)
			if err == nil {
				rc.Close()
			}
			check("GetRange", key, err)
		}
		if hasCond {
			check("PutIfAbsent", key, cp.PutIfAbsent(ctx, key, strings.NewReader("data"), 4))
		}
	}
	checkKeys(t, ctx, s, "", nil, nil)
}

func (c *suite) testConcurrentKeys(t *testing.T) {
	s, ctx := c.store(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("conc/%02d/obj", i)
			data := randomBytes(key, 64<<10+i)
			errs[i] = s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
		})
	}
	wg.Wait()
	var want []string
	for i := range n {
		key := fmt.Sprintf("conc/%02d/obj", i)
		if errs[i] != nil {
			t.Fatalf("Put(%q): %v", key, errs[i])
		}
		checkContent(t, ctx, s, key, randomBytes(key, 64<<10+i))
		want = append(want, key)
	}
	checkKeys(t, ctx, s, "", want, nil)
}

func (c *suite) testConcurrentSameKey(t *testing.T) {
	s, ctx := c.store(t)
	const n, rounds = 8, 3
	for round := range rounds {
		key := fmt.Sprintf("same/%d", round)
		datas := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			datas[i] = randomBytes(fmt.Sprint(key, i), 256<<10+i*1000)
			wg.Go(func() {
				errs[i] = s.Put(ctx, key, &onlyReader{r: bytes.NewReader(datas[i]), chunk: 32 << 10}, int64(len(datas[i])))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: writer %d: Put: %v", round, i, err)
			}
		}
		got := mustGet(t, ctx, s, key)
		found := false
		for _, d := range datas {
			if bytes.Equal(got, d) {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("round %d: after %d concurrent Puts the object (%d bytes) is none of the values written", round, n, len(got))
		}
		objs := mustList(t, ctx, s, key)
		if len(objs) != 1 || objs[0].Size != int64(len(got)) {
			t.Fatalf("round %d: List = %+v, want one object of %d bytes", round, objs, len(got))
		}
	}
}

func (c *suite) testReadDuringOverwrite(t *testing.T) {
	s, ctx := c.store(t)
	const key = "rdo/obj"
	const size = 512 << 10
	versions := [][]byte{randomBytes("v0", size), randomBytes("v1", size), randomBytes("v2", size-1000)}
	mustPut(t, ctx, s, key, versions[0])
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		defer close(writerDone)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := versions[i%len(versions)]
			if err := s.Put(ctx, key, &onlyReader{r: bytes.NewReader(v), chunk: 64 << 10}, int64(len(v))); err != nil {
				writerDone <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-writerDone; err != nil {
			t.Errorf("writer: Put: %v", err)
		}
	}()
	deadline := time.Now().Add(500 * time.Millisecond)
	reads := 0
	for reads < 20 || time.Now().Before(deadline) {
		rc, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get during overwrites: %v", err)
		}
		// Read slowly at first, so that overwrites land mid-read.
		var buf bytes.Buffer
		_, err = io.CopyN(&buf, rc, 4096)
		if err == nil {
			time.Sleep(time.Millisecond)
			_, err = io.Copy(&buf, rc)
		}
		rc.Close()
		if err != nil {
			t.Fatalf("reading during overwrites: %v", err)
		}
		ok := false
		for _, v := range versions {
			if bytes.Equal(buf.Bytes(), v) {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("read %d during overwrites returned %d bytes matching no version written", reads, buf.Len())
		}
		reads++
		if reads > 2000 {
			break
		}
	}
}

func (c *suite) testGetRange(t *testing.T) {
	s, ctx := c.store(t)
	rg, ok := s.(checkpoint.RangeGetter)
	if !ok {
		t.Skip("store does not implement checkpoint.RangeGetter")
	}
	const size = 100_000
	data := randomBytes(t.Name(), size)
	mustPut(t, ctx, s, "gr/obj", data)
	mustPut(t, ctx, s, "gr/empty", nil)
	readRange := func(key string, off, n int64) ([]byte, error) {
		rc, err := rg.GetRange(ctx, key, off, n)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	for _, tc := range []struct {
		off, n     int64
		start, end int
	}{
		{0, 10, 0, 10},
		{1, 1, 1, 2},
		{12_345, 50_000, 12_345, 62_345},
		{0, -1, 0, size},
		{0, size, 0, size},
		{90_000, -1, 90_000, size},
		{size - 1, -1, size - 1, size},
		{size - 1, 1, size - 1, size},
		{99_990, 100, 99_990, size}, // past the end: cut at the end
		{500, 0, 500, 500},          // nothing
		{0, 0, 0, 0},
	} {
		got, err := readRange("gr/obj", tc.off, tc.n)
		if err != nil {
			t.Errorf("GetRange(%d, %d): %v", tc.off, tc.n, err)
			continue
		}
		if d := diff(got, data[tc.start:tc.end]); d != "" {
			t.Errorf("GetRange(%d, %d): %s", tc.off, tc.n, d)
		}
	}
	// At the end: empty or an error, never data.
	for _, tc := range []struct {
		key    string
		off, n int64
	}{{"gr/obj", size, -1}, {"gr/obj", size, 10}, {"gr/empty", 0, -1}, {"gr/empty", 0, 5}} {
		got, err := readRange(tc.key, tc.off, tc.n)
		if err == nil && len(got) != 0 {
			t.Errorf("GetRange(%s, %d, %d) = %d bytes, want none", tc.key, tc.off, tc.n, len(got))
		}
		if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("GetRange(%s, %d, %d) = %v, want no error or one not matching fs.ErrNotExist", tc.key, tc.off, tc.n, err)
		}
	}
	for _, tc := range []struct{ off, n int64 }{{size + 1, -1}, {size + 1000, 10}, {-1, 10}, {-5, -1}} {
		got, err := readRange("gr/obj", tc.off, tc.n)
		if err == nil {
			t.Errorf("GetRange(%d, %d) = %d bytes, no error; want an error", tc.off, tc.n, len(got))
		} else if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("GetRange(%d, %d) = %v; the object exists, want an error not matching fs.ErrNotExist", tc.off, tc.n, err)
		}
	}
}

func (c *suite) conditional(t *testing.T) (checkpoint.Store, checkpoint.ConditionalPutter, context.Context) {
	s, ctx := c.store(t)
	cp, ok := s.(checkpoint.ConditionalPutter)
	if !ok {
		t.Skip("store does not implement checkpoint.ConditionalPutter")
	}
	return s, cp, ctx
}

func (c *suite) testPutIfAbsent(t *testing.T) {
	s, cp, ctx := c.conditional(t)
	first := randomBytes("first", 2000)
	second := randomBytes("second", 3000)
	const key = "cond/MANIFEST.json"
	if err := cp.PutIfAbsent(ctx, key, bytes.NewReader(first), int64(len(first))); err != nil {
		t.Fatalf("first PutIfAbsent: %v", err)
	}
	checkContent(t, ctx, s, key, first)
	for _, size := range []int64{int64(len(second)), -1} {
		err := cp.PutIfAbsent(ctx, key, bytes.NewReader(second), size)
		if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second PutIfAbsent (size %d) = %v, want an error matching fs.ErrExist", size, err)
		}
		if errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("second PutIfAbsent = %v, which also matches fs.ErrNotExist", err)
		}
	}
	checkContent(t, ctx, s, key, first)
	checkKeys(t, ctx, s, "", []string{key}, map[string]int{key: len(first)})
	// A plain Put still overwrites.
	mustPut(t, ctx, s, key, second)
	checkContent(t, ctx, s, key, second)
	// After Delete the key is free again.
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := cp.PutIfAbsent(ctx, key, &onlyReader{r: bytes.NewReader(first)}, -1); err != nil {
		t.Fatalf("PutIfAbsent after Delete: %v", err)
	}
	checkContent(t, ctx, s, key, first)
	// Empty objects too.
	if err := cp.PutIfAbsent(ctx, "cond/empty", bytes.NewReader(nil), 0); err != nil {
		t.Fatalf("PutIfAbsent of 0 bytes: %v", err)
	}
	if err := cp.PutIfAbsent(ctx, "cond/empty", bytes.NewReader(nil), 0); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second PutIfAbsent of 0 bytes = %v, want an error matching fs.ErrExist", err)
	}
	checkContent(t, ctx, s, "cond/empty", nil)
}

func (c *suite) testPutIfAbsentFailed(t *testing.T) {
	// A PutIfAbsent that fails leaves nothing behind, so that a later one
	// can still win.
	s, cp, ctx := c.conditional(t)
	const key = "condfail/obj"
	data := randomBytes(t.Name(), 200_000)
	err := cp.PutIfAbsent(ctx, key, &errReader{data: data[:50_000], err: errBoom}, int64(len(data)))
	if !errors.Is(err, errBoom) {
		t.Fatalf("PutIfAbsent with a failing reader = %v, want an error wrapping the reader's", err)
	}
	checkUntouched(t, ctx, s, key, nil)
	err = cp.PutIfAbsent(ctx, key, &onlyReader{r: bytes.NewReader(data[:10])}, 20)
	if err == nil {
		t.Fatal("PutIfAbsent with a short reader succeeded")
	}
	checkUntouched(t, ctx, s, key, nil)

	putCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGateReader(data, len(data)/2, nil)
	done := putAsync(putCtx, s, key, g, int64(len(data)), true)
	waitReached(t, g, done, "PutIfAbsent")
	checkUntouched(t, ctx, s, key, nil)
	cancel()
	close(g.release)
	if err := wait(t, done, "PutIfAbsent"); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutIfAbsent with a context cancelled midway = %v, want an error matching context.Canceled", err)
	}
	checkUntouched(t, ctx, s, key, nil)

	if err := cp.PutIfAbsent(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("PutIfAbsent after failed ones: %v", err)
	}
	checkContent(t, ctx, s, key, data)
	// A failing loser does not disturb the winner.
	err = cp.PutIfAbsent(ctx, key, &errReader{data: data[:1000], err: errBoom}, int64(len(data)))
	if err == nil {
		t.Fatal("PutIfAbsent over an existing object with a failing reader succeeded")
	}
	checkUntouched(t, ctx, s, key, data)
}

func (c *suite) testPutIfAbsentConcurrent(t *testing.T) {
	s, cp, ctx := c.conditional(t)
	const n, rounds = 8, 5
	for round := range rounds {
		key := fmt.Sprintf("race/%d/MANIFEST.json", round)
		datas := make([][]byte, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			datas[i] = randomBytes(fmt.Sprint(key, i), 10_000+i*500)
			wg.Go(func() {
				<-start
				errs[i] = cp.PutIfAbsent(ctx, key, bytes.NewReader(datas[i]), int64(len(datas[i])))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: writers %d and %d both won PutIfAbsent", round, winner, i)
				}
				winner = i
			case errors.Is(err, fs.ErrExist):
			default:
				t.Fatalf("round %d: writer %d: PutIfAbsent = %v, want nil or an error matching fs.ErrExist", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won PutIfAbsent", round)
		}
		checkContent(t, ctx, s, key, datas[winner])
	}
	var want []string
	for round := range rounds {
		want = append(want, fmt.Sprintf("race/%d/MANIFEST.json", round))
	}
	checkKeys(t, ctx, s, "", want, nil)
}
