package crc32c_test

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/spotsafe/spotsafe/internal/crc32c"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func TestCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, split := range [][2]int{{0, 0}, {0, 5}, {5, 0}, {1, 1}, {1000, 1}, {1, 1000}, {1 << 20, 2 << 20}, {12345, 3<<20 - 12345}} {
		a, b := buf[:split[0]], buf[split[0]:split[0]+split[1]]
		want := crc32.Checksum(buf[:split[0]+split[1]], castagnoli)
		got := crc32c.Combine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), int64(len(b)))
		if got != want {
			t.Errorf("combine(%d, %d) = %08x, want %08x", len(a), len(b), got, want)
		}
	}
}
