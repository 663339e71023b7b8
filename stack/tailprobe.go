package stack

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Tail probes when a bridged session comes back. A SYS_ERR loses what
// the modem held in its DL queue and ring, among it the network's ACKs
// of what the host had sent. A sender whose whole flight was acknowledged
// by ACKs lost that way has nothing left to send within its congestion
// window and hears nothing more: it waits for its retransmission timer
// (200 ms at least), resends what the peer already has, and the timeout
// is spurious (RFC 3522). The stack runs gVisor's TCP without RACK-TLP
// (TCPOptions.RACK), so nothing else sends a probe.
//
// So the stack keeps, per TCP flow it sends data on, the last bytes of
// its newest segments, and when the session comes back after an outage
// (setLinkUp ending a bridge) it sends each flow that sent data shortly
// before or during the outage, and whose newest byte the peer has not
// acknowledged, a one-byte copy of each of them, newest first, after
// what the link held. A peer that has them answers a
// duplicate with an ACK at once, not rate-limited (RFC 9293 §3.10.7.4;
// gVisor's maybeSendOutOfWindowAck, Linux's tcp_data_queue: a segment
// with data always gets one), and that ACK tells the sender what the lost
// ACKs said. A peer that lost segments below them SACKs the bytes: three
// discontiguous SACKed blocks above the hole are RFC 6675's IsLost, and
// the sender starts SACK recovery instead of waiting for the timer. The
// probes carry the bytes the flow sent at those sequence numbers, so a
// peer may take them as data. This is the receiver-visible half of
// RFC 8985's tail loss probe, sent on the one occasion the stack knows a
// flight may have been lost: docs/RELIABILITY.md, "Stack-side timeouts".
//
// The same occasion for the flows the stack receives on: it sends again
// its newest pure ACKs, byte for byte as its TCP wrote them: those that
// carried SACK blocks (up to tailPoints, oldest first), or else the
// newest ACK alone. While the session is down the link holds what TCP
// writes, but at most its TX pool: an upload fills it, and the ACKs
// written after that are dropped. Among them are the answers to the
// network's tail loss probe: ACKs of the whole flight, or SACKs of the
// data the host holds above a flight the crash lost. Without them the
// network's sender hears nothing until its retransmission timeout. A
// copy of what the receiver said, sent when the session is back, tells
// the sender at once what the host holds: its flight acknowledged, or
// SACK recovery to repair the hole (docs/RELIABILITY.md, "Why the
// network's one probe did not repair the tail"). Only the newest ACK
// without SACK blocks is repeated: to a sender without SACK a repeated
// ACK is a duplicate, and three could start a needless fast retransmit.

// tailPoints is how many one-byte probes a flow gets: RFC 6675's
// DupThresh, the discontiguous SACKed blocks that make the hole lost.
const tailPoints = 3

// tailFlows bounds the flows remembered (a direct-mapped table: a flow
// that collides with another replaces it).
const tailFlows = 256

// tailProbeAge is how long before the outage a flow's last data may have
// gone to get probes: gVisor's initial RTO. A flow quiet for longer has
// been acknowledged or is in timeout recovery already.
const tailProbeAge = time.Second

// tcpMaxHeader is the longest TCP header: a data offset of 15 words
// (RFC 9293 §3.1).
const tcpMaxHeader = 60

// sackACK is a copy of a pure ACK the stack sent: its TCP header,
// options included (at most 60 bytes).
type sackACK struct {
	hdr [tcpMaxHeader]byte
	n   uint8
}

// tailPoint is one byte a flow sent: its sequence number and value.
type tailPoint struct {
	seq uint32
	b   byte
}

// tailFlow is what a probe of one flow needs: its addresses and ports,
// the ACK, window and timestamps of its newest segment, and the last
// byte of each of its newest segments of data.
type tailFlow struct {
	used         bool
	v6           bool
	src, dst     tcpip.Address
	sport, dport uint16
	ack          uint32
	wnd          uint16
	ts           bool
	tsVal, tsEcr uint32
	points       [tailPoints]tailPoint // points[n-1] newest
	n            int
	lastData     time.Time
	// peerAck is the highest cumulative ACK received from the peer
	// (hasPeerAck: one was): a flow whose newest byte it covers needs
	// no probe.
	peerAck    uint32
	hasPeerAck bool
	// acks are the newest pure ACKs with SACK blocks (acks[nAcks-1]
	// newest), or the newest without (plainACK: it replaced them); ackAt
	// is when the newest was sent.
	acks     [tailPoints]sackACK
	nAcks    int
	plainACK bool
	ackAt    time.Time
}

