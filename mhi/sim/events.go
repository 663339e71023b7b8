package sim

import (
	"sync"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// eventRing is the device side of one event ring (§2.2, §8.3): the device
// owns rp, the host owns wp. It is started lazily on first use, as the EP
// does, and forgotten by an MHI reset.
type eventRing struct {
	idx     int
	started bool
	broken  bool // context unusable; reported once, events dropped
	ring    ring
	ctx     uint64 // IOVA of the context
	rp, wp  uint64
	rpHi    uint32 // high word of rp as last stored in the context
	dbSeq   uint32 // doorbell commits consumed
	vec     int
	intmodt time.Duration
	// stalled: the ring stayed full for EventWait. Later events are
	// dropped at once until the host rings the doorbell again, so that a
	// host that stopped consuming cannot hold the device for EventWait
	// per event.
	stalled bool
}

// startEventRing reads the context of event ring i (§8.3 step 1). The
// write offset starts at rp; the host's doorbell supplies wp.
func (m *Modem) startEventRing(er *eventRing) bool {
	if er.started {
		return true
	}
	if er.broken {
		return false
	}
	if !m.hc.valid {
		return false
	}
	if er.idx >= m.hc.ner {
		er.broken = true
		m.violate(ruleEventRingIndex, "event on ring %d but MHICFG.NER is %d", er.idx, m.hc.ner)
		return false
	}
	addr := m.hc.ecabap + uint64(er.idx)*mhi.ContextSize
	ctx, err := ctxRead(m.host, addr)
	if err != nil {
		er.broken = true
		m.dmaFailed(err, "reading event ring context", addr)
		return false
	}
	r, err := newRing(ctx.RBase, ctx.RLen)
	if err == nil && !r.contains(ctx.RP) {
		err = errRP
	}
	if err != nil || ctx.W1 != mhi.EvTypeValid {
		er.broken = true
		if err == nil {
			m.violate(ruleEventCtx, "event ring %d context ertype %d, want %d (valid)", er.idx, ctx.W1, mhi.EvTypeValid)
		} else {
			m.violate(ruleEventCtx, "event ring %d context: %v (rp %#x)", er.idx, err, ctx.RP)
		}
		return false
	}
	er.ring, er.ctx = r, addr
	er.rp, er.wp = ctx.RP, ctx.RP
	er.rpHi = uint32(ctx.RP >> 32)
	er.vec = int(ctx.W2)
	if er.vec >= m.id.MSIVectors {
		m.violate(ruleEventCtx, "event ring %d msivec %d, the device has %d vectors", er.idx, er.vec, m.id.MSIVectors)
		er.vec %= m.id.MSIVectors
	}
	er.intmodt = time.Duration(ctx.IntModT()) * time.Millisecond
	er.started = true
	// A doorbell rung before the ring started (the host seeds software
	// rings at READY, §2.2) is the first wp.
	m.erRefresh(er)
	return true
}

// erRefresh takes a newly committed event ring doorbell as wp.
func (m *Modem) erRefresh(er *eventRing) {
	l := m.regs.erLatch(er.idx)
	if l.seq == er.dbSeq {
		return
	}
	er.dbSeq = l.seq
	if !er.ring.contains(l.val) {
		m.violate(ruleDoorbellInRing, "doorbell for event ring %d at %#x outside ring [%#x,%#x)", er.idx, l.val, er.ring.base, er.ring.end())
		return
	}
	er.wp = l.val
}

// post writes one event to ring i, then stores the new rp in the context,
// then raises the MSI subject to moderation (§8.3). bei is the Block Event
// Interrupt flag of the TRE the event completes (false for state, EE,
// command and DB_MODE events, §5.6). It returns false when the event was
// dropped (ring unusable, full for too long, or a reset is pending). The
// caller holds m.mu.
func (m *Modem) post(i int, ev mhi.Element, bei bool) bool {
	if i < 0 || i >= maxEventRings {
		m.stats.eventDrops.Add(1)
		return false
	}
	er := &m.ers[i]
	if !m.startEventRing(er) || !m.eventSpace(er) {
		m.stats.eventDrops.Add(1)
		return false
	}
	ev.Encode(m.evBuf[:])
	if err := m.host.DMAWrite(er.rp, m.evBuf[:]); err != nil {
		m.dmaFailed(err, "writing event", er.rp)
		m.stats.eventDrops.Add(1)
		return false
	}
	er.rp = er.ring.next(er.rp)
	m.stats.events.Add(1)
	if m.batchEvents {
		// postBatch stores rp and signals once for the whole batch.
		return true
	}
	m.publish(er, bei)
	return true
}

// postBatch posts evs on event ring i as one batch: every element is in
// host memory before rp moves past all of them at once, and one MSI
// follows (QuirkEEBackToBack). It reports whether all were posted. The
// caller holds m.mu.
func (m *Modem) postBatch(i int, evs ...mhi.Element) bool {
	m.batchEvents = true
	ok := true
	for _, ev := range evs {
		ok = ok && m.post(i, ev, false)
	}
	m.batchEvents = false
	if i >= 0 && i < maxEventRings {
		m.publish(&m.ers[i], false)
	}
	return ok
}

// publish stores the ring's rp in its context for the host to see and
// signals the event (notify).
func (m *Modem) publish(er *eventRing, bei bool) {
	// The element is in host memory before rp moves (the reordered EP,
	// §8.3 step 3): the host reads elements as soon as it sees rp. IOVAs
	// are below 4 GiB, so the high word rarely needs storing.
	hi := uint32(er.rp >> 32)
	if hi != er.rpHi {
		if err := m.host.DMAWrite32(er.ctx+mhi.CtxRP+4, hi); err != nil {
			m.dmaFailed(err, "storing event ring rp", er.ctx)
		}
		er.rpHi = hi
	}
	if err := m.host.DMAWrite32(er.ctx+mhi.CtxRP, uint32(er.rp)); err != nil {
		m.dmaFailed(err, "storing event ring rp", er.ctx)
	}
	m.notify(er, bei)
	m.slowdown()
}

// eventSpace makes sure the ring has a free element: it re-reads the
// doorbell (the host rings it once per processed batch, §10), and when the
// ring is still full it flushes any moderated MSI (the host may be waiting
// for it before consuming) and waits, bounded, for the host to recycle.
func (m *Modem) eventSpace(er *eventRing) bool {
	if er.ring.eventSpace(er.rp, er.wp) > 0 {
		return true
	}
	seq := er.dbSeq
	m.erRefresh(er)
	if er.ring.eventSpace(er.rp, er.wp) > 0 {
		er.stalled = false
		return true
	}
	if er.stalled && er.dbSeq == seq {
		return false
	}
	m.stats.eventRingFull.Add(1)
	if vec, ok := m.irq.flush(er.idx); ok {
		m.raise(vec)
	}
	deadline := time.Now().Add(m.opts.EventWait)
	for {
		if m.abort.Load() {
			return false
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			er.stalled = true
			m.log.Warn("event ring full: event dropped", "ring", er.idx, "waited", m.opts.EventWait)
			m.violate(ruleEventSpace, "event ring %d stayed full for %v (rp %#x, wp %#x)", er.idx, m.opts.EventWait, er.rp, er.wp)
			return false
		}
		m.waitTimer.Reset(wait)
		select {
		case <-m.erKick:
		case <-m.waitTimer.C:
		case <-m.quit:
			m.waitTimer.Stop()
			return false
		}
		m.waitTimer.Stop()
		m.erRefresh(er)
		if er.ring.eventSpace(er.rp, er.wp) > 0 {
			er.stalled = false
			return true
		}
	}
}

// notify applies BEI + INTMODT moderation (§5.6, the EP intmodt patch):
// BEI = 0 raises the MSI now and cancels a pending one; BEI = 1 with
// INTMODT ≠ 0 schedules one INTMODT later unless one is pending; BEI = 1
// with INTMODT = 0 raises nothing.
func (m *Modem) notify(er *eventRing, bei bool) {
	if !bei || m.opts.DisableModeration {
		m.irq.cancel(er.idx)
		m.raise(er.vec)
		return
	}
	m.stats.msiModerated.Add(1)
	if er.intmodt > 0 {
		m.irq.schedule(er.idx, er.vec, er.intmodt)
	}
}

// raise signals MSI vector vec.
func (m *Modem) raise(vec int) {
	m.stats.msiRaised.Add(1)
	m.host.RaiseMSI(vec)
}

// raiseIntVec signals the BHI_INTVEC vector: BHI status, MHISTATUS and EE
// changes (§9).
func (m *Modem) raiseIntVec() {
	m.raise(int(m.regs.bhiReg(mhi.BHIIntVec) % uint32(m.id.MSIVectors)))
}

// moderator owns the delayed MSIs of moderated event rings. It runs its
// own goroutine so that a delayed MSI fires on time even while the device
// goroutine is busy (e.g. waiting for space in another event ring).
type moderator struct {
	mu   sync.Mutex
	ring [maxEventRings]struct {
		on  bool
		at  time.Time
		vec int
	}
	kick chan struct{}
}

func (mo *moderator) schedule(i, vec int, d time.Duration) {
	mo.mu.Lock()
	p := &mo.ring[i]
	if p.on {
		mo.mu.Unlock()
		return
	}
	p.on, p.at, p.vec = true, time.Now().Add(d), vec
	mo.mu.Unlock()
	select {
	case mo.kick <- struct{}{}:
	default:
	}
}

func (mo *moderator) cancel(i int) {
	mo.mu.Lock()
	mo.ring[i].on = false
	mo.mu.Unlock()
}

// flush cancels a pending MSI of ring i and returns its vector, so the
// caller can raise it now.
func (mo *moderator) flush(i int) (int, bool) {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	p := &mo.ring[i]
	if !p.on {
		return 0, false
	}
	p.on = false
	return p.vec, true
}

func (mo *moderator) cancelAll() {
	mo.mu.Lock()
	for i := range mo.ring {
		mo.ring[i].on = false
	}
	mo.mu.Unlock()
}

// runModerator fires delayed MSIs until quit is closed.
func (m *Modem) runModerator() {
	defer close(m.irqExited)
	mo := &m.irq
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due [maxEventRings]int
	for {
		now := time.Now()
		var next time.Time
		n := 0
		mo.mu.Lock()
		for i := range mo.ring {
			p := &mo.ring[i]
			if !p.on {
				continue
			}
			if !p.at.After(now) {
				p.on = false
				due[n] = p.vec
				n++
			} else if next.IsZero() || p.at.Before(next) {
				next = p.at
			}
		}
		mo.mu.Unlock()
		for _, vec := range due[:n] {
			m.raise(vec)
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t.Reset(wait)
		select {
		case <-m.quit:
			return
		case <-mo.kick:
		case <-t.C:
		}
	}
}
