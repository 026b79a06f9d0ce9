package objstoretest

import (
	"bytes"
	"testing"
)

func TestRandomBytes(t *testing.T) {
	a, b := RandomBytes(4096, 7), RandomBytes(4096, 7)
	if len(a) != 4096 || !bytes.Equal(a, b) {
		t.Fatalf("same n and seed must give the same %d bytes", len(a))
	}
	if bytes.Equal(a, RandomBytes(4096, 8)) {
		t.Fatal("another seed gave the same bytes")
	}
	if bytes.Count(a, a[:1]) > 100 {
		t.Fatal("bytes are not spread")
	}
}
