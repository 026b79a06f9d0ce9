package storetest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

// basicStore hides memstore's optional interfaces.
type basicStore struct{ s *memstore.Store }

func (b basicStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return b.s.Put(ctx, key, r, size)
}
func (b basicStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return b.s.Get(ctx, key)
}
func (b basicStore) List(ctx context.Context, prefix string) ([]checkpoint.ObjectInfo, error) {
	return b.s.List(ctx, prefix)
}
func (b basicStore) Delete(ctx context.Context, key string) error { return b.s.Delete(ctx, key) }

// An unarmed Faulty is a conforming store, with or without the inner
// store's optional interfaces.
func TestFaultyConformance(t *testing.T) {
	t.Run("Full", func(t *testing.T) {
		storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
			return storetest.NewFaulty(memstore.New())
		})
	})
	t.Run("EmulatedRange", func(t *testing.T) {
		storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
			f := storetest.NewFaulty(basicStore{memstore.New()})
			return struct {
				checkpoint.Store
				checkpoint.RangeGetter
			}{f, f}
		})
	})
}

func TestFaultyStoreView(t *testing.T) {
	full := storetest.NewFaulty(memstore.New()).Store()
	_, rg := full.(checkpoint.RangeGetter)
	_, cp := full.(checkpoint.ConditionalPutter)
	assert.True(t, rg && cp, "view of memstore lacks RangeGetter or ConditionalPutter")

	f := storetest.NewFaulty(basicStore{memstore.New()})
	basic := f.Store()
	_, rg = basic.(checkpoint.RangeGetter)
	_, cp = basic.(checkpoint.ConditionalPutter)
	assert.False(t, rg || cp, "view of a basic store claims optional interfaces")
	err := f.PutIfAbsent(context.Background(), "k", strings.NewReader("x"), 1)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Same(t, f, storetest.NewFaulty(f).Inner())
}

func newFaulty(t *testing.T, faults ...storetest.Fault) (*storetest.Faulty, *memstore.Store, context.Context) {
	t.Helper()
	inner := memstore.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return storetest.NewFaulty(inner, faults...), inner, ctx
}

