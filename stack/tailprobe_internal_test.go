package stack

import (
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// tcpPacket is a TCP segment as gVisor's TCP hands it to the link: IPv4
// and TCP headers pushed, n bytes of payload.
func tcpPacket(seq uint32, n int, ts bool) *gstack.PacketBuffer {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i)
	}
	optLen := 0
	if ts {
		optLen = 12
	}
	p := gstack.NewPacketBuffer(gstack.PacketBufferOptions{ReserveHeaderBytes: 80, Payload: buffer.MakeWithData(payload)})
	tcp := header.TCP(p.TransportHeader().Push(header.TCPMinimumSize + optLen))
	tcp.Encode(&header.TCPFields{SrcPort: 1000, DstPort: 80, SeqNum: seq, AckNum: 7, DataOffset: uint8(header.TCPMinimumSize + optLen),
		Flags: header.TCPFlagAck, WindowSize: 500})
	if ts {
		o := tcp[header.TCPMinimumSize:]
		header.EncodeNOP(o)
		header.EncodeNOP(o[1:])
		header.EncodeTSOption(11, 22, o[2:])
	}
	pushTestIPv4(p)
	return p
}

// The probes of a flow are one-byte segments carrying the last byte of
// each of its three newest segments, newest first, with the flow's ACK,
// window and timestamps, and valid checksums.
func TestTailProbesCarryTheLastBytesOfTheNewestSegments(t *testing.T) {
	tt := newTailTable()
	var pkts []*gstack.PacketBuffer
	for k := range 5 {
		pkts = append(pkts, tcpPacket(uint32(1000+100*k), 100, true))
	}
	// A retransmission does not move the tail.
	pkts = append(pkts, tcpPacket(1000, 100, true))
	tt.record(pkts)
	for _, p := range pkts {
		p.DecRef()
	}
	var since time.Time // any flow
	for _, f := range tt.flows {
		if f.used {
			since = f.lastData.Add(-1)
		}
	}
	probes := tt.probes(since)
	if len(probes) != tailPoints {
		t.Fatalf("%d probes, want %d", len(probes), tailPoints)
	}
	for i, p := range probes {
		if p.proto != header.IPv4ProtocolNumber || p.ack {
			t.Fatalf("probe %d: protocol %d, an ACK sent again %v; want IPv4, a probe", i, p.proto, p.ack)
		}
		b := p.b
		ip := header.IPv4(b)
		if !ip.IsValid(len(b)) || ip.CalculateChecksum() != 0xffff {
			t.Fatalf("probe %d: bad IPv4 header", i)
		}
		tcp := header.TCP(ip.Payload())
		wantSeq := uint32(1000 + 100*(4-i) + 99)
		if !tcp.IsChecksumValid(ip.SourceAddress(), ip.DestinationAddress(), checksum.Checksum(tcp.Payload(), 0), uint16(len(tcp.Payload()))) {
			t.Errorf("probe %d: bad TCP checksum", i)
		}
		ok, val, ecr := tsOption(tcp.Options())
		if tcp.SequenceNumber() != wantSeq || tcp.AckNumber() != 7 || tcp.WindowSize() != 500 || !ok || val != 11 || ecr != 22 ||
			len(tcp.Payload()) != 1 || tcp.Payload()[0] != 99 || tcp.SourcePort() != 1000 || tcp.DestinationPort() != 80 {
			t.Errorf("probe %d: seq %d ack %d wnd %d ts %v %d %d payload %v; want seq %d ack 7 wnd 500 ts 11 22 payload [99]",
				i, tcp.SequenceNumber(), tcp.AckNumber(), tcp.WindowSize(), ok, val, ecr, tcp.Payload(), wantSeq)
		}
	}
}

// peerACK is a pure ACK from the peer of tcpPacket's flow, as the link
// delivers it (raw, no header parsed).
func peerACK(ack uint32) *gstack.PacketBuffer {
	b := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 1})})
	header.TCP(b[header.IPv4MinimumSize:]).Encode(&header.TCPFields{SrcPort: 80, DstPort: 1000, SeqNum: 7, AckNum: ack,
		DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 1000})
	return gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
}

// A flow whose newest byte the peer has acknowledged gets no probes: its
// ACKs were not lost.
func TestTailProbesSkipAFlowThePeerAcknowledged(t *testing.T) {
	tt := newTailTable()
	p := tcpPacket(1000, 100, true)
	tt.record([]*gstack.PacketBuffer{p})
	p.DecRef()
	since := tt.flows[tt.slot(tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), 1000, 80)].lastData.Add(-1)
	for _, c := range []struct {
		ack    uint32
		probes int
	}{{1050, 1}, {1100, 0}} { // one point: the segment's last byte, 1099
		a := peerACK(c.ack)
		tt.received(header.IPv4ProtocolNumber, a)
		a.DecRef()
		if probes := tt.probes(since); len(probes) != c.probes {
			t.Errorf("after the peer's ACK of %d: %d probes, want %d", c.ack, len(probes), c.probes)
		}
	}
}

// sackACKPacket is a pure ACK of tcpPacket's flow with timestamps and one
// SACK block, as gVisor's TCP hands it to the link.
func sackACKPacket() *gstack.PacketBuffer {
	const optLen = 24 // NOP, NOP, timestamps; NOP, NOP, SACK of one block
	p := gstack.NewPacketBuffer(gstack.PacketBufferOptions{ReserveHeaderBytes: 80})
	tcp := header.TCP(p.TransportHeader().Push(header.TCPMinimumSize + optLen))
	tcp.Encode(&header.TCPFields{SrcPort: 1000, DstPort: 80, SeqNum: 5, AckNum: 7, DataOffset: uint8(header.TCPMinimumSize + optLen),
		Flags: header.TCPFlagAck, WindowSize: 500})
	o := tcp[header.TCPMinimumSize:]
	header.EncodeNOP(o)
	header.EncodeNOP(o[1:])
	header.EncodeTSOption(11, 22, o[2:])
	header.EncodeNOP(o[12:])
	header.EncodeNOP(o[13:])
	header.EncodeSACKBlocks([]header.SACKBlock{{Start: 100, End: 200}}, o[14:])
	pushTestIPv4(p)
	return p
}

// A pure ACK with SACK blocks is sent again as the stack wrote it, with a
// valid checksum; an ACK without replaces it, and is the only one sent
// again until the next with SACK blocks.
func TestTailACKsRepeatTheNewestACKs(t *testing.T) {
	tt := newTailTable()
	ack := sackACKPacket()
	defer ack.DecRef()
	tt.record([]*gstack.PacketBuffer{ack})
	pkts := tt.probes(time.Time{})
	if len(pkts) != 1 || !pkts[0].ack {
		t.Fatalf("%d packets, want 1 ACK", len(pkts))
	}
	ip := header.IPv4(pkts[0].b)
	tcp := header.TCP(ip.Payload())
	want := ack.TransportHeader().Slice()
	if !ip.IsValid(len(ip)) || ip.CalculateChecksum() != 0xffff ||
		!tcp.IsChecksumValid(ip.SourceAddress(), ip.DestinationAddress(), 0, 0) || string(tcp[:16]) != string(want[:16]) || string(tcp.Options()) != string(want[20:]) {
		t.Errorf("ACK sent again: % x; want the TCP header % x with a valid checksum", []byte(tcp), want)
	}
	noSACK := gstack.NewPacketBuffer(gstack.PacketBufferOptions{ReserveHeaderBytes: 80})
	defer noSACK.DecRef()
	th := header.TCP(noSACK.TransportHeader().Push(header.TCPMinimumSize))
	th.Encode(&header.TCPFields{SrcPort: 1000, DstPort: 80, SeqNum: 5, AckNum: 300, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 500})
	noSACK.TransportProtocolNumber = header.TCPProtocolNumber
	nip := header.IPv4(noSACK.NetworkHeader().Push(header.IPv4MinimumSize))
	nip.Encode(&header.IPv4Fields{TotalLength: uint16(noSACK.Size()), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2})})
	noSACK.NetworkProtocolNumber = header.IPv4ProtocolNumber
	tt.record([]*gstack.PacketBuffer{noSACK})
	if pkts := tt.probes(time.Time{}); len(pkts) != 1 || header.TCP(header.IPv4(pkts[0].b).Payload()).AckNumber() != 300 {
		t.Errorf("after an ACK without SACK blocks: %d packets, want that one", len(pkts))
	}
	tt.record([]*gstack.PacketBuffer{ack, ack})
	if pkts := tt.probes(time.Time{}); len(pkts) != 2 || header.TCP(header.IPv4(pkts[0].b).Payload()).AckNumber() != 7 {
		t.Errorf("after two ACKs with SACK blocks: %d packets, want those two", len(pkts))
	}
}

