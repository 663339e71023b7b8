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

// heldFrame is a UL frame taken off the ring by a SYS_ERR.
type heldFrame struct {
	buf *pci.Buffer
	n   int
}

// ulHold is the TX side's SYS_ERR state.
type ulHold struct {
	// idx maps a TX buffer to its index in lens; built by init, read
	// only afterwards.
	idx map[*pci.Buffer]int
	// lens is the length of the frame each buffer last carried, set by
	// queueFrame (under txState.mu), read by hold (a Release callback).
	lens []atomic.Int32

	mu      sync.Mutex
	holding bool
	held    []heldFrame
}

func (h *ulHold) init(all []*pci.Buffer) {
	h.idx = make(map[*pci.Buffer]int, len(all))
	for i, b := range all {
		h.idx[b] = i
	}
	h.lens = make([]atomic.Int32, len(all))
	h.held = make([]heldFrame, 0, len(all))
}

// queued notes the length of the frame b carries now.
func (h *ulHold) queued(b *pci.Buffer, n int) {
	if i, ok := h.idx[b]; ok {
		h.lens[i].Store(int32(n))
	}
}

// start begins holding the buffers Release hands back (EventSysErr).
func (h *ulHold) start() {
	h.mu.Lock()
	h.holding = true
	h.mu.Unlock()
}

// hold keeps b if a SYS_ERR is being recovered; false means it is not and
// b goes back to the free list.
func (h *ulHold) hold(b *pci.Buffer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, ok := h.idx[b]
	if !h.holding || !ok || len(h.held) == cap(h.held) {
		return false
	}
	h.held = append(h.held, heldFrame{b, int(h.lens[i].Load())})
	return true
}

// take ends holding and returns the held frames (ownership passes to the
// caller).
func (h *ulHold) take() []heldFrame {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding = false
	if len(h.held) == 0 {
		return nil
	}
	out := append([]heldFrame(nil), h.held...)
	clear(h.held)
	h.held = h.held[:0]
	return out
}

// requeueHeld queues the frames a SYS_ERR took off the UL ring again, in
// their order, and rings once (EventRecovered, on a controller goroutine:
// it does not wait for ring space). What does not fit, or everything if
// the endpoint is closing, goes back to the free list.
func (e *Endpoint) requeueHeld() {
	held := e.tx.hold.take()
	if len(held) == 0 {
		return
	}
	t := &e.tx
	t.mu.Lock()
	n := 0
	for _, f := range held {
		if e.closed.Load() || f.n <= 0 || e.ul.Queue(f.buf, f.n, mhi.EOT) != nil {
			t.put(f.buf)
			continue
		}
		t.hold.queued(f.buf, f.n)
		t.unrung = true
		n++
	}
	e.ringUL()
	t.mu.Unlock()
	t.flush()
	e.stats.txRequeued.Add(uint64(n))
}

// dropHeld returns held frames to the free list (the endpoint closes, or
// the device is gone).
func (e *Endpoint) dropHeld() {
	for _, f := range e.tx.hold.take() {
		e.tx.put(f.buf)
	}
	e.tx.flush()
}
