package gcsstore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"google.golang.org/api/option"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/gcsstore"
)

// emulator starts fake-gcs-server on loopback with a bucket, standing in
// for GCS so that the examples run anywhere.
func emulator() *fakestorage.Server {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Port: 0})
	if err != nil {
		log.Fatal(err)
	}
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "my-checkpoints"})
	return srv
}

// New takes a client you configured yourself. On GCS that is
// storage.NewClient(ctx) with Application Default Credentials; here it
// points at an emulator, which needs JSON reads.
func ExampleNew() {
	srv := emulator()
	defer srv.Stop()
	ctx := context.Background()

	client, err := storage.NewClient(ctx,
		option.WithEndpoint(srv.URL()+"/storage/v1/"),
		option.WithoutAuthentication(),
		storage.WithJSONReads())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	store, err := gcsstore.New(client, "my-checkpoints", &gcsstore.Options{Prefix: "jobs/llm"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.PutIfAbsent(ctx, "000000000100/MANIFEST.json", strings.NewReader(`{"step":100}`), 12); err != nil {
		log.Fatal(err)
	}
	rc, err := store.Get(ctx, "000000000100/MANIFEST.json")
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	fmt.Println(string(b))

	// Object names in the bucket carry the prefix.
	obj, _ := srv.GetObject("my-checkpoints", "jobs/llm/000000000100/MANIFEST.json")
	fmt.Println(obj.Name)
	// Output:
	// {"step":100}
	// jobs/llm/000000000100/MANIFEST.json
}

// A URL names the bucket, a prefix and, for an emulator, its endpoint.
// Without endpoint, the client uses Application Default Credentials (or
// STORAGE_EMULATOR_HOST when set).
func ExampleOpenURL() {
	srv := emulator()
	defer srv.Stop()
	ctx := context.Background()

	store, err := checkpoint.Open(ctx, "gs://my-checkpoints/jobs/llm?endpoint="+srv.URL())
	if err != nil {
		log.Fatal(err)
	}
	defer store.(io.Closer).Close()

	if err := store.Put(ctx, "000000000100/model.bin", strings.NewReader("weights"), 7); err != nil {
		log.Fatal(err)
	}
	objs, err := store.List(ctx, "000000000100/")
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range objs {
		fmt.Println(o.Key, o.Size)
	}
	// Output:
	// 000000000100/model.bin 7
}
