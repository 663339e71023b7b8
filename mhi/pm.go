package mhi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mhistack/mhistack/mhi/pci"
)

// PowerUp brings the device to mission mode (docs/PROTOCOL.md §4.3–§4.5):
// interrupts on, BHI_INTVEC = 0, an MHI reset with bus mastering off if the
// device is in any state but RESET or READY (SYS_ERR, or left running by a
// host that died), bus mastering on, a BHI firmware download if it is in
// PBL, then READY → program MMIO → M0 → STATE_CHANGE(M0) → EE_EVENT(AMSS)
// → mission mode.
func (c *Controller) PowerUp(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.pm != pmDisabled || c.poweringUp {
		c.mu.Unlock()
		return fmt.Errorf("mhi: %s: power-up in state %s: %w", c.name, c.pm, ErrState)
	}
	c.poweringUp = true
	c.crashes, c.recoveryStopped = nil, nil
	c.mu.Unlock()
	err := c.powerUp(ctx)
	c.mu.Lock()
	c.poweringUp = false
	c.mu.Unlock()
	if err != nil {
		c.stopInterrupts()
		c.reclaim(ErrNotRunning)
		c.mu.Lock()
		if c.pm != pmRemoved {
			c.pm = pmDisabled
		}
		c.mu.Unlock()
		return err
	}
	c.emit(Event{Kind: EventMissionMode, EE: c.currentEE()})
	return nil
}

func (c *Controller) currentEE() EE {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ee
}

func (c *Controller) powerUp(ctx context.Context) error {
	if err := c.startInterrupts(); err != nil {
		return err
	}
	c.write(c.bhiOff+BHIIntVec, 0)
	st, ee, removed := c.deviceStatus()
	if removed {
		c.markRemoved()
		return fmt.Errorf("mhi: %s: %w", c.name, ErrRemoved)
	}
	if s := State(Field(st, StatusStateMask, StatusStateShift)); s != StateReset && s != StateReady {
		if s == StateSysErr && ee == EERDDM {
			// A crash nobody collected (rddm.go): the dump is read
			// into buffers set up now, so DMA is on for the upload;
			// the reset below turns it off again.
			if err := c.setBusMaster(true); err != nil {
				return err
			}
			c.collectCrashDump(ctx)
		}
		c.log.Warn("device not in RESET or READY at power-up; resetting it", "dev", c.name, "state", s, "ee", ee)
		if err := c.resetLeftRunning(ctx); err != nil {
			return err
		}
		// The reset may have sent the device back to its boot ROM:
		// boot from the environment it is in now, not the one read
		// before (a modem that lost its firmware would otherwise be
		// waited on for READY until the timeout).
		st, ee, removed = c.deviceStatus()
		if removed {
			c.markRemoved()
			return fmt.Errorf("mhi: %s: %w", c.name, ErrRemoved)
		}
	}
	c.mu.Lock()
	resumeFP := c.boot.resumeFP
	c.mu.Unlock()
	if !ee.PowerUpCapable() && !(resumeFP && ee == EEFP) {
		return fmt.Errorf("mhi: %s: device is in EE %s; power-up needs PBL or AMSS (reset the modem): %w", c.name, ee, ErrState)
	}
	c.mu.Lock()
	c.ee, c.devState = ee, State(Field(st, StatusStateMask, StatusStateShift))
	c.mu.Unlock()
	if err := c.setBusMaster(true); err != nil {
		return err
	}
	return c.bootToMission(ctx, ee)
}

// resetLeftRunning brings a device found in any state but RESET or READY
// to a known one before the host hands it new rings (docs/RELIABILITY.md,
// "Power-up over a device left running"): a crashed device (SYS_ERR), or
// one a host process left in M0 when it died, its rings pointing at memory
// that is gone. Bus mastering goes off first, so that the device cannot
// write the old rings (or whatever the IOMMU maps there now) while it
// resets; then MHICTRL.RESET, wait for it to clear and, unless the reset
// sent the device to its boot ROM, for READY. powerUp turns bus mastering
// back on.
func (c *Controller) resetLeftRunning(ctx context.Context) error {
	if err := c.setBusMaster(false); err != nil {
		return err
	}
	if err := c.mhiReset(ctx); err != nil {
		return err
	}
	if c.prof.ResetOnRemove {
		// Its firmware outlives the MHI reset and would ignore our M0.
		// The SoC reset clears the MSI set-up: interrupts start again
		// on the restored config space, as after a function reset.
		c.stopInterrupts()
		if err := c.resetSoC(ctx); err != nil {
			return err
		}
		return c.startInterrupts()
	}
	if EE(c.read(c.bhiOff + BHIExecEnv)).InPBL() {
		return nil
	}
	return c.waitFor(ctx, c.prof.readyBound(), "READY after the power-up reset", func() (bool, error) {
		st := c.read(RegMHISTATUS)
		return st != 0xFFFFFFFF && st&StatusReady != 0, nil
	})
}

