package sim

import (
	"fmt"

	"github.com/mhistack/mhistack/mhi"
)

// Power-management and power-up quirks (docs/QUIRKS.md).

const (
	// QuirkNoM3: the device has no M3: it refuses MHICTRL = M3 (a
	// violation), stays in M0 and sends no STATE_CHANGE.
	QuirkNoM3 Quirk = "no-m3"
	// QuirkD3Cold: power is lost in M3 (D3cold): right after
	// STATE_CHANGE(M3) the modem is back at its power-on state (RESET in
	// PBL, or READY in AMSS with Options.Boot BootAMSS). Modem.LosePower
	// does the same once, on demand.
	QuirkD3Cold Quirk = "d3cold"
	// QuirkSysErrAtPowerUp: the device comes out of power-on (New, SoC
	// reset, FLR) already in SYS_ERR, before the host enabled its
	// interrupts (no MSI), and in PBL or SBL acts on MHICTRL.RESET only
	// while it advertises SYS_ERR; a reset from that SYS_ERR keeps the
	// execution environment (a boot ROM crash does not load firmware).
	QuirkSysErrAtPowerUp Quirk = "syserr-at-powerup"
	// QuirkM0DuringPrepare: the STATE_CHANGE(M0) of the wake that carried
	// a burst channel's START_CHAN comes only once the host rings the
	// channel's first doorbell, while it is still preparing the channel
	// (queuing its first buffers). As at every M0 entry, every burst
	// channel then stops polling: the device takes new TREs only after a
	// doorbell (docs/PROTOCOL.md §5.3).
	QuirkM0DuringPrepare Quirk = "m0-during-prepare"
	// QuirkLateStateChange: a STATE_CHANGE(M0) the device had queued
	// arrives after the host started tearing it down: at an MHI reset
	// requested in M0 it is posted (with its MSI) before the reset, and
	// READY follows the reset as usual. Until the host programs the
	// contexts again or requests a state, any doorbell is a violation:
	// the host is to ignore the late change, not take it as an M0 to
	// ring in.
	QuirkLateStateChange Quirk = "late-state-change"
	// QuirkResetOnRemove: an MHI reset requested in mission mode (M0 in
	// AMSS) leaves the firmware running: the device comes READY, but it
	// ignores every M0 request after it (the next host's power-up
	// stalls) until a SoC reset (or FLR) brings it back to power-on.
	QuirkResetOnRemove Quirk = "reset-on-remove"
)

// resetOnRemove plays QuirkResetOnRemove when MHICTRL.RESET is acted on:
// from M0 in AMSS the modem will not take an M0 request again before its
// next power-on. The caller holds m.mu.
func (m *Modem) resetOnRemove() {
	if m.quirks.has(QuirkResetOnRemove) && m.state == mhi.StateM0 && m.ee == mhi.EEAMSS {
		m.needsSoCReset = true
	}
}

// ignoresM0 reports whether an M0 request is ignored (QuirkResetOnRemove
// after an MHI reset in mission mode). The caller holds m.mu.
func (m *Modem) ignoresM0() bool {
	if m.needsSoCReset {
		m.log.Info("M0 ignored: MHI reset in mission mode; the firmware waits for a SoC reset (reset-on-remove)")
	}
	return m.needsSoCReset
}

// ruleLateDoorbell is the violation of a host that takes a state change
// arriving during its teardown for a live device.
const ruleLateDoorbell = "docs/QUIRKS.md: a host tearing the device down ignores a late STATE_CHANGE and rings no doorbell after its MHI reset (Linux pm.c: \"bus: mhi: host: Wait for ready state after reset\")"

// lateStateChange plays QuirkLateStateChange when MHICTRL.RESET is acted
// on. The caller holds m.mu.
func (m *Modem) lateStateChange() {
	if !m.quirks.has(QuirkLateStateChange) || m.state != mhi.StateM0 {
		return
	}
	m.post(0, mhi.StateChangeEvent(mhi.StateM0), false)
	m.lateWindow.Store(true)
}

// isDoorbell reports whether BAR offset off is a channel, event ring or
// command ring doorbell register.
func isDoorbell(off uint64) bool {
	return off >= chdbOff || off == mhi.RegCRDBLower || off == mhi.RegCRDBHigher
}

// ruleNoM3 is the violation a host commits asking a modem without M3 for
// M3.
const ruleNoM3 = "docs/QUIRKS.md: a host does not request M3 of a device without M3 (profile NoM3)"