func get(t *testing.T, ctx context.Context, s checkpoint.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(ctx, key)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

func put(s checkpoint.Store, ctx context.Context, key string, data []byte) error {
	return s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func TestFailCall(t *testing.T) {
	f, inner, ctx := newFaulty(t, storetest.FailCall(storetest.OpPut, 2, nil))
	require.NoError(t, put(f, ctx, "a", []byte("1")))
	err := put(f, ctx, "b", []byte("2"))
	require.ErrorIs(t, err, storetest.ErrInjected)
	require.NoError(t, put(f, ctx, "c", []byte("3")))
	objs, err := inner.List(ctx, "")
	require.NoError(t, err)
	assert.Len(t, objs, 2, "the failed call reached the inner store")
	assert.Equal(t, 3, f.Calls(storetest.OpPut))
	assert.Equal(t, 3, f.Calls(storetest.OpWrite))
	assert.Equal(t, 0, f.Calls(storetest.OpGet))

	// Other operations are not affected; their own Nth counts.
	boom := errors.New("boom")
	f.Inject(storetest.FailCall(storetest.OpList|storetest.OpDelete, 1, boom))
	_, err = f.List(ctx, "")
	require.ErrorIs(t, err, boom)
	require.NoError(t, f.Delete(ctx, "a"), "the fault fired once, on List")
	assert.Equal(t, []byte("3"), get(t, ctx, f, "c"))
}

func TestKeyPrefixAndTimes(t *testing.T) {
	f, _, ctx := newFaulty(t, storetest.Fault{Kind: storetest.FaultFail, Ops: storetest.OpPut, KeyPrefix: "ckpt/", Times: 2})
	require.NoError(t, put(f, ctx, "other", []byte("x")))
	require.Error(t, put(f, ctx, "ckpt/1", []byte("x")))
	require.NoError(t, put(f, ctx, "other", []byte("y")))
	require.Error(t, put(f, ctx, "ckpt/1", []byte("x")))
	require.NoError(t, put(f, ctx, "ckpt/1", []byte("z")), "the fault should be spent after two calls")
	assert.Equal(t, []byte("z"), get(t, ctx, f, "ckpt/1"))

	f.Inject(storetest.Fault{Kind: storetest.FaultFail, Ops: storetest.OpGet, Nth: 2})
	get(t, ctx, f, "ckpt/1")
	for range 3 {
		_, err := f.Get(ctx, "ckpt/1")
		require.ErrorIs(t, err, storetest.ErrInjected, "Times 0 means every call from the Nth on")
	}
	f.Reset()
	assert.Equal(t, []byte("z"), get(t, ctx, f, "ckpt/1"), "Reset should disarm every fault")
}

func TestFailAfterBytes(t *testing.T) {
	data := pattern(5000)
	boom := errors.New("link down")
	f, inner, ctx := newFaulty(t)
	require.NoError(t, put(f, ctx, "k", []byte("old")))
	f.Inject(storetest.FailAfterBytes(storetest.OpWrite, 1000, boom))
	for _, size := range []int64{5000, -1} {
		err := f.Put(ctx, "k", bytes.NewReader(data), size)
		require.ErrorIs(t, err, boom)
		err = f.PutIfAbsent(ctx, "new", bytes.NewReader(data), size)
		require.ErrorIs(t, err, boom)
	}
	assert.Equal(t, []byte("old"), get(t, ctx, inner, "k"), "the inner store kept a partial write")
	_, err := inner.Get(ctx, "new")
	require.ErrorIs(t, err, fs.ErrNotExist)
	// Smaller writes pass.
	require.NoError(t, put(f, ctx, "small", data[:1000]))
	f.Reset()

	require.NoError(t, put(f, ctx, "k", data))
	f.Inject(storetest.FailAfterBytes(storetest.OpRead, 100, nil))
	rc, err := f.Get(ctx, "k")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.ErrorIs(t, err, storetest.ErrInjected)
	assert.Equal(t, data[:100], got)
	rc, err = f.GetRange(ctx, "k", 50, 1000)
	require.NoError(t, err)
	got, err = io.ReadAll(rc)
	rc.Close()
	require.ErrorIs(t, err, storetest.ErrInjected)
	assert.Equal(t, data[50:150], got)
}

func TestNoSpace(t *testing.T) {
	f, inner, ctx := newFaulty(t, storetest.NoSpace(10_000))
	require.NoError(t, put(f, ctx, "a", pattern(6000)))
	err := put(f, ctx, "b", pattern(6000))
	require.ErrorIs(t, err, syscall.ENOSPC)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	err = put(f, ctx, "c", []byte("x"))
	require.ErrorIs(t, err, syscall.ENOSPC, "the disk stays full")
	objs, err := inner.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, objs, 1)
	assert.Equal(t, "a", objs[0].Key)
	// Reads still work.
	assert.Equal(t, pattern(6000), get(t, ctx, f, "a"))
}

func TestCorrupt(t *testing.T) {
	data := pattern(1000)
	f, inner, ctx := newFaulty(t)
	require.NoError(t, put(f, ctx, "k", data))
	f.Inject(storetest.Corrupt(storetest.OpRead, 10))

	got := get(t, ctx, f, "k")
	require.Len(t, got, len(data))
	for i := range data {
		if i == 10 {
			assert.Equal(t, data[i]^0xff, got[i], "byte 10 not flipped")
		} else if got[i] != data[i] {
			t.Fatalf("byte %d changed", i)
		}
	}
	rc, err := f.GetRange(ctx, "k", 5, 20)
	require.NoError(t, err)
	got, err = io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	want := bytes.Clone(data[5:25])
	want[5] ^= 0xff
	assert.Equal(t, want, got, "GetRange should flip object offset 10")
	rc, err = f.GetRange(ctx, "k", 20, -1)
	require.NoError(t, err)
	got, err = io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.Equal(t, data[20:], got, "a range after the offset is intact")
	assert.Equal(t, data, get(t, ctx, inner, "k"), "read corruption changed the stored object")

	f.Reset()
	f.Inject(storetest.Corrupt(storetest.OpPut, 3))
	require.NoError(t, put(f, ctx, "w", data))
	want = bytes.Clone(data)
	want[3] ^= 0xff
	assert.Equal(t, want, get(t, ctx, inner, "w"), "write corruption not stored")
}

func TestSlow(t *testing.T) {
	f, _, ctx := newFaulty(t, storetest.Slow(storetest.OpPut, 1<<20, 0), storetest.Slow(storetest.OpList, 0, 50*time.Millisecond))
	start := time.Now()
	require.NoError(t, put(f, ctx, "k", pattern(100<<10)))
	// 100 KiB at 1 MiB/s: at least ~98 ms. Only the lower bound is
	// checked; a loaded machine can only make it slower.
	assert.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond)
	start = time.Now()
	_, err := f.List(ctx, "")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	start = time.Now()
	get(t, ctx, f, "k")
	assert.Less(t, time.Since(start), 5*time.Second, "Get should not be slowed")

	// A slow stream stops when its context ends.
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	err = put(f, short, "k2", pattern(10<<20))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = f.Inner().Get(ctx, "k2")
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestHang(t *testing.T) {
	f, inner, ctx := newFaulty(t)
	require.NoError(t, put(f, ctx, "k", pattern(5000)))
	f.Inject(storetest.Hang(storetest.OpGet | storetest.OpDelete))

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := f.Get(short, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	why := errors.New("notice: preempted")
	cctx, ccancel := context.WithCancelCause(ctx)
	time.AfterFunc(10*time.Millisecond, func() { ccancel(why) })
	err = f.Delete(cctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, why)
	assert.Equal(t, pattern(5000), get(t, ctx, inner, "k"), "hung Delete reached the store")

	// Hang mid-stream: the inner store sees an upload that stops and then
	// fails.
	f.Reset()
	f.Inject(storetest.HangAfterBytes(storetest.OpPut, 1000))
	pctx, pcancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, pcancel)
	err = put(f, pctx, "k", pattern(9000))
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, pattern(5000), get(t, ctx, inner, "k"))

	// Reads hang after the bytes, until the Get's context ends.
	f.Reset()
	f.Inject(storetest.HangAfterBytes(storetest.OpGet, 100))
	gctx, gcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer gcancel()
	rc, err := f.Get(gctx, "k")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, pattern(5000)[:100], got)

	// Calls without a stream hang at once.
	f.Reset()
	f.Inject(storetest.HangAfterBytes(storetest.OpList, 100))
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer lcancel()
	_, err = f.List(lctx, "")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestOpString(t *testing.T) {
	assert.Equal(t, "Put|PutIfAbsent", storetest.OpWrite.String())
	assert.Equal(t, "GetRange", storetest.OpGetRange.String())
	assert.Equal(t, "Op(0)", storetest.Op(0).String())
}
