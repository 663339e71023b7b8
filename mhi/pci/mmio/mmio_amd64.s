// Register accessors for amd64. A plain MOV to uncached (UC) MMIO is one
// PCIe transaction; x86 keeps stores in order and does not reorder UC
// accesses with earlier write-back stores, so no fence is needed: being an
// out-of-line call is what stops the compiler (cf. Linux
// arch/x86/include/asm/barrier.h, where dma_wmb is barrier()).

#include "textflag.h"

// func Read32(addr uintptr) uint32
TEXT ·Read32(SB), NOSPLIT, $0-12
	MOVQ addr+0(FP), AX
	MOVL (AX), BX
	MOVL BX, ret+8(FP)
	RET

// func Write32(addr uintptr, v uint32)
TEXT ·Write32(SB), NOSPLIT, $0-12
	MOVQ addr+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET

// func Read64(addr uintptr) uint64
TEXT ·Read64(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ (AX), BX
	MOVQ BX, ret+8(FP)
	RET

// func Write64(addr uintptr, v uint64)
TEXT ·Write64(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

// func DMAWriteBarrier()
TEXT ·DMAWriteBarrier(SB), NOSPLIT, $0-0
	RET

// func DMAReadBarrier()
TEXT ·DMAReadBarrier(SB), NOSPLIT, $0-0
	RET
