package simnet

import (
	"github.com/mhistack/mhistack/internal/csum"
	"github.com/mhistack/mhistack/link/ndp"
	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/mhi/sim"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Receive implements sim.Function: one UL transfer from the host (one raw
// IP packet, or an NTB of any number on an MBIM pair).
func (cn *CarrierNetwork) Receive(td []byte) {
	d := cn.ep.disp.Load()
	if d == nil || len(td) == 0 {
		return
	}
	if isRawIP(cn.opts.Framing) {
		cn.receivePacket(0, td)
		return
	}
	spans, err := parseUL(cn.opts.Framing, td, cn.spans[:0])
	cn.spans = spans
	p := cn.ep.port.Load()
	if err != nil && p != nil {
		p.Violation(ruleULFraming, "carrier network: UL transfer of %d bytes: %v", len(td), err)
	}
	for _, sp := range spans {
		switch {
		case sp.Ctrl:
		case int(sp.ID) >= cn.sessions:
			// A session byte below the modem's offset: the firmware
			// has no such session (Linux logs "bad packet session").
			cn.stats.unknownSession.Add(1)
		default:
			cn.receivePacket(sp.ID, td[sp.Off:sp.Off+sp.Len])
		}
	}
	// Echo replies of one transfer travel in one DL frame.
	if p != nil {
		if err := cn.echoFr.Flush(p); err != nil {
			cn.stats.dropped.Add(1)
		}
	}
}

// receivePacket takes one IP packet of session from the host.
func (cn *CarrierNetwork) receivePacket(session uint8, td []byte) {
	var proto tcpip.NetworkProtocolNumber
	switch header.IPVersion(td) {
	case header.IPv4Version:
		proto = header.IPv4ProtocolNumber
	case header.IPv6Version:
		proto = header.IPv6ProtocolNumber
	default:
		return
	}
	cn.stats.seeUL(len(td))
	cn.session.Store(uint32(session))
	if !isRawIP(cn.opts.Framing) {
		cn.learnRoute(session, td)
	}
	if cn.radio != nil {
		// The model copies td; it comes back through radioUp.
		_ = cn.radio.Send(radio.Up, uint32(session), td)
		return
	}
	cn.ingest(session, proto, td)
}

// ingest hands one UL packet to the network: an echo request is answered
// at once, anything else is queued for rxLoop. It runs on the device
// goroutine, or with a radio model on the model's UL goroutine (never
// both: with a model every UL packet takes that path). The NAT64, part of
// the network, translates after the radio.
func (cn *CarrierNetwork) ingest(session uint8, proto tcpip.NetworkProtocolNumber, td []byte) {
	if cn.ra.net != nil && proto == header.IPv6ProtocolNumber {
		if ndp.IsRouterSolicit(td) {
			if _, ok := ndp.SolicitSource(td); ok {
				cn.solicited(session)
			}
			return
		}
		if cn.ulDead(td) {
			return
		}
	}
	translated := false
	if n := cn.nat64; n != nil && proto == header.IPv6ProtocolNumber {
		// IPv4 is never longer than the IPv6 it is made of.
		if len(cn.xlUL) < len(td) {
			cn.xlUL = make([]byte, max(len(td), 2048))
		}
		if m, ours := n.ul(cn.xlUL, td); ours {
			if m == 0 {
				return
			}
			td, proto, translated = cn.xlUL[:m], header.IPv4ProtocolNumber, true
		}
	}
	// Echo requests are answered here, from whatever address was pinged:
	// gVisor's promiscuous mode accepts flows to any address but answers
	// echo requests only for its own.
	if reply, v := echoReply(cn.echo[:0], td); v == echoReplied {
		cn.echo = reply
		if translated {
			if len(cn.xlEcho) < len(reply)+dlGrowth {
				cn.xlEcho = make([]byte, len(reply)+dlGrowth)
			}
			m, _ := cn.nat64.dl(cn.xlEcho, reply)
			if m == 0 {
				return
			}
			reply = cn.xlEcho[:m]
		}
		if cn.radio != nil {
			// The reply crosses the model's DL like any packet.
			cn.stats.echoes.Add(1)
			_ = cn.radio.Send(radio.Down, uint32(session), reply)
			return
		}
		p := cn.ep.port.Load()
		var err error = sim.ErrStopped
		if p != nil {
			if cn.echoFr != nil {
				err = cn.echoFr.Add(p, session, reply)
			} else {
				err = p.Send(reply)
			}
		}
		if err == nil {
			cn.stats.echoes.Add(1)
		} else {
			cn.stats.dropped.Add(1)
		}
		return
	}
	// MakeWithData copies: td is only valid during Receive.
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(td)})
	pkt.NetworkProtocolNumber = proto
	// Blocking here when the carrier falls behind stops the modem from
	// consuming UL transfers: the host's ring fills and its writers wait,
	// which is backpressure rather than loss.
	select {
	case cn.rx <- pkt:
	case <-cn.quit:
		pkt.DecRef()
	}
}

