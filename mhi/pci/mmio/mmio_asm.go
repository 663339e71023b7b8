//go:build amd64 || arm64

package mmio

// Read32 loads the little-endian 32-bit register at addr. On arm64 the load
// is followed by DMB OSHLD, so later reads of DMA memory cannot be satisfied
// before it (Linux readl).
//
//go:noescape
func Read32(addr uintptr) uint32

// Write32 stores v to the little-endian 32-bit register at addr. On arm64
// the store is preceded by DMB OSHST, so earlier writes to DMA memory reach
// the device first (Linux writel).
//
//go:noescape
func Write32(addr uintptr, v uint32)

// Read64 loads a 64-bit register as one access. Only use it where the
// device accepts 8-byte accesses; MHI registers are 32-bit.
//
//go:noescape
func Read64(addr uintptr) uint64

// Write64 stores a 64-bit register as one access (see Read64).
//
//go:noescape
func Write64(addr uintptr, v uint64)

// DMAWriteBarrier orders earlier stores to DMA memory before later stores to
// DMA memory or registers, as Linux dma_wmb: the engine calls it between
// filling a ring element and publishing the write pointer. It is a compiler
// barrier on amd64 (x86 keeps stores in order) and DMB OSHST on arm64.
func DMAWriteBarrier()

// DMAReadBarrier orders an earlier load (of a device-written pointer or
// status word) before later loads of the data it guards, as Linux dma_rmb.
// A compiler barrier on amd64, DMB OSHLD on arm64.
func DMAReadBarrier()
