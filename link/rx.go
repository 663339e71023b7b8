package link

import (
	"github.com/mhistack/mhistack/link/framing"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

// piece is one completed DL buffer of a frame.
type piece struct {
	buf *pci.Buffer
	n   int
}

// frame is a completed (or, at the tail, in-progress) DL transfer: one
// buffer, or an OVERFLOW chain of them.
type frame struct {
	pieces   []piece // capacity: the chain bound
	bytes    int
	oversize bool // the chain passed a bound: its pieces are being discarded
}

// rxState is the poller's receive state. Frames complete in the event
// ring callback (holding the ring's lock) and are delivered after Poll
// returns, so that delivery — which may call WritePackets, which may reap
// the UL ring — never runs under an event ring lock.
//
// frames is a ring: [head, tail) are complete frames waiting for
// delivery, frames[tail] is the chain being assembled. A frame with more
// packets than the pass has budget for stays at the head, decoded, and
// the next pass continues it.
type rxState struct {
	frames     []frame
	head, tail int

	// Decode state of the head frame.
	decoded bool
	data    []byte
	spans   []framing.Span
	cursor  int
	reasm   []byte // contiguous copy of a chained head frame

	// seqr is the framing when it numbers frames (set by New); seq is
	// the number of the last frame, valid once seqSeen.
	seqr    framing.Sequenced
	seq     uint16
	seqSeen bool

	// freed collects buffers for the pool; returned once per pass.
	freed []*pci.Buffer
}

func (r *rxState) init(budget, maxPieces, poolSize int) {
	// Poll asks for at most budget events per pass and only when no
	// complete frame waits, so budget complete frames plus the chain in
	// progress fit; one more slot keeps head != tail meaningful.
	r.frames = make([]frame, budget+2)
	for i := range r.frames {
		r.frames[i].pieces = make([]piece, 0, maxPieces)
	}
	r.spans = make([]framing.Span, 0, 64)
	r.reasm = make([]byte, framing.MaxFrame)
	r.freed = make([]*pci.Buffer, 0, poolSize)
}

func (r *rxState) next(i int) int {
	if i++; i == len(r.frames) {
		return 0
	}
	return i
}

// pending reports whether complete frames wait for delivery.
func (r *rxState) pending() bool { return r.head != r.tail }

// rxComplete handles one DL completion, inside dlER.Poll.
func (e *Endpoint) rxComplete(c mhi.Completion) {
	if c.Channel != e.dl {
		if c.Channel == e.ul {
			e.txComplete(c) // UL and DL share the event ring
		}
		return
	}
	r := &e.rx
	f := &r.frames[r.tail]
	n := min(max(c.Len, 0), len(c.Buf.Mem))
	if !f.oversize && (len(f.pieces) == cap(f.pieces) || f.bytes+n > framing.MaxFrame) {
		// The device keeps chaining past any real packet: drop what we
		// have and discard the rest of the chain as it comes, so the
		// chain never holds more than the bound.
		f.oversize = true
		r.dropPieces(f)
	}
	if f.oversize {
		r.freed = append(r.freed, c.Buf)
	} else {
		f.pieces = append(f.pieces, piece{c.Buf, n})
		f.bytes += n
	}
	if c.Code == mhi.CodeOverflow {
		return // the frame continues in the next buffer
	}
	// EOT, or EOB (a chained TD's block: Linux treats it as success).
	if f.oversize {
		f.oversize = false
		e.pass.dropOversize++
		return
	}
	e.pass.rxFrames++
	nt := r.next(r.tail)
	if nt == r.head {
		// Cannot happen (Poll asks for no more events than there is
		// room for), but a full backlog must drop, not overwrite.
		r.dropPieces(f)
		e.pass.dropBacklog++
		return
	}
	r.tail = nt
}

// dropPieces sends a frame's buffers back to the pool and empties it.
func (r *rxState) dropPieces(f *frame) {
	for i := range f.pieces {
		r.freed = append(r.freed, f.pieces[i].buf)
		f.pieces[i] = piece{}
	}
	f.pieces = f.pieces[:0]
	f.bytes = 0
}

// dropChain discards the chain in progress (its channel was reset).
func (r *rxState) dropChain(e *Endpoint) {
	f := &r.frames[r.tail]
	if len(f.pieces) > 0 || f.oversize {
		e.pass.dropTruncated++
	}
	r.dropPieces(f)
	f.oversize = false
}

// deliver hands up to limit packets from complete frames to the stack
// and returns how many it handled (delivered or dropped: both are work).
func (r *rxState) deliver(e *Endpoint, limit int) int {
	n := 0
	for n < limit && r.head != r.tail {
		f := &r.frames[r.head]
		if !r.decoded {
			r.decode(e, f)
		}
		for r.cursor < len(r.spans) && n < limit {
			s := r.spans[r.cursor]
			r.cursor++
			p := r.data[s.Off : s.Off+s.Len]
			switch {
			case s.Ctrl:
				e.control(p)
			case s.ID == e.session:
				// The endpoint's own session: the single-session fast
				// path, through GRO.
				e.deliverPacket(p, s.CsumValid, nil)
			default:
				e.deliverSession(s.ID, p, s.CsumValid)
			}
			n++
		}
		if r.cursor < len(r.spans) {
			break // budget spent inside the frame: continue next pass
		}
		r.dropPieces(f)
		r.decoded, r.data, r.cursor = false, nil, 0
		r.spans = r.spans[:0]
		r.head = r.next(r.head)
	}
	return n
}

// decode makes the head frame contiguous and finds its packets. Spans
// outside the frame (a framing bug on device-written input) are dropped.
//
// Each packet is then copied out of DMA memory into a gVisor buffer of its
// own as it is delivered (deliverPacket). Packets cannot share one copy of
// their frame: gVisor's buffer.PullUp, which every header parse calls,
// clones the whole chunk of a view whose chunk is shared, so a frame of n
// packets sharing one chunk costs n copies of the frame (docs/LINK.md, "RX
// buffer ownership").
func (r *rxState) decode(e *Endpoint, f *frame) {
	switch len(f.pieces) {
	case 0:
		r.data = nil
	case 1:
		p := f.pieces[0]
		r.data = p.buf.Mem[:p.n]
	default:
		// OVERFLOW chain: the device MTU exceeds the MRU. One extra
		// copy: framings decode contiguous frames.
		off := 0
		for _, p := range f.pieces {
			off += copy(r.reasm[off:], p.buf.Mem[:p.n])
		}
		r.data = r.reasm[:off]
	}
	if r.seqr != nil {
		if seq, ok := r.seqr.Sequence(r.data); ok {
			if r.seqSeen && seq != r.seq+1 {
				e.pass.rxSeqGlitches++
			}
			r.seq, r.seqSeen = seq, true
		}
	}
	spans, err := e.framing.Decode(r.data, r.spans[:0])
	if err != nil {
		e.pass.rxErrors++
	}
	valid := spans[:0]
	for _, s := range spans {
		if s.Off >= 0 && s.Len > 0 && s.Off <= len(r.data) && s.Len <= len(r.data)-s.Off {
			valid = append(valid, s)
		} else {
			e.pass.rxErrors++
		}
	}
	r.spans = valid
	r.cursor = 0
	r.decoded = true
}

// returnBuffers gives the pass's freed buffers back to the pool.
func (r *rxState) returnBuffers(e *Endpoint) {
	if len(r.freed) == 0 {
		return
	}
	e.rxPool.put(r.freed...)
	clear(r.freed)
	r.freed = r.freed[:0]
}

// releaseAll returns every buffer the poller holds (Close, after the
// poller stopped).
func (r *rxState) releaseAll(e *Endpoint) {
	for i := range r.frames {
		r.dropPieces(&r.frames[i])
		r.frames[i].oversize = false
	}
	r.head, r.tail = 0, 0
	r.decoded, r.data, r.cursor = false, nil, 0
	r.returnBuffers(e)
}

// rxRelease is the DL channel's Release: buffers still queued when the
// channel is reset (Close, SYS_ERR) come back here, on whatever goroutine
// reset it.
func (e *Endpoint) rxRelease(b *pci.Buffer) { e.rxPool.put(b) }

// deliverPacket copies one IP packet out of DMA memory into a gVisor
// buffer (the only RX copy) and hands it to GRO, or, for another session
// (sess non-nil), straight to that session's dispatcher. devCsum says the
// modem validated the transport checksum (Span.CsumValid).
func (e *Endpoint) deliverPacket(p []byte, devCsum bool, sess *SessionEndpoint) {
	var proto tcpip.NetworkProtocolNumber
	switch header.IPVersion(p) {
	case header.IPv4Version:
		if len(p) < header.IPv4MinimumSize {
			e.pass.dropProto++
			return
		}
		proto = header.IPv4ProtocolNumber
	case header.IPv6Version:
		if len(p) < header.IPv6MinimumSize {
			e.pass.dropProto++
			return
		}
		proto = header.IPv6ProtocolNumber
	default:
		e.pass.dropProto++
		return
	}
	if e.rxCsum {
		if devCsum {
			if !headerOK(p, proto) {
				e.pass.dropCsum++
				return
			}
			e.pass.rxCsumDevice++
		} else if !checksumOK(p, proto) {
			e.pass.dropCsum++
			return
		}
	}
	if t := e.tap.Load(); t != nil {
		t.write(p)
	}
	e.pass.rxPackets++
	e.pass.rxBytes += uint64(len(p))
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		Payload: buffer.MakeWithView(buffer.NewViewWithData(p)),
	})
	pkt.NetworkProtocolNumber = proto
	pkt.RXChecksumValidated = e.rxCsum
	if sess != nil {
		sess.deliver(proto, pkt)
		pkt.DecRef()
		return
	}
	e.pass.groIn++
	if tcp(p, proto) {
		e.gro.Enqueue(pkt)
	} else {
		// GRO merges TCP only and hands anything else straight to its
		// dispatcher (gro.dispatch4/6, after parsing the headers
		// again): do that here, at the same point of the packet order.
		e.groSink.DeliverNetworkPacket(proto, pkt)
	}
	pkt.DecRef()
}

// tcp reports whether the IP packet p (at least its minimum header) may
// carry TCP: what GRO can merge.
func tcp(p []byte, proto tcpip.NetworkProtocolNumber) bool {
	if proto == header.IPv4ProtocolNumber {
		return tcpip.TransportProtocolNumber(header.IPv4(p).Protocol()) == header.TCPProtocolNumber
	}
	return tcpip.TransportProtocolNumber(header.IPv6(p).NextHeader()) == header.TCPProtocolNumber
}
