//go:build amd64 && !purego

package checkpoint

import "golang.org/x/sys/cpu"

// haveCRCFold reports whether crcFold can run here: AVX-512 (F and VL for
// the 512- and 128-bit forms), VPCLMULQDQ, and SSE 4.2 for the final CRC32
// instructions. x/sys/cpu also checks that the OS saves the AVX-512 state.
var haveCRCFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ &&
	cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42 && cpu.X86.HasAVX

// crcFold returns the CRC-32C of p, not inverted: crc is the
// (non-inverted) CRC of the bytes before p. len(p) must be at least 256
// and a multiple of 16. Implemented in crc_amd64.s.
//
//go:noescape
func crcFold(crc uint32, p []byte) uint32
