package gcsstore_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/gcsstore"
	"github.com/spotsafe/spotsafe/internal/netsim"
)

func open(t *testing.T, rawURL string) *gcsstore.Store {
	t.Helper()
	s, err := checkpoint.Open(context.Background(), rawURL)
	require.NoError(t, err)
	gs, ok := s.(*gcsstore.Store)
	require.True(t, ok, "gs:// opens a *gcsstore.Store, got %T", s)
	c, ok := s.(io.Closer)
	require.True(t, ok, "the store owns its client and must be closable")
	t.Cleanup(func() { _ = c.Close() })
	return gs
}

func TestOpenURLWithEndpoint(t *testing.T) {
	f := newFake(t, netsim.Options{})
	ctx := context.Background()
	for _, ep := range []string{f.URL(), f.URL() + "/", f.URL() + "/storage/v1/"} {
		s := open(t, "gs://"+bucket+"/runs/a?endpoint="+ep)
		assert.Equal(t, bucket, s.Bucket())
		assert.Equal(t, "runs/a/", s.Prefix())
		require.NoError(t, s.Put(ctx, "k", strings.NewReader("v"), 1))
		assert.Equal(t, "v", string(get(t, s, "k")))
		_, ok := f.content(t, "runs/a/k")
		assert.True(t, ok, "the object lands under the URL's prefix")
	}
}

func TestOpenURLOptions(t *testing.T) {
	f := newFake(t, netsim.Options{})
	var composes atomic.Int64
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if _, ok := composeTarget(r); ok {
			composes.Add(1)
		}
		return false
	})
	s := open(t, "gs://"+bucket+"?endpoint="+f.URL()+"&parallel_threshold=1M&part_size=256KiB&concurrency=2&chunk_size=512k")
	assert.Empty(t, s.Prefix())
	want := data(20, 2<<20)
	require.NoError(t, s.Put(context.Background(), "big", bytes.NewReader(want), int64(len(want))))
	assert.Equal(t, want, get(t, s, "big"))
	assert.EqualValues(t, 1, composes.Load(), "parallel_threshold=1M makes 2 MiB a composite upload")

	off := open(t, "gs://"+bucket+"?endpoint="+f.URL()+"&parallel_threshold=-1")
	require.NoError(t, off.Put(context.Background(), "big2", bytes.NewReader(want), int64(len(want))))
	assert.EqualValues(t, 1, composes.Load(), "parallel_threshold=-1 disables composite uploads")
}

func TestOpenURLEmulatorHostEnv(t *testing.T) {
	f := newFake(t, netsim.Options{})
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(f.URL(), "http://"))
	s := open(t, "gs://"+bucket+"/env")
	require.NoError(t, s.Put(context.Background(), "k", strings.NewReader("v"), 1))
	assert.Equal(t, "v", string(get(t, s, "k")))
	_, ok := f.content(t, "env/k")
	assert.True(t, ok)
}

func TestOpenURLRejectsBadURLs(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{
		"gs://",
		"gs:///prefix",
		"gs://UPPER/x",
		"gs://ab",
		"gs://user:pw@bucket/x",
		"gs://bucket/x#frag",
		"gs://bucket/a b",
		"gs://bucket?bogus=1",
		"gs://bucket?endpoint=ftp://x",
		"gs://bucket?endpoint=localhost:4443",
		"gs://bucket?endpoint=http://a&endpoint=http://b",
		"gs://bucket?chunk_size=big",
		"gs://bucket?part_size=-5",
		"gs://bucket?concurrency=0",
		"gs://bucket?concurrency=x",
	} {
		s, err := checkpoint.Open(ctx, u)
		assert.Error(t, err, "%s", u)
		assert.Nil(t, s, "%s", u)
	}
}
