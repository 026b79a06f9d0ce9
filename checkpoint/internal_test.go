package checkpoint

import (
	"bytes"
	"context"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/spotsafe/spotsafe/internal/crc32c"
)

func TestCRCCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := crc32.Checksum(data, castagnoli)
	for range 50 {
		// Split into random pieces and combine their CRCs.
		var sum uint32
		for off := 0; off < len(data); {
			n := min(len(data)-off, 1+r.IntN(300000))
			if r.IntN(10) == 0 {
				n = 0
			}
			sum = crc32c.Combine(sum, crc32.Checksum(data[off:off+n], castagnoli), int64(n))
			off += n
		}
		if sum != want {
			t.Fatalf("combined CRC %08x, want %08x", sum, want)
		}
	}
}

func TestPartReader(t *testing.T) {
	pool := &chunkPool{retain: -1}
	b := &buffer{pool: pool}
	data := make([]byte, 2*chunkSize+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Write(data[:100])
	b.Write(data[100:])
	if crc, err := sourceCRC(context.Background(), b); err != nil || crc != crc32.Checksum(data, castagnoli) {
		t.Fatalf("sourceCRC = %08x, %v", crc, err)
	}
	var counted int64
	newReader := func() *partReader {
		counted = 0
		return &partReader{src: b, size: b.Size(), count: func(n int64) { counted += n }}
	}

	r := newReader()
	got, err := io.ReadAll(struct{ io.Reader }{r})
	if err != nil || !bytes.Equal(got, data) || counted != int64(len(data)) {
		t.Fatalf("Read: %d bytes (counted %d), %v", len(got), counted, err)
	}

	r = newReader()
	var out bytes.Buffer
	if n, err := r.WriteTo(&out); err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) || counted != n {
		t.Fatalf("WriteTo: %d, %v", n, err)
	}

	r = newReader()
	p := make([]byte, 1000)
	if _, err := r.ReadAt(p, chunkSize-500); err != nil || !bytes.Equal(p, data[chunkSize-500:chunkSize+500]) {
		t.Fatalf("ReadAt across chunks: %v", err)
	}
	if _, err := r.Seek(10, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, p); err != nil || !bytes.Equal(p, data[10:1010]) {
		t.Fatalf("Read after Seek: %v", err)
	}
	if n, err := r.ReadAt(p, int64(len(data))-10); n != 10 || err != io.EOF {
		t.Fatalf("ReadAt at the end: %d, %v", n, err)
	}
	if _, err := r.Seek(-1, io.SeekStart); err == nil {
		t.Fatal("negative Seek accepted")
	}

	// Released chunks are reused.
	n := len(b.chunks)
	b.release()
	if len(pool.free) != n {
		t.Fatalf("pool holds %d chunks after release, want %d", len(pool.free), n)
	}
}

func TestStepDir(t *testing.T) {
	for _, step := range []int64{0, 1, 999999999999, 1000000000000, 1<<63 - 1} {
		s := stepDir(step)
		got, ok := parseStepDir(s)
		if !ok || got != step {
			t.Fatalf("parseStepDir(stepDir(%d) = %q) = %d, %v", step, s, got, ok)
		}
	}
	if s := stepDir(42); s != "000000000042" {
		t.Fatalf("stepDir(42) = %q", s)
	}
	for _, s := range []string{"", "42", "00000000004x", "-00000000042", "0000000000042", "+00000000042"} {
		if _, ok := parseStepDir(s); ok {
			t.Fatalf("parseStepDir(%q) accepted", s)
		}
	}
}

func TestBufferFill(t *testing.T) {
	for _, n := range []int{0, 1, chunkSize - 1, chunkSize, 2 * chunkSize, 5*chunkSize + 3, 9 * chunkSize} {
		for _, workers := range []int{1, 2, 3, 8} {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i*31 + i>>13)
			}
			b := &buffer{pool: &chunkPool{retain: -1}}
			b.fill(p, workers)
			got := make([]byte, n+1)
			k, err := b.ReadAt(got, 0)
			if k != n || err != io.EOF || !bytes.Equal(got[:k], p) || b.Size() != int64(n) {
				t.Fatalf("fill(%d bytes, %d workers): read back %d bytes, %v, size %d", n, workers, k, err, b.Size())
			}
			if want := (n + chunkSize - 1) / chunkSize; len(b.chunks) != want {
				t.Fatalf("fill(%d bytes): %d chunks, want %d", n, len(b.chunks), want)
			}
		}
	}
}