// resetSoC writes MHI_SOC_RESET_REQ and waits for the device to be back
// at power-on, as Linux's remove does for a profile with ResetOnRemove
// (pci_generic.c: "bus: mhi: host: pci_generic: Reset QDU100 while the
// MHI driver is removed"; docs/QUIRKS.md, "Reset on remove"): such a
// device's firmware survives an MHI reset in mission mode and ignores the
// next M0 request. The reset takes the PCIe core along, so config space
// is restored once it is seen lost (bounded by the state timeout: a
// function that keeps it is waited for that long), then READY or the
// boot ROM is waited for (bounded by the READY timeout).
func (c *Controller) resetSoC(ctx context.Context) error {
	c.write(RegSOCResetReq, SOCResetCookie)
	var restoreErr error
	err := c.waitFor(ctx, c.stateBound(), "config space lost to the SoC reset", func() (bool, error) {
		if !c.configLost() {
			return false, nil
		}
		restoreErr = c.restoreConfig()
		return true, nil
	})
	if errors.Is(err, ErrTimeout) {
		c.log.Warn("config space kept across the SoC reset", "dev", c.name)
	} else if err != nil {
		return err
	}
	if restoreErr != nil {
		return restoreErr
	}
	return c.waitFor(ctx, c.prof.readyBound(), "READY or the boot ROM after the SoC reset", func() (bool, error) {
		if c.configLost() {
			restoreErr = c.restoreConfig() // the reset came after a look
			return false, restoreErr
		}
		st := c.read(RegMHISTATUS)
		if st == 0xFFFFFFFF {
			return false, nil
		}
		return st&StatusReady != 0 || EE(c.read(c.bhiOff+BHIExecEnv)).InPBL(), nil
	})
}

// pblBootAttempts bounds how often one power-up downloads the boot image
// to a PBL that reports SYS_ERR before the image changed the EE (an image
// that hangs in the boot ROM).
const pblBootAttempts = 4

