package storetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
)

// BenchOptions configures [RunBenchmarks]. The zero value benchmarks 1 MiB
// and 64 MiB objects without a raw comparison.
type BenchOptions struct {
	// Sizes are the object sizes to benchmark; nil means 1 MiB and 64 MiB.
	Sizes []int
	// Huge adds 256 MiB to Sizes.
	Huge bool
	// Raw, if set, is the same operation done directly on the backing
	// system (os.WriteFile + fsync, the SDK's PutObject, ...). Each
	// benchmark then also runs the raw operation once per iteration, with
	// the timer stopped (alternating which goes first), and reports the
	// store's throughput relative to it as the metric "x-raw": the raw
	// operation's median time over the store's (1.0 = as fast as raw;
	// higher is faster).
	Raw *RawOps
}

// RawOps are the raw operations a store's benchmarks compare against. Both
// are optional.
type RawOps struct {
	// Put writes data durably under key, as the store's Put would.
	Put func(ctx context.Context, key string, data []byte) error
	// Get opens key for reading.
	Get func(ctx context.Context, key string) (io.ReadCloser, error)
}

// RunBenchmarks runs Put and Get benchmarks (and GetRange, in four
// concurrent ranges, when the store implements checkpoint.RangeGetter) for
// each size, named Put/<size>, Get/<size> and GetRange4/<size>, with
// b.SetBytes so that go test reports MB/s. newStore is called once per
// benchmark; opts may be nil.
func RunBenchmarks(b *testing.B, newStore func(b *testing.B) checkpoint.Store, opts *BenchOptions) {
	b.Helper()
	if opts == nil {
		opts = &BenchOptions{}
	}
	sizes := opts.Sizes
	if sizes == nil {
		sizes = []int{1 << 20, 64 << 20}
	}
	if opts.Huge {
		sizes = append(sizes[:len(sizes):len(sizes)], 256<<20)
	}
	for _, size := range sizes {
		name := sizeName(size)
		b.Run("Put/"+name, func(b *testing.B) { benchPut(b, newStore(b), size, opts.Raw) })
		b.Run("Get/"+name, func(b *testing.B) { benchGet(b, newStore(b), size, opts.Raw) })
		b.Run("GetRange4/"+name, func(b *testing.B) {
			s := newStore(b)
			if _, ok := s.(checkpoint.RangeGetter); !ok {
				b.Skip("store does not implement checkpoint.RangeGetter")
			}
			benchGetRange(b, s, size)
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// ratio collects the per-iteration times of the store's and the raw
// operation and reports the ratio of their medians, which a shared, noisy
// machine disturbs less than the ratio of totals.
type ratio struct{ store, raw []time.Duration }

func (r *ratio) report(b *testing.B) {
	if len(r.raw) > 0 && len(r.store) > 0 {
		b.ReportMetric(float64(median(r.raw))/float64(median(r.store)), "x-raw")
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchPut(b *testing.B, s checkpoint.Store, size int, raw *RawOps) {
	ctx := context.Background()
	data := randomBytes(b.Name(), size)
	key := "bench/put-" + sizeName(size)
	var r ratio
	doRaw := func() {
		if raw == nil || raw.Put == nil {
			return
		}
		b.StopTimer()
		defer b.StartTimer()
		start := time.Now()
		if err := raw.Put(ctx, key+"-raw", data); err != nil {
			b.Fatalf("raw Put: %v", err)
		}
		r.raw = append(r.raw, time.Since(start))
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		// Alternate the order, so that neither side always runs on a
		// device still busy with the other's writes.
		if i%2 == 1 {
			doRaw()
		}
		start := time.Now()
		if err := s.Put(ctx, key, bytes.NewReader(data), int64(size)); err != nil {
			b.Fatalf("Put: %v", err)
		}
		r.store = append(r.store, time.Since(start))
		if i%2 == 0 {
			doRaw()
		}
	}
	b.StopTimer()
	r.report(b)
}

func benchGet(b *testing.B, s checkpoint.Store, size int, raw *RawOps) {
	ctx := context.Background()
	data := randomBytes(b.Name(), size)
	key := "bench/get-" + sizeName(size)
	if err := s.Put(ctx, key, bytes.NewReader(data), int64(size)); err != nil {
		b.Fatalf("Put: %v", err)
	}
	if raw != nil && raw.Get != nil && raw.Put != nil {
		if err := raw.Put(ctx, key+"-raw", data); err != nil {
			b.Fatalf("raw Put: %v", err)
		}
	}
	buf := make([]byte, 1<<20)
	readAll := func(rc io.ReadCloser, err error) {
		if err != nil {
			b.Fatalf("Get: %v", err)
		}
		// Hide WriterTo and ReaderFrom so that the copy goes through buf
		// (io.Discard would read in 8 KiB pieces).
		n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{rc}, buf)
		rc.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("Get: read %d bytes of %d: %v", n, size, err)
		}
	}
	var r ratio
	doRaw := func() {
		if raw == nil || raw.Get == nil {
			return
		}
		b.StopTimer()
		defer b.StartTimer()
		start := time.Now()
		readAll(raw.Get(ctx, key+"-raw"))
		r.raw = append(r.raw, time.Since(start))
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 1 {
			doRaw()
		}
		start := time.Now()
		readAll(s.Get(ctx, key))
		r.store = append(r.store, time.Since(start))
		if i%2 == 0 {
			doRaw()
		}
	}
	b.StopTimer()
	r.report(b)
}

func benchGetRange(b *testing.B, s checkpoint.Store, size int) {
	ctx := context.Background()
	rg := s.(checkpoint.RangeGetter)
	data := randomBytes(b.Name(), size)
	key := "bench/range-" + sizeName(size)
	if err := s.Put(ctx, key, bytes.NewReader(data), int64(size)); err != nil {
		b.Fatalf("Put: %v", err)
	}
	const n = 4
	chunk := (size + n - 1) / n
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		errs := make(chan error, n)
		for i := range n {
			go func() {
				off := i * chunk
				length := min(chunk, size-off)
				if length <= 0 {
					errs <- nil
					return
				}
				rc, err := rg.GetRange(ctx, key, int64(off), int64(length))
				if err != nil {
					errs <- err
					return
				}
				m, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{rc}, make([]byte, 1<<20))
				rc.Close()
				if err == nil && m != int64(length) {
					err = fmt.Errorf("read %d bytes of %d", m, length)
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				b.Fatalf("GetRange: %v", err)
			}
		}
	}
}
