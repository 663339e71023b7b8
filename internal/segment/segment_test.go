package segment

import (
	"bytes"
	"encoding/binary"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// gsoPacket builds what gVisor's TCP hands a host-GSO link: one packet
// with IP and TCP headers pushed, a partial checksum, payload in a view
// of its own, and GSOOptions.
func gsoPacket(t *testing.T, v6 bool, payload []byte, mss uint16, flags header.TCPFlags) *stack.PacketBuffer {
	t.Helper()
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		ReserveHeaderBytes: 120,
		Payload:            buffer.MakeWithData(payload),
	})
	opts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2} // NOP NOP timestamps
	tcp := header.TCP(pkt.TransportHeader().Push(header.TCPMinimumSize + len(opts)))
	tcp.Encode(&header.TCPFields{SrcPort: 4000, DstPort: 80, SeqNum: 0xfffff000, AckNum: 7,
		DataOffset: uint8(header.TCPMinimumSize + len(opts)), Flags: flags, WindowSize: 1000})
	copy(tcp[header.TCPMinimumSize:], opts)
	tcp.SetChecksum(0x1234) // partial: the segmenter must not trust it
	g := stack.GSO{MSS: mss, NeedsCsum: true, CsumOffset: header.TCPChecksumOffset}
	if v6 {
		g.Type, g.L3HdrLen = stack.GSOTCPv6, header.IPv6MinimumSize
		ip := header.IPv6(pkt.NetworkHeader().Push(header.IPv6MinimumSize))
		ip.Encode(&header.IPv6Fields{PayloadLength: uint16(len(tcp) + len(payload)), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: 64, SrcAddr: tcpip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, 15: 1}), DstAddr: tcpip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, 15: 2})})
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
	} else {
		g.Type, g.L3HdrLen = stack.GSOTCPv4, header.IPv4MinimumSize
		ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(header.IPv4MinimumSize + len(tcp) + len(payload)), ID: 100,
			Flags: header.IPv4FlagDontFragment, TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
			SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2})})
		ip.SetChecksum(^ip.CalculateChecksum())
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	}
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	pkt.GSOOptions = g
	return pkt
}

func TestCutsATCPSegmentIntoMSSPacketsWithValidChecksums(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v6      bool
		size    int
		mss     uint16
		flags   header.TCPFlags
		packets int
	}{
		{"v4 exact", false, 4 * 1000, 1000, header.TCPFlagAck, 4},
		{"v4 tail, FIN and PSH on the last only", false, 65000, 1448, header.TCPFlagAck | header.TCPFlagPsh | header.TCPFlagFin, 45},
		{"v4 one packet (checksum completed)", false, 500, 1448, header.TCPFlagAck | header.TCPFlagPsh, 1},
		{"v4 ack only", false, 0, 1448, header.TCPFlagAck, 1},
		{"v6 tail, CWR on the first only", true, 10000, 1428, header.TCPFlagAck | header.TCPFlagCwr, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := make([]byte, tc.size)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
			pkt := gsoPacket(t, tc.v6, payload, tc.mss, tc.flags)
			defer pkt.DecRef()
			var s Segmenter
			if !s.Reset(pkt) {
				t.Fatal("reset refused the packet")
			}
			var got []byte
			seq := uint32(0xfffff000)
			n := 0
			for !s.Done() {
				dst := make([]byte, s.Next())
				s.Write(dst)
				n++
				var seg []byte
				var xsum uint16
				if tc.v6 {
					ip := header.IPv6(dst)
					if int(ip.PayloadLength()) != len(dst)-header.IPv6MinimumSize {
						t.Fatalf("packet %d: payload length %d of %d bytes", n, ip.PayloadLength(), len(dst))
					}
					seg = dst[header.IPv6MinimumSize:]
					xsum = header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(seg)))
				} else {
					ip := header.IPv4(dst)
					if !ip.IsValid(len(dst)) || !ip.IsChecksumValid() || int(ip.TotalLength()) != len(dst) {
						t.Fatalf("packet %d: bad IPv4 header %x", n, dst[:20])
					}
					if ip.ID() != uint16(100+n-1) {
						t.Errorf("packet %d: IP ID %d", n, ip.ID())
					}
					seg = dst[ip.HeaderLength():]
					xsum = header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(seg)))
				}
				if checksum.Checksum(seg, xsum) != 0xffff {
					t.Fatalf("packet %d: bad TCP checksum", n)
				}
				tcp := header.TCP(seg)
				if tcp.SequenceNumber() != seq {
					t.Fatalf("packet %d: seq %#x, want %#x", n, tcp.SequenceNumber(), seq)
				}
				data := tcp.Payload()
				if len(data) > int(tc.mss) {
					t.Fatalf("packet %d: %d payload bytes over MSS %d", n, len(data), tc.mss)
				}
				seq += uint32(len(data))
				got = append(got, data...)
				want := tc.flags
				if !s.Done() {
					want &^= header.TCPFlagFin | header.TCPFlagPsh
				}
				if n > 1 {
					want &^= header.TCPFlagCwr
				}
				if tcp.Flags() != want {
					t.Errorf("packet %d: flags %v, want %v", n, tcp.Flags(), want)
				}
				if binary.BigEndian.Uint32(seg[header.TCPMinimumSize+4:]) != 1 {
					t.Errorf("packet %d: options not copied", n)
				}
			}
			if n != tc.packets {
				t.Errorf("%d packets, want %d", n, tc.packets)
			}
			if !bytes.Equal(got, payload) {
				t.Error("payload differs after segmentation")
			}
		})
	}
}

