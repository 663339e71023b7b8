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

// probes builds the probes of every flow that sent new data since since
// and has not had its newest byte acknowledged, as IP packets.
func (t *tailTable) probes(since time.Time) (v4, v6 [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.flows {
		f := &t.flows[i]
		if !f.used || f.n == 0 || f.lastData.Before(since) ||
			f.hasPeerAck && int32(f.peerAck-(f.points[f.n-1].seq+1)) >= 0 {
			continue
		}
		for k := f.n - 1; k >= 0; k-- {
			if f.v6 {
				v6 = append(v6, f.probe(f.points[k]))
			} else {
				v4 = append(v4, f.probe(f.points[k]))
			}
		}
	}
	return v4, v6
}

// probe is the one-byte segment carrying pt, as flow f's newest segment
// looked otherwise (ACK, window, timestamps).
func (f *tailFlow) probe(pt tailPoint) []byte {
	optLen := 0
	if f.ts {
		optLen = 12 // NOP, NOP, timestamps (RFC 7323 appendix A)
	}
	tcpLen := header.TCPMinimumSize + optLen + 1
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
	tcp := header.TCP(b[ipLen:])
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

// sendTailProbes sends the probes of the flows that sent data since
// tailProbeAge before the outage began, and counts them.
func (s *Stack) sendTailProbes(outageStart time.Time) {
	if s.tails == nil {
		return
	}
	v4, v6 := s.tails.probes(outageStart.Add(-tailProbeAge))
	for _, set := range []struct {
		proto tcpip.NetworkProtocolNumber
		pkts  [][]byte
	}{{header.IPv4ProtocolNumber, v4}, {header.IPv6ProtocolNumber, v6}} {
		for _, b := range set.pkts {
			if err := s.gs.WriteRawPacket(nicID, set.proto, buffer.MakeWithData(b)); err != nil {
				s.log.Debug("stack: tail probe not sent", "err", err.String())
				continue
			}
			s.counters.tailProbes.Add(1)
		}
	}
}
