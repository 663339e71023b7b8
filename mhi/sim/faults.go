package sim

import (
	"bytes"
	"fmt"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// Fault injection. The modem injects the faults that are the device's own
// doing; the ones that happen on the link are the bus's:
//
//   - dropped or delayed MSIs: (*vpci.Device).SetMSIFilter, which sees every
//     MSI the modem raises (event rings and INTVEC alike);
//   - surprise removal: (*vpci.Device).Remove — registers read all-ones and
//     DMA fails; the modem notices only through failing DMA and goes quiet
//     (such failures are not reported as host violations);
//   - DMA faults: any pointer the host did not map is refused by the vpci
//     IOMMU and reported by the modem as a violation naming the pointer.

// TriggerSysErr makes the modem crash (§8.6): channels stop, MHISTATUS
// reads SYS_ERR, STATE_CHANGE(SYS_ERR) is posted on event ring 0 (when the
// host has set it up, and not in M3, where the host may have turned bus
// mastering off) and the INTVEC MSI fires. It returns once the state
// is visible. After the host's MHI reset the modem comes back READY in
// AMSS (or PBL with Options.LoseFirmwareOnSysErr). It must not be called
// from a Function callback.
func (m *Modem) TriggerSysErr() error { return m.call(reqSysErr) }

// SysErrOnStart makes the modem crash like TriggerSysErr right after it
// has posted the completion of the n-th successful START_CHAN from now
// (counting every channel's; n <= 0 cancels): the host gets its START
// completed and, in the same pass of the device, MHISTATUS = SYS_ERR,
// STATE_CHANGE(SYS_ERR) and the INTVEC MSI. It fires once. It is how a
// test makes the modem fail at a precise point of the host's channel
// start-up, e.g. just after SYS_ERR recovery restarted the last channel.
func (m *Modem) SysErrOnStart(n int) {
	m.mu.Lock()
	m.sysErrOnStart = max(n, 0)
	m.mu.Unlock()
}

// Hang makes the modem crash like TriggerSysErr, but wedged: it ignores
// MHICTRL from then on, so MHICTRL.RESET is never cleared and MHISTATUS
// stays SYS_ERR, and recovery through MHI reset cannot succeed. Only a
// function-level reset (pci.Device.Reset) or a SoC reset brings it back,
// in Options.Boot (PBL or AMSS) like hardware after a reset. It returns
// once the state is visible and must not be called from a Function
// callback.
func (m *Modem) Hang() error { return m.call(reqHang) }

// EnterM1 makes the modem go idle (§4.6, device-initiated M0 → M1): it
// sends STATE_CHANGE(M1); the host answers with MHICTRL = M2 and brings it
// back with the wake doorbell. It returns ErrState unless the modem is in
// M0. It must not be called from a Function callback.
func (m *Modem) EnterM1() error { return m.call(reqM1) }

// SetSlow makes the modem slow: it sleeps d for every TRE it processes and
// every event it posts (0 restores full speed). Use it to test host
// timeouts and backpressure.
func (m *Modem) SetSlow(d time.Duration) { m.slow.Store(int64(d)) }

// HoldCommands makes the modem leave the command ring unread while hold is
// true, as firmware too busy to service it: the host's commands wait for
// completions that do not come (and time out), and whatever the host rang
// meanwhile is processed, in order, once hold is false again. It is how a
// test keeps a command in flight for as long as it needs.
func (m *Modem) HoldCommands(hold bool) {
	m.holdCmds.Store(hold)
	if !hold {
		m.mu.Lock()
		m.cmdPending = true
		m.mu.Unlock()
		m.signal()
	}
}

// FailNextBHI makes the next BHI download fail with BHI_ERRCODE code
// (non-zero), as a corrupt or rejected image would.
func (m *Modem) FailNextBHI(code uint32) {
	m.mu.Lock()
	m.boot.failNext = code
	m.mu.Unlock()
}

// InjectEvent posts ev on event ring i exactly as the modem posts its own
// events (element, then rp, then an immediate MSI). It is how a test plays
// a buggy or hostile device: an event naming a TRE the host never queued,
// a bad completion code, a channel that does not exist. It must not be
// called from a Function callback.
func (m *Modem) InjectEvent(i int, ev mhi.Element) error {
	return m.callRequest(&request{kind: reqInject, done: make(chan error, 1), ring: i, ev: ev})
}

// CorruptEventRP stores rp in event ring i's context read pointer and
// raises the ring's MSI, as a buggy or hostile device would: the value
// need not lie inside the ring, and the device's own rp is left as it was,
// so its next event stores a sane rp again. The ring must have been
// started (the device has posted on it, or the host rang its doorbell). It
// must not be called from a Function callback.
func (m *Modem) CorruptEventRP(i int, rp uint64) error {
	return m.callRequest(&request{kind: reqCorruptRP, done: make(chan error, 1), ring: i, rp: rp})
}

// corruptEventRP is CorruptEventRP on the device goroutine; the caller
// holds m.mu.
func (m *Modem) corruptEventRP(i int, rp uint64) error {
	if i < 0 || i >= maxEventRings || !m.startEventRing(&m.ers[i]) {
		return fmt.Errorf("sim: event ring %d is not usable", i)
	}
	er := &m.ers[i]
	// High word first: the host reads the 64-bit rp at once, and either
	// order is a torn value a hostile device could produce anyway.
	if err := m.host.DMAWrite32(er.ctx+mhi.CtxRP+4, uint32(rp>>32)); err != nil {
		return err
	}
	er.rpHi = uint32(rp >> 32)
	if err := m.host.DMAWrite32(er.ctx+mhi.CtxRP, uint32(rp)); err != nil {
		return err
	}
	m.raise(er.vec)
	return nil
}

// slowdown applies SetSlow.
func (m *Modem) slowdown() {
	if d := m.slow.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
}

// busMaster reports whether the function may master the bus: a device
// whose bus mastering is off issues no DMA at all.
func (m *Modem) busMaster() bool { return m.host.BusMaster() }

// DrainPattern is the byte a modem with Options.DrainDMAOnSysErr writes
// into the DL buffers it still holds after a SYS_ERR.
const DrainPattern = 0xDD

// dmaSpan is one host buffer the device writes.
type dmaSpan struct {
	iova uint64
	n    int
}

// holdDLBuffers records, at a SYS_ERR, the buffers of every DL TRE the
// modem holds (Options.DrainDMAOnSysErr). The caller holds m.mu.
func (m *Modem) holdDLBuffers() {
	m.draining = m.draining[:0]
	for _, c := range m.chans {
		if c == nil || c.ul || !m.canTransfer(c) {
			continue
		}
		m.refresh(c)
		var buf [mhi.ElementSize]byte
		for p, n := c.rp, uint64(0); p != c.wp && n < c.ring.n; p, n = c.ring.next(p), n+1 {
			if err := m.host.DMARead(p, buf[:]); err != nil {
				m.dmaFailed(err, "reading a DL TRE", p)
				break
			}
			if el := mhi.DecodeElement(buf[:]); el.Type() == mhi.TypeTransfer && el.Len() > 0 {
				m.draining = append(m.draining, dmaSpan{iova: el.Ptr, n: el.Len()})
			}
		}
	}
}

// drainDMA writes DrainPattern into every held buffer (the DMA engine
// draining after a SYS_ERR). The caller holds m.mu.
func (m *Modem) drainDMA() {
	if len(m.draining) == 0 || !m.busMaster() {
		return // no DMA without bus mastering
	}
	for _, s := range m.draining {
		if err := m.host.DMAWrite(s.iova, drainBytes(s.n)); err != nil {
			m.dmaFailed(err, "draining DMA into a DL buffer after SYS_ERR", s.iova)
		}
	}
}

var drainBuf = bytes.Repeat([]byte{DrainPattern}, mhi.MaxTRELen)

func drainBytes(n int) []byte { return drainBuf[:min(n, len(drainBuf))] }

// ChannelRing, EventRing and CommandRing return where a ring lies in host
// memory as the modem read it from the host's context: its first
// element's IOVA and its element count; ok is false while the modem has
// not read it (channel not started, MHI not in M0; an event ring's
// context is read on demand). They let a hostile-device test name elements inside the host's
// rings, as a real device could.
func (m *Modem) ChannelRing(num int) (base uint64, n int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if num < 0 || num >= len(m.chans) || m.chans[num] == nil || !m.chans[num].started {
		return 0, 0, false
	}
	return ringSpan(m.chans[num].ring)
}

// EventRing: see ChannelRing.
func (m *Modem) EventRing(i int) (base uint64, n int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < 0 || i >= maxEventRings {
		return 0, 0, false
	}
	if m.ers[i].started {
		return ringSpan(m.ers[i].ring)
	}
	// Not used yet: read its context as the first event will, without
	// starting it.
	if !m.hc.valid || i >= m.hc.ner {
		return 0, 0, false
	}
	ctx, err := ctxRead(m.host, m.hc.ecabap+uint64(i)*mhi.ContextSize)
	if err != nil {
		return 0, 0, false
	}
	r, err := newRing(ctx.RBase, ctx.RLen)
	if err != nil {
		return 0, 0, false
	}
	return ringSpan(r)
}

// CommandRing: see ChannelRing.
func (m *Modem) CommandRing() (base uint64, n int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.cmd.started {
		return 0, 0, false
	}
	return ringSpan(m.cmd.ring)
}

func ringSpan(r ring) (base uint64, n int, ok bool) {
	return r.base, int(r.size / mhi.ElementSize), r.size > 0
}

// armCrashLoop starts Options.CrashLoop's clock when the modem arrives in
// AMSS in M0 (from READY, or from the SBL). The caller holds m.mu.
func (m *Modem) armCrashLoop() {
	if m.opts.CrashLoop > 0 && m.ee == mhi.EEAMSS {
		m.crashAt = m.now().Add(m.opts.CrashLoop)
	}
}

// crashLoop crashes the firmware (SYS_ERR) once Options.CrashLoop has
// passed since the modem arrived in AMSS, if it is still there and awake:
// a modem running an image that does not fit it (the wrong variant's
// firmware) crashes the same way after every recovery. The caller holds
// m.mu.
func (m *Modem) crashLoop(now time.Time) {
	if m.crashAt.IsZero() || now.Before(m.crashAt) {
		return
	}
	m.crashAt = zeroTime
	if m.ee != mhi.EEAMSS {
		return
	}
	switch m.state {
	case mhi.StateM0, mhi.StateM1, mhi.StateM2:
		m.log.Warn("crash loop: the firmware crashes again (SYS_ERR)", "after", m.opts.CrashLoop)
		m.enterSysErr()
	}
}
