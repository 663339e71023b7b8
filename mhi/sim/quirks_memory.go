package sim

import "github.com/mhistack/mhistack/mhi"

// The quirks of device-written memory (docs/QUIRKS.md): a device writes
// the host's contexts and event rings, and what it writes there may be
// stale, misaligned or ahead of what it did. The host must take none of
// it on trust.

// badCHDBOff is the CHDBOFF QuirkBadOffsets reports: the last doorbell
// of the BAR, so that channel doorbells 1..127 would fall outside it.
const badCHDBOff = barSize - mhi.DoorbellStride

// eeChangeQuirks plays the quirks due at an EE change, right after its
// EE_EVENT was posted on the control ring. The caller holds m.mu.
func (m *Modem) eeChangeQuirks() {
	if m.quirks.has(QuirkStaleERWP) {
		m.staleEventWP()
	}
	if m.quirks.has(QuirkUnalignedERRP) {
		m.unalignedEventRP()
	}
}

// staleEventWP writes every started event ring's context wp back to the
// ring's base, the wp of the context as the host first initialised it
// (before it handed the ring over), as an SBL that flushes its whole
// event context at the EE change does. The wp is host-owned: a host that
// derives its next wp from the context (read-modify-write) instead of
// its own copy then hands the device a wp a ring's worth behind.
func (m *Modem) staleEventWP() {
	for i := range m.ers {
		er := &m.ers[i]
		if !er.started {
			continue
		}
		old := er.ring.base
		err := m.host.DMAWrite32(er.ctx+mhi.CtxWP, uint32(old))
		if err == nil {
			err = m.host.DMAWrite32(er.ctx+mhi.CtxWP+4, uint32(old>>32))
		}
		if err != nil {
			m.dmaFailed(err, "writing back a stale event ring wp", er.ctx)
			return
		}
	}
}

// unalignedEventRP stores each data event ring's context rp 8 bytes
// before its true rp (inside the ring, not on an element boundary) and
// raises the ring's MSI. The true rp is stored again with the ring's
// next event. A host that rounds the pointer to an element walks the
// whole ring of stale elements.
func (m *Modem) unalignedEventRP() {
	for i := 1; i < len(m.ers) && i < m.hc.ner; i++ {
		er := &m.ers[i]
		if !m.startEventRing(er) {
			continue
		}
		bad := er.rp - 8
		if er.rp == er.ring.base {
			bad = er.ring.end() - 8
		}
		if err := m.host.DMAWrite32(er.ctx+mhi.CtxRP, uint32(bad)); err != nil {
			m.dmaFailed(err, "storing an unaligned event ring rp", er.ctx)
			return
		}
		m.raise(er.vec)
	}
}

// strayCompletion posts, before the event of the non-chained UL TRE at
// addr, an EOT event naming the TRE three slots on: an event whose TRE
// the device has not read (or the host not queued), as a device that
// moves its rp before it writes the event body does. The caller holds
// m.mu.
func (m *Modem) strayCompletion(c *channel, addr uint64, n int) {
	p := addr
	for range 3 {
		p = c.ring.next(p)
	}
	m.post(c.er, mhi.TxEvent(p, n, mhi.CodeEOT, c.num), false)
}
