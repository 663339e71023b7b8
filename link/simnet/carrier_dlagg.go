package simnet

import (
	"sync"
	"time"

	"github.com/mhistack/mhistack/internal/segment"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/mhi/sim"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// DefaultFlushDelay is how long the carrier holds a DL frame for more
// packets after its first one (CarrierOptions.FlushDelay). Modems
// aggregate DL with a time limit as well as the datagram and byte limits
// the host negotiated; 200 µs is long enough to gather a burst of a TCP
// sender's segments (gVisor writes them one by one, microseconds apart)
// and short against any round-trip time, so an idle flow barely notices
// it. Raising it fills frames better under light load at the cost of
// that much latency per packet.
const DefaultFlushDelay = 200 * time.Microsecond

// dlPending is how many full DL frames wait for the sender before a
// writer waits: enough to keep the host's ring busy while the next frame
// fills, small enough that a slow host pushes back on the carrier's TCP
// rather than piling up frames.
const dlPending = 4

// dlAgg is the DL aggregation of a framed pair, as a modem does it. The
// carrier's writers (gVisor goroutines, in WritePackets) add packets to
// the frame being filled; the sender goroutine (runSender, started by
// NewCarrierNetwork, stopped by Close) sends a frame when it is full
// (MaxDatagrams or MaxBytes) or when FlushDelay has passed since its
// first packet. Full frames wait in a queue of dlPending; a writer that
// finds it full waits, which slows the carrier's TCP instead of losing
// its segments. Only the sender calls Port.Send, so frames leave in order.
type dlAgg struct {
	mu      sync.Mutex
	cond    sync.Cond // a frame left the queue, or the network closed
	cur     *Framer   // frame being filled (begun when open)
	first   time.Time // when cur got its first packet
	full    []*Framer // frames waiting for the sender, oldest first
	free    []*Framer
	closed  bool
	kick    chan struct{} // one token: cur got its first packet, or a frame is full
	framing framing.Framing
	maxD    int
	maxB    int
	num     *dlNumbering // the network's, shared by every frame
}

func (a *dlAgg) init(f framing.Framing, maxDatagrams, maxBytes int, num *dlNumbering) {
	a.cond.L = &a.mu
	a.framing, a.maxD, a.maxB, a.num = f, maxDatagrams, maxBytes, num
	if a.maxD <= 0 {
		a.maxD = DefaultAggDatagrams
	}
	a.kick = make(chan struct{}, 1)
	a.cur = a.newFrame()
}

// newFrame returns a recycled or new frame; a.mu is held (or a is not
// shared yet).
func (a *dlAgg) newFrame() *Framer {
	if n := len(a.free); n > 0 {
		fr := a.free[n-1]
		a.free = a.free[:n-1]
		return fr
	}
	fr := NewFramer(a.framing, a.maxD, a.maxB)
	fr.num = a.num
	return fr
}

func (a *dlAgg) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// push hands fr to the sender once the queue has room; false if the
// network closed meanwhile. Waiting releases a.mu, so the caller checks
// that the frame it meant to push is still a.cur (the sender may have
// flushed it by timer meanwhile) by passing it: push returns true without
// pushing in that case. a.mu is held.
func (a *dlAgg) push(fr *Framer) bool {
	gen := fr.gen
	for len(a.full) >= dlPending && !a.closed {
		a.cond.Wait()
	}
	if a.closed {
		return false
	}
	if fr.gen != gen {
		// Flushed by the sender's timer while we waited, and perhaps
		// recycled as a.cur since: that is someone else's frame now.
		return true
	}
	if fr == a.cur {
		a.cur = a.newFrame()
	} else if !fr.oneOff {
		return true // flushed by the sender's timer while we waited
	}
	fr.gen++
	a.full = append(a.full, fr)
	a.wake()
	return true
}

// close wakes the writers waiting for room; frames not sent are dropped.
func (a *dlAgg) close() {
	a.mu.Lock()
	a.closed = true
	a.cond.Broadcast()
	a.mu.Unlock()
}

// writeFramed adds the batch to the DL aggregation; see dlAgg.
func (l *carrierLink) writeFramed(pkts stack.PacketBufferList) (int, tcpip.Error) {
	a := &l.agg
	w := l.writer()
	defer l.put(w)
	seg := &w.seg
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, pkt := range pkts.AsSlice() {
		if a.closed {
			if i == 0 {
				return 0, &tcpip.ErrClosedForSend{}
			}
			return i, nil
		}
		session := l.cn.sessionFor(pkt.NetworkHeader().Slice())
		if !seg.Reset(pkt) {
			l.cn.stats.dropped.Add(1)
			continue
		}
		if nat := l.cn.nat64; nat != nil && owns(pkt.NetworkHeader().Slice()) {
			// For the NAT64: each piece is cut, translated, then framed.
			for !seg.Done() && !a.closed {
				size := seg.Next()
				if size > len(w.buf) {
					w.buf = make([]byte, max(size, 2048))
				}
				seg.Write(w.buf[:size])
				b, extra := w.translate(nat, w.buf[:size], l.mtu)
				for _, b := range [2][]byte{b, extra} {
					if b != nil {
						w.piece.b = b
						l.addFramed(&w.piece, l.cn.sessionFor(b))
					}
				}
			}
			continue
		}
		for !seg.Done() && !a.closed {
			l.addFramed(seg, session)
		}
	}
	return pkts.Len(), nil
}

// dlPiece is where addFramed copies a DL packet from: the segmenter
// cutting a gVisor packet, or a packet the radio model delivers
// (bytesPiece).
type dlPiece interface {
	Next() int        // the next packet's size
	Write(dst []byte) // copies it to dst
	Skip()            // passes over it
}

var _ dlPiece = (*segment.Segmenter)(nil)

// addFramed adds the next packet of seg to the frame being filled,
// pushing frames as they fill; a.mu is held.
func (l *carrierLink) addFramed(seg dlPiece, session uint8) {
	a := &l.agg
	size := seg.Next()
	for {
		fr := a.cur
		if !fr.open {
			fr.enc.Begin(fr.buf)
			fr.open, fr.n = true, 0
		}
		fr.enc.SetSession(session)
		if dst := fr.enc.Add(size); dst != nil {
			seg.Write(dst)
			fr.n++
			switch {
			case fr.n >= a.maxD: // full: no need to wait for the timer
				a.push(fr)
			case fr.n == 1:
				a.first = time.Now()
				a.wake() // the sender arms the flush timer
			}
			return
		}
		if fr.n == 0 {
			// Larger than an empty frame of MaxBytes (a ping with a
			// large MTU): it travels alone in a frame of its own size,
			// as a modem whose MTU exceeds its aggregation size sends
			// it.
			big := NewFramer(a.framing, 1, size+64)
			big.num = a.num
			big.oneOff = true
			big.enc.Begin(big.buf)
			big.open = true
			big.enc.SetSession(session)
			if dst := big.enc.Add(size); dst != nil {
				seg.Write(dst)
				big.n = 1
				a.push(big)
			} else {
				seg.Skip()
				l.cn.stats.dropped.Add(1)
			}
			return
		}
		// No room for this piece: the frame goes, the piece starts the
		// next one.
		if !a.push(fr) {
			seg.Skip()
			return
		}
	}
}

// runSender is the DL sender of a framed pair: it sends queued full
// frames, and the frame being filled once FlushDelay has passed since its
// first packet. It returns when the network closes.
func (l *carrierLink) runSender() {
	defer l.cn.wg.Done()
	a := &l.agg
	delay := l.cn.opts.FlushDelay
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		var fr *Framer
		wait := time.Duration(-1)
		a.mu.Lock()
		switch {
		case len(a.full) > 0:
			fr = a.full[0]
			a.full = append(a.full[:0], a.full[1:]...)
			a.cond.Broadcast()
		case a.cur.open && a.cur.n > 0:
			if d := delay - time.Since(a.first); d > 0 {
				wait = d
			} else {
				fr = a.cur
				fr.gen++
				a.cur = a.newFrame()
			}
		}
		a.mu.Unlock()
		if fr != nil {
			l.sendFrame(fr)
			if !fr.oneOff {
				a.mu.Lock()
				a.free = append(a.free, fr)
				a.mu.Unlock()
			}
			continue
		}
		if wait >= 0 {
			t.Reset(wait)
		}
		select {
		case <-a.kick:
		case <-t.C:
		case <-l.cn.quit:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// sendFrame ends fr and sends it to the host.
func (l *carrierLink) sendFrame(fr *Framer) {
	k := fr.n
	n := fr.end(fr.buf)
	fr.open, fr.n = false, 0
	p := l.port.Load()
	var err error = sim.ErrStopped
	if p != nil {
		err = l.send(p, fr.buf[:n])
	}
	if err != nil {
		l.cn.stats.dropped.Add(uint64(k))
		return
	}
	l.cn.stats.dl.Add(uint64(k))
	l.cn.stats.dlFrames.Add(1)
}
