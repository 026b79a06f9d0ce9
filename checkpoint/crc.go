package checkpoint

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// foldMin is the length from which crcUpdate hands the bulk of a buffer to
// crcFold, where the CPU has one.
const foldMin = 256

// crcUpdate returns the CRC-32C of p appended to bytes whose CRC-32C is
// crc (crc32.Update with the Castagnoli table). On CPUs with AVX-512 and
// VPCLMULQDQ it folds 256 bytes per step with carry-less multiplication,
// about four times as fast as the standard library's CRC32 instruction
// loop; elsewhere it is crc32.Update.
func crcUpdate(crc uint32, p []byte) uint32 {
	if haveCRCFold && len(p) >= foldMin {
		n := len(p) &^ 15
		crc = ^crcFold(^crc, p[:n])
		p = p[n:]
	}
	return crcUpdateGeneric(crc, p)
}

func crcUpdateGeneric(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }
