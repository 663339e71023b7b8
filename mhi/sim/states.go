package sim

import (
	"github.com/mhistack/mhistack/mhi"
)

// handleCtrl reacts to a host write of MHICTRL (§8.2): RESET first, then
// the requested state. The caller holds m.mu.
// resumeRequested reports whether MHICTRL asks for M0 while the device is
// in M3: the host has started its resume, and doorbells it rings from then
// on are legal (Linux rings in M3_EXIT, after writing M0).
func (m *Modem) resumeRequested() bool {
	v := m.regs.getCtrl()
	return m.state == mhi.StateM3 && v&mhi.CtrlReset == 0 &&
		mhi.State(mhi.Field(v, mhi.CtrlStateMask, mhi.CtrlStateShift)) == mhi.StateM0
}

func (m *Modem) handleCtrl() {
	if m.hung {
		// Wedged firmware (Hang): not even RESET is acted on.
		return
	}
	v := m.regs.getCtrl()
	if v&mhi.CtrlReset != 0 {
		if !m.ignoresReset() { // quirks_pm.go
			m.lateStateChange() // quirks_pm.go
			m.resetOnRemove()   // quirks_pm.go
			m.mhiReset()
		}
		return
	}
	req := mhi.State(mhi.Field(v, mhi.CtrlStateMask, mhi.CtrlStateShift))
	m.lateWindow.Store(false) // quirks_pm.go
	if req == m.state {
		// A read-modify-write that left the state field alone.
		return
	}
	if m.state == mhi.StateSysErr {
		m.violate(ruleSysErrNeedsReset, "MHICTRL state %s requested in SYS_ERR", req)
		return
	}
	if m.ignoresCtrl(req) { // quirks_boot.go
		return
	}
	switch req {
	case mhi.StateM0:
		if m.state == mhi.StateReady && m.ignoresM0() { // quirks_pm.go
			return
		}
		m.toM0()
	case mhi.StateM3:
		if !m.refusesM3() { // quirks_pm.go
			m.toM3()
		}
	case mhi.StateM2:
		if m.state != mhi.StateM1 {
			m.illegal(req)
			return
		}
		// M1 → M2: host-acknowledged low power; no event (§4.6).
		m.setState(mhi.StateM2)
	case mhi.StateReset:
		// The host clearing the state field (e.g. MHICTRL = 0 after a
		// reset) is not a transition request.
	default:
		m.illegal(req)
	}
}

// illegal handles a state request the device cannot honour: the EP enters
// SYS_ERR (§8.2, §8.6).
func (m *Modem) illegal(req mhi.State) {
	m.violate(ruleStateTransition, "MHICTRL requests %s while the device is in %s", req, m.state)
	m.enterSysErr()
}

// setState records and publishes the MHI state.
func (m *Modem) setState(s mhi.State) {
	m.state = s
	m.regs.setStatus(s, s != mhi.StateReset, s == mhi.StateSysErr)
}

// toM0 handles MHICTRL = M0 (§8.2, ep/sm.c mhi_ep_set_m0_state): from
// READY it reads the host's configuration and starts the command ring,
// then sends STATE_CHANGE(M0) and EE_EVENT(current EE) on event ring 0;
// from M3 (or M1/M2) it resumes the channels and sends STATE_CHANGE(M0).
func (m *Modem) toM0() {
	prev := m.state
	switch prev {
	case mhi.StateReady:
		if !m.readHostConfig() || !m.startCommandRing() {
			m.enterSysErr()
			return
		}
	case mhi.StateM3:
		for _, c := range m.chans {
			if c != nil && c.started && c.state == mhi.ChanSuspended {
				w0, err := m.host.DMARead32(c.ctx)
				if err != nil {
					m.dmaFailed(err, "reading a channel context", c.ctx)
				}
				m.setChanState(c, w0, mhi.ChanRunning)
			}
		}
	case mhi.StateM1, mhi.StateM2:
	default:
		m.illegal(mhi.StateM0)
		return
	}
	m.setState(mhi.StateM0)
	m.post(0, mhi.StateChangeEvent(mhi.StateM0), false)
	if prev == mhi.StateReady {
		if m.ee == mhi.EESBL && m.eeBackToBack() { // quirks_boot.go
			m.resume()
			return
		}
		m.post(0, mhi.EEEvent(m.ee), false)
		m.eeChangeQuirks() // quirks_memory.go
		if m.ee == mhi.EESBL {
			m.sblUntil = m.now().Add(m.opts.SBLTime)
		}
		m.armCrashLoop() // faults.go
	}
	m.resume()
}

// resume picks up doorbells the host rang while the device could not act
// on them, and queued DL data. The host re-rings its doorbells at M0 too.
func (m *Modem) resume() {
	for _, c := range m.chans {
		if c != nil && c.started && c.state == mhi.ChanRunning {
			m.dbWork.set(c.num)
		}
	}
	m.cmdPending = true
}

