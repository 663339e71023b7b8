package sim

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	gcsum "gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

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
		return true
	}
	xsum := header.PseudoHeaderChecksum(tp, src, dst, uint16(len(seg)))
	return gcsum.Checksum(seg, xsum) == 0xffff
}
