// Package segment cuts a host-GSO TCP segment into the MSS-sized packets
// it is sent as, each with its own IP and TCP header and a complete TCP
// checksum, while the bytes are copied into their destination (a TX DMA
// buffer, a DL transfer, a frame). It does in software what a NIC doing
// TSO does: gVisor's TCP hands the link one packet of up to 64 KiB with a
// partial checksum (stack.GSOTCPv4 / stack.GSOTCPv6 with NeedsCsum) and
// the link sends it as many wire packets.
//
// It is used on both sides of the emulated link: link's TX path (the
// host's uplink) and the emulated modem's carrier (link/simnet's downlink).
// A packet that is not a host-GSO TCP segment is passed through whole.
package segment

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// MaxHeaders bounds the IP and TCP headers of a GSO packet (IPv4 60 +
// TCP 60; IPv6 40 + TCP 60).
const MaxHeaders = 120

// Segmenter walks one outgoing packet as the packets it is sent as: the
// packet itself, or, for a host-GSO TCP segment, its MSS-sized pieces.
// The zero value is ready for Reset; a Segmenter does not allocate.
type Segmenter struct {
	pkt *stack.PacketBuffer
	gso bool

	// The packet's bytes as a cursor over its views.
	view *buffer.View
	off  int

	// GSO state: the original headers, their lengths, the payload left
	// and the index of the next piece.
	hdr      [MaxHeaders]byte
	l3, l4   int
	v6       bool
	mss      int
	left     int
	index    int
	segments int
}

// Reset starts pkt. It returns false if pkt is a GSO packet whose headers
// cannot be cut (not IPv4/IPv6 + TCP, or longer than MaxHeaders): the
// caller drops such a packet as too big.
func (s *Segmenter) Reset(pkt *stack.PacketBuffer) bool {
	s.pkt = pkt
	vl, off := pkt.AsViewList()
	s.view, s.off = vl.Front(), off
	g := pkt.GSOOptions
	s.gso = (g.Type == stack.GSOTCPv4 || g.Type == stack.GSOTCPv6) && g.NeedsCsum
	s.index, s.segments = 0, 1
	if !s.gso {
		return true
	}
	s.l3, s.l4 = len(pkt.NetworkHeader().Slice()), len(pkt.TransportHeader().Slice())
	s.v6 = g.Type == stack.GSOTCPv6
	if s.l4 < header.TCPMinimumSize || s.l3+s.l4 > MaxHeaders || s.l3+s.l4 > pkt.Size() ||
		(!s.v6 && s.l3 < header.IPv4MinimumSize) || (s.v6 && s.l3 < header.IPv6MinimumSize) {
		return false
	}
	s.read(s.hdr[:s.l3+s.l4])
	s.mss = int(g.MSS)
	s.left = pkt.Size() - s.l3 - s.l4
	if s.mss <= 0 {
		s.mss = max(s.left, 1)
	}
	s.segments = max(1, (s.left+s.mss-1)/s.mss)
	return true
}

// Release forgets the current packet (it holds no reference of its own;
// this only lets the packet be collected once the caller drops it).
func (s *Segmenter) Release() { s.pkt, s.view = nil, nil }

// Segments returns how many packets the current one is sent as (1 for a
// packet that is not cut).
func (s *Segmenter) Segments() int { return s.segments }

// Cut reports whether the current packet is a host-GSO TCP segment sent
// as more than one packet.
func (s *Segmenter) Cut() bool { return s.gso && s.segments > 1 }

// Next returns the size of the next piece of the current packet.
func (s *Segmenter) Next() int {
	if !s.gso {
		return s.pkt.Size()
	}
	return s.l3 + s.l4 + min(s.mss, s.left)
}

// Done reports whether the packet's last piece has been written or
// skipped.
func (s *Segmenter) Done() bool { return s.index == s.segments }

// read copies the packet's next len(dst) bytes into dst.
func (s *Segmenter) read(dst []byte) {
	n := 0
	for n < len(dst) && s.view != nil {
		b := s.view.AsSlice()
		if s.off >= len(b) {
			s.off -= len(b)
			s.view = s.view.Next()
			continue
		}
		c := copy(dst[n:], b[s.off:])
		n += c
		s.off += c
	}
}

// Skip passes over the next piece (the caller dropped it); the pieces
// after it keep their sequence numbers and IP IDs.
func (s *Segmenter) Skip() {
	s.index++
	n := s.pkt.Size()
	if s.gso {
		n = min(s.mss, s.left)
		s.left -= n
	}
	for n > 0 && s.view != nil {
		b := s.view.AsSlice()
		if s.off >= len(b) {
			s.off -= len(b)
			s.view = s.view.Next()
			continue
		}
		c := min(n, len(b)-s.off)
		n -= c
		s.off += c
	}
}

// Write writes the next piece into dst, which must be Next() bytes long.
// A cut piece gets the original headers with its own IP length (and, for
// IPv4, IP ID original+i and a new header checksum), sequence number,
// flags (FIN and PSH on the last piece only, CWR on the first only) and a
// complete TCP checksum.
func (s *Segmenter) Write(dst []byte) {
	s.index++
	if !s.gso {
		s.read(dst)
		return
	}
	h := s.l3 + s.l4
	payload := len(dst) - h
	copy(dst, s.hdr[:h])
	s.read(dst[h:])
	first, last := s.index == 1, s.index == s.segments
	seq := binary.BigEndian.Uint32(s.hdr[s.l3+4:]) + uint32((s.index-1)*s.mss)
	s.left -= payload

	ip := dst[:s.l3]
	if s.v6 {
		header.IPv6(ip).SetPayloadLength(uint16(len(dst) - header.IPv6MinimumSize))
	} else {
		v4 := header.IPv4(ip)
		v4.SetTotalLength(uint16(len(dst)))
		v4.SetID(v4.ID() + uint16(s.index-1))
		v4.SetChecksum(0)
		v4.SetChecksum(^v4.CalculateChecksum())
	}
	tcp := header.TCP(dst[s.l3:])
	tcp.SetSequenceNumber(seq)
	flags := tcp.Flags()
	if !last {
		flags &^= header.TCPFlagFin | header.TCPFlagPsh
	}
	if !first {
		flags &^= header.TCPFlagCwr
	}
	tcp.SetFlags(uint8(flags))
	tcp.SetChecksum(0)
	var xsum uint16
	if s.v6 {
		v6 := header.IPv6(ip)
		xsum = header.PseudoHeaderChecksum(header.TCPProtocolNumber, v6.SourceAddress(), v6.DestinationAddress(), uint16(len(dst)-s.l3))
	} else {
		v4 := header.IPv4(ip)
		xsum = header.PseudoHeaderChecksum(header.TCPProtocolNumber, v4.SourceAddress(), v4.DestinationAddress(), uint16(len(dst)-s.l3))
	}
	tcp.SetChecksum(^checksum.Checksum(dst[s.l3:], xsum))
}
