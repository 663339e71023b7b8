package link

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/mhistack/mhistack/link/internal/csum"
)

// checksumOK validates, once and on the contiguous DMA copy, what the
// stack skips when the link advertises CapabilityRXChecksumOffload: the
// IPv4 header checksum and the TCP and UDP checksums. Packets the stack
// would reject as malformed anyway fail here too. Transport checksums of
// fragments, and of IPv6 packets with extension headers before the
// transport header, cannot be checked per packet and pass unchecked.
func checksumOK(p []byte, proto tcpip.NetworkProtocolNumber) bool {
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
	return csum.Checksum(seg, xsum) == 0xffff
}

// headerOK is what checksumOK checks when the modem has validated the
// transport checksum (Span.CsumValid): the IP header is well formed and,
// for IPv4, its checksum is right (the device vouches for TCP/UDP only, as
// rmnet's CHECKSUM_UNNECESSARY does; Linux's IP layer still checks the
// IPv4 header, and gVisor skips it under CapabilityRXChecksumOffload).
func headerOK(p []byte, proto tcpip.NetworkProtocolNumber) bool {
	if proto == header.IPv6ProtocolNumber {
		return header.IPv6(p).IsValid(len(p))
	}
	h := header.IPv4(p)
	return h.IsValid(len(p)) && h.IsChecksumValid()
}
