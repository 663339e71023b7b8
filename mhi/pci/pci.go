// Package pci is the backend-neutral view of a PCI function that the MHI
// engine drives: config space, bus mastering, BARs, DMA memory and MSI vectors.
//
// Three backends implement it: mhi/pci/vfio (real hardware through Linux
// VFIO), mhi/pci/vpci (an in-process virtual bus hosting a device model such
// as the emulated modem) and mhi/pci/vfiouserclient (a function another
// process serves over vfio-user, such as mhictl sim serve). A user opens a Device from one of them, then:
//
//	bar, _ := dev.BAR(0)                      // registers
//	buf, _ := dev.DMA().Alloc(4096, 4096)     // memory the device can reach
//	vecs, _ := dev.Interrupts().Enable(6)     // one eventfd-backed vector each
//
// Nothing here knows MHI.
package pci

import (
	"errors"
	"fmt"
)

// Errors shared by every backend.
var (
	// ErrClosed is returned by any call on a closed device or vector.
	ErrClosed = errors.New("pci: device closed")
	// ErrNotSupported is returned when the backend or device lacks a feature
	// (e.g. a function-level reset).
	ErrNotSupported = errors.New("pci: not supported")
	// ErrNoIOVASpace is returned when the DMA window below 4 GiB is exhausted.
	ErrNoIOVASpace = errors.New("pci: IOVA space exhausted")
	// ErrRemoved: the function is gone (hot-unplugged, or released at
	// the kernel's request); nothing reaches it any more.
	ErrRemoved = errors.New("pci: device removed")
)

// Device is one PCI function opened for exclusive use.
//
// BAR, DMA and Interrupts may be called from any goroutine. Close releases
// everything obtained from the device; later calls return ErrClosed.
type Device interface {
	// Info describes the function: its address and IDs.
	Info() Info
	// ConfigRead reads len(p) bytes of config space at off (1, 2 or 4
	// byte aligned accesses).
	ConfigRead(off int, p []byte) error
	// ConfigWrite writes config space.
	ConfigWrite(off int, p []byte) error
	// SetBusMaster enables or disables memory decoding and DMA
	// (Command register bits 1 and 2). DMA is refused while disabled.
	SetBusMaster(on bool) error
	// BAR returns memory BAR i mapped for 32-bit register access.
	BAR(i int) (BAR, error)
	// DMA returns the allocator of device-visible memory.
	DMA() DMA
	// Interrupts returns the MSI vector controller.
	Interrupts() Interrupts
	// Reset performs a function-level reset, or returns ErrNotSupported.
	Reset() error
	// Close releases the device.
	Close() error
}

// Removable is implemented by a Device whose backend learns that the
// function is going away while it still answers: vfio-pci asks user space
// to release a function the kernel is removing (hot-unplug, unbind) with
// its request interrupt. RemovalRequested is closed then; the owner may
// still quiesce the device (stop its DMA, as a driver's remove does) and
// calls Release, or the backend releases it by itself after a short grace
// period. From the release on, the BARs read all-ones and config space,
// interrupts and reset fail with ErrRemoved.
type Removable interface {
	RemovalRequested() <-chan struct{}
	// Release gives the function back now; it is idempotent.
	Release()
}

// Info identifies a function.
type Info struct {
	Address           string // "0000:01:00.0" for real devices, "vpci:N" for virtual ones
	Vendor, Device    uint16
	SubVendor, SubDev uint16
	Class             uint32 // 24-bit class code
	Revision          uint8
}

func (i Info) String() string {
	return fmt.Sprintf("%s [%04x:%04x sub %04x:%04x]", i.Address, i.Vendor, i.Device, i.SubVendor, i.SubDev)
}

// BAR is a memory BAR accessed as 32-bit little-endian registers. Offsets
// outside the BAR read as all-ones and writes to them are dropped, like an
// unclaimed PCIe transaction; a removed device reads all-ones everywhere.
type BAR interface {
	Len() uint64
	Read32(off uint64) uint32
	Write32(off uint64, v uint32)
}

// Buffer is a DMA buffer: Mem is the CPU view, IOVA the address the device
// uses. IOVAs are always below 4 GiB (the 32-bit DMA mask of every MHI modem).
//
// Words shared with the device (ring pointers, context fields) must be
// accessed with the Load32/Store32 helpers, which compile to single
// non-elided accesses; bulk data may be copied normally, ordered by a
// doorbell or a device-written pointer.
type Buffer struct {
	Mem  []byte
	IOVA uint64
}

// Len returns the buffer size in bytes.
func (b *Buffer) Len() int { return len(b.Mem) }

// Contains reports whether [iova, iova+n) lies inside the buffer.
func (b *Buffer) Contains(iova uint64, n int) bool {
	return iova >= b.IOVA && n >= 0 && iova-b.IOVA <= uint64(len(b.Mem)) && uint64(n) <= uint64(len(b.Mem))-(iova-b.IOVA)
}

// DMA allocates device-visible memory. Alloc returns a zeroed buffer that is
// IOVA-contiguous, whose IOVA is a multiple of align (a power of two, at
// least 1) and lies entirely below 4 GiB.
type DMA interface {
	Alloc(size, align int) (*Buffer, error)
	Free(*Buffer) error
}

// Interrupts controls the function's MSI vectors.
type Interrupts interface {
	// Max returns the number of MSI vectors the function supports.
	Max() int
	// Enable enables n vectors (1 ≤ n ≤ Max) and returns them in order.
	// A backend may grant fewer (MSI grants powers of two); callers must
	// handle len(result) < n by sharing vector 0.
	Enable(n int) ([]Vector, error)
	// Disable disables all vectors; blocked Waits return ErrClosed.
	Disable() error
}

// Vector is one interrupt vector backed by an eventfd.
type Vector interface {
	// Wait blocks until the vector fires and returns how many times it
	// fired since the last Wait. It returns ErrClosed once the vector is
	// disabled. Waiting parks the goroutine in the netpoller; no OS thread
	// is held.
	Wait() (uint64, error)
	// Trigger fires the vector from software (tests, kick-starts).
	Trigger() error
	// Index is the vector number.
	Index() int
}
