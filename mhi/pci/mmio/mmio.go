// Package mmio reads and writes device registers: single loads and stores
// that the Go compiler can neither elide, merge, forward nor turn into locked
// read-modify-write instructions.
//
// Go has no volatile. A plain *p = v may be dropped by dead-store
// elimination, a read after a write may be answered from the register
// without touching the device, and sync/atomic stores compile to XCHG on
// amd64, which also reads the register (go build -gcflags=-S shows each). The
// accessors here are assembly functions on amd64 and arm64: the compiler
// never inlines them, so every call is exactly one access of the given
// width, in program order, and also a compiler barrier.
//
//	v := mmio.Read32(base + 0x00)   // one 32-bit load
//	mmio.DMAWriteBarrier()          // ring memory before the doorbell
//	mmio.Write32(base + 0x04, db)   // one 32-bit store
//
// addr must be the address of memory that stays mapped for the duration of
// the call (a BAR mapping from mmap, never the Go heap in production), and be
// naturally aligned. Registers are little-endian, like PCI.
package mmio
