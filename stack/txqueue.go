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

// newTXQueue returns the queueing discipline for a queue of n packets
// over lower, and the writer that lets Close stop waiting on a modem that
// takes nothing more.
func newTXQueue(lower gstack.LinkWriter, n int) (gstack.QueueingDiscipline, *txWriter) {
	w := &txWriter{lower: lower}
	// One queue: its goroutine batches packets for the link's single UL
	// ring (one doorbell per batch) and keeps every flow in order.
	return fifo.New(w, 1, n), w
}

// txWriter is what the queue's goroutine writes to. Once Close has begun
// and the link has returned a short count (no ring space within its
// TXTimeout: the modem takes no more UL transfers), the rest of the queue
// is dropped at once rather than waiting TXTimeout per batch, so that
// Close does not wait for each of up to TXQueueLen/47 batches.
type txWriter struct {
	lower   gstack.LinkWriter
	closing atomic.Bool
	stuck   atomic.Bool
}

// WritePackets implements stack.LinkWriter.
func (w *txWriter) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	if w.stuck.Load() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	n, err := w.lower.WritePackets(pkts)
	if n < pkts.Len() && w.closing.Load() {
		w.stuck.Store(true)
	}
	return n, err
}
