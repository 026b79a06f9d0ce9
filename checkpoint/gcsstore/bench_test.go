package gcsstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"golang.org/x/sync/errgroup"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/gcsstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/netsim"
)

// rawPut is the plain SDK baseline: one Writer with the SDK's defaults
// (16 MiB chunks, resumable above that), no precondition.
func rawPut(c *storage.Client, chunkSize int) func(ctx context.Context, key string, data []byte) error {
	return func(ctx context.Context, key string, data []byte) error {
		w := c.Bucket(bucket).Object(key).NewWriter(ctx)
		if chunkSize >= 0 {
			w.ChunkSize = chunkSize
		}
		if _, err := w.Write(data); err != nil {
			_ = w.Close()
			return err
		}
		return w.Close()
	}
}

// rawGet is the plain SDK baseline for reads: one Reader.
func rawGet(c *storage.Client) func(ctx context.Context, key string) (io.ReadCloser, error) {
	return func(ctx context.Context, key string) (io.ReadCloser, error) {
		return c.Bucket(bucket).Object(key).NewReader(ctx)
	}
}

// BenchmarkStore runs the shared store benchmarks against fake-gcs-server
// on loopback, without shaping, and compares with the plain SDK (x-raw:
// the raw operation's time over ours; 1.0 = as fast).
//
//	go test -run '^$' -bench 'BenchmarkStore' -benchtime 3x ./checkpoint/gcsstore/
func BenchmarkStore(b *testing.B) {
	f := newFake(b, netsim.Options{})
	client := f.client(b)
	var n atomic.Int64
	storetest.RunBenchmarks(b, func(b *testing.B) checkpoint.Store {
		s, err := gcsstore.New(client, bucket, &gcsstore.Options{Prefix: fmt.Sprintf("bench/%04d", n.Add(1))})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}, &storetest.BenchOptions{Raw: &storetest.RawOps{Put: rawPut(client, -1), Get: rawGet(client)}})
}

// BenchmarkThrottled saves and restores 256 MiB through a network shaped
// like a cloud region's (100 MB/s per connection, 20 ms per round trip):
// a parallel composite upload (16 MiB parts, 8 at a time) against one
// plain Writer, and a parallel ranged restore (16 MiB ranges, 8 at a time,
// as checkpoint.Manager reads) against one plain Reader. It reports
// x-raw against the SDK's default Writer (16 MiB resumable chunks) and
// x-raw1 against a Writer sending everything in one request (ChunkSize 0),
// because fake-gcs-server handles resumable chunks in quadratic time (it
// re-hashes the whole object on every chunk), which flatters x-raw; and
// fake-compose-s/op, the time the fake spends in Compose (copying and
// hashing the whole object, where GCS only writes metadata), which
// burdens ours.
//
//	go test -run '^$' -bench 'BenchmarkThrottled' -benchtime 1x ./checkpoint/gcsstore/
func BenchmarkThrottled(b *testing.B) {
	const size = 256 << 20
	f := newFake(b, netsim.Options{BytesPerSecond: 100e6, Latency: 20 * time.Millisecond})
	client := f.client(b)
	s, err := gcsstore.New(client, bucket, &gcsstore.Options{Prefix: "throttled"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	payload := data(77, size)

	// Time the fake spends composing: a metadata operation on GCS, but
	// fake-gcs-server copies the whole object several times and hashes it.
	var composing atomic.Int64
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if _, ok := composeTarget(r); !ok {
			return false
		}
		start := time.Now()
		f.serve(w, r)
		composing.Add(int64(time.Since(start)))
		return true
	})

	b.Run("Save", func(b *testing.B) {
		composing.Store(0)
		var ours, raw, raw1 time.Duration
		b.SetBytes(size)
		b.ResetTimer()
		for i := range b.N {
			key := fmt.Sprintf("save/%d", i)
			start := time.Now()
			if err := s.Put(ctx, key, bytes.NewReader(payload), size); err != nil {
				b.Fatal(err)
			}
			ours += time.Since(start)
			b.StopTimer()
			raw += timed(b, func() error { return rawPut(client, -1)(ctx, "throttled/raw-"+key, payload) })
			raw1 += timed(b, func() error { return rawPut(client, 0)(ctx, "throttled/raw1-"+key, payload) })
			// Keep the fake's heap (it holds every object in memory) the
			// same for every iteration.
			for _, k := range []string{"throttled/" + key, "throttled/raw-" + key, "throttled/raw1-" + key} {
				if err := client.Bucket(bucket).Object(k).Delete(ctx); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			b.StartTimer()
		}
		b.StopTimer()
		b.ReportMetric(float64(raw)/float64(ours), "x-raw")
		b.ReportMetric(float64(raw1)/float64(ours), "x-raw1")
		b.ReportMetric(time.Duration(composing.Load()).Seconds()/float64(b.N), "fake-compose-s/op")
	})

	b.Run("Restore", func(b *testing.B) {
		if err := s.Put(ctx, "restore", bytes.NewReader(payload), size); err != nil {
			b.Fatal(err)
		}
		if err := rawPut(client, 0)(ctx, "throttled/raw-restore", payload); err != nil {
			b.Fatal(err)
		}
		dst := make([]byte, size)
		var ours, raw time.Duration
		b.SetBytes(size)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if err := parallelGet(ctx, s, "restore", dst, 16<<20, 8); err != nil {
				b.Fatal(err)
			}
			ours += time.Since(start)
			b.StopTimer()
			if !bytes.Equal(dst, payload) {
				b.Fatal("restored bytes differ")
			}
			raw += timed(b, func() error {
				rc, err := rawGet(client)(ctx, "throttled/raw-restore")
				if err != nil {
					return err
				}
				defer rc.Close()
				_, err = io.ReadFull(rc, dst)
				return err
			})
			b.StartTimer()
		}
		b.StopTimer()
		b.ReportMetric(float64(raw)/float64(ours), "x-raw")
	})
}

// parallelGet reads key into dst in ranges of rangeSize, n at a time.
func parallelGet(ctx context.Context, rg checkpoint.RangeGetter, key string, dst []byte, rangeSize, n int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(n)
	for off := 0; off < len(dst); off += rangeSize {
		part := dst[off:min(off+rangeSize, len(dst))]
		g.Go(func() error {
			rc, err := rg.GetRange(ctx, key, int64(off), int64(len(part)))
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.ReadFull(rc, part)
			return err
		})
	}
	return g.Wait()
}

func timed(b *testing.B, fn func() error) time.Duration {
	start := time.Now()
	if err := fn(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
