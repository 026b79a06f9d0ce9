package checkpoint_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/filestore"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./checkpoint/
// Every benchmark times the raw operation on the same bytes in the same
// loop, interleaved, and reports the ratio of the best (minimum) times, so
// that the machine's speed and other load on it cancel out.

// best keeps the minimum of the durations it sees.
type best time.Duration

func (b *best) add(d time.Duration) {
	if *b == 0 || d < time.Duration(*b) {
		*b = best(d)
	}
}

func (b best) seconds() float64 { return time.Duration(b).Seconds() }

const benchSize = 256 << 20

func benchManager(b *testing.B, st checkpoint.Store, noCRC bool) *checkpoint.Manager {
	b.Helper()
	opts := &checkpoint.ManagerOptions{Keep: 1}
	if noCRC {
		checkpoint.DisableCRC(opts)
	}
	m, err := checkpoint.NewManager(st, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// benchSave saves data as step and returns the whole time (capture,
// upload, commit) and the upload's share (without the capture).
func benchSave(b *testing.B, m *checkpoint.Manager, step int64, data []byte) (total, upload time.Duration) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	u, err := m.Save(ctx, step, checkpoint.Bytes("state.bin", data))
	if err != nil {
		b.Fatal(err)
	}
	if err := u.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	if err := m.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return d, d - u.CaptureTime()
}

// BenchmarkCapture: how long Save blocks the caller for 256 MiB of bytes,
// against a plain copy of the same bytes into a buffer.
func BenchmarkCapture(b *testing.B) {
	ctx := context.Background()
	data := payload(1, benchSize)
	dst := make([]byte, benchSize)
	copy(dst, data)
	st, err := filestore.New(b.TempDir(), &filestore.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m := benchManager(b, st, false)
	benchSave(b, m, 0, data) // staging memory is pooled from here on
	b.SetBytes(benchSize)
	var raw, capture best
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		t0 := time.Now()
		copy(dst, data)
		raw.add(time.Since(t0))
		b.StartTimer()
		t0 = time.Now()
		u, err := m.Save(ctx, int64(i+1), checkpoint.Bytes("state.bin", data))
		capture.add(time.Since(t0))
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if err := u.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		m.Flush(ctx)
		b.StartTimer()
	}
	b.ReportMetric(capture.seconds()/raw.seconds(), "capture/copy")
	b.ReportMetric(benchSize/raw.seconds()/1e6, "copy-MB/s")
}

// BenchmarkSave: a whole save of 256 MiB to filestore (capture, upload,
// fsync, commit), against os.WriteFile-and-fsync of the same bytes in the
// same directory, against the same save with CRC-32C off, and against the
// same save through a store that hides the part reader's WriteTo (so
// filestore copies through its 1 MiB buffer instead of writing the staged
// memory directly).
func BenchmarkSave(b *testing.B) {
	data := payload(2, benchSize)
	dir := b.TempDir()
	st, err := filestore.New(filepath.Join(dir, "store"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m := benchManager(b, st, false)
	stNoCRC, err := filestore.New(filepath.Join(dir, "nocrc"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer stNoCRC.Close()
	noCRC := benchManager(b, stNoCRC, true)
	stCopy, err := filestore.New(filepath.Join(dir, "copy"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer stCopy.Close()
	viaBuffer := benchManager(b, copyingStore{stCopy}, false)
	benchSave(b, m, 0, data)
	benchSave(b, noCRC, 0, data)
	benchSave(b, viaBuffer, 0, data)
	b.SetBytes(benchSize)
	var raw, save, upload, saveNoCRC, saveCopy best
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		raw.add(rawWrite(b, filepath.Join(dir, "raw.bin"), data))
		d, _ := benchSave(b, noCRC, int64(i+1), data)
		saveNoCRC.add(d)
		d, _ = benchSave(b, viaBuffer, int64(i+1), data)
		saveCopy.add(d)
		b.StartTimer()
		d, up := benchSave(b, m, int64(i+1), data)
		save.add(d)
		upload.add(up)
	}
	b.ReportMetric(raw.seconds()/save.seconds(), "save/raw-throughput")
	b.ReportMetric(raw.seconds()/upload.seconds(), "upload/raw-throughput")
	b.ReportMetric(100*(save.seconds()/saveNoCRC.seconds()-1), "crc-overhead-%")
	b.ReportMetric(raw.seconds()/saveCopy.seconds(), "save-via-buffer/raw-throughput")
	b.ReportMetric(benchSize/raw.seconds()/1e6, "raw-MB/s")
}

// copyingStore is a filestore whose Put sees only the Read method of its
// source.
type copyingStore struct{ *filestore.Store }

func (s copyingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.Store.Put(ctx, key, struct{ io.Reader }{r}, size)
}

func rawWrite(b *testing.B, path string, data []byte) time.Duration {
	t0 := time.Now()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	os.Remove(path)
	return d
}

// BenchmarkRestore: Latest of a 256 MiB checkpoint from filestore (ranged
// parallel reads, verified) against a plain Get of the object into a new
// buffer, and against Latest with CRC-32C off. The three run in turn, in an
// order that rotates every iteration, each right after a garbage
// collection, so that they all find the same heap; the ratios are of median
// times. Two cases: memory=fresh returns the freed heap to the OS before
// each run, so the bytes land in newly faulted pages, as in a process that
// has just started; memory=recycled lets each run reuse the pages the
// previous one freed. crc-cpu-overhead-% compares the CPU time (user and
// system) of the two Latest calls, which other load on the machine
// disturbs less than their wall time.
func BenchmarkRestore(b *testing.B) {
	ctx := context.Background()
	data := payload(3, benchSize)
	st, err := filestore.New(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m := benchManager(b, st, false)
	noCRC := benchManager(b, st, true)
	benchSave(b, m, 1, data)
	latest := func(m *checkpoint.Manager) {
		cp, err := m.Latest(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if got, _ := cp.ReadPart(ctx, "state.bin"); len(got) != benchSize {
			b.Fatalf("restored %d bytes", len(got))
		}
	}
	raw := func() {
		rc, err := st.Get(ctx, "000000000001/state.bin")
		if err != nil {
			b.Fatal(err)
		}
		defer rc.Close()
		buf := make([]byte, benchSize)
		if _, err := io.ReadFull(rc, buf); err != nil {
			b.Fatal(err)
		}
	}
	for _, fresh := range []bool{true, false} {
		name := "memory=recycled"
		if fresh {
			name = "memory=fresh"
		}
		b.Run(name, func(b *testing.B) {
			ops := []func(){raw, func() { latest(noCRC) }, func() { latest(m) }}
			const opRaw, opNoCRC, opCRC = 0, 1, 2
			var wall, cpu [3][]time.Duration
			b.SetBytes(benchSize)
			b.ResetTimer()
			b.StopTimer()
			for i := range b.N {
				for k := range ops {
					op := (i + k) % len(ops)
					runtime.GC()
					if fresh {
						debug.FreeOSMemory()
					}
					c0, t0 := cpuTime(), time.Now()
					if op == opCRC {
						b.StartTimer()
					}
					ops[op]()
					if op == opCRC {
						b.StopTimer()
					}
					wall[op] = append(wall[op], time.Since(t0))
					cpu[op] = append(cpu[op], cpuTime()-c0)
				}
			}
			runtime.GC()
			b.ReportMetric(median(wall[opRaw]).Seconds()/median(wall[opCRC]).Seconds(), "restore/raw-throughput")
			b.ReportMetric(100*(median(wall[opCRC]).Seconds()/median(wall[opNoCRC]).Seconds()-1), "crc-overhead-%")
			if c := median(cpu[opNoCRC]); c > 0 {
				b.ReportMetric(100*(median(cpu[opCRC]).Seconds()/c.Seconds()-1), "crc-cpu-overhead-%")
			}
			b.ReportMetric(benchSize/median(wall[opRaw]).Seconds()/1e6, "raw-MB/s")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkCRC32C is the checksum's throughput on this machine: spotsafe's
// (AVX-512 folding where the CPU has it) and the standard library's, on
// 1 MiB (the restore's hashing step, in cache) and 64 MiB.
func BenchmarkCRC32C(b *testing.B) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	for _, n := range []int{1 << 20, 64 << 20} {
		data := payload(4, n)
		for _, impl := range []struct {
			name string
			f    func(uint32, []byte) uint32
		}{
			{"spotsafe", checkpoint.CRC32C},
			{"hash-crc32", func(c uint32, p []byte) uint32 { return crc32.Update(c, tab, p) }},
		} {
			b.Run(fmt.Sprintf("%s/%dMiB", impl.name, n>>20), func(b *testing.B) {
				b.SetBytes(int64(n))
				var sum uint32
				for b.Loop() {
					sum = impl.f(sum, data)
				}
				if want := crc32.Checksum(data, tab); impl.f(0, data) != want {
					b.Fatalf("CRC %08x, want %08x", impl.f(0, data), want)
				}
			})
		}
	}
}

// BenchmarkSaveHeap measures the peak heap during a save of S = 256 MiB
// by a fresh Manager (staging not yet pooled: the worst case), over the
// heap before it (which holds the caller's S bytes). The target is at most
// S + 64 MiB.
func BenchmarkSaveHeap(b *testing.B) {
	data := payload(5, benchSize)
	st, err := filestore.New(b.TempDir(), &filestore.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	b.SetBytes(benchSize)
	var worst uint64
	for i := range b.N {
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		m := benchManager(b, st, false)
		stop := make(chan struct{})
		var peak uint64
		var wg sync.WaitGroup
		wg.Go(func() {
			var ms runtime.MemStats
			t := time.NewTicker(2 * time.Millisecond)
			defer t.Stop()
			for {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
		b.StartTimer()
		benchSave(b, m, int64(i+1), data)
		b.StopTimer()
		close(stop)
		wg.Wait()
		m.Close(context.Background())
		if peak > base {
			worst = max(worst, peak-base)
		}
		b.StartTimer()
	}
	over := float64(int64(worst)-benchSize) / (1 << 20)
	b.ReportMetric(over, "heap-over-S-MiB")
	if over > 64 {
		b.Errorf("peak heap during a save of %d MiB was S + %.0f MiB; want at most S + 64 MiB", benchSize>>20, over)
	}
}
