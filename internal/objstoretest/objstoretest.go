// Package objstoretest holds the test and benchmark harnesses that the S3
// and OSS checkpoint stores run alike against internal/s3fake: the
// server-killed-mid-upload and mid-save scenarios, the Manager
// save/restore benchmark and
// the Put-versus-raw benchmark, with the two network settings they run in.
package objstoretest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
	"github.com/spotsafe/spotsafe/internal/netsim"
	"github.com/spotsafe/spotsafe/internal/s3fake"
)

// RandomBytes returns n pseudo-random bytes, the same for the same n and
// seed.
func RandomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Network is one setting the benchmarks run in.
type Network struct {
	Name  string
	Shape netsim.Options
	Sizes []int // object sizes to measure
}

// Networks are the two settings every benchmark runs in: loopback as is
// (the cost of our code, and of gofakes3), and a shaped network where one
// connection gets 100 MB/s and every request pays 20 ms (where parallel
// parts and ranges pay off).
var Networks = []Network{
	{"direct", netsim.Options{}, []int{64 << 20, 256 << 20}},
	{"100MBps-20ms", netsim.Options{BytesPerSecond: 100e6, Latency: 20 * time.Millisecond}, []int{256 << 20}},
}

// KilledMidSave kills srv while a checkpoint Manager uploads a
// checkpoint's parts: the save must fail without committing, and once the
// server is back a new Manager must restore the previous checkpoint.
// open returns a store on srv under one fixed prefix, with multipart parts
// small enough that a firstSize-byte checkpoint goes up whole and a
// secondSize-byte one takes at least two parts.
func KilledMidSave(t *testing.T, srv *s3fake.Server, open func(t *testing.T) checkpoint.Store, firstSize, secondSize int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := checkpoint.NewManager(open(t), &checkpoint.ManagerOptions{Attempts: 2})
	require.NoError(t, err)
	v1 := RandomBytes(firstSize, 1)
	up, err := m.Save(ctx, 1, checkpoint.Bytes("model.bin", v1), checkpoint.Bytes("opt.bin", v1[:1000]))
	require.NoError(t, err)
	require.NoError(t, up.Wait(ctx))

	var parts atomic.Int32
	srv.OnRequest(func(r *http.Request) {
		if r.URL.Query().Has("partNumber") && parts.Add(1) == 2 {
			srv.Kill()
		}
	})
	up, err = m.Save(ctx, 2, checkpoint.Bytes("model.bin", RandomBytes(secondSize, 2)), checkpoint.Bytes("opt.bin", v1[:2000]))
	require.NoError(t, err)
	require.Error(t, up.Wait(ctx), "the save must fail when the server dies under it")
	require.GreaterOrEqual(t, parts.Load(), int32(2), "the server was not killed mid-upload")
	m.Close(ctx)
	srv.OnRequest(nil)
	srv.Restart(t)

	st := open(t)
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

// ManagerConcurrency matches the stores' default: the Manager then keeps
// as many ranges in flight on restore as the store does on Get.
const ManagerConcurrency = 8

// BenchManager measures a checkpoint of one part of size bytes saved and
// restored through the Manager, against the raw single-request operations,
// and reports raw time / our time as the metric x-raw.
func BenchManager(b *testing.B, newStore func(*testing.B) checkpoint.Store, size int, raw *storetest.RawOps) {
	ctx := context.Background()
	data := RandomBytes(size, 3)
	name := fmt.Sprintf("%dMiB", size>>20)
	b.Run("Save/"+name, func(b *testing.B) {
		m, err := checkpoint.NewManager(newStore(b), &checkpoint.ManagerOptions{Keep: 1, Concurrency: ManagerConcurrency})
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
		m, err := checkpoint.NewManager(newStore(b), &checkpoint.ManagerOptions{Concurrency: ManagerConcurrency})
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

// BenchPutVsRaw measures a store Put of size bytes against raw, one plain
// upload of the same bytes, and reports raw time / our time as x-raw.
func BenchPutVsRaw(b *testing.B, s checkpoint.Store, size int, raw func(context.Context, []byte) error) {
	ctx := context.Background()
	data := RandomBytes(size, 4)
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

// KilledMidUpload kills srv during the third part of a multipart Put of
// newSize bytes on s (a store on srv whose parts are small enough for
// that): the Put must fail, and once the server is back the object must
// not exist while an earlier oldSize-byte object is intact and alone.
func KilledMidUpload(t *testing.T, srv *s3fake.Server, s checkpoint.Store, oldSize, newSize int) {
	ctx := context.Background()
	old := RandomBytes(oldSize, 5)
	require.NoError(t, s.Put(ctx, "0001/state", bytes.NewReader(old), int64(len(old))))

	var parts atomic.Int32
	srv.OnRequest(func(r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Query().Has("partNumber") && parts.Add(1) == 3 {
			srv.Kill()
		}
	})
	data := RandomBytes(newSize, 6)
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "0002/state", bytes.NewReader(data), int64(len(data))) }()
	select {
	case err := <-done:
		require.Error(t, err, "Put must fail when the server dies under it")
		t.Logf("Put after kill: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Put did not return after the server was killed")
	}
	srv.OnRequest(nil)
	srv.Restart(t)

	_, err := s.Get(ctx, "0002/state")
	assert.ErrorIs(t, err, fs.ErrNotExist, "a killed upload must not leave an object")
	rc, err := s.Get(ctx, "0001/state")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(old, got), "the earlier object must be intact")
	objs, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, objs, 1)
	assert.Equal(t, "0001/state", objs[0].Key)
}
