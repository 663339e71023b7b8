package simnet

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// A forwarded flow whose host-side server closes first leaves the
// carrier's endpoint in TIME-WAIT (60 s, gVisor's default), and the
// host's stack, the passive closer, may reuse the port at once. gVisor
// hands a SYN that hits a TIME-WAIT endpoint to a new connection only
// when a listener owns the address; the carrier terminates TCP with a
// forwarder, so such a SYN was answered with an ACK or dropped, and the
// host's dial timed out (304 of 5,605 dials in a minute of churn).
//
// The carrier accepts it instead, as Linux does for a SYN newer than
// the TIME-WAIT connection (RFC 6191) and a NAT does for any SYN on a
// closed 4-tuple: takeOverTimeWait aborts the TIME-WAIT endpoint before
// the SYN reaches gVisor, which then finds no endpoint and hands the SYN
// to the forwarder. TIME-WAIT guards a new incarnation against old
// duplicates of the previous one; the emulated path neither delays nor
// reorders packets, so a SYN on a TIME-WAIT 4-tuple is always the host's
// new connection, whatever its sequence number (gVisor's ISNs for one
// 4-tuple grow with time, not with what the previous connection sent,
// so RFC 1122's "higher than the last sequence number" would refuse a
// port reused soon after a large transfer). The RST that Abort sends
// carries the old connection's sequence numbers; a host in SYN-SENT
// drops a RST that does not acknowledge its SYN (RFC 9293 §3.10.7.3).

// takeOverTimeWait aborts the carrier's TIME-WAIT endpoint of the
// 4-tuple of p, an IP packet of proto from the host, if p is a SYN
// without ACK and there is one. It runs on rxLoop before GRO; a packet
// that is not a SYN costs a few header reads.
func (cn *CarrierNetwork) takeOverTimeWait(p []byte, proto tcpip.NetworkProtocolNumber) {
	var src, dst tcpip.Address
	var th header.TCP
	switch proto {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(p)
		if !ip.IsValid(len(p)) || ip.TransportProtocol() != header.TCPProtocolNumber || ip.More() || ip.FragmentOffset() != 0 {
			return
		}
		th = header.TCP(ip.Payload())
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(p)
		// A SYN with extension headers is not looked at: the host's
		// stack sends none.
		if !ip.IsValid(len(p)) || ip.TransportProtocol() != header.TCPProtocolNumber {
			return
		}
		th = header.TCP(ip.Payload())
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	default:
		return
	}
	if len(th) < header.TCPMinimumSize {
		return
	}
	if f := th.Flags(); !f.Contains(header.TCPFlagSyn) || f.Intersects(header.TCPFlagAck|header.TCPFlagRst) {
		return
	}
	id := stack.TransportEndpointID{LocalPort: th.DestinationPort(), LocalAddress: dst, RemotePort: th.SourcePort(), RemoteAddress: src}
	ep := cn.s.FindTransportEndpoint(proto, tcp.ProtocolNumber, id, 1)
	tep, ok := ep.(*tcp.Endpoint)
	if !ok || tcp.EndpointState(tep.State()) != tcp.StateTimeWait {
		return
	}
	tep.Abort()
	cn.stats.timeWaitReused.Add(1)
}
