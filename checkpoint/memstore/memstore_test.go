package memstore_test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunConformance(t, func(t *testing.T) checkpoint.Store { return memstore.New() })
}

func TestOpenSharesByName(t *testing.T) {
	ctx := context.Background()
	a, err := checkpoint.Open(ctx, "mem://shared-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	b, err := checkpoint.Open(ctx, "mem://shared-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	other, err := checkpoint.Open(ctx, "mem://other-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, "k", bytes.NewReader([]byte("v")), 1); err != nil {
		t.Fatal(err)
	}
	if objs, err := b.List(ctx, ""); err != nil || len(objs) != 1 {
		t.Fatalf("second Open of the same name lists %v, %v; want the object written through the first", objs, err)
	}
	if objs, err := other.List(ctx, ""); err != nil || len(objs) != 0 {
		t.Fatalf("another name lists %v, %v; want nothing", objs, err)
	}
}

// BenchmarkStore compares memstore with copying the bytes into a map.
func BenchmarkStore(b *testing.B) {
	var mu sync.Mutex
	raw := make(map[string][]byte)
	storetest.RunBenchmarks(b, func(b *testing.B) checkpoint.Store { return memstore.New() }, &storetest.BenchOptions{
		Raw: &storetest.RawOps{
			Put: func(_ context.Context, key string, data []byte) error {
				c := bytes.Clone(data)
				mu.Lock()
				raw[key] = c
				mu.Unlock()
				return nil
			},
			Get: func(_ context.Context, key string) (io.ReadCloser, error) {
				mu.Lock()
				defer mu.Unlock()
				return io.NopCloser(bytes.NewReader(raw[key])), nil
			},
		},
	})
}
