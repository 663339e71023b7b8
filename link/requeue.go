package link

import (
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

// UL frames across a SYS_ERR. The frames on the UL ring when the modem
// fails were never sent: the device never completed them. Dropping them
// (mhi_net frees them) loses, among data, the ACKs of every download in
// flight, and a TCP peer that does not hear its window was received
// waits a retransmission timeout, resends what the host already has, and
// takes the ACK of that resend, which echoes the timestamp of the last
// segment before the fault (RFC 7323 §4.3), as an RTT sample as long as
// the timeout: its RTO grows with every SYS_ERR. So the endpoint keeps
// them: from EventSysErr until the channel is back, the UL buffers the
// MHI reset hands back (in ring order) are held with their frame lengths,
// and on EventRecovered they are queued again, in order, before anything
// else is rung (docs/RELIABILITY.md, "The stall after SYS_ERR"). A frame
// the device had read but not completed may reach the network twice; IP
// allows that, TCP ignores it.
//
// The frames written while the channel is down are kept the same way,
// after those: dropping them loses the tail of whatever TCP sent during
// the fault (a window opened by the last ACKs, a retransmission), which
// only a retransmission timeout repairs. And the layer above can ask for
// the same while its data session is down and expected back (PauseTX,
// ResumeTX): the stack does, so that a session re-established after a
// modem reset with the same addresses loses nothing it sent meanwhile.
// What is held is bounded by the TX pool: a writer that finds no free
// TX buffer while frames are held fails at once (TXDrops.Held) instead
// of waiting for completions that cannot come.

// heldFrame is a UL frame kept off the ring: its buffer, its length and
// the packets in it (several when the framing aggregates UL).
type heldFrame struct {
	buf  *pci.Buffer
	n    int
	pkts int
}

// ulHold is the TX side's hold state.
type ulHold struct {
	// idx maps a TX buffer to its index in lens; built by init, read
	// only afterwards.
	idx map[*pci.Buffer]int
	// lens is the length of the frame each buffer last carried and
	// pkts the packets in it, set by queueFrame (under txState.mu), read
	// by hold (a Release callback).
	lens, pkts []atomic.Int32

	// active says frames written now are held (sysErr or paused); the
	// writers read it without mu.
	active atomic.Bool

	mu      sync.Mutex
	sysErr  bool        // EventSysErr until EventRecovered
	paused  bool        // PauseTX until ResumeTX
	ring    []heldFrame // handed back by the SYS_ERR's reset, in ring order
	written []heldFrame // written while active, in order
}

func (h *ulHold) init(all []*pci.Buffer) {
	h.idx = make(map[*pci.Buffer]int, len(all))
	for i, b := range all {
		h.idx[b] = i
	}
	h.lens = make([]atomic.Int32, len(all))
	h.pkts = make([]atomic.Int32, len(all))
	h.ring = make([]heldFrame, 0, len(all))
	h.written = make([]heldFrame, 0, len(all))
}

// queued notes the length of the frame b carries now and its packets.
func (h *ulHold) queued(b *pci.Buffer, n, pkts int) {
	if i, ok := h.idx[b]; ok {
		h.lens[i].Store(int32(n))
		h.pkts[i].Store(int32(pkts))
	}
}

// setActiveLocked updates active from the flags.
func (h *ulHold) setActiveLocked() { h.active.Store(h.sysErr || h.paused) }

// startSysErr begins holding (EventSysErr).
func (h *ulHold) startSysErr() {
	h.mu.Lock()
	h.sysErr = true
	h.setActiveLocked()
	h.mu.Unlock()
}

// hold keeps b if a SYS_ERR is being recovered; false means it is not and
// b goes back to the free list.
func (h *ulHold) hold(b *pci.Buffer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, ok := h.idx[b]
	if !h.sysErr || !ok || len(h.ring) == cap(h.ring) {
		return false
	}
	h.ring = append(h.ring, heldFrame{b, int(h.lens[i].Load()), int(h.pkts[i].Load())})
	return true
}

// keep holds a frame a writer built (under txState.mu); false means
// nothing is held any more and the frame goes on the ring.
func (h *ulHold) keep(b *pci.Buffer, n, pkts int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.sysErr && !h.paused || len(h.written) == cap(h.written) {
		return false
	}
	h.written = append(h.written, heldFrame{b, n, pkts})
	return true
}

// take returns the held frames, ring first, and forgets them (ownership
// passes to the caller). The caller holds h.mu.
func (h *ulHold) takeLocked() []heldFrame {
	if len(h.ring)+len(h.written) == 0 {
		return nil
	}
	out := make([]heldFrame, 0, len(h.ring)+len(h.written))
	out = append(append(out, h.ring...), h.written...)
	clear(h.ring)
	clear(h.written)
	h.ring, h.written = h.ring[:0], h.written[:0]
	return out
}

// endSysErr ends the SYS_ERR hold (EventRecovered) and returns the
// frames to send, unless TX is paused: then they stay held.
func (h *ulHold) endSysErr() []heldFrame {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sysErr = false
	h.setActiveLocked()
	if h.paused {
		return nil
	}
	return h.takeLocked()
}

// pause begins holding what is written (PauseTX).
func (h *ulHold) pause() {
	h.mu.Lock()
	h.paused = true
	h.setActiveLocked()
	h.mu.Unlock()
}

// resume ends a pause. With send, it returns the frames to send (none
// while a SYS_ERR is being recovered: they go at EventRecovered);
// without, the frames to drop.
func (h *ulHold) resume(send bool) []heldFrame {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = false
	h.setActiveLocked()
	if send && h.sysErr {
		return nil
	}
	return h.takeLocked()
}

// drop ends the SYS_ERR hold and returns every held frame (the device is
// gone, recovery failed, the endpoint closes). A pause stays in effect.
func (h *ulHold) drop() []heldFrame {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sysErr = false
	h.setActiveLocked()
	return h.takeLocked()
}

// PauseTX holds the UL frames written from now on instead of sending
// them, until ResumeTX: the layer above calls it when its data session
// is lost but expected back with the same addresses (a modem reset, a
// network reattach), so that what TCP sends meanwhile is not lost. At
// most the TX pool (Options.TXBuffers) is held; writes beyond it fail at
// once and are counted in TXDrops.Held.
func (e *Endpoint) PauseTX() { e.tx.hold.pause() }

// ResumeTX ends PauseTX. With send, the held frames are queued in the
// order they were written (after a SYS_ERR recovery in progress, once it
// ends); without, they are dropped and counted in TXDrops.Held (the
// session came back with other addresses, or not at all).
func (e *Endpoint) ResumeTX(send bool) {
	// lifeMu as a writer: Close frees the buffers.
	e.lifeMu.RLock()
	defer e.lifeMu.RUnlock()
	// Under t.mu: no writer queues between the decision and the queueing.
	e.tx.mu.Lock()
	held := e.tx.hold.resume(send)
	if send {
		e.queueHeldLocked(held)
	} else {
		e.dropFramesLocked(held)
	}
	e.tx.mu.Unlock()
	e.tx.flush()
}

// requeueHeld queues the frames a SYS_ERR took off the UL ring, and those
// written during it, again, in their order, and rings once
// (EventRecovered, on a controller goroutine: it does not wait for ring
// space). What does not fit, or everything if the endpoint is closing,
// goes back to the free list.
func (e *Endpoint) requeueHeld() {
	t := &e.tx
	t.mu.Lock()
	e.queueHeldLocked(t.hold.endSysErr())
	t.mu.Unlock()
	t.flush()
}

// queueHeldLocked queues held frames in order and rings; the caller holds
// t.mu.
func (e *Endpoint) queueHeldLocked(held []heldFrame) {
	if len(held) == 0 {
		return
	}
	t := &e.tx
	n, lost := 0, 0
	for _, f := range held {
		if e.closed.Load() || f.n <= 0 || e.ul.Queue(f.buf, f.n, mhi.EOT) != nil {
			t.put(f.buf)
			lost += f.pkts
			continue
		}
		t.hold.queued(f.buf, f.n, f.pkts)
		t.unrung = true
		n++
	}
	e.ringUL()
	e.stats.txRequeued.Add(uint64(n))
	e.stats.txHeldDrops.Add(uint64(lost))
}

// dropFramesLocked returns held frames to the free list, their packets
// counted.
func (e *Endpoint) dropFramesLocked(held []heldFrame) {
	for _, f := range held {
		e.tx.put(f.buf)
		e.stats.txHeldDrops.Add(uint64(f.pkts))
	}
}

// dropHeld returns held frames to the free list (the endpoint closes, or
// the device is gone).
func (e *Endpoint) dropHeld() {
	for _, f := range e.tx.hold.drop() {
		e.tx.put(f.buf)
		e.stats.txHeldDrops.Add(uint64(f.pkts))
	}
	e.tx.flush()
}