// tailTable records the TCP segments the stack sends (tap.WritePackets,
// on the transmit queue's goroutine or the senders' own) and the ACKs
// it receives (tap.DeliverNetworkPacket, on the link's delivery
// goroutine); mu is held for one batch or packet at a time.
type tailTable struct {
	mu    sync.Mutex
	seed  maphash.Seed
	flows [tailFlows]tailFlow
}

func newTailTable() *tailTable { return &tailTable{seed: maphash.MakeSeed()} }

// record notes the TCP segments of pkts.
func (t *tailTable) record(pkts []*gstack.PacketBuffer) {
	now := time.Now()
	t.mu.Lock()
	for _, p := range pkts {
		t.recordLocked(p, now)
	}
	t.mu.Unlock()
}

func (t *tailTable) recordLocked(p *gstack.PacketBuffer, now time.Time) {
	if p.TransportProtocolNumber != header.TCPProtocolNumber {
		return
	}
	var src, dst tcpip.Address
	v6 := false
	switch p.NetworkProtocolNumber {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(p.NetworkHeader().Slice())
		if len(ip) < header.IPv4MinimumSize {
			return
		}
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(p.NetworkHeader().Slice())
		if len(ip) < header.IPv6MinimumSize {
			return
		}
		src, dst, v6 = ip.SourceAddress(), ip.DestinationAddress(), true
	default:
		return
	}
	tcp := header.TCP(p.TransportHeader().Slice())
	if len(tcp) < header.TCPMinimumSize || int(tcp.DataOffset()) > len(tcp) || int(tcp.DataOffset()) < header.TCPMinimumSize {
		return
	}
	f := &t.flows[t.slot(src, dst, tcp.SourcePort(), tcp.DestinationPort())]
	flags := tcp.Flags()
	if flags.Intersects(header.TCPFlagSyn | header.TCPFlagFin | header.TCPFlagRst) {
		// Closing (nothing more to probe) or not yet open.
		if f.used && f.is(src, dst, tcp.SourcePort(), tcp.DestinationPort()) {
			*f = tailFlow{}
		}
		return
	}
	if !f.used || !f.is(src, dst, tcp.SourcePort(), tcp.DestinationPort()) {
		*f = tailFlow{used: true, v6: v6, src: src, dst: dst, sport: tcp.SourcePort(), dport: tcp.DestinationPort()}
	}
	f.ack, f.wnd = tcp.AckNumber(), tcp.WindowSize()
	f.ts, f.tsVal, f.tsEcr = tsOption(tcp.Options())
	n := p.Data().Size()
	if n == 0 {
		f.keepACK(tcp, now)
		return
	}
	seq := tcp.SequenceNumber()
	// A GSO batch is several segments: the last bytes of its last ones.
	mss := n
	if p.GSOOptions.Type != gstack.GSONone && p.GSOOptions.MSS > 0 && int(p.GSOOptions.MSS) < n {
		mss = int(p.GSOOptions.MSS)
	}
	first := max(0, (n-1)/mss-(tailPoints-1))
	for k := first; k*mss < n; k++ {
		off := min(n, (k+1)*mss) - 1
		if f.add(seq+uint32(off), payloadByte(p, off)) {
			f.lastData = now
		}
	}
}

// received notes the peer's ACK in a TCP segment the stack received
// (tap.DeliverNetworkPacket, before gVisor has parsed it), read in place.
func (t *tailTable) received(proto tcpip.NetworkProtocolNumber, p *gstack.PacketBuffer) {
	var src, dst tcpip.Address
	var tcp header.TCP
	switch proto {
	case header.IPv4ProtocolNumber:
		b, ok := p.Data().PullUp(header.IPv4MinimumSize)
		if !ok {
			return
		}
		ip := header.IPv4(b)
		hl := int(ip.HeaderLength())
		if ip.Protocol() != uint8(header.TCPProtocolNumber) || hl < header.IPv4MinimumSize || ip.FragmentOffset() != 0 {
			return
		}
		if b, ok = p.Data().PullUp(hl + header.TCPMinimumSize); !ok {
			return
		}
		ip = header.IPv4(b)
		src, dst, tcp = ip.SourceAddress(), ip.DestinationAddress(), header.TCP(b[hl:])
	case header.IPv6ProtocolNumber:
		b, ok := p.Data().PullUp(header.IPv6MinimumSize + header.TCPMinimumSize)
		if !ok {
			return
		}
		ip := header.IPv6(b)
		if ip.TransportProtocol() != header.TCPProtocolNumber {
			return
		}
		src, dst, tcp = ip.SourceAddress(), ip.DestinationAddress(), header.TCP(b[header.IPv6MinimumSize:])
	default:
		return
	}
	if !tcp.Flags().Contains(header.TCPFlagAck) {
		return
	}
	// The peer's segment: its destination is the flow's source.
	t.mu.Lock()
	f := &t.flows[t.slot(dst, src, tcp.DestinationPort(), tcp.SourcePort())]
	if f.used && f.is(dst, src, tcp.DestinationPort(), tcp.SourcePort()) {
		if a := tcp.AckNumber(); !f.hasPeerAck || int32(a-f.peerAck) > 0 {
			f.peerAck, f.hasPeerAck = a, true
		}
	}
	t.mu.Unlock()
}

