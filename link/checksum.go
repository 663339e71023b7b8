package link

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/mhistack/mhistack/internal/csum"
)

// checksumOK validates, once and on the contiguous DMA copy, what the
// stack skips when the link advertises CapabilityRXChecksumOffload: the
// IPv4 header checksum and the TCP and UDP checksums. Packets the stack
// would reject as malformed anyway fail here too. Transport checksums of
// fragments, and of IPv6 packets with extension headers before the
// transport header, cannot be checked per packet and pass unchecked.
func checksumOK(p []byte, proto tcpip.NetworkProtocolNumber) bool {
	return csum.PacketOK(p, proto)
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
