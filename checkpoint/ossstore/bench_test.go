package ossstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/ossstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/objstoretest"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

// BenchmarkOSS compares, per network, the store (storetest.RunBenchmarks)
// and the checkpoint Manager (save: Save+Wait; restore: Latest; with
// Concurrency 8) with a
// plain single PutObject / GetObject of the same bytes through the same
// SDK client (the OSS SDK, against gofakes3 speaking the OSS dialect). The metric x-raw is raw time / our time: above 1 is faster
// than the plain call.
//
//	go test -run '^$' -bench . -benchtime 1x ./checkpoint/ossstore
func BenchmarkOSS(b *testing.B) {
	for _, nw := range objstoretest.Networks {
		b.Run(nw.Name, func(b *testing.B) {
			srv := s3fake.Start(b, &s3fake.Options{Dialect: s3fake.OSS, Netsim: nw.Shape})
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
				storetest.RunBenchmarks(b, newStore, &storetest.BenchOptions{Sizes: nw.Sizes, Raw: raw})
			})
			b.Run("Manager", func(b *testing.B) {
				for _, size := range nw.Sizes {
					objstoretest.BenchManager(b, newStore, size, raw)
				}
			})
		})
	}
}

// BenchmarkOSSPutNetworkBound is the 256 MiB store Put of BenchmarkOSS, in
// both networks, against s3fake.Sink, which discards what it receives:
// it shows what parallel parts gain when the server is not the
// bottleneck (gofakes3 hashes parts one at a time and re-hashes the whole
// object on complete, which caps the speed-up measured against it).
func BenchmarkOSSPutNetworkBound(b *testing.B) {
	for _, nw := range objstoretest.Networks {
		b.Run(nw.Name, func(b *testing.B) {
			url := s3fake.StartSink(b, nw.Shape)
			client := newClient(b, url)
			s, err := ossstore.New(client, bucket, nil)
			if err != nil {
				b.Fatal(err)
			}
			bkt := s.Bucket()
			objstoretest.BenchPutVsRaw(b, s, 256<<20, func(ctx context.Context, data []byte) error {
				return bkt.PutObject("raw", bytes.NewReader(data), oss.WithContext(ctx))
			})
		})
	}
}
