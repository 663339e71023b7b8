package sim

import (
	"github.com/mhistack/mhistack/mhi"
)

// Emergency download (EDL) and the flash programmer (docs/PROTOCOL.md §6.1,
// §6.4, §8.7), and the boot knobs that go with the BHIe path.
//
// A modem whose profile has EDLTrigger honours the cookie 0xEDEDEDED in
// channel doorbell 91 at the next SoC reset: it comes back in its boot ROM
// with BHI_EXECENV = EDL (6), not READY, waiting for a BHI download. The
// image it then receives is the flash programmer: the modem enters READY
// with BHI_EXECENV = FP (7) and, after M0, sends STATE_CHANGE(M0) and
// EE_EVENT(FP); the FIREHOSE channels (34/35, EE mask FP) can be started.
// The emulator publishes FP at READY rather than at M0 because the host
// reads BHI_EXECENV only after the EE event; the order the host observes is
// the same.

// socReset is the device's reaction to MHI_SOC_RESET_REQ (§1.1): back to
// the power-on state, or into EDL if the host left the EDL cookie in
// doorbell 91 first and the profile supports the trigger. The latch is read
// before powerOn, which clears the doorbells. The caller holds m.mu.
//
// Like hardware, the reset takes the PCIe core along: config space (BARs,
// Command register, MSI) returns to power-on values, so registers stop
// decoding and DMA stops until the host restores it.
func (m *Modem) socReset() {
	cookie := m.regs.chLatch(mhi.EDLDoorbellChannel).val
	if m.host != nil {
		m.host.ResetConfig()
	}
	m.powerOn()
	if cookie != mhi.EDLCookie {
		return
	}
	if !m.p.EDLTrigger {
		m.log.Info("EDL cookie ignored: the profile has no EDL trigger")
		return
	}
	m.boot.edlEntries++
	m.setState(mhi.StateReset)
	m.readyAt = zeroTime
	m.setEE(mhi.EEEDL)
	m.edlReady() // quirks_boot.go
	m.log.Info("SoC reset into EDL")
	m.raiseIntVec()
}

// startFlashProgrammer runs the image just received over BHI in EDL. The
// caller holds m.mu.
func (m *Modem) startFlashProgrammer() {
	m.setEE(mhi.EEFP)
	m.enterReady()
	m.raiseIntVec()
}

// EDLEntries returns how many times a SoC reset took the modem into EDL.
func (m *Modem) EDLEntries() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boot.edlEntries
}

// SetFullBootChain makes the SBL wait for a BHIe download of the whole
// image before it moves to AMSS (Linux fbc_download, §4.4): without one
// it stays in SBL and the host's mission-mode wait times out.
func (m *Modem) SetFullBootChain(on bool) {
	m.mu.Lock()
	m.boot.fullBootChain = on
	m.mu.Unlock()
}

// FailNextBHIe makes the next BHIe download end with TXVECSTATUS = error
// (3), as a rejected image would.
func (m *Modem) FailNextBHIe() {
	m.mu.Lock()
	m.boot.failNextBHIe = true
	m.mu.Unlock()
}