// rxBudget is how many UL packets rxLoop takes from the queue before it
// flushes GRO: a batch is what has piled up while gVisor was busy with
// the previous one, as NAPI polls up to its budget per pass.
const rxBudget = 64

// rxLoop hands the host's packets to gVisor on the carrier's own
// goroutine, so that whatever gVisor writes inline (RSTs, ICMP errors,
// ACKs) may wait for DL room without stalling the device goroutine. It
// takes what has queued up, up to rxBudget packets, through GRO and
// flushes GRO once per batch, so the carrier's TCP receives a burst of a
// flow's in-order segments as one (a network's receiving servers run GRO
// too); a lone packet is delivered at once.
func (cn *CarrierNetwork) rxLoop() {
	defer cn.wg.Done()
	for {
		select {
		case pkt := <-cn.rx:
			cn.enqueueGRO(pkt)
		batch:
			for range rxBudget - 1 {
				select {
				case pkt := <-cn.rx:
					cn.enqueueGRO(pkt)
				default:
					break batch
				}
			}
			cn.flushGRO()
		case <-cn.quit:
			cn.flushGRO()
			return
		}
	}
}

// enqueueGRO validates pkt's checksums (see ulChecksumOK) and hands it
// to GRO; a packet that fails is dropped and counted, as the stack would
// have.
func (cn *CarrierNetwork) enqueueGRO(pkt *stack.PacketBuffer) {
	// One chunk (receivePacket made it from one slice): no copy.
	p, _ := pkt.Data().PullUp(pkt.Data().Size())
	if !ulChecksumOK(p, pkt.NetworkProtocolNumber) {
		cn.stats.badChecksum.Add(1)
		pkt.DecRef()
		return
	}
	pkt.RXChecksumValidated = true
	cn.takeOverTimeWait(p, pkt.NetworkProtocolNumber)
	if cn.tlp != nil {
		cn.tlp.ack(p)
	}
	cn.groSink.in++
	cn.gro.Enqueue(pkt)
	pkt.DecRef()
}

// flushGRO delivers everything GRO holds. gro.GRO.Flush at the pinned
// gVisor delivers only the first packet of each bucket (it walks the list
// with Next after removing the element, which clears the link), so it is
// repeated until a call delivers nothing; a bucket holds at most 8.
//
// GRO was once tried here and taken out because the carrier lost
// segments and stalled. Two things caused it: a single Flush left
// segments in GRO until more traffic came, and merged segments were
// dropped as malformed, because GRO does not rewrite the checksums of
// what it merges and gVisor's NIC sets RXChecksumValidated from the
// link's capabilities, so a NIC without CapabilityRXChecksumOffload
// checks them again (hence ulChecksumOK).
func (cn *CarrierNetwork) flushGRO() {
	for range 9 {
		before := cn.groSink.out
		cn.gro.Flush()
		if cn.groSink.out == before {
			return
		}
	}
}

// groSink is the dispatcher GRO delivers to: the carrier's stack, with
// counts of the packets that went into GRO and came out (rxLoop's only;
// in − out is what GRO merged or holds).
type groSink struct {
	cn      *CarrierNetwork
	in, out uint64
}

func (s *groSink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	s.out++
	if d := s.cn.ep.disp.Load(); d != nil {
		(*d).DeliverNetworkPacket(proto, pkt)
	}
}

func (s *groSink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// ulChecksumOK validates a UL packet from the host, once, before GRO: the
// carrier's NIC advertises CapabilityRXChecksumOffload, which gVisor's NIC
// applies to every packet it receives, and GRO does not rewrite the
// checksums of the segments it merges, so the stack must not check them
// again. It checks what the stack would skip: the IPv4 header checksum
// and the TCP and UDP checksums. Transport checksums of fragments, and of
// IPv6 packets with extension headers before the transport header, cannot
// be checked per packet and pass unchecked (link's checksumOK makes the
// same choice on the host's side); ICMP checks its own.
func ulChecksumOK(p []byte, proto tcpip.NetworkProtocolNumber) bool {
	return csum.PacketOK(p, proto)
}
