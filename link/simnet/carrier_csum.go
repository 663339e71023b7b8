package simnet

import (
	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/mhistack/mhistack/internal/csum"
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
	return csum.PacketOK(p, proto)
}
