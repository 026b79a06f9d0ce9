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
