package simnet

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	gcsum "gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/internal/segment"
)

// ulSegment is an IPv4 TCP segment from the host's address to TestAddr4,
// with correct checksums.
func ulSegment(sport uint16, seq uint32, payload []byte) []byte {
	p := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize+len(payload))
	ip := header.IPv4(p)
	src := tcpip.AddrFrom4(DefaultCarrier().IPv4.Addr().As4())
	dst := tcpip.AddrFrom4(TestAddr4.As4())
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(p)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: dst})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(p[header.IPv4MinimumSize:])
	tcp.Encode(&header.TCPFields{SrcPort: sport, DstPort: 80, SeqNum: seq, AckNum: 1, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 65535})
	copy(tcp.Payload(), payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp)))
	tcp.SetChecksum(^gcsum.Checksum(tcp, xsum))
	return p
}

func ulUDP(v6, zeroSum bool) ([]byte, tcpip.NetworkProtocolNumber) {
	payload := []byte("query")
	if v6 {
		p := make([]byte, header.IPv6MinimumSize+header.UDPMinimumSize+len(payload))
		src, dst := tcpip.AddrFrom16(DefaultCarrier().IPv6.Addr().As16()), tcpip.AddrFrom16(TestAddr6.As16())
		header.IPv6(p).Encode(&header.IPv6Fields{PayloadLength: uint16(len(p) - header.IPv6MinimumSize), TransportProtocol: header.UDPProtocolNumber, HopLimit: 64, SrcAddr: src, DstAddr: dst})
		u := header.UDP(p[header.IPv6MinimumSize:])
		u.Encode(&header.UDPFields{SrcPort: 5000, DstPort: 53, Length: uint16(len(u))})
		copy(u.Payload(), payload)
		if !zeroSum {
			u.SetChecksum(^gcsum.Checksum(u, header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(u)))))
		}
		return p, header.IPv6ProtocolNumber
	}
	p := make([]byte, header.IPv4MinimumSize+header.UDPMinimumSize+len(payload))
	src, dst := tcpip.AddrFrom4(DefaultCarrier().IPv4.Addr().As4()), tcpip.AddrFrom4(TestAddr4.As4())
	ip := header.IPv4(p)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(p)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber), SrcAddr: src, DstAddr: dst})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(p[header.IPv4MinimumSize:])
	u.Encode(&header.UDPFields{SrcPort: 5000, DstPort: 53, Length: uint16(len(u))})
	copy(u.Payload(), payload)
	if !zeroSum {
		u.SetChecksum(^gcsum.Checksum(u, header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(u)))))
	}
	return p, header.IPv4ProtocolNumber
}

func TestCarrierValidatesULChecksumsBeforeGRO(t *testing.T) {
	flip := func(p []byte, off int) []byte {
		p = bytes.Clone(p)
		p[off] ^= 0x40
		return p
	}
	seg := ulSegment(40000, 1, []byte("hello, carrier"))
	udp4, _ := ulUDP(false, false)
	udp4z, _ := ulUDP(false, true)
	udp6, _ := ulUDP(true, false)
	udp6z, _ := ulUDP(true, true)
	for _, c := range []struct {
		name  string
		p     []byte
		proto tcpip.NetworkProtocolNumber
		ok    bool
	}{
		{"tcp", seg, header.IPv4ProtocolNumber, true},
		{"tcp payload bit flipped", flip(seg, len(seg)-1), header.IPv4ProtocolNumber, false},
		{"ipv4 header bit flipped", flip(seg, 8), header.IPv4ProtocolNumber, false},
		{"tcp truncated", seg[:header.IPv4MinimumSize+10], header.IPv4ProtocolNumber, false},
		{"udp4", udp4, header.IPv4ProtocolNumber, true},
		{"udp4 payload bit flipped", flip(udp4, len(udp4)-1), header.IPv4ProtocolNumber, false},
		{"udp4 without checksum", udp4z, header.IPv4ProtocolNumber, true},
		{"udp6", udp6, header.IPv6ProtocolNumber, true},
		{"udp6 payload bit flipped", flip(udp6, len(udp6)-1), header.IPv6ProtocolNumber, false},
		{"udp6 without checksum", udp6z, header.IPv6ProtocolNumber, false},
	} {
		if got := ulChecksumOK(c.p, c.proto); got != c.ok {
			t.Errorf("%s: ulChecksumOK = %v, want %v", c.name, got, c.ok)
		}
	}
}

