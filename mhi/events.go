package mhi

import (
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi/pci"
)

// EventRing is one event ring: the device writes events at its rp, the
// host consumes them and hands slots back by advancing wp (docs/PROTOCOL.md
// §2.2, §5.5).
//
// A ring is either managed by the controller (its interrupts process it,
// and channel completions go to ChannelOptions.OnComplete) or, after
// SetNotify, polled by a client: the interrupt only calls the notify
// function, and the client calls Poll from its own goroutine, NAPI style.
type EventRing struct {
	c      *Controller
	idx    int
	cfg    EventRingConfig
	ring   ring
	ctxOff int
	chans  []*Channel

	mu     sync.Mutex // one consumer at a time
	active bool       // seeded; false while the controller rewinds rings
	rp, wp uint32     // host-local read index, and the last slot handed back
	msivec int

	notify atomic.Pointer[func()]

	events  atomic.Uint64
	invalid atomic.Uint64
	dbs     atomic.Uint64
}

// Completion is one completed transfer buffer.
type Completion struct {
	Channel *Channel
	// Buf is the buffer that was queued; Len the bytes transferred into
	// (DL) or out of (UL) it.
	Buf *pci.Buffer
	Len int
	// Code is EOT, EOB or OVERFLOW; OVERFLOW means the packet continues
	// in the next buffer of the same channel.
	Code Code
}

// Index returns the ring's number.
func (er *EventRing) Index() int { return er.idx }

// Config returns the ring's profile entry.
func (er *EventRing) Config() EventRingConfig { return er.cfg }

// SetNotify hands the ring to a client: interrupts call fn (which must not
// block; it should only schedule the client's poller) instead of
// processing events. nil returns the ring to the controller.
func (er *EventRing) SetNotify(fn func()) {
	if fn == nil {
		er.notify.Store(nil)
		return
	}
	er.notify.Store(&fn)
}

// EventRingStats are per-ring counters.
type EventRingStats struct {
	Events, Invalid, Doorbells uint64
}

// Stats returns the ring's counters.
func (er *EventRing) Stats() EventRingStats {
	return EventRingStats{Events: er.events.Load(), Invalid: er.invalid.Load(), Doorbells: er.dbs.Load()}
}

func (er *EventRing) vector() int {
	er.mu.Lock()
	defer er.mu.Unlock()
	return er.msivec
}

// initContext writes the ring's context: valid, INTMODT from the profile,
// the MSI vector (ring index + 1, or 0 when vectors are shared), and an
// empty ring at rbase.
func (er *EventRing) initContext(shared bool) {
	er.mu.Lock()
	defer er.mu.Unlock()
	er.msivec = er.idx + 1
	if shared {
		er.msivec = 0
	}
	b, o := er.c.evCtx, er.ctxOff
	b.Store32(o+CtxW0, uint32(er.cfg.IntModMs)<<EvIntModTShift)
	b.Store32(o+CtxW1, EvTypeValid)
	b.Store32(o+CtxW2, uint32(er.msivec))
	b.Store64(o+CtxRBase, er.ring.base)
	b.Store64(o+CtxRLen, er.ring.len())
	b.Store64(o+CtxRP, er.ring.base)
	b.Store64(o+CtxWP, er.ring.base)
	er.rp, er.wp, er.active = 0, 0, false
}

// rewind resets the ring to empty, locally and in its context (§2.4).
func (er *EventRing) rewind() {
	er.mu.Lock()
	defer er.mu.Unlock()
	b, o := er.c.evCtx, er.ctxOff
	b.Store64(o+CtxRP, er.ring.base)
	b.Store64(o+CtxWP, er.ring.base)
	er.rp, er.wp, er.active = 0, 0, false
}

// seed gives the device the whole ring: wp = last element, written to the
// context and rung (§2.2, pm.c READY and mission-mode transitions).
func (er *EventRing) seed() {
	er.mu.Lock()
	er.wp = er.ring.n - 1
	er.c.evCtx.Store64(er.ctxOff+CtxWP, er.ring.iova(er.wp))
	er.active = true
	er.mu.Unlock()
	er.ringDoorbell()
}

func (er *EventRing) ringDoorbell() {
	er.mu.Lock()
	defer er.mu.Unlock()
	if er.active {
		er.doorbellLocked()
	}
}

func (er *EventRing) doorbellLocked() {
	er.c.dbGate.RLock()
	defer er.c.dbGate.RUnlock()
	if !er.c.doorbellAllowed() {
		return
	}
	er.dbs.Add(1)
	er.c.doorbell(er.c.erdbOff+uint64(er.idx)*DoorbellStride, er.ring.iova(er.wp))
}

// interrupt runs on the ring's MSI: notify the client or process here.
func (er *EventRing) interrupt() {
	if fn := er.notify.Load(); fn != nil {
		(*fn)()
		return
	}
	var reRing bool
	// EE changes read back to back are applied together (eeChanges):
	// nobody acts on an environment the device has already left.
	var ees eeChanges
	n := er.process(int(er.ring.n), func(e Element) bool {
		if e.Type() == TypeEEEvent {
			ees.add(e.EE())
			return true
		}
		ees.apply(er.c)
		if er.dispatchManaged(e) {
			reRing = true
		}
		return true
	})
	ees.apply(er.c)
	if reRing {
		// Outside the ring lock: re-ringing takes every ring's lock.
		er.c.reRingAll()
	}
	if n == 0 && er.idx == 0 {
		// A control-ring interrupt without events: the device may have
		// entered SYS_ERR (§4.8 third detection path).
		er.c.checkAlive()
	}
}

