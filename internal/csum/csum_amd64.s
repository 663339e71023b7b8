#include "textflag.h"

// func sumVector(p *byte, n int) uint64
//
// Four accumulators of eight 32-bit lanes: for each 32-byte block, the low
// and the high 16-bit half of every 32-bit lane are added to separate
// accumulators, so no add carries out of its lane for maxBlock bytes.
TEXT ·sumVector(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPCMPEQD Y15, Y15, Y15
	VPSRLD $16, Y15, Y15 // 0x0000FFFF in every lane

loop:
	CMPQ CX, $64
	JB   reduce
	VMOVDQU (SI), Y4
	VMOVDQU 32(SI), Y5
	VPAND   Y15, Y4, Y6
	VPSRLD  $16, Y4, Y4
	VPADDD  Y6, Y0, Y0
	VPADDD  Y4, Y1, Y1
	VPAND   Y15, Y5, Y7
	VPSRLD  $16, Y5, Y5
	VPADDD  Y7, Y2, Y2
	VPADDD  Y5, Y3, Y3
	ADDQ    $64, SI
	SUBQ    $64, CX
	JMP     loop

reduce:
	// Widen every lane to 64 bits before adding them up.
	VEXTRACTI128 $1, Y0, X4
	VPMOVZXDQ    X0, Y8
	VPMOVZXDQ    X4, Y9
	VPADDQ       Y9, Y8, Y8
	VEXTRACTI128 $1, Y1, X4
	VPMOVZXDQ    X1, Y9
	VPADDQ       Y9, Y8, Y8
	VPMOVZXDQ    X4, Y9
	VPADDQ       Y9, Y8, Y8
	VEXTRACTI128 $1, Y2, X4
	VPMOVZXDQ    X2, Y9
	VPADDQ       Y9, Y8, Y8
	VPMOVZXDQ    X4, Y9
	VPADDQ       Y9, Y8, Y8
	VEXTRACTI128 $1, Y3, X4
	VPMOVZXDQ    X3, Y9
	VPADDQ       Y9, Y8, Y8
	VPMOVZXDQ    X4, Y9
	VPADDQ       Y9, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPADDQ       X9, X8, X8
	VPSHUFD      $0x4E, X8, X9
	VPADDQ       X9, X8, X8
	VMOVQ        X8, AX
	VZEROUPPER
	MOVQ AX, ret+16(FP)
	RET
