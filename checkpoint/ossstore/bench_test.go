package ossstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/ossstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/netsim"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

// networks are the two settings every benchmark runs in: loopback as is
// (the cost of our code, and of gofakes3), and a shaped network where one
// connection gets 100 MB/s and every request pays 20 ms (where parallel
// parts and ranges pay off).
var networks = []struct {
	name  string
	shape netsim.Options
	sizes []int
}{
	{"direct", netsim.Options{}, []int{64 << 20, 256 << 20}},
	{"100MBps-20ms", netsim.Options{BytesPerSecond: 100e6, Latency: 20 * time.Millisecond}, []int{256 << 20}},
}

// BenchmarkOSS compares, per network, the store (storetest.RunBenchmarks)
// and the checkpoint Manager (save: Save+Wait; restore: Latest; with
// Concurrency 8) with a
// plain single PutObject / GetObject of the same bytes through the same
// SDK client (the OSS SDK, against gofakes3 speaking the OSS dialect). The metric x-raw is raw time / our time: above 1 is faster
// than the plain call.
//
//	go test -run '^$' -bench . -benchtime 1x ./checkpoint/ossstore
func BenchmarkOSS(b *testing.B) {
	for _, nw := range networks {
		b.Run(nw.name, func(b *testing.B) {
			srv := s3fake.Start(b, &s3fake.Options{Dialect: s3fake.OSS, Netsim: nw.shape})
			bkt, err := newClient(b, srv.URL).Bucket(bucket)
			if err != nil {
				b.Fatal(err)
			}
			raw := &storetest.RawOps{
				Put: func(ctx context.Context, key string, data []byte) error {
					return bkt.PutObject("raw/"+key, bytes.NewReader(data), oss.WithContext(ctx))
				},
				Get: func(ctx context.Context, key string) (io.ReadCloser, error) {
					return bkt.GetObject("raw/"+key, oss.WithContext(ctx))
				},
			}
			var n atomic.Int32
			newStore := func(b *testing.B) checkpoint.Store {
				return newStore(b, srv, &ossstore.Options{Prefix: fmt.Sprintf("bench-%d", n.Add(1))})
			}
			b.Run("Store", func(b *testing.B) {
				storetest.RunBenchmarks(b, newStore, &storetest.BenchOptions{Sizes: nw.sizes, Raw: raw})
			})
			b.Run("Manager", func(b *testing.B) {
				for _, size := range nw.sizes {
					benchManager(b, newStore, size, raw)
				}
			})
		})
	}
}

// managerConcurrency matches the store's default: the Manager then keeps
// as many ranges in flight on restore as the store does on Get.
const managerConcurrency = 8

// benchManager measures a checkpoint of one part of size bytes saved and
// restored through the Manager, against the raw single-request operations.
func benchManager(b *testing.B, newStore func(*testing.B) checkpoint.Store, size int, raw *storetest.RawOps) {
	ctx := context.Background()
	data := randomBytes(size)
	name := fmt.Sprintf("%dMiB", size>>20)
	b.Run("Save/"+name, func(b *testing.B) {
		m, err := checkpoint.NewManager(newStore(b), &checkpoint.ManagerOptions{Keep: 1, Concurrency: managerConcurrency})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(ctx)
		var ours, base time.Duration
		b.SetBytes(int64(size))
		b.ResetTimer()
		for i := range b.N {
			start := time.Now()
			up, err := m.Save(ctx, int64(i+1), checkpoint.Bytes("model.bin", data))
			if err == nil {
				err = up.Wait(ctx)
			}
			if err != nil {
				b.Fatalf("Save: %v", err)
			}
			ours += time.Since(start)
			b.StopTimer()
			start = time.Now()
			if err := raw.Put(ctx, "mgr-model.bin", data); err != nil {
				b.Fatalf("raw put: %v", err)
			}
			base += time.Since(start)
			b.StartTimer()
		}
		b.StopTimer()
		b.ReportMetric(float64(base)/float64(ours), "x-raw")
	})
	b.Run("Restore/"+name, func(b *testing.B) {
		m, err := checkpoint.NewManager(newStore(b), &checkpoint.ManagerOptions{Concurrency: managerConcurrency})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(ctx)
		up, err := m.Save(ctx, 1, checkpoint.Bytes("model.bin", data))
		if err == nil {
			err = up.Wait(ctx)
		}
		if err == nil {
			err = raw.Put(ctx, "mgr-restore.bin", data)
		}
		if err != nil {
			b.Fatal(err)
		}
		var ours, base time.Duration
		b.SetBytes(int64(size))
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			cp, err := m.Latest(ctx)
			if err != nil {
				b.Fatalf("Latest: %v", err)
			}
			if got, _ := cp.ReadPart(ctx, "model.bin"); len(got) != size {
				b.Fatalf("restored %d bytes, want %d", len(got), size)
			}
			ours += time.Since(start)
			b.StopTimer()
			start = time.Now()
			// Into fresh memory, as the Manager's restore does.
			rc, err := raw.Get(ctx, "mgr-restore.bin")
			if err == nil {
				_, err = io.ReadFull(rc, make([]byte, size))
				rc.Close()
			}
			if err != nil {
				b.Fatalf("raw get: %v", err)
			}
			base += time.Since(start)
			b.StartTimer()
		}
		b.StopTimer()
		b.ReportMetric(float64(base)/float64(ours), "x-raw")
	})
}

// BenchmarkOSSPutNetworkBound is the 256 MiB store Put of BenchmarkOSS, in
// both networks, against s3fake.Sink, which discards what it receives:
// it shows what parallel parts gain when the server is not the
// bottleneck (gofakes3 hashes parts one at a time and re-hashes the whole
// object on complete, which caps the speed-up measured against it).
func BenchmarkOSSPutNetworkBound(b *testing.B) {
	for _, nw := range networks {
		b.Run(nw.name, func(b *testing.B) {
			url := s3fake.StartSink(b, nw.shape)
			client := newClient(b, url)
			s, err := ossstore.New(client, bucket, nil)
			if err != nil {
				b.Fatal(err)
			}
			bkt := s.Bucket()
			benchPutVsRaw(b, s, 256<<20, func(ctx context.Context, data []byte) error {
				return bkt.PutObject("raw", bytes.NewReader(data), oss.WithContext(ctx))
			})
		})
	}
}

func benchPutVsRaw(b *testing.B, s checkpoint.Store, size int, raw func(context.Context, []byte) error) {
	ctx := context.Background()
	data := randomBytes(size)
	var ours, base time.Duration
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := s.Put(ctx, "obj", bytes.NewReader(data), int64(size)); err != nil {
			b.Fatalf("Put: %v", err)
		}
		ours += time.Since(start)
		b.StopTimer()
		start = time.Now()
		if err := raw(ctx, data); err != nil {
			b.Fatalf("raw put: %v", err)
		}
		base += time.Since(start)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(base)/float64(ours), "x-raw")
}
