package s3store_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

// TestConformance runs the shared Store suite against gofakes3, each
// subtest under its own prefix of one bucket, with part sizes small enough
// that the large round trips go through multipart uploads and parallel
// ranged reads.
func TestConformance(t *testing.T) {
	srv := s3fake.Start(t, nil)
	var n atomic.Int32
	storetest.RunConformance(t, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small(fmt.Sprintf("conf-%03d", n.Add(1))))
	})
}

// TestManager runs the checkpoint Manager's whole cycle (save, restore,
// retention, racing writers, failed saves) on the S3 store.
func TestManager(t *testing.T) {
	srv := s3fake.Start(t, nil)
	var n atomic.Int32
	storetest.RunManagerTests(t, func(t *testing.T) checkpoint.Store {
		return newStore(t, srv, small(fmt.Sprintf("mgr-%03d", n.Add(1))))
	})
}

// TestManagerServerKilledMidSave kills the server while the Manager uploads
// a checkpoint's parts: the save fails without committing, and once the
// server is back a new Manager restores the previous checkpoint.
func TestManagerServerKilledMidSave(t *testing.T) {
	srv := s3fake.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := checkpoint.NewManager(newStore(t, srv, small("job")), &checkpoint.ManagerOptions{Attempts: 2})
	require.NoError(t, err)
	v1 := randomBytes(7 << 20)
	up, err := m.Save(ctx, 1, checkpoint.Bytes("model.bin", v1), checkpoint.Bytes("opt.bin", v1[:1000]))
	require.NoError(t, err)
	require.NoError(t, up.Wait(ctx))

	var parts atomic.Int32
	srv.OnRequest(func(r *http.Request) {
		if r.URL.Query().Has("partNumber") && parts.Add(1) == 2 {
			srv.Kill()
		}
	})
	up, err = m.Save(ctx, 2, checkpoint.Bytes("model.bin", randomBytes(24<<20)), checkpoint.Bytes("opt.bin", v1[:2000]))
	require.NoError(t, err)
	require.Error(t, up.Wait(ctx), "the save must fail when the server dies under it")
	require.GreaterOrEqual(t, parts.Load(), int32(2), "the server was not killed mid-upload")
	m.Close(ctx)
	srv.OnRequest(nil)
	srv.Restart(t)

	st := newStore(t, srv, small("job"))
	objs, err := st.List(ctx, "")
	require.NoError(t, err)
	for _, o := range objs {
		assert.NotEqual(t, "000000000002/MANIFEST.json", o.Key, "the failed save committed")
	}
	m2, err := checkpoint.NewManager(st, nil)
	require.NoError(t, err)
	defer m2.Close(ctx)
	cp, err := m2.Latest(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), cp.Step)
	got, err := cp.ReadPart(ctx, "model.bin")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(v1, got), "the previous checkpoint must restore intact")
}