// TestCarrierGROFlushDeliversEveryHeldSegment: one flow's in-order
// segments come out of GRO as one packet, and the segments of 40 other
// flows (several per GRO bucket, which one gro.Flush at the pinned gVisor
// does not empty) are all delivered by the flush that ends the batch; a
// segment with a bad checksum is dropped and counted.
func TestCarrierGROFlushDeliversEveryHeldSegment(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	cn, err := NewCarrierNetwork(CarrierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(p []byte) {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(p)})
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
		cn.enqueueGRO(pkt)
	}
	for i := range 20 {
		enqueue(ulSegment(40000, uint32(1+i*1000), bytes.Repeat([]byte{byte(i)}, 1000)))
	}
	for i := range 40 {
		enqueue(ulSegment(uint16(41000+i), 1, []byte{byte(i)}))
	}
	bad := ulSegment(42000, 1, []byte("corrupted"))
	bad[len(bad)-1] ^= 1
	enqueue(bad)
	cn.flushGRO()
	// rxLoop has not run (no packet came through Receive), so reading
	// its counters here does not race with it.
	in, out := cn.groSink.in, cn.groSink.out
	rcvd := cn.s.Stats().IP.ValidPacketsReceived.Value()
	bc := cn.Stats().BadChecksums
	cn.Close()
	if in != 60 || out != 41 || rcvd != 41 {
		t.Errorf("GRO took %d segments, delivered %d, the stack took %d as valid; want 60, 41 (20 merged into 1, 40 alone), 41", in, out, rcvd)
	}
	if bc != 1 {
		t.Errorf("BadChecksums = %d, want 1", bc)
	}
	goleak.VerifyNone(t, ignore)
}

// upload sends size bytes from the host's stack to a server on the
// host's loopback through the carrier and checks what the server got.
func (h *carrierHost) upload(t testing.TB, size int) {
	t.Helper()
	data := testData(size, 11)
	var sum [32]byte
	var n int64
	conn, served := h.dialHost(t, func(c net.Conn) error {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		hs := sha256.New()
		var err error
		n, err = io.Copy(hs, c)
		copy(sum[:], hs.Sum(nil))
		return err
	})
	defer conn.Close()
	conn.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := conn.Write(data); err != nil {
		t.Fatalf("upload: %v", err)
	}
	conn.CloseWrite()
	if err := served(); err != nil || n != int64(size) || sum != sha256.Sum256(data) {
		t.Fatalf("server got %d bytes (%v), sha256 %x; sent %d, sha256 %x", n, err, sum, size, sha256.Sum256(data))
	}
}

// TestCarrierUploadArrivesIntactThroughGRO: a bulk TCP upload through the
// carrier on every pair arrives intact at the host socket, with every UL
// checksum right; how much GRO merged (it depends on how many segments
// queue up while the carrier's stack is busy) is logged.
//
// The UL-aggregated pairs (ulAggPairs) carry it in frames of several
// packets within the modem's UL limits, which the strict modem checks:
// at least two packets a frame on average.
func TestCarrierUploadArrivesIntactThroughGRO(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	pairs := append([]carrierPair{{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, 0}}, framedPairs...)
	for _, k := range append(pairs, ulAggPairs...) {
		t.Run(k.name, func(t *testing.T) {
			h := newCarrierHost(t, k, CarrierOptions{})
			h.upload(t, 8<<20)
			cs := h.cn.Stats()
			if cs.BadChecksums != 0 {
				t.Errorf("%d UL packets with a bad checksum", cs.BadChecksums)
			}
			if st := h.ep.Stats(); aggregatesUL(k.framing) && st.TXFrames*2 > st.TXPackets {
				t.Errorf("UL aggregation: %d packets in %d frames", st.TXPackets, st.TXFrames)
			}
			in := h.cn.s.Stats().IP.PacketsReceived.Value()
			t.Logf("%d UL packets reached the carrier's IP layer as %d (%.1f per GRO packet)", cs.ULPackets, in, float64(cs.ULPackets)/float64(in))
		})
	}
	goleak.VerifyNone(t, ignore)
}

// TestCarrierCutsAGSOSegmentIntoMSSPackets: a 64 KiB-class host-GSO
// segment from the carrier's TCP comes out as MSS-sized packets with
// consecutive sequence numbers, IP IDs, PSH and FIN on the last only, and
// correct checksums; a skipped (dropped) piece leaves the next one intact.
func TestCarrierCutsAGSOSegmentIntoMSSPackets(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) { testGSOCut(t, v6) })
	}
}

