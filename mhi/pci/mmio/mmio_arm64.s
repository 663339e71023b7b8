// Register accessors for arm64, ordered like Linux readl/writel
// (arch/arm64/include/asm/io.h): a write is DMB OSHST then STR, so DMA
// memory written before it is visible to the device first; a read is LDR
// then DMB OSHLD, so DMA memory read after it is not read early. DMB option
// encodings (Arm ARM C6.2.81): OSHLD = 1, OSHST = 2.

#include "textflag.h"

// func Read32(addr uintptr) uint32
TEXT ·Read32(SB), NOSPLIT, $0-12
	MOVD addr+0(FP), R0
	MOVWU (R0), R1
	DMB $1
	MOVW R1, ret+8(FP)
	RET

// func Write32(addr uintptr, v uint32)
TEXT ·Write32(SB), NOSPLIT, $0-12
	MOVD addr+0(FP), R0
	MOVWU v+8(FP), R1
	DMB $2
	MOVW R1, (R0)
	RET

// func Read64(addr uintptr) uint64
TEXT ·Read64(SB), NOSPLIT, $0-16
	MOVD addr+0(FP), R0
	MOVD (R0), R1
	DMB $1
	MOVD R1, ret+8(FP)
	RET

// func Write64(addr uintptr, v uint64)
TEXT ·Write64(SB), NOSPLIT, $0-16
	MOVD addr+0(FP), R0
	MOVD v+8(FP), R1
	DMB $2
	MOVD R1, (R0)
	RET

// func DMAWriteBarrier()
TEXT ·DMAWriteBarrier(SB), NOSPLIT, $0-0
	DMB $2
	RET

// func DMAReadBarrier()
TEXT ·DMAReadBarrier(SB), NOSPLIT, $0-0
	DMB $1
	RET
