package vpci

import "github.com/mhistack/mhistack/mhi/pci"

// Model is a PCI device implemented in Go. A bus (this package's in-process
// Bus, or a vfio-user server) hosts it; the model never learns which.
//
// Register accesses arrive synchronously from the host's goroutines, like
// MMIO transactions: MMIORead must answer immediately and MMIOWrite must not
// block (queue the work for the model's own goroutines). The model reaches
// host memory and raises interrupts only through the Host it is attached to.
type Model interface {
	// Identity returns the IDs, BAR sizes and MSI vector count; the bus
	// builds config space from it.
	Identity() pci.Identity
	// Attach is called once, before any MMIO, with the bus's side of
	// the link. The model may start its goroutines here.
	Attach(h Host)
	// MMIORead reads the 32-bit register at off of BAR bar.
	MMIORead(bar int, off uint64) uint32
	// MMIOWrite writes the 32-bit register at off of BAR bar.
	MMIOWrite(bar int, off uint64, v uint32)
	// Reset is a function-level reset: the model returns to power-on state.
	Reset()
	// Detach stops the model's goroutines; no Host call may follow.
	Detach()
}

// Host is what a device can do to the host: DMA and MSI. Every DMA is
// checked against the IOMMU mappings and refused (with a recorded fault)
// outside them, when bus mastering is off, or after surprise removal.
type Host interface {
	// DMARead copies host memory at iova into p.
	DMARead(iova uint64, p []byte) error
	// DMAWrite copies p into host memory at iova.
	DMAWrite(iova uint64, p []byte) error
	// DMARead32 and DMAWrite32 access one 4-byte aligned little-endian
	// word as a single access (ring pointers, context fields), the
	// device-side counterpart of pci.Buffer.Load32/Store32.
	DMARead32(iova uint64) (uint32, error)
	DMAWrite32(iova uint64, v uint32) error
	// RaiseMSI signals MSI vector n. It is dropped while MSI is disabled
	// or bus mastering is off, recorded as pending while the vector is
	// masked, and with fewer vectors enabled than n+1 it aliases to
	// n mod enabled, as the low MSI data bits of a real function do.
	RaiseMSI(n int)
	// ResetConfig is the function's own PCIe core being reset with the
	// rest of the device (a SoC reset, docs/PROTOCOL.md §1.1 MHI_SOC_RESET_REQ): config
	// space returns to its power-on values (BARs, Command register and
	// MSI enable cleared), so memory decoding, DMA and MSIs stop until
	// the host restores config space (Linux pci_restore_state). The
	// host's MSI eventfds stay; unlike an FLR the host did not ask.
	ResetConfig()
	// BusMaster reports whether the function may master the bus now
	// (Command register bit 2, and not removed). A model skips DMA that a
	// function without bus mastering would not issue — an MHI reset's
	// write-back into host contexts while the host resets with bus
	// mastering off — instead of having it refused and recorded.
	BusMaster() bool
}
