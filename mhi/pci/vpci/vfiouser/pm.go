package vfiouser

import (
	"sync"

	"github.com/mhistack/mhistack/mhi/pci"
)

// The server adds a PCI Power Management capability (PCI Bus Power
// Management Interface 1.2, §3.2) in front of the MSI capability that
// pci.ConfigSpace builds. Real modems have one, and Linux's
// mhi_pci_generic enables runtime PM (MHI M3 while the function sits in
// D3hot) only when the function can signal PME from D3hot; without it the
// kernel never suspends the modem and M3/M0 would go untested.
const (
	pmCapOffset = 0x40 // free space below pci.MSICapOffset
	pmCapID     = 0x01
	pmPMC       = 0x02 // Power Management Capabilities
	pmPMCSR     = 0x04 // Control/Status
	pmCapLen    = 8

	// PMC: version 3 (PM 1.2), PME from D0 and D3hot (bits 11 and 14),
	// no D1/D2.
	pmcValue = 0x0003 | 1<<11 | 1<<14

	pmcsrStateMask   = 0x0003 // PowerState: 0 = D0, 3 = D3hot
	pmcsrNoSoftReset = 1 << 3 // D3hot → D0 keeps the function's state
	pmcsrPMEEn       = 1 << 8
	pmcsrPMEStatus   = 1 << 15

	stateD0    = 0
	stateD3hot = 3
)

// pmState is the capability's writable state; the rest is constant.
type pmState struct {
	mu    sync.Mutex
	pmcsr uint16
}

// regs returns the 8 capability bytes as the function presents them.
func (p *pmState) regs() [pmCapLen]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.pmcsr | pmcsrNoSoftReset
	return [pmCapLen]byte{pmCapID, pci.MSICapOffset, byte(pmcValue & 0xff), byte(pmcValue >> 8), byte(v), byte(v >> 8), 0, 0}
}

// write applies a write of byte v at capability offset r: PowerState
// (D1/D2 are not supported and ignored, as PM 1.2 §5.4.1 allows), PME_En,
// and PME_Status as write-one-to-clear.
func (p *pmState) write(r int, v byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r {
	case pmPMCSR:
		if st := uint16(v) & pmcsrStateMask; st == stateD0 || st == stateD3hot {
			p.pmcsr = p.pmcsr&^pmcsrStateMask | st
		}
	case pmPMCSR + 1:
		w := uint16(v) << 8
		p.pmcsr = p.pmcsr&^pmcsrPMEEn | w&pmcsrPMEEn
		p.pmcsr &^= w & pmcsrPMEStatus
	}
}

// d3 reports whether the function is in D3hot: it then decodes no memory
// accesses and sends no MSIs (only config space and PME work).
func (p *pmState) d3() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pmcsr&pmcsrStateMask == stateD3hot
}

func (p *pmState) reset() {
	p.mu.Lock()
	p.pmcsr = 0
	p.mu.Unlock()
}

// overlayRead replaces what pci.ConfigSpace returned for [off, off+len(p))
// with the PM capability and the capability pointer that leads to it.
func (s *Server) overlayRead(off int, p []byte) {
	caps := s.pm.regs()
	for i := range p {
		switch o := off + i; {
		case o == pci.CfgCapPtr:
			p[i] = pmCapOffset
		case o >= pmCapOffset && o < pmCapOffset+pmCapLen:
			p[i] = caps[o-pmCapOffset]
		}
	}
}

// overlayWrite takes the bytes of a config write that belong to the PM
// capability and returns whether all of them did.
func (s *Server) overlayWrite(off int, p []byte) bool {
	all := true
	for i, v := range p {
		o := off + i
		if o >= pmCapOffset && o < pmCapOffset+pmCapLen {
			s.pm.write(o-pmCapOffset, v)
		} else {
			all = false
		}
	}
	return all
}