func testGSOCut(t *testing.T, v6 bool) {
	const mss = 1000
	payload := make([]byte, 10*mss+123)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	proto, l3 := header.IPv4ProtocolNumber, header.IPv4MinimumSize
	if v6 {
		proto, l3 = header.IPv6ProtocolNumber, header.IPv6MinimumSize
	}
	newPkt := func() *stack.PacketBuffer {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 60, Payload: buffer.MakeWithData(payload)})
		tcp := header.TCP(pkt.TransportHeader().Push(header.TCPMinimumSize))
		tcp.Encode(&header.TCPFields{SrcPort: 80, DstPort: 40000, SeqNum: 5000, AckNum: 1, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck | header.TCPFlagPsh | header.TCPFlagFin, WindowSize: 1000})
		g := stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, MSS: mss, L3HdrLen: uint16(l3), MaxSize: 1 << 16}
		if v6 {
			src, dst := tcpip.AddrFrom16(TestAddr6.As16()), tcpip.AddrFrom16(DefaultCarrier().IPv6.Addr().As16())
			ip := header.IPv6(pkt.NetworkHeader().Push(header.IPv6MinimumSize))
			ip.Encode(&header.IPv6Fields{PayloadLength: uint16(pkt.Size() - header.IPv6MinimumSize), TransportProtocol: header.TCPProtocolNumber, HopLimit: 64, SrcAddr: src, DstAddr: dst})
			g.Type = stack.GSOTCPv6
		} else {
			src, dst := tcpip.AddrFrom4(TestAddr4.As4()), tcpip.AddrFrom4(DefaultCarrier().IPv4.Addr().As4())
			ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
			ip.Encode(&header.IPv4Fields{TotalLength: uint16(pkt.Size()), ID: 100, TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: dst})
		}
		pkt.NetworkProtocolNumber = proto
		pkt.GSOOptions = g
		return pkt
	}
	pkt := newPkt()
	defer pkt.DecRef()
	var s segment.Segmenter
	if !s.Reset(pkt) {
		t.Fatal("reset refused a TCP GSO packet")
	}
	var got []byte
	for i := 0; !s.Done(); i++ {
		b := make([]byte, s.Next())
		s.Write(b)
		if !ulChecksumOK(b, proto) {
			t.Fatalf("piece %d: bad checksum", i)
		}
		tcp := header.TCP(b[l3:])
		last := i == 10
		wantFlags := header.TCPFlagAck
		if last {
			wantFlags |= header.TCPFlagPsh | header.TCPFlagFin
		}
		if tcp.SequenceNumber() != uint32(5000+i*mss) || tcp.Flags() != wantFlags {
			t.Errorf("piece %d: seq %d, flags %v; want %d, %v", i, tcp.SequenceNumber(), tcp.Flags(), 5000+i*mss, wantFlags)
		}
		if !v6 && header.IPv4(b).ID() != uint16(100+i) {
			t.Errorf("piece %d: IP ID %d, want %d", i, header.IPv4(b).ID(), 100+i)
		}
		if n := len(tcp.Payload()); n != mss && !last || last && n != 123 {
			t.Errorf("piece %d: %d bytes of payload", i, n)
		}
		got = append(got, tcp.Payload()...)
	}
	if !bytes.Equal(got, payload) {
		t.Errorf("the pieces carry %d bytes, not the segment's %d", len(got), len(payload))
	}

	pkt2 := newPkt()
	defer pkt2.DecRef()
	s.Reset(pkt2)
	s.Skip()
	b := make([]byte, s.Next())
	s.Write(b)
	if tcp := header.TCP(b[l3:]); tcp.SequenceNumber() != 5000+mss || !bytes.Equal(tcp.Payload(), payload[mss:2*mss]) || !ulChecksumOK(b, proto) {
		t.Errorf("after a skipped piece: seq %d, payload or checksum wrong", tcp.SequenceNumber())
	}
}

// BenchmarkCarrierUpload is a bulk TCP upload from the host's stack
// through the emulated modem's carrier network to a host socket, on the
// framed pairs with and without UL aggregation. One op is 1 MiB. It
// reports the UL transfers (TREs) and doorbells per TX packet, from the
// link endpoint's Stats (TX packets include the host's ACKs, none here
// but the handshake's).
func BenchmarkCarrierUpload(b *testing.B) {
	for _, k := range append(append([]carrierPair(nil), framedPairs...), ulAggPairs...) {
		b.Run(k.name, func(b *testing.B) {
			h := newCarrierHost(b, k, CarrierOptions{})
			h.upload(b, 1<<20) // warm-up: the flow's window opens
			before := h.ep.Stats()
			b.SetBytes(1 << 20)
			b.ResetTimer()
			start := time.Now()
			h.upload(b, b.N<<20)
			el := time.Since(start)
			b.StopTimer()
			st := h.ep.Stats()
			pkts := float64(st.TXPackets - before.TXPackets)
			b.ReportMetric(float64(st.TXFrames-before.TXFrames)/pkts, "TREs/pkt")
			b.ReportMetric(float64(st.TXDoorbells-before.TXDoorbells)/pkts, "doorbells/pkt")
			b.ReportMetric(float64(b.N)*8*(1<<20)/el.Seconds()/1e6, "Mbit/s")
		})
	}
}
