package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// channel is the device side of one channel (§2.1, §5.4). All fields are
// guarded by Modem.mu except td, which only the device goroutine touches.
type channel struct {
	num  int
	cfg  mhi.ChannelConfig
	ul   bool // even channel: host → device
	pair *pair

	state   mhi.ChanState // the device's view: DISABLED until START
	started bool          // ring cached: START seen, no RESET since
	// eeEnded: the channel ended with its execution environment (the
	// SBL's, at AMSS); the host may ring it until it has handled
	// EE_EVENT(AMSS), and such doorbells are ignored.
	eeEnded bool
	faulted bool // the ring became unreadable; idle until restarted
	ring    ring
	ctx     uint64 // IOVA of the channel context
	rp, wp  uint64
	er      int
	cache   treCache
	dbSeq   uint32 // doorbell commits consumed

	// Burst mode (§5.3): while polling, new TREs are found by reading the
	// context wp; lastNew is when something new was last found (or, on a
	// DL channel, when data started waiting).
	burst bool
	// m0Late: QuirkM0DuringPrepare announces M0 at this burst
	// channel's first doorbell since its START_CHAN.
	m0Late  bool
	polling bool
	lastNew time.Time
	badWP   uint64 // last invalid context wp reported, to report it once
	// watchAt: in doorbell mode after a DB_MODE, when the doorbell-mode
	// watchdog next re-reads the context wp (zero: not watching).
	watchAt time.Time
	// watchMoved: the last look found the context wp moved and no
	// doorbell; the next one (sooner) confirms it.
	watchMoved bool

	// UL: the transfer descriptor being assembled (reused buffer).
	td       []byte
	tdBroken bool

	// DL: data waiting for host buffers, and the senders waiting for
	// room in it.
	q       dlQueue
	room    chan struct{} // closed and replaced when room appears
	waiters int
}

// pair is a UL/DL channel pair with the function behind it (the EP's client
// device, §8.4).
type pair struct {
	name   string
	ul, dl *channel
	fn     Function
	port   *Port // non-nil while the function runs
	// holdUL: UL delivery waits while the DL queue holds data
	// (EchoFunction); ulHeld records that it is waiting.
	holdUL, ulHeld bool
}

func (c *channel) advance() {
	c.rp = c.ring.next(c.rp)
	if c.rp == c.ring.base {
		// Wrapped: the host reuses the slots behind us.
		c.cache.invalidate()
	}
}

// active reports whether the channel was started and not stopped since.
func (c *channel) active() bool {
	return c.started && (c.state == mhi.ChanRunning || c.state == mhi.ChanSuspended)
}

// canTransfer reports whether the device may move data on c now: the
// channel runs and the link is up (M0; M1/M2 are modelled as link states
// in which the emulator keeps servicing rings).
func (m *Modem) canTransfer(c *channel) bool {
	if !c.started || c.faulted || c.state != mhi.ChanRunning {
		return false
	}
	switch m.state {
	case mhi.StateM0, mhi.StateM1, mhi.StateM2:
		return true
	}
	return false
}

// refresh learns the host's new write pointer: a newly committed doorbell
// (which also puts a burst channel in polling mode), and for a polling
// burst channel the context wp in host memory. It reports whether wp moved.
func (m *Modem) refresh(c *channel) bool {
	old := c.wp
	if l := m.regs.chLatch(c.num); l.seq != c.dbSeq {
		c.dbSeq = l.seq
		if c.ring.contains(l.val) {
			c.wp = l.val
			if c.burst && !c.polling {
				c.startPolling()
			}
		} else {
			m.violate(ruleDoorbellInRing, "doorbell for channel %d at %#x outside ring [%#x,%#x)", c.num, l.val, c.ring.base, c.ring.end())
		}
	}
	if c.burst && c.polling {
		if wp, ok := m.ctxWP(c); ok {
			c.wp = wp
		}
	}
	if c.wp != old {
		c.lastNew = time.Now()
		return true
	}
	return false
}

// startPolling puts a burst channel in polling mode (a doorbell, or the
// doorbell-mode watchdog finding the context wp moved).
func (c *channel) startPolling() {
	c.polling = true
	c.lastNew = time.Now()
	c.watchAt, c.watchMoved = zeroTime, false
}

// stopPolling leaves polling mode without a DB_MODE (STOP, RESET, M3):
// the host re-arms doorbell mode itself, so nothing is watched.
func (c *channel) stopPolling() {
	c.polling = false
	c.watchAt, c.watchMoved = zeroTime, false
}

