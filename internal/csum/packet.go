package csum

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// PacketOK validates what a gVisor stack skips when a link advertises
// CapabilityRXChecksumOffload: the IPv4 header checksum and the TCP and
// UDP checksums of the packet p (network protocol proto). Packets the
// stack would reject as malformed anyway fail here too. Transport
// checksums of fragments, and of IPv6 packets with extension headers
// before the transport header, cannot be checked per packet and pass
// unchecked. The host's link and the emulated carrier both call it.
func PacketOK(p []byte, proto tcpip.NetworkProtocolNumber) bool {
	var src, dst tcpip.Address
	var seg []byte
	var tp tcpip.TransportProtocolNumber
	v6 := proto == header.IPv6ProtocolNumber
	if !v6 {
		h := header.IPv4(p)
		if !h.IsValid(len(p)) || !h.IsChecksumValid() {
			return false
		}
		if h.More() || h.FragmentOffset() != 0 {
			return true
		}
		src, dst = h.SourceAddress(), h.DestinationAddress()
		seg = p[h.HeaderLength():h.TotalLength()]
		tp = h.TransportProtocol()
	} else {
		h := header.IPv6(p)
		if !h.IsValid(len(p)) {
			return false
		}
		src, dst = h.SourceAddress(), h.DestinationAddress()
		seg = p[header.IPv6MinimumSize : header.IPv6MinimumSize+int(h.PayloadLength())]
		tp = tcpip.TransportProtocolNumber(h.NextHeader())
	}
	switch tp {
	case header.TCPProtocolNumber:
		if len(seg) < header.TCPMinimumSize {
			return false
		}
	case header.UDPProtocolNumber:
		if len(seg) < header.UDPMinimumSize {
			return false
		}
		u := header.UDP(seg)
		if ul := int(u.Length()); ul < header.UDPMinimumSize || ul > len(seg) {
			return false
		}
		seg = seg[:u.Length()]
		if u.Checksum() == 0 {
			// No checksum: allowed on IPv4 only (RFC 768, RFC 8200 §8.1).
			return !v6
		}
	default:
		return true // ICMP and others validate their own
	}
	xsum := header.PseudoHeaderChecksum(tp, src, dst, uint16(len(seg)))
	return Checksum(seg, xsum) == 0xffff
}
