package gcsstore

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func TestCombined(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	// Many pieces, as a composite upload combines them.
	var ps []piece
	off := 0
	for _, n := range []int{7, 100_000, 1, 256 << 10, 0, 999_999} {
		ps = append(ps, piece{size: int64(n), crc: crc32.Checksum(buf[off:off+n], castagnoli)})
		off += n
	}
	if got, want := combined(ps), crc32.Checksum(buf[:off], castagnoli); got.crc != want || got.size != int64(off) {
		t.Errorf("combined = %08x/%d, want %08x/%d", got.crc, got.size, want, off)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "16M": 16 << 20, "16MiB": 16 << 20, "2k": 2 << 10, "1G": 1 << 30, "-1": -1, "3KB": 3 << 10} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "M", "-2", "-1M", "1.5M", "99999999999G"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}
