package s3store_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/s3store"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/objstoretest"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

// BenchmarkS3 compares, per network, the store (storetest.RunBenchmarks)
// and the checkpoint Manager (save: Save+Wait; restore: Latest; with
// Concurrency 8) with a
// plain single PutObject / GetObject of the same bytes through the same
// SDK client. The metric x-raw is raw time / our time: above 1 is faster
// than the plain call.
//
//	go test -run '^$' -bench . -benchtime 1x ./checkpoint/s3store
func BenchmarkS3(b *testing.B) {
	for _, nw := range objstoretest.Networks {
		b.Run(nw.Name, func(b *testing.B) {
			srv := s3fake.Start(b, &s3fake.Options{Netsim: nw.Shape})
			client := newClient(srv.URL)
			raw := &storetest.RawOps{
				Put: func(ctx context.Context, key string, data []byte) error {
					_, err := client.PutObject(ctx, &s3.PutObjectInput{
						Bucket: aws.String(bucket), Key: aws.String("raw/" + key),
						Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
					})
					return err
				},
				Get: func(ctx context.Context, key string) (io.ReadCloser, error) {
					out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("raw/" + key)})
					if err != nil {
						return nil, err
					}
					return out.Body, nil
				},
			}
			var n atomic.Int32
			newStore := func(b *testing.B) checkpoint.Store {
				return newStore(b, srv, &s3store.Options{Prefix: fmt.Sprintf("bench-%d", n.Add(1))})
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

// BenchmarkS3PutNetworkBound is the 256 MiB store Put of BenchmarkS3, in
// both networks, against s3fake.Sink, which discards what it receives:
// it shows what parallel parts gain when the server is not the
// bottleneck (gofakes3 hashes parts one at a time and re-hashes the whole
// object on complete, which caps the speed-up measured against it).
func BenchmarkS3PutNetworkBound(b *testing.B) {
	for _, nw := range objstoretest.Networks {
		b.Run(nw.Name, func(b *testing.B) {
			url := s3fake.StartSink(b, nw.Shape)
			client := newClient(url)
			s, err := s3store.New(client, bucket, nil)
			if err != nil {
				b.Fatal(err)
			}
			objstoretest.BenchPutVsRaw(b, s, 256<<20, func(ctx context.Context, data []byte) error {
				_, err := client.PutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String(bucket), Key: aws.String("raw"),
					Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
				})
				return err
			})
		})
	}
}
