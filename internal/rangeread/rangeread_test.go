package rangeread_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/internal/rangeread"
)

func object(n int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// source serves ranges of data, with optional jitter and faults.
type source struct {
	data     []byte
	jitter   bool
	breakN   atomic.Int32 // break this many bodies halfway
	mu       sync.Mutex
	breakAt  map[int64]bool // break the first body starting at these offsets
	calls    atomic.Int32
	inFlight atomic.Int32
	maxIn    atomic.Int32
	open     atomic.Int32 // bodies not yet closed
}

func (s *source) fetch(ctx context.Context, off, n int64) (io.ReadCloser, error) {
	s.calls.Add(1)
	in := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if in <= m || s.maxIn.CompareAndSwap(m, in) {
			break
		}
	}
	if s.jitter {
		select {
		case <-time.After(time.Duration(rand.IntN(3)) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b := s.data[off : off+n]
	s.open.Add(1)
	s.mu.Lock()
	brk := s.breakAt[off]
	delete(s.breakAt, off)
	s.mu.Unlock()
	if brk || s.breakN.Add(-1) >= 0 {
		return &body{Reader: io.MultiReader(bytes.NewReader(b[:n/2]), errReader{}), s: s}, nil
	}
	return &body{Reader: bytes.NewReader(b), s: s}, nil
}

type body struct {
	io.Reader
	s    *source
	once sync.Once
}

func (b *body) Close() error { b.once.Do(func() { b.s.open.Add(-1) }); return nil }

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func fast() backoff.BackOff { return &backoff.ZeroBackOff{} }

func TestReadsInOrder(t *testing.T) {
	for _, size := range []int{0, 1, 1000, 4096, 4097, 100_000} {
		src := &source{data: object(size), jitter: true}
		r := rangeread.New(context.Background(), int64(size), nil, src.fetch,
			&rangeread.Options{ChunkSize: 4096, Concurrency: 4, Backoff: fast})
		var got bytes.Buffer
		_, err := io.Copy(&got, r) // uses WriteTo
		require.NoError(t, err)
		require.NoError(t, r.Close())
		assert.True(t, bytes.Equal(src.data, got.Bytes()), "size %d: content differs", size)
		assert.LessOrEqual(t, src.maxIn.Load(), int32(4), "more fetches in flight than Concurrency")
		assert.Zero(t, src.open.Load(), "bodies left open")
	}
}

func TestSmallReadsAndFirstBody(t *testing.T) {
	src := &source{data: object(50_000)}
	first, err := src.fetch(context.Background(), 0, 4096)
	require.NoError(t, err)
	src.calls.Store(0)
	r := rangeread.New(context.Background(), 50_000, first, src.fetch,
		&rangeread.Options{ChunkSize: 4096, Concurrency: 3})
	got, err := io.ReadAll(io.LimitReader(onlyReader{r}, 1<<30)) // Read path, small buffers
	require.NoError(t, err)
	require.NoError(t, r.Close())
	assert.Equal(t, src.data, got)
	assert.Equal(t, int32(12), src.calls.Load(), "the first chunk must come from the given body")
	assert.Zero(t, src.open.Load())
}

type onlyReader struct{ io.Reader }

func TestBrokenBodiesAreResumed(t *testing.T) {
	src := &source{data: object(40_000), breakAt: map[int64]bool{0: true, 3 * 4096: true, 9 * 4096: true}}
	r := rangeread.New(context.Background(), 40_000, nil, src.fetch,
		&rangeread.Options{ChunkSize: 4096, Concurrency: 4, Backoff: fast})
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	r.Close()
	assert.Equal(t, src.data, got)
	assert.Equal(t, int32(10+3), src.calls.Load(), "each broken body costs one more request")
}

func TestPersistentFailureEndsStream(t *testing.T) {
	src := &source{data: object(40_000)}
	src.breakN.Store(1000)
	r := rangeread.New(context.Background(), 40_000, nil, src.fetch,
		&rangeread.Options{ChunkSize: 4096, Concurrency: 2, Attempts: 2, Backoff: fast})
	_, err := io.ReadAll(r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection reset")
	assert.Contains(t, err.Error(), "after 2 attempts")
	r.Close()
	assert.Zero(t, src.open.Load())
}

func TestFetchErrorIsReturned(t *testing.T) {
	boom := errors.New("412 precondition failed")
	fetch := func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
		if off > 0 {
			return nil, boom
		}
		return io.NopCloser(bytes.NewReader(make([]byte, n))), nil
	}
	r := rangeread.New(context.Background(), 10_000, nil, fetch, &rangeread.Options{ChunkSize: 4096})
	got, err := io.ReadAll(r)
	assert.ErrorIs(t, err, boom)
	assert.Len(t, got, 4096, "the chunk before the failure is delivered")
	r.Close()
}

func TestCloseMidStreamStopsFetches(t *testing.T) {
	src := &source{data: object(1 << 20), jitter: true}
	r := rangeread.New(context.Background(), 1<<20, nil, src.fetch,
		&rangeread.Options{ChunkSize: 4096, Concurrency: 4})
	buf := make([]byte, 10_000)
	_, err := io.ReadFull(r, buf)
	require.NoError(t, err)
	require.NoError(t, r.Close()) // waits for every goroutine
	assert.Less(t, src.calls.Load(), int32(256), "fetching continued after Close")
	assert.Zero(t, src.open.Load(), "bodies left open after Close")
	_, err = r.Read(buf)
	assert.Error(t, err)
}

func TestContextCancelEndsStream(t *testing.T) {
	src := &source{data: object(1 << 20), jitter: true}
	ctx, cancel := context.WithCancel(context.Background())
	r := rangeread.New(ctx, 1<<20, nil, src.fetch, &rangeread.Options{ChunkSize: 4096})
	buf := make([]byte, 5000)
	_, err := io.ReadFull(r, buf)
	require.NoError(t, err)
	cancel()
	_, err = io.ReadAll(r)
	assert.ErrorIs(t, err, context.Canceled)
	r.Close()
}

func TestBufferPoolIsReused(t *testing.T) {
	pool := rangeread.NewBufferPool(4096)
	src := &source{data: object(64 << 10)}
	for range 3 {
		r := rangeread.New(context.Background(), int64(len(src.data)), nil, src.fetch,
			&rangeread.Options{ChunkSize: 4096, Concurrency: 2, Buffers: pool})
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		require.NoError(t, r.Close())
		assert.True(t, bytes.Equal(src.data, got))
	}
	// Closing mid-stream hands buffers back without corrupting later reads.
	r := rangeread.New(context.Background(), int64(len(src.data)), nil, src.fetch,
		&rangeread.Options{ChunkSize: 4096, Concurrency: 4, Buffers: pool})
	_, err := io.ReadFull(r, make([]byte, 5000))
	require.NoError(t, err)
	require.NoError(t, r.Close())
	r = rangeread.New(context.Background(), int64(len(src.data)), nil, src.fetch,
		&rangeread.Options{ChunkSize: 4096, Concurrency: 4, Buffers: pool})
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	r.Close()
	assert.True(t, bytes.Equal(src.data, got))
	// A pool of another size is ignored, not misused.
	r = rangeread.New(context.Background(), int64(len(src.data)), nil, src.fetch,
		&rangeread.Options{ChunkSize: 8192, Buffers: pool})
	got, err = io.ReadAll(r)
	require.NoError(t, err)
	r.Close()
	assert.True(t, bytes.Equal(src.data, got))
}
