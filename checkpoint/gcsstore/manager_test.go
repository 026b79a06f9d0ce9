package gcsstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/gcsstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/netsim"
)

// TestManager runs the Manager's whole cycle (save, restore, retention,
// racing writers, corrupt fallback, failed save) on GCS, with thresholds
// small enough that the suite's 1 MiB part goes up as a composite upload.
func TestManager(t *testing.T) {
	f := newFake(t, netsim.Options{})
	client := f.client(t)
	var n atomic.Int64
	storetest.RunManagerTests(t, func(t *testing.T) checkpoint.Store {
		s, err := gcsstore.New(client, bucket, &gcsstore.Options{
			Prefix:    fmt.Sprintf("manager/%04d", n.Add(1)),
			ChunkSize: 256 << 10, ParallelThreshold: 512 << 10, PartSize: 256 << 10, Concurrency: 4,
		})
		require.NoError(t, err)
		return s
	})
	f.assertNoTemporaries(t)
}

// The server dies in the middle of a checkpoint's upload: the previous
// checkpoint restores, the interrupted step never commits, and once the
// server is back the next save works.
func TestManagerServerKilledMidSave(t *testing.T) {
	f := newFake(t, netsim.Options{})
	opts := small()
	opts.RetryTimeout = 500 * time.Millisecond
	s := f.store(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := checkpoint.NewManager(s, &checkpoint.ManagerOptions{Prefix: "job", Attempts: 2, RangeSize: 256 << 10})
	require.NoError(t, err)
	defer func() { assert.NoError(t, m.Close(context.Background())) }()

	state := func(step int) map[string][]byte {
		return map[string][]byte{
			"model.bin": data(uint64(step), 3<<20), // composite
			"optim.bin": data(uint64(step+100), 700<<10),
			"meta.json": fmt.Appendf(nil, `{"step":%d}`, step),
		}
	}
	save := func(step int, st map[string][]byte) error {
		var parts []checkpoint.Part
		for name, b := range st {
			parts = append(parts, checkpoint.Bytes(name, b))
		}
		u, err := m.Save(ctx, int64(step), parts...)
		if err != nil {
			return err
		}
		return u.Wait(ctx)
	}
	check := func(step int, st map[string][]byte) {
		t.Helper()
		cp, err := m.Latest(ctx)
		require.NoError(t, err)
		require.EqualValues(t, step, cp.Step)
		for name, want := range st {
			got, err := cp.ReadPart(ctx, name)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, got), "part %s", name)
		}
	}
	require.NoError(t, save(1, state(1)))

	var got atomic.Int64
	var once sync.Once
	reached := make(chan struct{})
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if isUpload(r) {
			r.Body = countingBody{ReadCloser: r.Body, n: &got, limit: 2 << 20, once: &once, reached: reached}
		}
		return false
	})
	errc := make(chan error, 1)
	go func() { errc <- save(2, state(2)) }()
	<-reached
	f.kill()
	err = <-errc
	require.Error(t, err)
	var se *checkpoint.SaveError
	assert.ErrorAs(t, err, &se)
	f.setHook(nil)
	f.start()

	check(1, state(1))
	_, err = s.Get(ctx, "job/000000000002/MANIFEST.json")
	assert.ErrorIs(t, err, fs.ErrNotExist, "the interrupted step has no manifest")
	infos, err := m.List(ctx)
	require.NoError(t, err)
	for _, in := range infos {
		if in.Step == 2 {
			assert.NotEqual(t, checkpoint.StatusValid, in.Status)
		}
	}

	require.NoError(t, save(3, state(3)))
	require.NoError(t, m.Flush(ctx))
	check(3, state(3))
	_, err = s.Sweep(ctx, 0)
	require.NoError(t, err)
	f.assertNoTemporaries(t)
}
