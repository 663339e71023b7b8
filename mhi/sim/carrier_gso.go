package sim

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/buffer"
	gcsum "gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// The carrier's NIC does TSO, as a network server's NIC does: its TCP
// hands it segments of up to 64 KiB (host GSO) and they are cut into
// MSS-sized packets while they are copied into the DL transfer or frame,
// so gVisor builds, routes and checksums one packet per 64 KiB instead of
// one per MSS. The cutting is link/gso.go's segmenter (the host's side
// does the same for UL).

// maxDLHeaders bounds the IP and TCP headers of a GSO packet (IPv4 60 +
// TCP 60; IPv6 40 + TCP 60).
const maxDLHeaders = 120

// dlSegmenter walks one outgoing packet as the packets it is sent as: the
// packet itself, or, for a host-GSO TCP segment, its MSS-sized pieces,
// each with its own IP and TCP header and a complete TCP checksum.
type dlSegmenter struct {
	pkt *stack.PacketBuffer
	gso bool

	// The packet's bytes as a cursor over its views.
	view *buffer.View
	off  int

	// GSO state: the original headers, their lengths, the payload left
	// and the index of the next piece.
	hdr      [maxDLHeaders]byte
	l3, l4   int
	v6       bool
	mss      int
	left     int
	index    int
	segments int
}

// reset starts pkt. It returns false if pkt is a GSO packet whose headers
// cannot be cut (not IPv4/IPv6 + TCP, or longer than maxDLHeaders).
func (s *dlSegmenter) reset(pkt *stack.PacketBuffer) bool {
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
	if s.l4 < header.TCPMinimumSize || s.l3+s.l4 > maxDLHeaders || s.l3+s.l4 > pkt.Size() ||
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

// next returns the size of the next piece of the current packet.
func (s *dlSegmenter) next() int {
	if !s.gso {
		return s.pkt.Size()
	}
	return s.l3 + s.l4 + min(s.mss, s.left)
}

// done reports whether the packet's last piece has been written.
func (s *dlSegmenter) done() bool { return s.index == s.segments }

// read copies the packet's next len(dst) bytes into dst.
func (s *dlSegmenter) read(dst []byte) {
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

// skip passes over the next piece (it was dropped).
func (s *dlSegmenter) skip() {
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

// write writes the next piece into dst (len(dst) == next()).
func (s *dlSegmenter) write(dst []byte) {
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
	tcp.SetChecksum(^gcsum.Checksum(dst[s.l3:], xsum))
}
