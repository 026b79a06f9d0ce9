package filestore_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

// writeFileSync is the raw save a Put is compared with: os.WriteFile of
// the same bytes, then fsync.
func writeFileSync(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, 0o666); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// BenchmarkStore runs the shared store benchmarks; Put reports x-raw, its
// throughput relative to os.WriteFile + fsync of the same bytes (1.0 = as
// fast). 256 MiB objects are included unless -short.
func BenchmarkStore(b *testing.B) {
	rawDir := b.TempDir()
	storetest.RunBenchmarks(b, func(b *testing.B) checkpoint.Store { return newStore(b, nil) }, &storetest.BenchOptions{
		Huge: !testing.Short(),
		Raw: &storetest.RawOps{
			Put: func(_ context.Context, key string, data []byte) error {
				return writeFileSync(filepath.Join(rawDir, filepath.FromSlash(key)), data)
			},
			Get: func(_ context.Context, key string) (io.ReadCloser, error) {
				return os.Open(filepath.Join(rawDir, filepath.FromSlash(key)))
			},
		},
	})
}

// BenchmarkGetVsReadFile reads a whole 256 MiB object into memory with Get
// and with os.ReadFile of the same file (both from the page cache) and
// reports x-readfile, Get's throughput relative to ReadFile's (ratio of
// median times).
func BenchmarkGetVsReadFile(b *testing.B) {
	size := 256 << 20
	if testing.Short() {
		size = 16 << 20
	}
	ctx := context.Background()
	s := newStore(b, &benchNoCleanup)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 31)
	}
	const key = "bench/read"
	if err := s.Put(ctx, key, bytes.NewReader(data), int64(size)); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(s.Dir(), filepath.FromSlash(key))
	var tGet, tRead []time.Duration
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		rc, err := s.Get(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, size) // as ReadFile allocates
		if _, err := io.ReadFull(rc, buf); err != nil {
			b.Fatal(err)
		}
		rc.Close()
		tGet = append(tGet, time.Since(start))

		b.StopTimer()
		start = time.Now()
		got, err := os.ReadFile(path)
		if err != nil || len(got) != size {
			b.Fatalf("ReadFile: %d bytes, %v", len(got), err)
		}
		tRead = append(tRead, time.Since(start))
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(median(tRead))/float64(median(tGet)), "x-readfile")
}

var benchNoCleanup = filestore.Options{TempMaxAge: -1}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkPutSource compares the two ways Put takes in bytes, for 256 MiB:
// a source with WriteTo (bytes.Reader here; the Manager's staged parts
// have one too), whose memory is written to the file directly, and a plain
// io.Reader, copied through a 1 MiB buffer. Both against os.WriteFile +
// fsync of the same bytes, in rotating order; ratios of median times
// (x-raw: throughput relative to WriteFile + fsync).
func BenchmarkPutSource(b *testing.B) {
	size := 256 << 20
	if testing.Short() {
		size = 16 << 20
	}
	ctx := context.Background()
	s := newStore(b, &benchNoCleanup)
	rawDir := b.TempDir()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 31)
	}
	ops := []func() error{
		func() error { return writeFileSync(filepath.Join(rawDir, "raw"), data) },
		func() error { return s.Put(ctx, "bench/writerto", bytes.NewReader(data), int64(size)) },
		func() error {
			return s.Put(ctx, "bench/reader", struct{ io.Reader }{bytes.NewReader(data)}, int64(size))
		},
	}
	var times [3][]time.Duration
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		for k := range ops {
			op := (i + k) % len(ops)
			start := time.Now()
			if err := ops[op](); err != nil {
				b.Fatal(err)
			}
			times[op] = append(times[op], time.Since(start))
		}
	}
	b.StopTimer()
	raw := float64(median(times[0]))
	b.ReportMetric(raw/float64(median(times[1])), "writerto-x-raw")
	b.ReportMetric(raw/float64(median(times[2])), "reader-x-raw")
	b.ReportMetric(float64(size)/median(times[0]).Seconds()/1e6, "raw-MB/s")
}