// toM3 handles MHICTRL = M3 (§8.2): RUNNING channels become SUSPENDED, in
// the host's contexts too; burst channels stop polling (the host re-arms
// doorbell mode at M0, §5.3); STATE_CHANGE(M3).
func (m *Modem) toM3() {
	switch m.state {
	case mhi.StateM0, mhi.StateM1, mhi.StateM2:
	default:
		m.illegal(mhi.StateM3)
		return
	}
	for _, c := range m.chans {
		if c != nil && c.started && c.state == mhi.ChanRunning {
			w0, err := m.host.DMARead32(c.ctx)
			if err != nil {
				m.dmaFailed(err, "reading a channel context", c.ctx)
			}
			m.setChanState(c, w0, mhi.ChanSuspended)
			c.stopPolling()
		}
	}
	m.setState(mhi.StateM3)
	m.post(0, mhi.StateChangeEvent(mhi.StateM3), false)
	m.afterM3() // quirks_pm.go
}

// enterM1 is the device-initiated M0 → M1 (§4.6): STATE_CHANGE(M1); the
// host answers with MHICTRL = M2.
func (m *Modem) enterM1() error {
	if m.state != mhi.StateM0 {
		return ErrState
	}
	m.setState(mhi.StateM1)
	m.post(0, mhi.StateChangeEvent(mhi.StateM1), false)
	return nil
}

// wakeDoorbell handles channel doorbell 127 (§1.4, §4.6): value 1 asserts
// wake and brings the device from M1/M2 back to M0 with STATE_CHANGE(M0);
// 0 de-asserts. In other states it is only a vote.
func (m *Modem) wakeDoorbell() {
	l := m.regs.chLatch(mhi.WakeDoorbellChannel)
	if l.val&1 == 0 {
		return
	}
	if m.state == mhi.StateM1 || m.state == mhi.StateM2 {
		m.setState(mhi.StateM0)
		m.post(0, mhi.StateChangeEvent(mhi.StateM0), false)
		m.resume()
	}
}

// fuzedByWake is QuirkNoInbandWake: firmware without a wake doorbell
// takes a write to channel doorbell 127 as a kick of a channel it never
// set up and wedges ("can fuze MHI devices", Linux pci_generic.c, "bus:
// mhi: pci_generic: No-Op for device_wake operations"). The emulator
// records the violation and wedges as Hang does: SYS_ERR, MHICTRL
// ignored until an FLR or SoC reset.
func (m *Modem) fuzedByWake() {
	l := m.regs.chLatch(mhi.WakeDoorbellChannel)
	m.violate(ruleNoWakeDoorbell, "channel doorbell %d written (%#x) on firmware without an in-band wake doorbell", mhi.WakeDoorbellChannel, l.val)
	m.enterSysErr()
	m.hung = true
}

// enterSysErr is the device's fatal error (§8.6): channels stop, MHISTATUS
// says SYS_ERR, STATE_CHANGE(SYS_ERR) goes on event ring 0 when the host
// has set one up (not in M3), and the INTVEC MSI fires. Then only
// MHICTRL.RESET helps.
func (m *Modem) enterSysErr() {
	if m.state == mhi.StateSysErr {
		return
	}
	prev := m.state
	m.boots++
	if m.opts.DrainDMAOnSysErr {
		m.holdDLBuffers()
	}
	m.stopChannels(false)
	m.setState(mhi.StateSysErr)
	switch prev {
	case mhi.StateM0, mhi.StateM1, mhi.StateM2:
		m.post(0, mhi.StateChangeEvent(mhi.StateSysErr), false)
	}
	// Not in M3: the host may have put the function in D3hot with bus
	// mastering off (Linux runtime PM), so a crashed modem writes nothing
	// to host memory; the host finds MHISTATUS = SYS_ERR when it resumes.
	m.sblUntil = zeroTime
	m.fpAt = zeroTime
	m.raiseIntVec()
}

