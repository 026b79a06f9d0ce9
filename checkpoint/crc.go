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

// crcCombine returns the CRC-32C of A‖B given crc1 = CRC(A), crc2 = CRC(B)
// and len2 = len(B), so that ranges fetched in parallel can be verified as
// they stream, without a second pass (zlib's crc32_combine).
func crcCombine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	var even, odd [32]uint32
	odd[0] = 0x82f63b78 // reflected Castagnoli polynomial
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // operator for two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd)
		if len2&1 != 0 {
			crc1 = gf2Times(&even, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
		gf2Square(&odd, &even)
		if len2&1 != 0 {
			crc1 = gf2Times(&odd, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
