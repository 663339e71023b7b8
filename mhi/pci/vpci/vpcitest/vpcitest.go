// Package vpcitest has a device model for the tests of what hosts a
// vpci.Model (the vfio-user server in mhi/pci/vpci/vfiouser and its
// client, mhi/pci/vfiouserclient), in the style of net/http/httptest:
// the model records what the host did to it, and the test drives DMA and
// MSIs through the Host it was attached to.
package vpcitest

import (
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// NumRegs is the number of 32-bit registers in BAR 0 of a Regs.
const NumRegs = 64

// Regs is a tiny device: BAR 0 (4 KiB) starts with NumRegs plain 32-bit
// registers, it has 4 MSI vectors, and it records the values written in
// order, its resets and its detach. The zero value is ready to attach.
type Regs struct {
	// Host is what the model was attached to (set by Attach, before
	// the host serves it).
	Host vpci.Host
	// Gate, when set before the model is attached, holds a read of the
	// last register, or a write of the one before it, until it is
	// closed (a server stuck in the model: it reads no further
	// message); Entered, set with it, is closed when that access begins
	// (once: a test makes one such access).
	Gate, Entered chan struct{}

	// Resets counts Reset; Detached is set by Detach.
	Resets   atomic.Int32
	Detached atomic.Bool

	mu     sync.Mutex
	regs   [NumRegs]uint32
	writes []uint32
}

// Identity implements vpci.Model: a Qualcomm-IDed wireless function with
// subsystem IDs, BAR 0 of 4 KiB and 4 MSI vectors.
func (m *Regs) Identity() pci.Identity {
	id := pci.Identity{Vendor: 0x17cb, Device: 0x0306, SubVendor: 0x1eac, SubDev: 0x1002, Class: pci.ClassWirelessOther, MSIVectors: 4}
	id.BARSize[0] = 4096
	return id
}

// Attach implements vpci.Model.
func (m *Regs) Attach(h vpci.Host) { m.Host = h }

// MMIORead implements vpci.Model; past the registers it reads 0.
func (m *Regs) MMIORead(bar int, off uint64) uint32 {
	m.stall(off, (NumRegs-1)*4)
	m.mu.Lock()
	defer m.mu.Unlock()
	if off/4 < NumRegs {
		return m.regs[off/4]
	}
	return 0
}

// MMIOWrite implements vpci.Model: every write is recorded, one to a
// register also sets it.
func (m *Regs) MMIOWrite(bar int, off uint64, v uint32) {
	m.stall(off, (NumRegs-2)*4)
	m.mu.Lock()
	defer m.mu.Unlock()
	if off/4 < NumRegs {
		m.regs[off/4] = v
	}
	m.writes = append(m.writes, v)
}

// stall holds an access to the gated register while Gate is set.
func (m *Regs) stall(off, gated uint64) {
	if off == gated && m.Gate != nil {
		close(m.Entered)
		<-m.Gate
	}
}

// Reset implements vpci.Model: the registers return to 0.
func (m *Regs) Reset() {
	m.mu.Lock()
	m.regs = [NumRegs]uint32{}
	m.mu.Unlock()
	m.Resets.Add(1)
}

// Detach implements vpci.Model.
func (m *Regs) Detach() { m.Detached.Store(true) }

// Set sets register i (as the device would).
func (m *Regs) Set(i int, v uint32) {
	m.mu.Lock()
	m.regs[i] = v
	m.mu.Unlock()
}

// Writes returns the values written so far, in order.
func (m *Regs) Writes() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]uint32(nil), m.writes...)
}
