package checkpoint

import (
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestCRCUpdate checks crcUpdate against hash/crc32 for every length up to
// a few folding blocks, at every alignment mod 8, from random starting
// CRCs, and for large buffers.
func TestCRCUpdate(t *testing.T) {
	if !haveCRCFold {
		t.Log("no AVX-512 VPCLMULQDQ here: crcUpdate is crc32.Update")
	}
	r := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for n := range 2200 {
		for off := range 8 {
			p := data[off : off+n]
			init := r.Uint32()
			if got, want := crcUpdate(init, p), crc32.Update(init, castagnoli, p); got != want {
				t.Fatalf("len %d, offset %d, crc %08x: got %08x, want %08x", n, off, init, got, want)
			}
		}
	}
	for _, n := range []int{4096, 1 << 20, 1<<20 + 13, 3<<20 - 5} {
		if got, want := crcUpdate(0, data[5:5+n]), crc32.Checksum(data[5:5+n], castagnoli); got != want {
			t.Fatalf("len %d: got %08x, want %08x", n, got, want)
		}
	}
	// Pieces hashed one after another give the CRC of the whole.
	var sum uint32
	for off := 0; off < len(data); {
		n := min(len(data)-off, r.IntN(70000))
		sum = crcUpdate(sum, data[off:off+n])
		off += n
	}
	if want := crc32.Checksum(data, castagnoli); sum != want {
		t.Fatalf("piecewise: got %08x, want %08x", sum, want)
	}
	// One flipped bit anywhere changes the CRC.
	for range 200 {
		i, bit := r.IntN(len(data)), byte(1)<<r.IntN(8)
		before := crcUpdate(0, data)
		data[i] ^= bit
		after := crcUpdate(0, data)
		data[i] ^= bit
		if before == after {
			t.Fatalf("flipping bit %d of byte %d left the CRC at %08x", bits.TrailingZeros8(bit), i, after)
		}
	}
}

func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 300), uint8(0))
	f.Add(uint32(0xdeadbeef), make([]byte, 1000), uint8(3))
	f.Fuzz(func(t *testing.T, init uint32, p []byte, off uint8) {
		p = p[min(int(off), len(p)):]
		if got, want := crcUpdate(init, p), crc32.Update(init, castagnoli, p); got != want {
			t.Fatalf("len %d, crc %08x: got %08x, want %08x", len(p), init, got, want)
		}
	})
}

// TestCRCFoldConstants derives the folding constants of crc_amd64.s:
// bit-reflected x^(D+32) mod P and x^(D-32) mod P, shifted left by one,
// for fold distances D of 2048, 512 and 128 bits. The same formula gives
// the standard library's constants for the IEEE polynomial.
func TestCRCFoldConstants(t *testing.T) {
	k := func(n int, poly uint64) uint64 {
		r := uint64(1)
		for range n {
			r <<= 1
			if r&(1<<32) != 0 {
				r ^= poly
			}
		}
		return uint64(bits.Reverse32(uint32(r))) << 1
	}
	const ieee, castagnoli = 0x104c11db7, 0x11edc6f41
	for _, c := range []struct {
		poly   uint64
		d      int
		k1, k2 uint64
	}{
		{ieee, 512, 0x154442bd4, 0x1c6e41596}, // hash/crc32's r2r1
		{ieee, 128, 0x1751997d0, 0x0ccaa009e}, // and r4r3
		{castagnoli, 2048, 0xdcb17aa4, 0xb9e02b86},
		{castagnoli, 512, 0x740eef02, 0x9e4addf8},
		{castagnoli, 128, 0xf20c0dfe, 0x14cd00bd6},
	} {
		if k1, k2 := k(c.d+32, c.poly), k(c.d-32, c.poly); k1 != c.k1 || k2 != c.k2 {
			t.Errorf("poly %#x, D %d: derived %#x, %#x; table has %#x, %#x", c.poly, c.d, k1, k2, c.k1, c.k2)
		}
	}
}
