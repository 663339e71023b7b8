package stack

import (
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/qdisc/fifo"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// The transmit queue (Config.TXQueueLen) is gVisor's fifo queueing
// discipline between the NIC and the link, Linux's qdisc in front of a
// driver that stops its queue when the ring is full. Without it every
// sender writes to the link itself, and the link waits for UL ring space
// (up to its TXTimeout) on the sender's goroutine: a TCP processor
// goroutine shared by many connections, or the link's own poller sending
// a reset from inside delivery, which then stops draining the DL ring the
// modem needs to make UL progress. With it, senders queue and return; one
// goroutine hands batches to the link and is the only one that waits.
//
// That goroutine holds what the link has no room for, as Linux's qdisc
// holds packets while the driver's queue is stopped: the link returns the
// packets it could not queue within its TXTimeout (ErrWouldBlock from
// link.Endpoint.WritePacketsKept) and the goroutine offers them again,
// for as long as the link is up and the stack not closing. Meanwhile the
// queue fills and refuses senders (ErrNoBufferSpace, counted in
// TXDroppedNoBufferSpace, each an error to its writer), and a UDP
// writer's send buffer stays charged with its queued datagrams, so memory
// stays bounded by the queue.

// newTXQueue returns the queueing discipline for a queue of n packets
// over lower, and the writer that lets Close stop waiting on a modem that
// takes nothing more.
func newTXQueue(lower *tap, n int) (gstack.QueueingDiscipline, *txWriter) {
	w := &txWriter{lower: lower}
	// One queue: its goroutine batches packets for the link's single UL
	// ring (one doorbell per batch) and keeps every flow in order.
	return fifo.New(w, 1, n), w
}

// txWriter is what the queue's goroutine writes to. It offers the link
// again what the link kept back for want of room, until Close begins.
// Once Close has begun and the link has returned a short count (no ring
// space within its TXTimeout: the modem takes no more UL transfers), the
// rest of the queue is dropped at once rather than waiting TXTimeout per
// batch, so that Close does not wait for each of up to TXQueueLen/47
// batches; closeDrops counts those packets.
type txWriter struct {
	lower      *tap
	closing    atomic.Bool
	stuck      atomic.Bool
	closeDrops atomic.Uint64
}

// WritePackets implements stack.LinkWriter.
func (w *txWriter) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	if w.stuck.Load() {
		w.closeDrops.Add(uint64(pkts.Len()))
		return 0, &tcpip.ErrClosedForSend{}
	}
	// rest shares pkts's array; popping from it releases nothing (the
	// queue releases the batch when this returns).
	rest, done := pkts, 0
	for again := false; ; again = true {
		n, kept, err := w.lower.writeKept(rest, again)
		n = min(max(n, 0), rest.Len())
		for range n {
			rest.PopFront()
		}
		done += n
		if rest.Len() == 0 {
			return done, nil
		}
		if !kept {
			// The link dropped the rest (and counted it, if it
			// counts).
			if w.closing.Load() {
				w.stuck.Store(true)
			}
			return done, err
		}
		switch err.(type) {
		case *tcpip.ErrWouldBlock:
			// No room within the link's TXTimeout: hold and offer
			// again, unless the stack is closing.
			if w.closing.Load() {
				w.stuck.Store(true)
				w.closeDrops.Add(uint64(rest.Len()))
				return done, &tcpip.ErrClosedForSend{}
			}
		case *tcpip.ErrMessageTooLong:
			// The link dropped and counted that one packet; the rest
			// goes on.
			rest.PopFront()
			done++
			if rest.Len() == 0 {
				return done, nil
			}
		default:
			// Down or closed: the link dropped and counted the rest.
			if w.closing.Load() {
				w.stuck.Store(true)
			}
			return done, err
		}
	}
}