// refusesM3 reports whether MHICTRL = M3 is refused (QuirkNoM3): the
// request is a violation and the device stays where it is. The caller
// holds m.mu.
func (m *Modem) refusesM3() bool {
	if !m.quirks.has(QuirkNoM3) {
		return false
	}
	m.violate(ruleNoM3, "MHICTRL requests M3 of a device without M3 (in %s)", m.state)
	return true
}

// afterM3 runs once the modem entered M3: with QuirkD3Cold the power goes.
// The caller holds m.mu.
func (m *Modem) afterM3() {
	if m.quirks.has(QuirkD3Cold) {
		m.stats.powerLosses.Add(1)
		m.powerOn()
	}
}

// LosePower plays a power loss while the host has the modem suspended
// (D3cold): the modem returns to its power-on state as after a SoC reset,
// without an MSI; the host finds MHISTATUS ≠ M3 at resume. PCI config
// (MSI, bus mastering) is left alone, as the host's PCI layer restores it.
func (m *Modem) LosePower() error {
	m.stats.powerLosses.Add(1)
	return m.call(reqReset)
}

// HibernationRestore plays what a hibernation restore leaves in a modem
// the host had suspended (Linux pci-generic: "bus: mhi: pci-generic: Fix
// hibernation"): the restore kernel brought MHI up with contexts of its
// own and suspended it again, so the device is in M3 but every ring
// pointer it holds (each started channel's rp and wp, each event ring's
// rp and wp, the command ring's rp) is that session's, here its ring's
// base, while the host's contexts and rings came back from the image as
// they were. A host that only resumes hands the device rings it no longer
// agrees on (at its next command the device reads the command ring from
// its base again and replays the host's earlier commands); one that resets and programs its contexts again (as Linux's
// restore does) is served. It fails unless the modem is in M3.
func (m *Modem) HibernationRestore() error {
	return m.call(reqHibernationRestore)
}

// hibernationRestore rewinds every ring pointer the device holds (see
// HibernationRestore). The caller holds m.mu.
func (m *Modem) hibernationRestore() error {
	if m.state != mhi.StateM3 {
		return fmt.Errorf("sim: hibernation restore with the modem in %s, not M3", m.state)
	}
	for _, c := range m.chans {
		if c != nil && c.started {
			c.rp, c.wp = c.ring.base, c.ring.base
		}
	}
	for i := range m.ers {
		if er := &m.ers[i]; er.ring.n != 0 {
			er.rp, er.wp = er.ring.base, er.ring.base
		}
	}
	if m.cmd.ring.n != 0 {
		m.cmd.rp = m.cmd.ring.base
	}
	m.log.Info("hibernation restore: every ring pointer the device holds is the restore kernel's")
	return nil
}

// powerOnQuirks runs at the end of powerOn: with QuirkSysErrAtPowerUp the
// device crashes before the host is there (no event, no MSI). The caller
// holds m.mu.
func (m *Modem) powerOnQuirks() {
	m.needsSoCReset = false
	if !m.quirks.has(QuirkSysErrAtPowerUp) {
		return
	}
	m.readyAt = zeroTime
	m.setState(mhi.StateSysErr)
	m.bootSysErr = true
}

// ignoresReset reports whether MHICTRL.RESET is not acted on: with
// QuirkSysErrAtPowerUp, PBL and SBL act on it only in SYS_ERR (the RESET
// bit stays set). The caller holds m.mu.
func (m *Modem) ignoresReset() bool {
	return m.quirks.has(QuirkSysErrAtPowerUp) && (m.ee == mhi.EEPBL || m.ee == mhi.EESBL) && m.state != mhi.StateSysErr
}

// m0DuringPrepare plays QuirkM0DuringPrepare after a doorbell of c was
// handled: the late STATE_CHANGE(M0), and every burst channel back in
// doorbell mode. A host that re-arms its burst channels only when its own
// power state changes (it thinks it is in M0 already) keeps writing only
// the context wp, which nobody reads. The caller holds m.mu.
func (m *Modem) m0DuringPrepare(c *channel) {
	if !c.m0Late {
		return
	}
	c.m0Late = false
	if m.state != mhi.StateM0 {
		return
	}
	for _, b := range m.burstChans {
		b.stopPolling()
	}
	m.post(0, mhi.StateChangeEvent(mhi.StateM0), false)
}