// ctxWP reads c's write pointer from its channel context in host memory.
// A wp outside the ring is a violation (reported once per value) and not
// used; an unreadable context faults the channel.
func (m *Modem) ctxWP(c *channel) (uint64, bool) {
	hi, err1 := m.host.DMARead32(c.ctx + mhi.CtxWP + 4)
	lo, err2 := m.host.DMARead32(c.ctx + mhi.CtxWP)
	switch wp := uint64(hi)<<32 | uint64(lo); {
	case err1 != nil || err2 != nil:
		c.faulted = true
		m.dmaFailed(firstErr(err1, err2), "polling channel context wp", c.ctx+mhi.CtxWP)
	case c.ring.contains(wp):
		return wp, true
	case wp != c.badWP:
		c.badWP = wp
		m.violate(ruleCtxWPInRing, "channel %d context wp %#x outside ring [%#x,%#x)", c.num, wp, c.ring.base, c.ring.end())
	}
	return 0, false
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// fetch returns the TRE at c.rp; the ring must hold one (rp != wp).
func (m *Modem) fetch(c *channel) (mhi.Element, bool) {
	el, err := c.cache.fetch(m.host, c.ring, c.rp, c.wp)
	if err != nil {
		c.faulted = true
		m.dmaFailed(err, "reading a TRE of channel "+c.cfg.Name, c.rp)
		return el, false
	}
	return el, true
}

// readTD consumes UL TREs until a transfer descriptor completes (§5.4 UL):
// each TRE's buffer is read; a TRE with CHAIN gets an EOB event if it asks
// (IEOB), the last TRE of the TD an EOT event if it asks (IEOT); the event
// names that TRE and carries its length. It returns the TD's bytes, valid
// until the next call, or false when no complete TD is available (a
// partial one stays buffered). The caller holds m.mu.
func (m *Modem) readTD(c *channel) ([]byte, bool) {
	for budget := c.ring.n; budget > 0 && c.rp != c.wp && m.canTransfer(c); budget-- {
		el, ok := m.fetch(c)
		if !ok {
			return nil, false
		}
		m.slowdown()
		addr := c.rp
		chain := el.D1&mhi.TREChain != 0
		bei := el.D1&mhi.TREBEI != 0
		code, want := mhi.CodeEOT, el.D1&mhi.TREIEOT != 0
		if chain {
			code, want = mhi.CodeEOB, el.D1&mhi.TREIEOB != 0
		}
		n := el.Len()
		switch {
		case el.Type() != mhi.TypeTransfer:
			m.violate(ruleTREType, "channel %d TRE at %#x has type %#x", c.num, addr, el.Type())
			c.tdBroken = true
			code, want, n = mhi.CodeBadTRE, true, 0
		case n == 0:
		case len(c.td)+n > m.opts.MaxTD:
			// Bytes past the bound are not read; the TD is dropped.
			c.tdBroken = true
		default:
			if !m.hc.inData(el.Ptr, n) {
				m.violate(ruleDMA, "channel %d TRE at %#x: buffer [%#x,+%d) outside MHIDATABASE..MHIDATALIMIT", c.num, addr, el.Ptr, n)
			}
			at := len(c.td)
			c.td = slices.Grow(c.td, n)[:at+n]
			if err := m.host.DMARead(el.Ptr, c.td[at:]); err != nil {
				m.dmaFailed(err, "reading a UL buffer", el.Ptr)
				c.tdBroken = true
				code, want, n = mhi.CodeBadTRE, true, 0
			}
		}
		m.stats.tres.Add(1)
		m.stats.bytesUL.Add(uint64(n))
		c.advance()
		if want && !chain && code == mhi.CodeEOT && m.quirks.has(QuirkStrayCompletion) {
			m.strayCompletion(c, addr, n) // quirks_memory.go
		}
		if want {
			m.post(c.er, mhi.TxEvent(addr, n, code, c.num), bei && code != mhi.CodeBadTRE)
		}
		if chain {
			continue
		}
		td, broken := c.td, c.tdBroken
		c.td, c.tdBroken = c.td[:0], false
		if broken {
			m.stats.ulDrops.Add(1)
			continue
		}
		m.stats.tdsUL.Add(1)
		return td, true
	}
	return nil, false
}

// serviceUL delivers up to budget TDs of c to its function and reports
// whether more may be waiting. The function runs without m.mu held, so it
// may call Send.
func (m *Modem) serviceUL(c *channel, budget int) bool {
	for range budget {
		m.mu.Lock()
		if pr := c.pair; pr.holdUL && pr.dl.q.n > 0 {
			// Resumed by drain when the queue empties.
			pr.ulHeld = true
			m.mu.Unlock()
			return false
		}
		td, ok := m.readTD(c)
		port := c.pair.port
		m.mu.Unlock()
		if !ok {
			return false
		}
		if port == nil {
			// No function behind the pair: the modem is a sink.
			m.stats.ulDrops.Add(1)
			continue
		}
		port.delivering.Store(true)
		c.pair.fn.Receive(td)
		port.delivering.Store(false)
	}
	return true
}

// place writes one DL packet into host buffers from c.rp on (§5.4 DL): one
// TX event per TRE, OVERFLOW when the buffer is full and bytes remain, EOT
// on the last piece. The TRE's IEOB/IEOT flags are ignored on DL, as on the
// EP. It returns how many bytes were placed and whether the packet is done;
// not done means the ring ran out of host buffers. The caller holds m.mu.
func (m *Modem) place(c *channel, pkt []byte) (int, bool) {
	off := 0
	for budget := c.ring.n + 1; budget > 0; budget-- {
		if c.rp == c.wp {
			m.refresh(c)
			if c.rp == c.wp {
				return off, false
			}
		}
		el, ok := m.fetch(c)
		if !ok {
			return off, false
		}
		m.slowdown()
		addr := c.rp
		c.advance()
		m.stats.tres.Add(1)
		if el.Type() != mhi.TypeTransfer {
			m.violate(ruleTREType, "channel %d TRE at %#x has type %#x", c.num, addr, el.Type())
			m.post(c.er, mhi.TxEvent(addr, 0, mhi.CodeBadTRE, c.num), false)
			continue
		}
		n := min(len(pkt)-off, el.Len())
		if n == 0 && off < len(pkt) {
			m.violate(ruleZeroLenTRE, "channel %d DL TRE at %#x has a zero-length buffer", c.num, addr)
		}
		if n > 0 {
			if !m.hc.inData(el.Ptr, n) {
				m.violate(ruleDMA, "channel %d TRE at %#x: buffer [%#x,+%d) outside MHIDATABASE..MHIDATALIMIT", c.num, addr, el.Ptr, n)
			}
			if err := m.host.DMAWrite(el.Ptr, pkt[off:off+n]); err != nil {
				m.dmaFailed(err, "writing a DL buffer", el.Ptr)
				m.post(c.er, mhi.TxEvent(addr, 0, mhi.CodeBadTRE, c.num), false)
				continue
			}
		}
		off += n
		m.stats.bytesDL.Add(uint64(n))
		code := mhi.CodeOverflow
		if off == len(pkt) {
			code = mhi.CodeEOT
		}
		if code == mhi.CodeEOT {
			// Counted before the event is posted: a host that saw
			// the EOT finds it in Stats.
			m.stats.packetsDL.Add(1)
		}
		m.post(c.er, mhi.TxEvent(addr, n, code, c.num), el.D1&mhi.TREBEI != 0)
		if code == mhi.CodeEOT {
			return off, true
		}
	}
	return off, false
}

// drain places queued DL data while host buffers last, and wakes senders
// waiting for queue room. The caller holds m.mu.
func (m *Modem) drain(c *channel) {
	if c.q.n == 0 || !m.canTransfer(c) {
		return
	}
	before := c.q.n
	for c.q.n > 0 {
		k, done := m.place(c, c.q.front())
		if !done {
			c.q.off += k
			break
		}
		c.q.pop()
	}
	if c.q.n < before {
		m.wakeRoom(c)
	}
	if pr := c.pair; pr.ulHeld && c.q.n == 0 {
		pr.ulHeld = false
		m.ulWork.set(pr.ul.num)
		m.signal()
	}
}

// wakeRoom wakes every sender waiting for room in c's queue.
func (m *Modem) wakeRoom(c *channel) {
	if c.waiters > 0 {
		close(c.room)
		c.room = make(chan struct{})
	}
}

// dbMode tells the host the device stopped polling c (§5.3): a TX event
// with code DB_MODE makes the host ring the doorbell again. Its pointer is
// the next TRE slot, which lies inside the ring as the host checks.
func (m *Modem) dbMode(c *channel, now time.Time) {
	c.polling, c.watchMoved = false, false
	if m.opts.DBModeWatchdog > 0 {
		c.watchAt = now.Add(m.opts.DBModeWatchdog)
		m.watchSoon(c.watchAt)
	}
	m.stats.dbMode.Add(1)
	m.post(c.er, mhi.TxEvent(c.rp, 0, mhi.CodeDBMode, c.num), false)
}

// pollBurst services burst channels in polling mode (§5.3): UL channels
// re-read the context wp; DL channels with queued data try to place it.
// After BurstIdle without anything new a channel sends DB_MODE and waits
// for the next doorbell. It reports whether any channel is still polling.
func (m *Modem) pollBurst(now time.Time) bool {
	polling := false
	m.watchNext = zeroTime
	for _, c := range m.burstChans {
		if !c.polling && !c.watchAt.IsZero() && m.canTransfer(c) {
			m.watchDBMode(c, now)
		}
		if !c.polling || !m.canTransfer(c) {
			continue
		}
		if c.ul {
			if m.refresh(c) {
				m.lastActive = now
			}
			if c.rp != c.wp {
				m.ulWork.set(c.num)
				polling = true
				continue
			}
		} else {
			if c.q.n == 0 {
				// Nothing to place: buffers are looked for on demand.
				continue
			}
			m.drain(c)
			if c.q.n == 0 {
				continue
			}
		}
		if now.Sub(c.lastNew) >= m.opts.BurstIdle {
			m.dbMode(c, now)
		} else {
			polling = true
		}
	}
	return polling
}

// watchDBMode is the doorbell-mode watchdog (Options.DBModeWatchdog): a
// burst channel that posted DB_MODE re-reads its context wp every
// DBModeWatchdog and, when the host moved it and still has not rung a
// quarter period later, takes it as the doorbell that never came. Linux's host can lose its doorbell mode
// flag to a DB_MODE that races its own doorbell write
// (docs/KERNEL-CROSSCHECK.md) and then only moves the context wp. It
// records the next check in m.watchNext. The caller holds m.mu.
func (m *Modem) watchDBMode(c *channel, now time.Time) {
	if now.Before(c.watchAt) {
		m.watchSoon(c.watchAt)
		return
	}
	c.watchAt = now.Add(m.opts.DBModeWatchdog)
	if m.regs.chLatch(c.num).seq != c.dbSeq {
		// A doorbell is on its way: chDoorbell takes it.
		c.watchMoved = false
		m.watchSoon(c.watchAt)
		return
	}
	wp, ok := m.ctxWP(c)
	if !ok || wp == c.wp {
		c.watchMoved = false
		m.watchSoon(c.watchAt)
		return
	}
	if !c.watchMoved {
		// The host may be between its context wp write and its
		// doorbell write (behind QEMU, a doorbell is a message to
		// the server): look again a little later.
		c.watchMoved = true
		c.watchAt = now.Add(m.opts.DBModeWatchdog / 4)
		m.watchSoon(c.watchAt)
		return
	}
	m.stats.wpNoDoorbell.Add(1)
	m.log.Info("burst channel's context wp moved without a doorbell in doorbell mode; polling again",
		"channel", c.num, "wp", fmt.Sprintf("%#x", wp))
	c.wp = wp
	c.startPolling()
	m.lastActive = now
	if !c.ul {
		m.drain(c)
	}
}

// watchSoon makes the device goroutine wake up for a watchdog check at t.
func (m *Modem) watchSoon(t time.Time) {
	if m.watchNext.IsZero() || t.Before(m.watchNext) {
		m.watchNext = t
	}
}

// chanBits is a set of channel numbers.
type chanBits [2]uint64

func (b *chanBits) set(n int)          { b[n/64] |= 1 << (n % 64) }
func (b *chanBits) clear(n int)        { b[n/64] &^= 1 << (n % 64) }
func (b *chanBits) has(n int) bool     { return b[n/64]&(1<<(n%64)) != 0 }
func (b *chanBits) or(o [2]uint64)     { b[0] |= o[0]; b[1] |= o[1] }
func (b *chanBits) take() (o chanBits) { o, *b = *b, chanBits{}; return o }

// dlQueue holds DL packets waiting for host buffers: a ring of reusable
// slots, bounded in packets and bytes, so queueing does not allocate once
// the slots have grown.
type dlQueue struct {
	slots      [][]byte
	head, n    int
	bytes      int
	off        int // bytes of the head packet already placed
	limitBytes int
}

func (q *dlQueue) init(packets, bytes int) {
	q.slots = make([][]byte, packets)
	q.limitBytes = bytes
}

// fits reports whether a packet of size bytes may be queued. An empty
// queue takes any one packet, so that a packet larger than the byte bound
// is not refused forever.
func (q *dlQueue) fits(size int) bool {
	return q.n == 0 || q.n < len(q.slots) && q.bytes+size <= q.limitBytes
}

func (q *dlQueue) push(b []byte) {
	i := (q.head + q.n) % len(q.slots)
	q.slots[i] = append(q.slots[i][:0], b...)
	q.n++
	q.bytes += len(b)
}

func (q *dlQueue) front() []byte { return q.slots[q.head][q.off:] }

func (q *dlQueue) pop() {
	q.bytes -= len(q.slots[q.head])
	q.head = (q.head + 1) % len(q.slots)
	q.n--
	q.off = 0
}

// clear empties the queue and returns how many packets were discarded.
func (q *dlQueue) clear() int {
	n := q.n
	q.head, q.n, q.bytes, q.off = 0, 0, 0, 0
	return n
}