// mhiReset is MHI RESET (§8.5): stop everything and forget every ring;
// MHICTRL = 0 (the RESET bit the host polls clears), MHISTATUS = 0,
// BHI_INTVEC cleared; then back to READY (a real modem does; the Linux EP
// only does after SYS_ERR). After SYS_ERR the device comes back in AMSS,
// or in PBL when Options.LoseFirmwareOnSysErr is set. The INTVEC MSI fires
// after RESET clears and again after READY, because the host's recovery
// waits are woken by it (§8.5 step 4, §10 pitfall 10).
func (m *Modem) mhiReset() {
	prev := m.state
	m.boots++
	// The DMA engine finishes what it was doing before the reset
	// completes (Options.DrainDMAOnSysErr).
	m.drainDMA()
	m.draining = nil
	bootSysErr := m.bootSysErr
	m.bootSysErr = false
	if prev == mhi.StateSysErr && !bootSysErr {
		// Before MHICTRL.RESET clears: a host that sees it clear reads
		// BHI_EXECENV next and must find where the modem restarts.
		m.setEE(mhi.EEAMSS)
		if m.opts.LoseFirmwareOnSysErr {
			m.setEE(mhi.EEPBL)
		}
	}
	m.stopChannels(true)
	m.forgetRings()
	m.regs.resetMHI()
	m.state = mhi.StateReset
	m.readyAt = zeroTime
	m.sblUntil = zeroTime
	m.fpAt = zeroTime
	m.boot.rddm.dump, m.boot.rddm.armed = nil, false
	m.raiseIntVec()
	if m.ee == mhi.EEPBL {
		// The boot ROM waits for an image (§8.7): not READY.
		return
	}
	m.enterReady()
	m.raiseIntVec()
}

// enterReady is §8.1 step 3: allowed only from RESET with READY clear.
// With QuirkSlowReady and a ReadyDelay, READY comes up that much later
// (readyDone).
func (m *Modem) enterReady() {
	if m.state != mhi.StateReset {
		return
	}
	if m.quirks.has(QuirkSlowReady) && m.opts.ReadyDelay > 0 {
		m.readyAt = m.now().Add(m.opts.ReadyDelay)
		return
	}
	m.setState(mhi.StateReady)
}

// readyDone ends QuirkSlowReady's delay: READY, and the INTVEC MSI a
// host waiting for it is woken by. A reset or crash meanwhile moved the
// state on and cancelled it.
func (m *Modem) readyDone() {
	m.readyAt = zeroTime
	if m.state != mhi.StateReset {
		return
	}
	m.setState(mhi.StateReady)
	m.raiseIntVec()
}

// setEE publishes the execution environment in BHI_EXECENV.
func (m *Modem) setEE(ee mhi.EE) {
	m.ee = ee
	m.regs.setBHI(mhi.BHIExecEnv, uint32(ee))
}

// stopChannels stops every channel and its function. writeBack writes
// CHSTATE DISABLED into the host's contexts (MHI reset: the host still has
// them mapped) unless bus mastering is off (a host resetting a device it
// found running, whose contexts may be gone); a crash or SoC reset does not
// touch host memory.
func (m *Modem) stopChannels(writeBack bool) {
	for _, c := range m.chans {
		if c == nil || !c.started {
			continue
		}
		if writeBack && m.busMaster() {
			if w0, err := m.host.DMARead32(c.ctx); err == nil {
				m.setChanState(c, w0, mhi.ChanDisabled)
			}
		}
		m.forgetChannel(c)
	}
	for _, pr := range m.pairs {
		m.stopPort(pr)
	}
}

// forgetRings drops the command ring, the event rings, pending moderated
// MSIs and the host configuration (§8.5 step 1).
func (m *Modem) forgetRings() {
	m.cmd = cmdRing{}
	for _, c := range m.chans {
		if c != nil {
			c.eeEnded = false
		}
	}
	for i := range m.ers {
		m.ers[i] = eventRing{idx: i}
	}
	m.irq.cancelAll()
	m.hc = hostCfg{}
	m.dbWork = chanBits{}
	m.cmdPending = false
}

// readHostConfig takes what the host programmed in mhi_init_mmio (§1.1):
// NER, the context base addresses and the control/data windows.
func (m *Modem) readHostConfig() bool {
	hc := m.regs.hostConfig()
	if hc.ner < 1 || hc.ner > maxEventRings {
		m.violate(ruleNER, "MHICFG.NER is %d", hc.ner)
		if hc.ner < 1 {
			return false
		}
		hc.ner = maxEventRings
	}
	m.hc = hostCfg{hostConfig: hc, valid: true}
	for _, b := range []struct {
		name string
		addr uint64
		size int
	}{
		{"CCABAP", hc.ccabap, mhi.MaxChannels * mhi.ContextSize},
		{"ECABAP", hc.ecabap, hc.ner * mhi.ContextSize},
		{"CRCBAP", hc.crcbap, mhi.ContextSize},
	} {
		if b.addr == 0 || b.addr%4 != 0 {
			m.violate(ruleContextBases, "%s is %#x", b.name, b.addr)
			m.hc.valid = false
			return false
		}
		if !m.hc.inCtrl(b.addr, b.size) {
			m.violate(ruleContextBases, "%s [%#x,+%d) outside MHICTRLBASE %#x..MHICTRLLIMIT %#x", b.name, b.addr, b.size, hc.ctrlBase, hc.ctrlLimit)
		}
	}
	return true
}
