//go:build amd64 && !purego

#include "textflag.h"

// CRC-32C by folding (Intel, "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction", the reflected variant), 512 bits wide.
//
// Each 128-bit lane X of an accumulator stands for bytes of the message;
// folding it D bits forward replaces it by X.lo*k1 xor X.hi*k2, which is
// congruent to X*x^D modulo P, and xors in the data D bits further on.
// The constants are bit-reflected x^(D+32) mod P and x^(D-32) mod P,
// shifted left by one (see crc_test.go, which derives them). What is left
// at the end is one 128-bit value congruent to the whole message, and its
// CRC, taken with the CRC32 instruction, is the message's CRC.

// Fold distance 2048 bits (four 512-bit accumulators), four times over.
DATA k2048<>+0(SB)/8, $0xdcb17aa4
DATA k2048<>+8(SB)/8, $0xb9e02b86
DATA k2048<>+16(SB)/8, $0xdcb17aa4
DATA k2048<>+24(SB)/8, $0xb9e02b86
DATA k2048<>+32(SB)/8, $0xdcb17aa4
DATA k2048<>+40(SB)/8, $0xb9e02b86
DATA k2048<>+48(SB)/8, $0xdcb17aa4
DATA k2048<>+56(SB)/8, $0xb9e02b86
GLOBL k2048<>(SB), RODATA, $64

// Fold distance 512 bits, four times over.
DATA k512<>+0(SB)/8, $0x740eef02
DATA k512<>+8(SB)/8, $0x9e4addf8
DATA k512<>+16(SB)/8, $0x740eef02
DATA k512<>+24(SB)/8, $0x9e4addf8
DATA k512<>+32(SB)/8, $0x740eef02
DATA k512<>+40(SB)/8, $0x9e4addf8
DATA k512<>+48(SB)/8, $0x740eef02
DATA k512<>+56(SB)/8, $0x9e4addf8
GLOBL k512<>(SB), RODATA, $64

// Fold distance 128 bits.
DATA k128<>+0(SB)/8, $0xf20c0dfe
DATA k128<>+8(SB)/8, $0x14cd00bd6
GLOBL k128<>(SB), RODATA, $16

// func crcFold(crc uint32, p []byte) uint32
TEXT ·crcFold(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), X15
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

	// Four accumulators hold the first 256 bytes; the CRC so far is
	// xored into the first 32 bits.
	VPXORQ    Z14, Z14, Z14
	VMOVAPS   X15, X14
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VPXORQ    Z14, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX

	VMOVDQU64 k2048<>+0(SB), Z8

loop256:
	CMPQ       CX, $256
	JB         fold4
	VMOVDQU64  0(SI), Z4
	VMOVDQU64  64(SI), Z5
	VMOVDQU64  128(SI), Z6
	VMOVDQU64  192(SI), Z7
	VPCLMULQDQ $0x00, Z8, Z0, Z9
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x00, Z8, Z1, Z10
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x00, Z8, Z2, Z11
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x00, Z8, Z3, Z12
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGD $0x96, Z4, Z9, Z0
	VPTERNLOGD $0x96, Z5, Z10, Z1
	VPTERNLOGD $0x96, Z6, Z11, Z2
	VPTERNLOGD $0x96, Z7, Z12, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop256

fold4:
	// Fold the four accumulators into Z0.
	VMOVDQU64  k512<>+0(SB), Z8
	VPCLMULQDQ $0x00, Z8, Z0, Z9
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPTERNLOGD $0x96, Z1, Z9, Z0
	VPCLMULQDQ $0x00, Z8, Z0, Z9
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPTERNLOGD $0x96, Z2, Z9, Z0
	VPCLMULQDQ $0x00, Z8, Z0, Z9
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPTERNLOGD $0x96, Z3, Z9, Z0

loop64:
	CMPQ       CX, $64
	JB         fold1
	VMOVDQU64  0(SI), Z4
	VPCLMULQDQ $0x00, Z8, Z0, Z9
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPTERNLOGD $0x96, Z4, Z9, Z0
	ADDQ       $64, SI
	SUBQ       $64, CX
	JMP        loop64

fold1:
	// Fold the four 128-bit lanes of Z0 into X0.
	VEXTRACTI32X4 $1, Z0, X1
	VEXTRACTI32X4 $2, Z0, X2
	VEXTRACTI32X4 $3, Z0, X3
	VMOVDQU       k128<>+0(SB), X8
	VPCLMULQDQ    $0x00, X8, X0, X9
	VPCLMULQDQ    $0x11, X8, X0, X0
	VPTERNLOGD    $0x96, X1, X9, X0
	VPCLMULQDQ    $0x00, X8, X0, X9
	VPCLMULQDQ    $0x11, X8, X0, X0
	VPTERNLOGD    $0x96, X2, X9, X0
	VPCLMULQDQ    $0x00, X8, X0, X9
	VPCLMULQDQ    $0x11, X8, X0, X0
	VPTERNLOGD    $0x96, X3, X9, X0

loop16:
	CMPQ       CX, $16
	JB         done
	VMOVDQU    0(SI), X4
	VPCLMULQDQ $0x00, X8, X0, X9
	VPCLMULQDQ $0x11, X8, X0, X0
	VPTERNLOGD $0x96, X4, X9, X0
	ADDQ       $16, SI
	SUBQ       $16, CX
	JMP        loop16

done:
	// X0 is congruent to the message modulo P: its CRC is the message's.
	VMOVQ   X0, BX
	VPEXTRQ $1, X0, DX
	XORL    AX, AX
	CRC32Q  BX, AX
	CRC32Q  DX, AX
	VZEROUPPER
	MOVL    AX, ret+32(FP)
	RET