// keepACK notes a pure ACK the flow sent: one with SACK blocks is kept
// beside those before (the oldest goes when tailPoints are), one without
// replaces them all.
func (f *tailFlow) keepACK(tcp header.TCP, now time.Time) {
	off := int(tcp.DataOffset())
	sack := hasSACK(tcp[header.TCPMinimumSize:off])
	if !sack || f.plainACK {
		// An ACK without SACK blocks: the hole, if any, is filled;
		// only this one is worth repeating.
		f.nAcks = 0
	}
	f.plainACK = !sack
	if f.nAcks == tailPoints {
		copy(f.acks[:], f.acks[1:])
		f.nAcks--
	}
	a := &f.acks[f.nAcks]
	a.n = uint8(copy(a.hdr[:], tcp[:off]))
	f.nAcks++
	f.ackAt = now
}

// hasSACK reports whether TCP options o (as the stack wrote them) hold a
// SACK option (RFC 2018: kind 5).
func hasSACK(o []byte) bool {
	for i := 0; i < len(o); {
		switch o[i] {
		case header.TCPOptionEOL:
			return false
		case header.TCPOptionNOP:
			i++
			continue
		}
		if i+1 >= len(o) || o[i+1] < 2 || i+int(o[i+1]) > len(o) {
			return false
		}
		if o[i] == header.TCPOptionSACK {
			return true
		}
		i += int(o[i+1])
	}
	return false
}

// add appends a point if it is beyond the newest: retransmissions and
// probes do not move the tail (nor its time).
func (f *tailFlow) add(seq uint32, b byte) bool {
	if f.n > 0 && int32(seq-f.points[f.n-1].seq) <= 0 {
		return false
	}
	if f.n == tailPoints {
		copy(f.points[:], f.points[1:])
		f.n--
	}
	f.points[f.n] = tailPoint{seq, b}
	f.n++
	return true
}

func (f *tailFlow) is(src, dst tcpip.Address, sport, dport uint16) bool {
	return f.sport == sport && f.dport == dport && f.src == src && f.dst == dst
}

type flowKey struct {
	src, dst     tcpip.Address
	sport, dport uint16
}

func (t *tailTable) slot(src, dst tcpip.Address, sport, dport uint16) int {
	return int(maphash.Comparable(t.seed, flowKey{src, dst, sport, dport}) % tailFlows)
}

// tsOption finds the timestamps option (RFC 7323 §3.2: kind 8, length
// 10) in TCP options the stack wrote, without the allocation of
// header.ParseTCPOptions.
func tsOption(o []byte) (ok bool, val, ecr uint32) {
	for i := 0; i < len(o); {
		switch o[i] {
		case header.TCPOptionEOL:
			return false, 0, 0
		case header.TCPOptionNOP:
			i++
			continue
		}
		if i+1 >= len(o) || o[i+1] < 2 || i+int(o[i+1]) > len(o) {
			return false, 0, 0
		}
		if o[i] == header.TCPOptionTS && o[i+1] == header.TCPOptionTSLength {
			return true, binary.BigEndian.Uint32(o[i+2:]), binary.BigEndian.Uint32(o[i+6:])
		}
		i += int(o[i+1])
	}
	return false, 0, 0
}

// payloadByte is p's payload byte at off (off < p.Data().Size()), read
// in place.
func payloadByte(p *gstack.PacketBuffer, off int) byte {
	vl, start := p.AsViewList()
	i := start + p.Size() - p.Data().Size() + off
	for v := vl.Front(); v != nil; v = v.Next() {
		if i < v.Size() {
			return v.AsSlice()[i]
		}
		i -= v.Size()
	}
	return 0
}