// bootToMission runs the PBL or READY transition and waits for mission
// mode. A SYS_ERR while the device is still in PBL after the download (the
// image hung before any EE change) is handled each time it happens, not
// only the first (Linux main.c, "bus: mhi: host: Remove duplicate ee check
// for syserr"; docs/QUIRKS.md, "SYS_ERR in PBL twice"): MHI reset, the
// image downloaded again, up to pblBootAttempts downloads.
func (c *Controller) bootToMission(ctx context.Context, ee EE) error {
	for attempt := 1; ; attempt++ {
		err := c.bootOnce(ctx, ee)
		if err == nil || !ee.InPBL() || !errors.Is(err, ErrSysErr) || attempt == pblBootAttempts {
			return err
		}
		now := EE(c.read(c.bhiOff + BHIExecEnv))
		if !now.InPBL() {
			// The image ran: a crash after it is not a boot ROM's.
			return err
		}
		c.log.Warn("SYS_ERR in PBL: the boot image hung before any EE change; resetting and downloading it again",
			"dev", c.name, "ee", now, "attempt", attempt, "of", pblBootAttempts)
		if err := c.mhiReset(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		// A new SYS_ERR episode may start: the next one is detected
		// like the first.
		c.ee, c.devState = now, StateReset
		c.mu.Unlock()
		ee = now
	}
}

// bootOnce is one boot: the PBL or READY transition, then the wait for
// mission mode.
func (c *Controller) bootOnce(ctx context.Context, ee EE) error {
	if ee.InPBL() {
		if err := c.pblTransition(ctx, ee); err != nil {
			return err
		}
	}
	if err := c.readyTransition(ctx); err != nil {
		return err
	}
	if err := c.sblTransition(ctx); err != nil {
		return err
	}
	err := c.waitFor(ctx, c.prof.readyBound(), "mission mode and M0", func() (bool, error) {
		if c.pm == pmSysErrProcess || c.devState == StateSysErr {
			return false, ErrSysErr
		}
		return c.ee.MissionMode() && c.devState == StateM0, nil
	})
	if err != nil {
		return err
	}
	return c.missionModeTransition(ctx)
}

// mhiReset sets MHICTRL.RESET and waits for the device to clear it, then
// rewrites BHI_INTVEC, which the device clears during reset (§4.3 step 5).
func (c *Controller) mhiReset(ctx context.Context) error {
	c.rmw(RegMHICTRL, CtrlReset, 1, 1)
	err := c.waitFor(ctx, c.stateBound(), "MHICTRL.RESET to clear", func() (bool, error) {
		v := c.read(RegMHICTRL)
		if v == 0xFFFFFFFF {
			return false, nil // removal is caught by the poll tick
		}
		return v&CtrlReset == 0, nil
	})
	if err != nil {
		return err
	}
	c.write(c.bhiOff+BHIIntVec, 0)
	return nil
}

// readyTransition waits for READY, programs the MMIO, seeds the software
// event rings and asks for M0 (§4.5 steps 1–4).
func (c *Controller) readyTransition(ctx context.Context) error {
	err := c.waitFor(ctx, c.prof.readyBound(), "READY", func() (bool, error) {
		if c.read(RegMHICTRL)&CtrlReset != 0 {
			return false, nil
		}
		st := c.read(RegMHISTATUS)
		if st == 0xFFFFFFFF {
			return false, nil
		}
		if st&StatusSysErr != 0 || State(Field(st, StatusStateMask, StatusStateShift)) == StateSysErr {
			return false, ErrSysErr
		}
		return st&StatusReady != 0, nil
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.pm, c.devState = pmPOR, StateReady
	c.mu.Unlock()
	if err := c.programMMIO(); err != nil {
		return err
	}
	for _, er := range c.events {
		if !er.cfg.Hardware() {
			er.seed()
		}
	}
	c.rmw(RegMHICTRL, CtrlStateMask, CtrlStateShift, uint32(StateM0))
	return nil
}

// programMMIO tells the device where the contexts are (Linux mhi_init_mmio).
func (c *Controller) programMMIO() error {
	n := c.bar.Len()
	c.chdbOff = uint64(c.read(RegCHDBOFF))
	c.erdbOff = uint64(c.read(RegERDBOFF))
	if (c.chdbOff == 0xFFFFFFFF || c.erdbOff == 0xFFFFFFFF) && c.confirmRemoved() {
		return fmt.Errorf("mhi: %s: registers read all-ones: %w", c.name, ErrRemoved)
	}
	if c.chdbOff%4 != 0 || c.chdbOff+MaxChannels*DoorbellStride > n {
		return fmt.Errorf("mhi: %s: CHDBOFF %#x leaves no room for %d doorbells in the %d-byte BAR: %w", c.name, c.chdbOff, MaxChannels, n, ErrProtocol)
	}
	if c.erdbOff%4 != 0 || c.erdbOff+uint64(len(c.events))*DoorbellStride > n {
		return fmt.Errorf("mhi: %s: ERDBOFF %#x leaves no room for %d doorbells: %w", c.name, c.erdbOff, len(c.events), ErrProtocol)
	}
	c.write64(RegCCABAPLower, RegCCABAPHigher, c.chanCtx.IOVA)
	c.write64(RegECABAPLower, RegECABAPHigher, c.evCtx.IOVA)
	c.write64(RegCRCBAPLower, RegCRCBAPHigher, c.cmdCtx.IOVA)
	c.write64(RegMHICTRLBASELower, RegMHICTRLBASEHigher, 0)
	c.write64(RegMHIDATABASELower, RegMHIDATABASEHigher, 0)
	c.write64(RegMHICTRLLIMITLower, RegMHICTRLLIMITHigh, pci.Limit4G-1)
	c.write64(RegMHIDATALIMITLower, RegMHIDATALIMITHigh, pci.Limit4G-1)
	c.rmw(RegMHICFG, CfgFieldMask<<CfgNERShift, CfgNERShift, uint32(len(c.events)))
	c.rmw(RegMHICFG, CfgFieldMask<<CfgNHWERShift, CfgNHWERShift, uint32(c.hwRings))
	return nil
}

// missionModeTransition runs once the device reported EE AMSS and M0
// (§4.5 step 6): check BHI_EXECENV, take down the channels of the
// environment that ended (SBL's SAHARA), seed the hardware event rings.
func (c *Controller) missionModeTransition(ctx context.Context) error {
	ee := EE(c.read(c.bhiOff + BHIExecEnv))
	if !ee.MissionMode() {
		return fmt.Errorf("mhi: %s: EE event said mission mode but BHI_EXECENV is %s: %w", c.name, ee, ErrProtocol)
	}
	for _, ch := range c.channels {
		if ch != nil {
			ch.eeEnded(ctx, ee)
		}
	}
	for _, er := range c.events {
		if er.cfg.Hardware() {
			er.seed()
		}
	}
	c.mu.Lock()
	c.ee = ee
	c.mission = true
	c.broadcast()
	c.mu.Unlock()
	c.log.Info("mission mode", "dev", c.name, "ee", ee)
	return nil
}

// --- interrupts --------------------------------------------------------------

func (c *Controller) startInterrupts() error {
	want := 1 + len(c.events)
	irqs := c.dev.Interrupts()
	if m := irqs.Max(); want > m {
		want = 1
	}
	vecs, err := irqs.Enable(want)
	if err != nil {
		return fmt.Errorf("mhi: %s: enable %d MSI vectors: %w", c.name, want, err)
	}
	c.vectors = vecs
	shared := len(vecs) < 1+len(c.events)
	if shared != c.shared {
		c.shared = shared
		for _, er := range c.events {
			er.initContext(shared)
		}
	}
	for _, v := range vecs {
		c.wg.Add(1)
		go c.interruptLoop(v)
	}
	c.startLiveness()
	return nil
}

func (c *Controller) stopInterrupts() {
	c.stopLiveness()
	if c.vectors == nil {
		return
	}
	_ = c.dev.Interrupts().Disable()
	c.vectors = nil
}

// interruptLoop is the MSI handler of one vector: vector 0 is BHI_INTVEC
// (state and EE changes, SYS_ERR); vector i+1 belongs to event ring i.
// Rings with a client (link endpoints) are only notified, like an MSI
// handler calling napi_schedule; the others are processed here.
func (c *Controller) interruptLoop(v pci.Vector) {
	defer c.wg.Done()
	for {
		if _, err := v.Wait(); err != nil {
			return
		}
		c.stats.Interrupts.Add(1)
		idx := v.Index()
		if idx == 0 {
			c.intvec()
		}
		for _, er := range c.events {
			if er.vector() == idx {
				er.interrupt()
			}
		}
	}
}

// intvec handles the BHI/INTVEC interrupt: wake every state waiter and
// check for SYS_ERR (§4.8 first detection path).
func (c *Controller) intvec() {
	c.checkStatus("INTVEC")
	c.mu.Lock()
	c.broadcast()
	c.mu.Unlock()
}

// --- control events ----------------------------------------------------------

// onStateChange handles a STATE_CHANGE event from the control ring. It
// reports whether the caller must re-ring the doorbells (M0 entered); the
// caller does so once it holds no ring lock.
func (c *Controller) onStateChange(s State) (reRing bool) {
	c.mu.Lock()
	if c.pm == pmShutdown {
		// A change the device reports while PowerDown tears it down
		// (a late M0, READY after the reset) is not a live device.
		c.mu.Unlock()
		c.log.Debug("ignoring state change during power-down", "dev", c.name, "state", s)
		return false
	}
	if s != StateSysErr {
		// sysErrDetected records SYS_ERR itself; setting it here
		// first would make it think the episode is already handled.
		c.devState = s
	}
	switch s {
	case StateM0:
		switch c.pm {
		case pmPOR, pmM0, pmM2, pmM3, pmM3Exit:
			c.pm = pmM0
		}
		// Every M0 entry re-rings, in any EE (Linux
		// mhi_pm_m0_transition): channels started in SBL have TREs
		// queued while in M3 as well. Also when the host thought it
		// was in M0 already: the device put its burst channels back
		// in doorbell mode, maybe while one was being prepared and
		// had rung once (docs/QUIRKS.md, "M0 during a burst channel's
		// preparation").
		reRing = c.pm == pmM0
	case StateM1:
		// The device went idle; acknowledge with M2 (§4.6).
		if c.pm == pmM0 {
			c.pm = pmM2
			c.devState = StateM2
			c.mu.Unlock()
			c.rmw(RegMHICTRL, CtrlStateMask, CtrlStateShift, uint32(StateM2))
			c.mu.Lock()
		}
	case StateM3:
		if c.pm == pmM3Enter {
			c.pm = pmM3
		}
	case StateSysErr:
		c.mu.Unlock()
		c.sysErrDetected(c.currentEE(), "STATE_CHANGE event")
		c.mu.Lock()
	}
	c.broadcast()
	c.mu.Unlock()
	if s == StateM0 {
		c.wake(false)
	}
	return reRing
}

// onEE handles an EE_EVENT: record the environment; the goroutine driving
// power-up or recovery does the transition work.
func (c *Controller) onEE(e EE) {
	c.mu.Lock()
	c.eeChangeLocked(e)
	c.broadcast()
	hook := c.eeHook
	c.mu.Unlock()
	if hook != nil {
		hook(e)
	}
}

func (c *Controller) eeChangeLocked(e EE) {
	switch e {
	case EESBL, EEAMSS, EEWFW, EEFP, EERDDM:
		c.ee = e
	default:
		c.log.Warn("ignoring EE event", "dev", c.name, "ee", e)
	}
}

// eeChanges are the EE_EVENTs of one pass over the control ring that came
// one after another (Linux pm.c, "bus: mhi: host: Process execution
// environment changes serially"; docs/QUIRKS.md, "Back-to-back EE
// changes"). They are applied in order under one hold of the controller's
// lock, before the next event of another type: an SBL that announces
// itself and mission mode back to back is never seen in the SBL by a
// client, which would otherwise start the SBL's channels (SAHARA) in an
// environment the device has already left.
type eeChanges struct {
	ees [4]EE
	n   int
}

func (q *eeChanges) add(e EE) {
	if q.n == len(q.ees) {
		// Only the order matters: the oldest of a longer run is
		// superseded by the ones after it.
		copy(q.ees[:], q.ees[1:])
		q.n--
	}
	q.ees[q.n] = e
	q.n++
}

// apply records the changes in order and wakes the waiters once.
func (q *eeChanges) apply(c *Controller) {
	if q.n == 0 {
		return
	}
	c.mu.Lock()
	for _, e := range q.ees[:q.n] {
		c.eeChangeLocked(e)
	}
	c.broadcast()
	ee, hook := c.ee, c.eeHook
	c.mu.Unlock()
	q.n = 0
	if hook != nil {
		hook(ee)
	}
}

// reRingAll runs after an M0 transition (Linux mhi_pm_m0_transition):
// in mission mode the event-ring and command doorbells; in every EE burst
// channels back in doorbell mode and every channel with queued TREs rung.
func (c *Controller) reRingAll() {
	c.mu.Lock()
	mission := c.mission
	c.mu.Unlock()
	if mission {
		for _, er := range c.events {
			er.ringDoorbell()
		}
		c.cmd.reRing(c)
	}
	for _, ch := range c.channels {
		ch.reRing()
	}
}

// wake writes the device-wake doorbell (channel 127): 1 to bring a device
// in M2 back to M0, 0 to release it once it is there. Profiles with
// sideband wake never use it (§4.6).
func (c *Controller) wake(assert bool) {
	if c.prof.SidebandWake {
		return
	}
	c.mu.Lock()
	if c.wakeAsserted == assert || c.chdbOff == 0 {
		c.mu.Unlock()
		return
	}
	c.wakeAsserted = assert
	c.mu.Unlock()
	v := uint64(0)
	if assert {
		v = 1
	}
	c.doorbell(c.chdbOff+WakeDoorbellChannel*DoorbellStride, v)
}

// --- SYS_ERR and recovery ------------------------------------------------------

// sysErrDetected starts recovery once per SYS_ERR episode. During power-up
// the waits fail instead, and the caller reports the error.
func (c *Controller) sysErrDetected(ee EE, how string) {
	c.mu.Lock()
	if c.closed || c.pm == pmRemoved || c.pm == pmDisabled || c.pm == pmShutdown || c.devState == StateSysErr || c.recoveryStopped != nil {
		c.mu.Unlock()
		return
	}
	c.stats.SysErrs.Add(1)
	if c.poweringUp || c.recovering {
		// The goroutine driving power-up or recovery sees its waits
		// fail and handles it.
		c.devState = StateSysErr
		c.dmaFence = c.dmaFence || c.recovering
		c.broadcast()
		c.mu.Unlock()
		return
	}
	c.devState = StateSysErr
	ctx := c.beginRecoveryLocked()
	c.mu.Unlock()
	c.log.Warn("SYS_ERR detected", "dev", c.name, "via", how, "ee", ee)
	go c.recover(ctx)
}

// beginRecoveryLocked marks the controller recovering, for the recovery
// goroutine the caller starts next with the context returned (which
// PowerDown and Close cancel); that goroutine calls c.wg.Done, then
// finishRecovery. The caller holds c.mu.
func (c *Controller) beginRecoveryLocked() context.Context {
	c.recovering = true
	c.pm = pmSysErrProcess
	c.mission = false
	c.dmaFence = true
	ctx, cancel := context.WithCancel(context.Background())
	c.cancelRecovery = cancel
	c.broadcast()
	c.wg.Add(1)
	return ctx
}

// recoveryAttempts bounds how often recovery restarts when the device
// fails again while recovering.
const recoveryAttempts = 3

// recover is the SYS_ERR recovery goroutine, in the order of Linux
// mhi_pm_sys_error_transition (docs/RELIABILITY.md, "The recovery
// sequence"): channels down host-side (Queue fails, completions are
// dropped) but their buffers left with the device; EventSysErr; MHI reset,
// which stops the device's DMA; only then buffers back to the clients and
// rings rewound; PBL or READY transition again; then every channel whose
// client still wants it (not reset since) is started again. A SYS_ERR at
// any point before recovery ends, the restarts included, makes it go
// round again (at most recoveryAttempts times), then the function-level
// reset (flr.go) is the last resort. Every crash into RDDM, the first and
// any during recovery, has its RAM dump collected before the reset that
// follows it (rddm.go). The CrashLoopLimit-th SYS_ERR within
// CrashLoopWindow is not recovered from (crashloop.go).
func (c *Controller) recover(ctx context.Context) {
	defer c.wg.Done()
	start := time.Now()
	c.quiesceChannels(ErrSysErr)
	c.emit(Event{Kind: EventSysErr, Err: ErrSysErr})
	c.collectCrashDump(ctx) // rddm.go: only a device in EE RDDM
	if err := c.noteCrash(start); err != nil {
		c.stopForCrashLoop(ctx, err) // crashloop.go
		c.finishRecovery(ctx, start, err)
		return
	}
	var err error
	for attempt, flr := 1, false; ; {
		if flr {
			err = c.recoverByFunctionReset(ctx, fmt.Errorf("MHI reset: %w", err)) // flr.go
		} else if err = c.recoverDevice(ctx); err == nil {
			err = c.restartChannels(ctx)
		}
		if err == nil {
			if c.recoveryEndHook != nil {
				c.recoveryEndHook()
			}
			if err = c.endRecovery(start); err == nil {
				break
			}
		}
		if flr || ctx.Err() != nil || c.opts.NoRecovery || errors.Is(err, ErrRemoved) {
			break
		}
		if !errors.Is(err, ErrSysErr) {
			flr = true
			continue
		}
		// The device failed again. If it crashed into RDDM, this
		// crash's RAM dump is collected too, before the next reset
		// (a retry's or the function-level one) loses it.
		if attempt == recoveryAttempts {
			c.collectCrashDump(ctx)
			flr = true
			continue
		}
		attempt++
		c.log.Warn("SYS_ERR again during recovery; retrying", "dev", c.name, "attempt", attempt, "err", err)
		c.quiesceChannels(ErrSysErr)
		c.mu.Lock()
		c.pm = pmSysErrProcess
		c.mission = false
		c.dmaFence = true
		c.mu.Unlock()
		c.collectCrashDump(ctx)
	}
	c.finishRecovery(ctx, start, err)
}

// finishRecovery ends a recovery goroutine's run: EventRecovered when err
// is nil (endRecovery has cleared recovering), else the buffers back if no
// MHI reset will ever complete, pmFatal (unless removed or closed) and
// EventRecoveryFailed.
func (c *Controller) finishRecovery(ctx context.Context, start time.Time, err error) {
	if err == nil {
		c.stats.Recoveries.Add(1)
		c.log.Info("device recovered", "dev", c.name, "took", time.Since(start))
		c.emit(Event{Kind: EventRecovered, EE: c.currentEE()})
		return
	}
	if ctx.Err() == nil && c.dmaFenced() {
		// No MHI reset completed and none will: the buffers go back
		// without the device confirming it stopped (PowerDown and
		// Close, which cancel ctx, reset the device first instead).
		c.reclaim(ErrSysErr)
	}
	c.mu.Lock()
	c.recovering = false
	c.cancelRecovery()
	if c.pm != pmRemoved && !c.closed {
		c.pm = pmFatal
	}
	c.broadcast()
	c.mu.Unlock()
	c.log.Error("recovery failed", "dev", c.name, "err", err)
	c.emit(Event{Kind: EventRecoveryFailed, Err: err})
}

// endRecovery ends a recovery whose device is back and whose channels are
// started again, unless the device failed again meanwhile: a SYS_ERR that
// sysErrDetected recorded after the last wait that would have seen it
// (the last START_CHAN completed, then the modem crashed), or one
// MHISTATUS shows but no interrupt has reported yet. Then it returns
// ErrSysErr and recovery goes round again; no SYS_ERR is lost. The check
// and the end of recovering are one critical section: a SYS_ERR detected
// after it starts a recovery of its own.
func (c *Controller) endRecovery(start time.Time) error {
	st, ee, removed := c.deviceStatus()
	if removed {
		c.markRemoved()
		return fmt.Errorf("mhi: %s: %w", c.name, ErrRemoved)
	}
	if State(Field(st, StatusStateMask, StatusStateShift)) == StateSysErr {
		c.sysErrDetected(ee, "MHISTATUS at the end of recovery")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.devState == StateSysErr {
		return fmt.Errorf("mhi: %s: SYS_ERR again after the channel restarts: %w", c.name, ErrSysErr)
	}
	c.recovering = false
	c.cancelRecovery()
	c.lastRecover = time.Since(start)
	c.broadcast()
	return nil
}

// recoverDevice resets the device, reclaims the buffers once the reset has
// stopped its DMA, and boots it to mission mode again.
func (c *Controller) recoverDevice(ctx context.Context) error {
	if c.opts.NoRecovery {
		return fmt.Errorf("mhi: %s: automatic recovery disabled: %w", c.name, ErrSysErr)
	}
	if err := c.mhiReset(ctx); err != nil {
		return err
	}
	c.reclaim(ErrSysErr)
	_, ee, removed := c.deviceStatus()
	if removed {
		return ErrRemoved
	}
	c.mu.Lock()
	c.ee = ee
	c.mu.Unlock()
	return c.bootToMission(ctx, ee)
}

// restartChannels starts again, UL before DL, every channel whose client
// still wants it running.
func (c *Controller) restartChannels(ctx context.Context) error {
	for num := 0; num < MaxChannels; num++ {
		if ch := c.channels[num]; ch != nil {
			if err := ch.restart(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// quiesceChannels takes every channel down host-side without reclaiming
// its buffers (SYS_ERR: the device may still write them until the MHI
// reset).
func (c *Controller) quiesceChannels(cause error) {
	for _, ch := range c.channels {
		ch.quiesce(cause)
	}
}

// reclaim runs once the device's DMA has stopped (the MHI reset completed,
// or the device is gone): every channel's buffers go back to their
// clients, the rings rewind, and Resets waiting in waitDMAStopped go on.
func (c *Controller) reclaim(cause error) {
	c.resetHostState(cause)
	c.mu.Lock()
	c.dmaFence = false
	c.broadcast()
	c.mu.Unlock()
}

func (c *Controller) dmaFenced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dmaFence
}

// waitDMAStopped waits while a SYS_ERR has left the device's DMA running:
// until recovery's MHI reset (or PowerDown's) has completed. It returns at
// once otherwise, and gives up when ctx ends, the wait exceeds twice the
// command timeout, the controller is closed or the device is removed.
func (c *Controller) waitDMAStopped(ctx context.Context) error {
	if !c.dmaFenced() {
		return nil
	}
	return c.waitFor(ctx, c.stateBound().twice(), "the MHI reset to stop the device's DMA", func() (bool, error) {
		return !c.dmaFence, nil
	})
}

// resetHostState takes every channel down host-side (no commands) and
// returns their buffers to the clients; the caller has made sure the
// device no longer writes them.
func (c *Controller) resetHostState(cause error) {
	for num := 0; num < MaxChannels; num++ {
		if ch := c.channels[num]; ch != nil {
			ch.abort(cause)
		}
	}
	c.rewindRings()
}

// rewindRings resets command and event ring pointers, local and in the
// contexts, to rbase (§2.4).
func (c *Controller) rewindRings() {
	c.cmd.rewind(c)
	for _, er := range c.events {
		er.rewind()
	}
}

// --- M3 suspend / M0 resume ----------------------------------------------------

// Suspend moves the device to M3 (§4.6): write MHICTRL = M3 and wait for
// STATE_CHANGE(M3). Running channels become SUSPENDED on the device;
// their TREs stay queued. Like Linux mhi_pm_suspend, it refuses while UL
// transfers are outstanding: the error wraps ErrBusy (and syscall.EBUSY),
// the device stays in M0, and the caller retries once they completed. On
// a profile with NoM3 it returns an error wrapping errors.ErrUnsupported
// at once, without touching the device.
func (c *Controller) Suspend(ctx context.Context) error {
	// No doorbell may be between its check and its write while the
	// state leaves M0/M2 (dbGate).
	c.dbGate.Lock()
	c.mu.Lock()
	unlock := func() {
		c.mu.Unlock()
		c.dbGate.Unlock()
	}
	if err := c.operationalLocked(); err != nil {
		unlock()
		return fmt.Errorf("mhi: %s: suspend: %w", c.name, err)
	}
	if c.pm != pmM0 && c.pm != pmM2 {
		unlock()
		return fmt.Errorf("mhi: %s: suspend from %s: %w", c.name, c.pm, ErrState)
	}
	if c.prof.NoM3 {
		// The device rejects M3 (docs/QUIRKS.md, "No M3"): asking
		// would leave the host waiting for a STATE_CHANGE that never
		// comes. Nothing is written; the device stays in M0.
		unlock()
		return fmt.Errorf("mhi: %s: suspend: model %s has no M3 (profile NoM3): %w", c.name, c.prof.Name, errors.ErrUnsupported)
	}
	if ch := c.pendingULLocked(); ch != nil {
		unlock()
		return fmt.Errorf("mhi: %s: suspend: %s has %d UL transfers outstanding: %w", c.name, ch, ch.Outstanding(), ErrBusy)
	}
	c.pm = pmM3Enter
	unlock()
	c.rmw(RegMHICTRL, CtrlStateMask, CtrlStateShift, uint32(StateM3))
	err := c.waitFor(ctx, c.stateBound(), "M3", func() (bool, error) {
		if c.pm == pmSysErrProcess {
			return false, ErrSysErr
		}
		return c.devState == StateM3, nil
	})
	if err != nil {
		return err
	}
	c.stats.Suspends.Add(1)
	c.emit(Event{Kind: EventSuspended})
	return nil
}

// pendingULLocked returns a UL channel with TREs the device has not
// completed (Linux pending_pkts counts UL packets only: DL channels always
// have receive buffers queued), or nil.
func (c *Controller) pendingULLocked() *Channel {
	for num := 0; num < MaxChannels; num++ {
		ch := c.channels[num]
		if ch != nil && !ch.Inbound() && ch.Outstanding() > 0 {
			return ch
		}
	}
	return nil
}

// Resume brings a suspended device back to M0; queued TREs are rung. A
// device that is no longer in M3 lost power while suspended (D3cold,
// docs/QUIRKS.md): it is recovered like after a SYS_ERR, and Resume
// returns once the recovery ended, its channels started again.
func (c *Controller) Resume(ctx context.Context) error {
	st, ee, err := c.suspendedStatus("resume")
	if err != nil {
		return err
	}
	// All-ones from a function that still answers config reads is a
	// BAR not readable yet, not a state: resume as usual.
	if s := State(Field(st, StatusStateMask, StatusStateShift)); st != 0xFFFFFFFF && s != StateM3 {
		return c.resumeByRecovery(ctx, s, ee, "power lost in suspend")
	}
	// Doorbells are allowed again from M3 exit on, but only after
	// MHICTRL = M0 is written: both happen under dbGate.
	c.dbGate.Lock()
	c.mu.Lock()
	if c.pm != pmM3 {
		c.mu.Unlock()
		c.dbGate.Unlock()
		return fmt.Errorf("mhi: %s: resume from %s: %w", c.name, c.pm, ErrState)
	}
	c.pm = pmM3Exit
	c.mu.Unlock()
	c.rmw(RegMHICTRL, CtrlStateMask, CtrlStateShift, uint32(StateM0))
	c.dbGate.Unlock()
	err = c.waitFor(ctx, c.stateBound(), "M0", func() (bool, error) {
		if c.pm == pmSysErrProcess {
			return false, ErrSysErr
		}
		return c.pm == pmM0, nil
	})
	if err != nil {
		return err
	}
	c.stats.Resumes.Add(1)
	c.emit(Event{Kind: EventResumed})
	return nil
}

// Restore resumes a suspended device after the host itself was restored
// from a hibernation image (Linux pci-generic mhi_pci_restore: "bus: mhi:
// pci-generic: Fix hibernation"; docs/QUIRKS.md, "Hibernation"). The
// device may hold ring pointers of another session (a restore kernel that
// brought MHI up with its own contexts), which the host's memory, back
// from the image, no longer matches: it is not resumed but reset, booted,
// its contexts programmed again and its channels started again, as in
// SYS_ERR recovery. Restore returns once that ended; call it instead of
// Resume after a hibernation.
func (c *Controller) Restore(ctx context.Context) error {
	st, ee, err := c.suspendedStatus("restore")
	if err != nil {
		return err
	}
	return c.resumeByRecovery(ctx, State(Field(st, StatusStateMask, StatusStateShift)), ee, "restore from hibernation")
}

// suspendedStatus checks that the host suspended the device and reads
// its status register and EE for op (resume, restore); a device gone
// from the bus is marked removed.
func (c *Controller) suspendedStatus(op string) (uint32, EE, error) {
	c.mu.Lock()
	pm := c.pm
	c.mu.Unlock()
	if pm != pmM3 {
		return 0, 0, fmt.Errorf("mhi: %s: %s from %s: %w", c.name, op, pm, ErrState)
	}
	st, ee, removed := c.deviceStatus()
	if removed {
		c.markRemoved()
		return 0, 0, fmt.Errorf("mhi: %s: %s: %w", c.name, op, ErrRemoved)
	}
	return st, ee, nil
}

// resumeByRecovery resumes a device found in state s at resume, why
// says why it cannot simply be resumed: power was lost in suspend and it
// is back at its power-on state (Linux pci_generic queues its recovery
// instead of failing the resume), or the host was restored from
// hibernation (Restore). The SYS_ERR recovery (recover) resets it, boots
// it and starts the channels again; Resume waits for it to end.
func (c *Controller) resumeByRecovery(ctx context.Context, s State, ee EE, why string) error {
	c.mu.Lock()
	if c.pm != pmM3 || c.recovering {
		c.mu.Unlock()
		return fmt.Errorf("mhi: %s: resume from %s: %w", c.name, c.pm, ErrState)
	}
	c.devState = s
	rctx := c.beginRecoveryLocked()
	c.mu.Unlock()
	c.log.Warn("device not resumable; recovering it", "dev", c.name, "why", why, "state", s, "ee", ee)
	go c.recover(rctx)
	err := c.waitFor(ctx, c.prof.readyBound().twice(), "recovery after "+why, func() (bool, error) {
		return !c.recovering, nil
	})
	if err != nil {
		return fmt.Errorf("mhi: %s: resume: %w", c.name, err)
	}
	c.mu.Lock()
	ok := c.mission && c.pm == pmM0
	pm := c.pm
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("mhi: %s: resume: recovery after %s left the device in %s: %w", c.name, why, pm, ErrSysErr)
	}
	c.stats.Resumes.Add(1)
	c.emit(Event{Kind: EventResumed})
	return nil
}

// --- power-down and close --------------------------------------------------------

// PowerDown resets the device gracefully (Linux mhi_pm_disable_transition):
// channels reset, MHICTRL.RESET, wait for it to clear and for READY, then
// interrupts off. The controller can be powered up again.
func (c *Controller) PowerDown(ctx context.Context) error {
	c.mu.Lock()
	if c.pm == pmDisabled {
		c.mu.Unlock()
		return nil
	}
	wasMission := c.mission && c.pm != pmRemoved
	c.mu.Unlock()
	if wasMission {
		for num := MaxChannels - 1; num >= 0; num-- {
			if ch := c.channels[num]; ch != nil && ch.running() {
				if err := ch.Reset(ctx); err != nil {
					c.log.Warn("channel reset at power-down", "dev", c.name, "ch", num, "err", err)
				}
			}
		}
	}
	c.mu.Lock()
	if c.cancelRecovery != nil {
		c.cancelRecovery()
	}
	c.mu.Unlock()
	c.waitRecoveryDone(ctx)
	c.mu.Lock()
	removed := c.pm == pmRemoved
	c.mission = false
	c.pm = pmShutdown // no doorbells, no state changes from here on
	c.mu.Unlock()
	var err error
	if !removed {
		if err = c.mhiReset(ctx); err == nil {
			rerr := c.waitFor(ctx, c.prof.readyBound(), "READY after the power-down reset", func() (bool, error) {
				return c.read(RegMHISTATUS)&StatusReady != 0, nil
			})
			if rerr != nil {
				c.log.Warn("device not READY after power-down reset", "dev", c.name, "err", rerr)
			}
			if c.prof.ResetOnRemove {
				if err = c.resetSoC(ctx); err != nil {
					c.log.Warn("SoC reset at power-down", "dev", c.name, "err", err)
				}
			}
		}
	}
	c.stopInterrupts()
	c.wg.Wait()
	c.reclaim(ErrNotRunning)
	c.initContexts()
	c.mu.Lock()
	if c.pm != pmRemoved {
		c.pm = pmDisabled
	}
	c.devState = StateReset
	c.broadcast()
	c.mu.Unlock()
	c.emit(Event{Kind: EventPowerDown})
	return err
}

// waitRecoveryDone waits (bounded) for a running recovery to finish.
func (c *Controller) waitRecoveryDone(ctx context.Context) {
	_ = c.waitFor(ctx, c.stateBound().twice(), "recovery to finish", func() (bool, error) { return !c.recovering, nil })
}

// Close powers the device down (bounded by the profile timeout), stops
// every goroutine and frees the DMA memory. The pci.Device stays open; its
// owner closes it.
func (c *Controller) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.timeout)
	defer cancel()
	err := c.PowerDown(ctx)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.broadcast()
	c.mu.Unlock()
	c.stopInterrupts()
	c.wg.Wait()
	c.reclaim(ErrClosed)
	c.freeMemory()
	if errors.Is(err, ErrRemoved) {
		err = nil
	}
	return err
}

func (c *Controller) freeMemory() {
	dma := c.dev.DMA()
	for _, ch := range c.channels {
		ch.ring.free(dma)
	}
	for _, er := range c.events {
		er.ring.free(dma)
	}
	c.cmd.ring.free(dma)
	for _, b := range []*pci.Buffer{c.chanCtx, c.evCtx, c.cmdCtx} {
		if b != nil {
			_ = dma.Free(b)
		}
	}
	c.chanCtx, c.evCtx, c.cmdCtx = nil, nil, nil
}
