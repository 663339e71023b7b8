package pci

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Load32 reads the little-endian 32-bit word at off as one access the
// compiler cannot elide or merge. off must be a multiple of 4. It is the
// way to read a word the device may write concurrently (a ring pointer).
func (b *Buffer) Load32(off int) uint32 {
	return le32(atomic.LoadUint32(b.word(off)))
}

// Store32 writes a little-endian 32-bit word at off (a multiple of 4) as one
// access, with release ordering: every earlier store to the buffer is
// visible to a device that observes this one. Device memory is little-endian
// whatever the CPU (Linux boot.c, "bus: mhi: host: Fix endianness of BHI
// vector table": a vector table stored in CPU order broke BHIe on
// big-endian hosts).
func (b *Buffer) Store32(off int, v uint32) {
	atomic.StoreUint32(b.word(off), le32(v))
}

// le32 converts between the CPU's word order and little-endian; it is
// nothing on a little-endian CPU.
func le32(v uint32) uint32 {
	if bigEndian {
		return bits.ReverseBytes32(v)
	}
	return v
}

// word returns the 32-bit word at off, panicking if it is not inside Mem.
// The bounds check is a slice-to-array-pointer conversion because it reads
// no memory: a check written as `_ = b.Mem[off+3]` is a plain one-byte load,
// which the race detector reports against a device's atomic write of the
// same word.
func (b *Buffer) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer((*[4]byte)(b.Mem[off:])))
}

// Load64 reads a 64-bit field that is only 4-byte aligned (MHI contexts pack
// their 64-bit fields at 4-byte offsets) as two 32-bit loads, high word
// first. A concurrent writer can make it tear; callers validate the result.
func (b *Buffer) Load64(off int) uint64 {
	hi := b.Load32(off + 4)
	lo := b.Load32(off)
	return uint64(hi)<<32 | uint64(lo)
}

// Store64 writes a 4-byte aligned 64-bit field as two 32-bit stores, high
// word first, so that the low word, written last, publishes the value.
func (b *Buffer) Store64(off int, v uint64) {
	b.Store32(off+4, uint32(v>>32))
	b.Store32(off, uint32(v))
}