// Poll processes up to budget events (each may complete several buffers)
// and calls fn for every completed buffer, then rings the ring's doorbell
// once. It returns the number of events processed; fewer than budget (and
// than the ring's size, the most one call reads) means the ring was empty
// when Poll looked. Only one goroutine may poll a ring
// at a time; fn may queue buffers on any channel.
func (er *EventRing) Poll(budget int, fn func(Completion)) int {
	return er.process(budget, func(e Element) bool { er.dispatchData(e, fn); return true })
}

// PollCharged is Poll for a ring that several channels complete on (a
// pair whose UL and DL share an event ring): only events of channel
// charge count against budget, as NAPI counts only RX work; the others
// (UL completions) are handled for free, at most one ring's worth of
// events per call in all. It returns the number of charged events.
func (er *EventRing) PollCharged(budget int, charge *Channel, fn func(Completion)) int {
	num := charge.cfg.Num
	return er.process(budget, func(e Element) bool {
		er.dispatchData(e, fn)
		return e.Type() == TypeTxEvent && int(e.Chan()) == num
	})
}

// Pending reports whether the device has posted events not yet consumed
// (the re-check after re-arming a client poller).
func (er *EventRing) Pending() bool {
	er.mu.Lock()
	defer er.mu.Unlock()
	if !er.active {
		return false
	}
	dev, ok := er.deviceRP()
	return ok && dev != er.rp
}

// deviceRP reads and validates the device-written context rp.
func (er *EventRing) deviceRP() (uint32, bool) {
	p := er.c.evCtx.Load64(er.ctxOff + CtxRP)
	i, ok := er.ring.index(p)
	if !ok {
		er.invalid.Add(1)
		er.c.stats.InvalidEvents.Add(1)
	}
	return i, ok
}

// process is the consumer loop shared by managed and polled rings: read
// events between the local rp and the device's rp (re-read when caught
// up) until budget of them were charged (handle reports whether an event
// counts) or one ring's worth was read, hand each slot back, then one
// doorbell. It returns the charged events.
func (er *EventRing) process(budget int, handle func(Element) bool) int {
	er.mu.Lock()
	defer er.mu.Unlock()
	if !er.active || budget <= 0 {
		return 0
	}
	dev, ok := er.deviceRP()
	if !ok {
		return 0
	}
	n, read := 0, uint32(0)
	for n < budget && read < er.ring.n {
		if er.rp == dev {
			if dev, ok = er.deviceRP(); !ok || er.rp == dev {
				break
			}
		}
		e := DecodeElement(er.ring.element(er.rp))
		er.rp = er.ring.next(er.rp)
		er.wp = er.ring.next(er.wp)
		read++
		if handle(e) {
			n++
		}
		if !er.active {
			// A handler rewound the ring (SYS_ERR seen mid-pass).
			return n
		}
	}
	if read > 0 {
		er.events.Add(uint64(read))
		er.c.stats.Events.Add(uint64(read))
		er.c.evCtx.Store64(er.ctxOff+CtxWP, er.ring.iova(er.wp))
		er.doorbellLocked()
	}
	return n
}

// dispatchManaged handles any event type; it runs for controller-managed
// rings (the control ring and unclaimed data rings). It reports whether
// the doorbells must be re-rung (an M0 transition in mission mode).
func (er *EventRing) dispatchManaged(e Element) (reRing bool) {
	switch e.Type() {
	case TypeStateChange:
		return er.c.onStateChange(e.State())
	case TypeEEEvent:
		er.c.onEE(e.EE())
	case TypeCmdComplete:
		er.c.cmd.complete(er.c, e.Ptr, e.Code())
	case TypeTxEvent:
		er.dispatchData(e, func(cpl Completion) {
			if cb := cpl.Channel.opts.OnComplete; cb != nil {
				cb(cpl)
			}
		})
	case TypeBWReqEvent, TypeTsyncEvent:
		// Link bandwidth and time sync requests: nothing to do here.
	case typeStale:
	default:
		er.invalid.Add(1)
		er.c.stats.InvalidEvents.Add(1)
	}
	return false
}

// dispatchData handles a transfer event; data rings ignore other types.
func (er *EventRing) dispatchData(e Element, fn func(Completion)) {
	if e.Type() != TypeTxEvent {
		if e.Type() != typeStale {
			er.invalid.Add(1)
			er.c.stats.InvalidEvents.Add(1)
		}
		return
	}
	ch := er.channel(int(e.Chan()))
	if ch == nil {
		er.invalid.Add(1)
		er.c.stats.InvalidEvents.Add(1)
		return
	}
	if !ch.complete(e, fn) {
		er.invalid.Add(1)
		er.c.stats.InvalidEvents.Add(1)
	}
}

func (er *EventRing) channel(num int) *Channel {
	for _, ch := range er.chans {
		if ch.cfg.Num == num {
			return ch
		}
	}
	return nil
}

// typeStale marks events of a reset channel that were not yet processed
// (host-internal, Linux MHI_PKT_TYPE_STALE_EVENT).
const typeStale = 0x51

// markStale overwrites the type of unconsumed events for channel num so
// they are skipped (the device never rewrites a slot it has published).
func (er *EventRing) markStale(num int) {
	er.mu.Lock()
	defer er.mu.Unlock()
	if !er.active {
		return
	}
	dev, ok := er.deviceRP()
	if !ok {
		return
	}
	for i, n := er.rp, uint32(0); i != dev && n < er.ring.n; i, n = er.ring.next(i), n+1 {
		el := er.ring.element(i)
		e := DecodeElement(el)
		if e.Type() == TypeTxEvent && int(e.Chan()) == num {
			e.D1 = e.D1&^(0xFF<<16) | typeStale<<16
			e.Encode(el)
		}
	}
}