// A skipped (dropped) piece leaves the pieces after it intact: right
// sequence number, payload, IP ID and checksums, over IPv4 and IPv6.
func TestSkippedPieceLeavesTheNextIntact(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		const mss = 1000
		payload := make([]byte, 3*mss+10)
		for i := range payload {
			payload[i] = byte(i * 3)
		}
		pkt := gsoPacket(t, v6, payload, mss, header.TCPFlagAck|header.TCPFlagPsh)
		var s Segmenter
		if !s.Reset(pkt) || !s.Cut() || s.Segments() != 4 {
			t.Fatalf("v6=%v: reset %d segments, cut %v", v6, s.Segments(), s.Cut())
		}
		s.Skip()
		dst := make([]byte, s.Next())
		s.Write(dst)
		l3 := header.IPv4MinimumSize
		var xsum uint16
		if v6 {
			l3 = header.IPv6MinimumSize
			ip := header.IPv6(dst)
			xsum = header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(dst)-l3))
		} else {
			ip := header.IPv4(dst)
			if !ip.IsChecksumValid() || ip.ID() != 101 {
				t.Errorf("v4: second piece has IP ID %d or a bad header checksum", ip.ID())
			}
			xsum = header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(dst)-l3))
		}
		tcp := header.TCP(dst[l3:])
		if tcp.SequenceNumber() != 0xfffff000+mss || !bytes.Equal(tcp.Payload(), payload[mss:2*mss]) {
			t.Errorf("v6=%v: after a skipped piece: seq %#x, payload wrong", v6, tcp.SequenceNumber())
		}
		if checksum.Checksum(dst[l3:], xsum) != 0xffff {
			t.Errorf("v6=%v: bad TCP checksum after a skipped piece", v6)
		}
		s.Skip()
		s.Skip()
		if !s.Done() {
			t.Errorf("v6=%v: not done after the last piece", v6)
		}
		s.Release()
		pkt.DecRef()
	}
}

// A packet that is not a host-GSO TCP segment goes through whole, and a
// GSO packet whose headers cannot be cut is refused.
func TestNonGSOPacketPassesWholeAndBadHeadersAreRefused(t *testing.T) {
	payload := []byte("hello, world")
	pkt := gsoPacket(t, false, payload, 1000, header.TCPFlagAck)
	defer pkt.DecRef()
	want := pkt.ToView().ToSlice()
	pkt.GSOOptions = stack.GSO{}
	var s Segmenter
	if !s.Reset(pkt) || s.Cut() || s.Segments() != 1 || s.Next() != len(want) {
		t.Fatalf("plain packet: cut %v, %d segments, next %d", s.Cut(), s.Segments(), s.Next())
	}
	got := make([]byte, s.Next())
	s.Write(got)
	if !bytes.Equal(got, want) || !s.Done() {
		t.Error("plain packet not copied whole")
	}

	bad := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 40, Payload: buffer.MakeWithData(payload)})
	defer bad.DecRef()
	bad.TransportHeader().Push(8) // shorter than a TCP header
	bad.NetworkHeader().Push(header.IPv4MinimumSize)
	bad.GSOOptions = stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, MSS: 100}
	if s.Reset(bad) {
		t.Error("a GSO packet with an 8-byte transport header was accepted")
	}
}
