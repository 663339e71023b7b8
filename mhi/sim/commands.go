package sim

import (
	"github.com/mhistack/mhistack/mhi"
)

// cmdRing is the device side of the command ring (§2.3, §8.4). The device
// keeps its read pointer to itself: the EP never writes the command rp
// back, completions carry the element's address instead.
type cmdRing struct {
	started bool
	ring    ring
	rp      uint64
	dbSeq   uint32
	buf     [mhi.ElementSize]byte
}

// startCommandRing reads the command ring context at the READY → M0
// transition (§8.1 step 5). The context rp is where processing starts.
func (m *Modem) startCommandRing() bool {
	ctx, err := ctxRead(m.host, m.hc.crcbap)
	if err != nil {
		m.dmaFailed(err, "reading the command ring context", m.hc.crcbap)
		return false
	}
	r, err := newRing(ctx.RBase, ctx.RLen)
	if err == nil && !r.contains(ctx.RP) {
		err = errRP
	}
	if err != nil {
		m.violate(ruleRingCtx, "command ring context: %v (rbase %#x rlen %#x rp %#x)", err, ctx.RBase, ctx.RLen, ctx.RP)
		return false
	}
	m.cmd = cmdRing{started: true, ring: r, rp: ctx.RP, dbSeq: m.cmd.dbSeq}
	return true
}

// commandDoorbell processes the commands between the device's read
// pointer and the doorbell value, strictly in order (§8.4). The caller
// holds m.mu.
func (m *Modem) commandDoorbell() {
	l := m.regs.cmdLatch()
	if l.seq == m.cmd.dbSeq {
		return
	}
	if !m.cmd.started {
		m.violate(ruleDoorbellState, "command doorbell while the device is in %s (no command ring until M0)", m.state)
		m.cmd.dbSeq = l.seq
		return
	}
	if m.state == mhi.StateM3 {
		// Processed when the host brings the device back to M0.
		m.violate(ruleDoorbellState, "command doorbell while the device is in M3")
		return
	}
	m.cmd.dbSeq = l.seq
	r := m.cmd.ring
	if !r.contains(l.val) {
		m.violate(ruleDoorbellInRing, "command doorbell at %#x outside ring [%#x,%#x)", l.val, r.base, r.end())
		return
	}
	for budget := r.n; m.cmd.rp != l.val && budget > 0; budget-- {
		addr := m.cmd.rp
		if err := m.host.DMARead(addr, m.cmd.buf[:]); err != nil {
			m.dmaFailed(err, "reading a command element", addr)
			return
		}
		m.command(mhi.DecodeElement(m.cmd.buf[:]), addr)
		// The completion was sent before the read pointer moves.
		m.cmd.rp = r.next(addr)
		if m.state == mhi.StateSysErr || !m.cmd.started {
			return
		}
	}
}

// command executes one command element at addr and posts its completion on
// event ring 0, unless the command is dropped.
func (m *Modem) command(el mhi.Element, addr uint64) {
	m.stats.commands.Add(1)
	typ, n := el.Type(), int(el.Chan())
	var code mhi.Code
	switch typ {
	case mhi.TypeStartCmd, mhi.TypeStopCmd, mhi.TypeResetCmd:
		var c *channel
		if n < mhi.MaxChannels {
			c = m.chans[n]
		}
		if c == nil {
			// Newer EP: an unknown channel's command is dropped
			// without a completion; the host times out.
			m.violate(ruleUnknownChannel, "command %#x for channel %d, which %s does not define: dropped", typ, n, m.p.Name)
			return
		}
		switch typ {
		case mhi.TypeStartCmd:
			code = m.startChannel(c)
		case mhi.TypeStopCmd:
			code = m.stopChannel(c)
		default:
			code = m.resetChannel(c)
		}
		if code == mhi.CodeInvalid {
			return
		}
	case mhi.TypeNoopCmd:
		code = mhi.CodeSuccess
	default:
		m.violate(ruleCommandType, "command element at %#x has type %#x", addr, typ)
		code = mhi.CodeUndefErr
	}
	m.post(0, mhi.CmdCompletionEvent(addr, code), false)
	if typ == mhi.TypeStartCmd && code == mhi.CodeSuccess && m.sysErrOnStart > 0 {
		// SysErrOnStart.
		if m.sysErrOnStart--; m.sysErrOnStart == 0 {
			m.enterSysErr()
		}
	}
}