// Recording is on the transmit path of every packet, and reading the
// peer's ACK on the receive path: no allocation.
func TestTailRecordDoesNotAllocate(t *testing.T) {
	tt := newTailTable()
	p := tcpPacket(1, 1400, true)
	defer p.DecRef()
	pkts := []*gstack.PacketBuffer{p}
	if n := testing.AllocsPerRun(100, func() { tt.record(pkts) }); n != 0 {
		t.Errorf("%v allocations per record, want 0", n)
	}
	ack := sackACKPacket()
	defer ack.DecRef()
	acks := []*gstack.PacketBuffer{ack}
	if n := testing.AllocsPerRun(100, func() { tt.record(acks) }); n != 0 {
		t.Errorf("%v allocations per record of a SACK ACK, want 0", n)
	}
	a := peerACK(1)
	defer a.DecRef()
	if n := testing.AllocsPerRun(100, func() { tt.received(header.IPv4ProtocolNumber, a) }); n != 0 {
		t.Errorf("%v allocations per received ACK, want 0", n)
	}
}

func FuzzTSOption(f *testing.F) {
	f.Add([]byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add([]byte{2, 4, 5, 0, 8, 10})
	f.Add([]byte{8, 1})
	f.Fuzz(func(t *testing.T, o []byte) {
		ok, val, ecr := tsOption(o)
		if p := header.ParseTCPOptions(o); ok && p.TS && (p.TSVal != val || p.TSEcr != ecr) {
			t.Errorf("tsOption %d %d, ParseTCPOptions %d %d", val, ecr, p.TSVal, p.TSEcr)
		}
	})
}

// received reads what the network sent: any bytes, no panic.
func FuzzTailReceived(f *testing.F) {
	a := peerACK(5)
	f.Add(a.ToView().AsSlice())
	a.DecRef()
	f.Add([]byte{0x45, 0, 0, 20})
	f.Add(make([]byte, 60))
	f.Fuzz(func(t *testing.T, b []byte) {
		tt := newTailTable()
		p := tcpPacket(1000, 10, false)
		tt.record([]*gstack.PacketBuffer{p})
		p.DecRef()
		for _, proto := range []tcpip.NetworkProtocolNumber{header.IPv4ProtocolNumber, header.IPv6ProtocolNumber} {
			pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
			tt.received(proto, pkt)
			pkt.DecRef()
		}
	})
}

func FuzzHasSACK(f *testing.F) {
	f.Add([]byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1, 5, 10, 0, 0, 0, 9, 0, 0, 0, 19})
	f.Add([]byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add([]byte{5, 1})
	f.Fuzz(func(t *testing.T, o []byte) {
		// Every well-formed SACK option ParseTCPOptions finds, hasSACK
		// finds too.
		if p := header.ParseTCPOptions(o); len(p.SACKBlocks) > 0 && !hasSACK(o) {
			t.Errorf("ParseTCPOptions found %d SACK blocks, hasSACK none", len(p.SACKBlocks))
		}
	})
}

// pushTestIPv4 puts the test flow's IPv4 header (10.0.0.1 to 10.0.0.2)
// before p's TCP segment.
func pushTestIPv4(p *gstack.PacketBuffer) {
	p.TransportProtocolNumber = header.TCPProtocolNumber
	ip := header.IPv4(p.NetworkHeader().Push(header.IPv4MinimumSize))
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(p.Size()), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2})})
	p.NetworkProtocolNumber = header.IPv4ProtocolNumber
}
