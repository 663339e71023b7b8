//go:build !amd64 && !arm64

package mmio

// The fallback for architectures without assembly here uses sync/atomic.
// Atomic operations are never elided or merged by the compiler and carry at
// least the ordering the barriers below promise (Go's atomics are
// sequentially consistent), so it is correct, only slower than needed: on
// some architectures an atomic store is a locked read-modify-write that also
// reads the register. Registers are little-endian, so big-endian machines
// swap bytes, as Linux readl/writel do.

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

var bigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// ptr turns a register address into a pointer without the uintptr to
// unsafe.Pointer conversion vet rejects: the address is of mmap'ed memory
// the garbage collector does not manage, so there is nothing to keep alive.
func ptr(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// Read32 loads the little-endian 32-bit register at addr.
func Read32(addr uintptr) uint32 {
	v := atomic.LoadUint32((*uint32)(ptr(addr)))
	if bigEndian {
		v = bits.ReverseBytes32(v)
	}
	return v
}

// Write32 stores v to the little-endian 32-bit register at addr.
func Write32(addr uintptr, v uint32) {
	if bigEndian {
		v = bits.ReverseBytes32(v)
	}
	atomic.StoreUint32((*uint32)(ptr(addr)), v)
}

// Read64 loads a 64-bit register as one access (addr 8-byte aligned).
func Read64(addr uintptr) uint64 {
	v := atomic.LoadUint64((*uint64)(ptr(addr)))
	if bigEndian {
		v = bits.ReverseBytes64(v)
	}
	return v
}

// Write64 stores a 64-bit register as one access (addr 8-byte aligned).
func Write64(addr uintptr, v uint64) {
	if bigEndian {
		v = bits.ReverseBytes64(v)
	}
	atomic.StoreUint64((*uint64)(ptr(addr)), v)
}

var fence atomic.Uint32

// DMAWriteBarrier orders earlier stores to DMA memory before later stores.
// A sequentially consistent atomic operation is a full barrier in Go's
// memory model, which is stronger than needed but correct.
func DMAWriteBarrier() { fence.Add(1) }

// DMAReadBarrier orders an earlier load before later loads (see
// DMAWriteBarrier).
func DMAReadBarrier() { fence.Load() }