// startChannel is START_CHAN (§8.4): read the channel context if the ring
// is not started, write CHSTATE RUNNING into the host's context, start the
// pair's function once both channels run.
func (m *Modem) startChannel(c *channel) mhi.Code {
	addr := m.hc.ccabap + uint64(c.num)*mhi.ContextSize
	ctx, err := ctxRead(m.host, addr)
	if err != nil {
		m.dmaFailed(err, "reading a channel context", addr)
		return mhi.CodeUndefErr
	}
	st := ctx.ChanState()
	if st != mhi.ChanEnabled && !(st == mhi.ChanStop && c.started) {
		m.violate(ruleStartCtx, "START_CHAN for channel %d whose context CHSTATE is %s, want ENABLED", c.num, st)
	}
	wantType := mhi.ChanTypeInbound
	if c.ul {
		wantType = mhi.ChanTypeOutbound
	}
	if mhi.ChanType(ctx.W1) != wantType {
		m.violate(ruleChanType, "channel %d context chtype %d, want %d", c.num, ctx.W1, wantType)
	}
	if !c.cfg.EE.Has(m.ee) {
		m.violate(ruleChanEE, "START_CHAN for channel %d %s in EE %s", c.num, c.cfg.Name, m.ee)
		return mhi.CodeUndefErr
	}
	er := int(ctx.W2)
	if er >= m.hc.ner {
		m.violate(ruleEventRingIndex, "channel %d context erindex %d, MHICFG.NER is %d", c.num, er, m.hc.ner)
		return mhi.CodeUndefErr
	}
	if !c.started {
		r, err := newRing(ctx.RBase, ctx.RLen)
		if err == nil && (!r.contains(ctx.RP) || !r.contains(ctx.WP)) {
			err = errRP
		}
		if err != nil {
			m.violate(ruleRingCtx, "START_CHAN for channel %d: %v (rbase %#x rlen %#x rp %#x wp %#x)", c.num, err, ctx.RBase, ctx.RLen, ctx.RP, ctx.WP)
			return mhi.CodeUndefErr
		}
		if !m.hc.inCtrl(r.base, int(r.size)) {
			m.violate(ruleDMA, "channel %d ring [%#x,%#x) outside MHICTRLBASE..MHICTRLLIMIT", c.num, r.base, r.end())
		}
		c.ring, c.ctx = r, addr
		c.rp, c.wp = ctx.RP, ctx.WP
		c.cache.invalidate()
		c.td, c.tdBroken = c.td[:0], false
		c.started, c.eeEnded = true, false
	} else if r := c.ring; r.contains(ctx.WP) {
		// Restart after STOP: the ring and our read pointer stay.
		c.wp = ctx.WP
	}
	// Doorbells rung before the START are not this run's.
	c.dbSeq = m.regs.chLatch(c.num).seq
	c.er = er
	c.faulted = false
	c.burst = ctx.BurstMode()
	c.m0Late = c.burst && m.quirks.has(QuirkM0DuringPrepare)
	c.stopPolling()
	c.badWP = 0
	c.lastNew = m.now()
	if !m.setChanState(c, ctx.W0, mhi.ChanRunning) {
		c.started = false
		return mhi.CodeUndefErr
	}
	m.updatePair(c.pair)
	if c.ul && c.rp != c.wp {
		m.ulWork.set(c.num)
	}
	return mhi.CodeSuccess
}

// stopChannel is STOP_CHAN: the channel must be started (else, like the
// EP, no completion); its function stops; CHSTATE STOP.
func (m *Modem) stopChannel(c *channel) mhi.Code {
	if !c.started && c.eeEnded {
		return m.endedChannelCommand(c, "STOP_CHAN")
	}
	if !c.started {
		m.violate(ruleStopStarted, "STOP_CHAN for channel %d, which is not started", c.num)
		return mhi.CodeInvalid
	}
	w0, err := m.host.DMARead32(c.ctx)
	if err != nil {
		m.dmaFailed(err, "reading a channel context", c.ctx)
	}
	m.setChanState(c, w0, mhi.ChanStop)
	c.stopPolling()
	m.ulWork.clear(c.num)
	m.updatePair(c.pair)
	return mhi.CodeSuccess
}

// resetChannel is RESET_CHAN: the channel must be started; its ring is
// forgotten, its function stops, CHSTATE DISABLED. No TX event for it may
// follow the completion (§10: the host marks later ones stale).
func (m *Modem) resetChannel(c *channel) mhi.Code {
	if !c.started && c.eeEnded {
		return m.endedChannelCommand(c, "RESET_CHAN")
	}
	if !c.started {
		m.violate(ruleStopStarted, "RESET_CHAN for channel %d, which is not started", c.num)
		return mhi.CodeInvalid
	}
	w0, err := m.host.DMARead32(c.ctx)
	if err != nil {
		m.dmaFailed(err, "reading a channel context", c.ctx)
	}
	m.setChanState(c, w0, mhi.ChanDisabled)
	m.forgetChannel(c)
	m.updatePair(c.pair)
	return mhi.CodeSuccess
}

// endedChannelCommand handles a STOP_CHAN or RESET_CHAN for a channel that
// ended with its execution environment (the SBL's, at AMSS). The host may
// send one until it has handled EE_EVENT(AMSS), like a doorbell, so it is
// no violation; the firmware that ran the channel is gone and nothing
// answers it: it is dropped without a completion, as the EP drops a
// command for a channel it does not define (the host's wait ends when it
// learns of the new EE). The caller holds m.mu.
func (m *Modem) endedChannelCommand(c *channel, name string) mhi.Code {
	m.log.Info(name+" for a channel that ended with its EE: dropped", "channel", c.num, "ee", m.ee)
	return mhi.CodeInvalid
}

// forgetChannel drops the ring cache, as a reset does.
func (m *Modem) forgetChannel(c *channel) {
	c.started, c.faulted = false, false
	c.stopPolling()
	c.state = mhi.ChanDisabled
	c.cache.invalidate()
	c.td, c.tdBroken = c.td[:0], false
	m.stats.dlDrops.Add(uint64(c.q.clear()))
	m.ulWork.clear(c.num)
	c.pair.ulHeld = false
}

// setChanState records the channel state and writes it into the host's
// context chcfg (the EP's context cache is host memory, §2.1), keeping
// BRSTMODE and POLLCFG.
func (m *Modem) setChanState(c *channel, w0 uint32, s mhi.ChanState) bool {
	c.state = s
	w0 = w0&^mhi.ChCfgStateMask | uint32(s)
	if err := m.host.DMAWrite32(c.ctx+mhi.CtxW0, w0); err != nil {
		m.dmaFailed(err, "writing a channel context", c.ctx)
		return false
	}
	return true
}