// tailPacket is one packet sendTailProbes sends: a probe, or a kept ACK
// sent again (ack).
type tailPacket struct {
	b     []byte
	proto tcpip.NetworkProtocolNumber
	ack   bool
}

// probes builds, as IP packets, the kept SACK ACKs of every flow that sent
// one since since, and the probes of every flow that sent new data since
// since and has not had its newest byte acknowledged.
func (t *tailTable) probes(since time.Time) []tailPacket {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []tailPacket
	for i := range t.flows {
		f := &t.flows[i]
		if !f.used {
			continue
		}
		proto := tcpip.NetworkProtocolNumber(header.IPv4ProtocolNumber)
		if f.v6 {
			proto = header.IPv6ProtocolNumber
		}
		if f.nAcks > 0 && !f.ackAt.Before(since) {
			for k := range f.nAcks {
				out = append(out, tailPacket{f.sackACK(&f.acks[k]), proto, true})
			}
		}
		if f.n == 0 || f.lastData.Before(since) ||
			f.hasPeerAck && int32(f.peerAck-(f.points[f.n-1].seq+1)) >= 0 {
			continue
		}
		for k := f.n - 1; k >= 0; k-- {
			out = append(out, tailPacket{f.probe(f.points[k]), proto, false})
		}
	}
	return out
}

// sackACK is the IP packet of a kept ACK, its TCP header as sent.
func (f *tailFlow) sackACK(a *sackACK) []byte {
	b, tcp := f.ipPacket(int(a.n))
	copy(tcp, a.hdr[:a.n])
	tcp.SetChecksum(0)
	tcp.SetChecksum(^checksum.Checksum(tcp, header.PseudoHeaderChecksum(header.TCPProtocolNumber, f.src, f.dst, uint16(len(tcp)))))
	return b
}

// ipPacket is an IP packet of the flow's addresses around a TCP segment
// of tcpLen bytes, and that segment, to be filled.
func (f *tailFlow) ipPacket(tcpLen int) ([]byte, header.TCP) {
	ipLen := header.IPv4MinimumSize
	if f.v6 {
		ipLen = header.IPv6MinimumSize
	}
	b := make([]byte, ipLen+tcpLen)
	if f.v6 {
		header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(tcpLen), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: 64, SrcAddr: f.src, DstAddr: f.dst})
	} else {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), Flags: header.IPv4FlagDontFragment, TTL: 64,
			Protocol: uint8(header.TCPProtocolNumber), SrcAddr: f.src, DstAddr: f.dst})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	return b, header.TCP(b[ipLen:])
}

// probe is the one-byte segment carrying pt, as flow f's newest segment
// looked otherwise (ACK, window, timestamps).
func (f *tailFlow) probe(pt tailPoint) []byte {
	optLen := 0
	if f.ts {
		optLen = 12 // NOP, NOP, timestamps (RFC 7323 appendix A)
	}
	tcpLen := header.TCPMinimumSize + optLen + 1
	b, tcp := f.ipPacket(tcpLen)
	tcp.Encode(&header.TCPFields{SrcPort: f.sport, DstPort: f.dport, SeqNum: pt.seq, AckNum: f.ack,
		DataOffset: uint8(header.TCPMinimumSize + optLen), Flags: header.TCPFlagAck | header.TCPFlagPsh, WindowSize: f.wnd})
	if f.ts {
		o := tcp[header.TCPMinimumSize:]
		header.EncodeNOP(o)
		header.EncodeNOP(o[1:])
		header.EncodeTSOption(f.tsVal, f.tsEcr, o[2:])
	}
	tcp[len(tcp)-1] = pt.b
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, f.src, f.dst, uint16(tcpLen))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
	return b
}

// sendTailProbes sends the kept SACK ACKs and the probes of the flows
// that sent them or data since tailProbeAge before the outage began, and
// counts them.
func (s *Stack) sendTailProbes(outageStart time.Time) {
	if s.tails == nil {
		return
	}
	for _, p := range s.tails.probes(outageStart.Add(-tailProbeAge)) {
		if err := s.gs.WriteRawPacket(nicID, p.proto, buffer.MakeWithData(p.b)); err != nil {
			s.log.Debug("stack: tail probe not sent", "err", err.String())
			continue
		}
		if p.ack {
			s.counters.tailACKs.Add(1)
		} else {
			s.counters.tailProbes.Add(1)
		}
	}
}
