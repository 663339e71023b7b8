package stack

import (
	"sync/atomic"

	"github.com/mhistack/mhistack/link"
)

type counters struct {
	dialed, dialFailed, accepted, connLimit, dialLimit, addrAborts atomic.Uint64
	bridges, bridgeExpiries, tailProbes, tailACKs                  atomic.Uint64
	ra, raBad                                                      atomic.Uint64
	clat                                                           clatCounters
}

// Stats are the stack's counters, its TCP/IP counters and, when the link
// is a *link.Endpoint or a session on one (Modem.OpenSession), the
// link's. The stack's and TCP/IP counters are the session's own; Link
// counts the whole data pair, every session of the modem included.
type Stats struct {
	// ActiveTCPConns is the number of open TCP connections (dialed and
	// accepted, not yet closed); InFlightDials the handshakes under way.
	ActiveTCPConns, InFlightDials int
	// Dialed and Accepted count TCP connections made; DialFailed dials
	// that failed; ConnLimitHits and DialLimitHits the dials and accepts
	// refused by Limits.
	Dialed, DialFailed, Accepted, ConnLimitHits, DialLimitHits uint64
	// AddressAborts counts TCP connections and dials reset because
	// their local address was removed (SetAddresses, a session address
	// change).
	AddressAborts uint64
	// Bridges counts the times the data session was lost with its
	// addresses kept and the stack bridged the outage: link down, NIC
	// enabled, the link holding what was sent (docs/STACK.md);
	// BridgeExpiries those it gave up on after 5 s (the interface was
	// then disabled and what was held dropped).
	Bridges, BridgeExpiries uint64
	// CLATTranslated counts the packets the CLAT translated (IPv4 to
	// IPv6 and back, docs/STACK.md "464XLAT"); CLATRefused those it
	// dropped: refused by the translator as RFC 7915 says, or sent while
	// no CLAT ran.
	CLATTranslated, CLATRefused uint64
	// CLATErrorsSent counts the ICMP errors the CLAT sent of its own
	// about packets it refused (RFC 7915; rate-limited).
	CLATErrorsSent uint64
	// TailProbes counts the one-byte TCP probes sent when a bridged
	// session came back (TCPOptions.NoTailProbe, docs/STACK.md).
	TailProbes uint64
	// RouterAdverts counts the network's Router Advertisements the
	// stack followed (docs/STACK.md); RouterAdvertsInvalid those it
	// dropped as RFC 4861 §6.1.2 says (hop limit, source, checksum,
	// options).
	RouterAdverts, RouterAdvertsInvalid uint64
	// TailACKs counts the pure ACKs sent again when a bridged session
	// came back: what the host holds, which the link may have dropped
	// while the session was down
	// (TCPOptions.NoTailProbe, docs/STACK.md).
	TailACKs uint64

	// Packets and bytes through the NIC, and packets dropped because
	// the transmit queue was full (Config.TXQueueLen; without a queue,
	// packets the link refused). Link.TXDrops has what the link itself
	// refused.
	RXPackets, RXBytes, TXPackets, TXBytes, TXDroppedNoBufferSpace uint64
	// TXDroppedClosing counts the packets the transmit queue dropped
	// because the stack was closing while the link had no room for them
	// (the queue holds them otherwise, docs/STACK.md).
	TXDroppedClosing uint64
	// TCP counters: segments, retransmits, timeouts, resets.
	TCPSegmentsSent, TCPSegmentsReceived, TCPRetransmits, TCPTimeouts, TCPResetsSent, TCPResetsReceived uint64
	TCPFailedConnectionAttempts                                                                         uint64
	// UDP datagrams dropped for a full receive buffer.
	UDPReceiveBufferErrors uint64
	// UDPPacketsSent counts the UDP datagrams handed to the NIC;
	// UDPSendErrors those it refused, each an error returned to its
	// writer (a full transmit queue: TXDroppedNoBufferSpace). A writer
	// whose send buffer is full waits (or fails at its deadline) and
	// sends nothing, so neither counts it.
	UDPPacketsSent, UDPSendErrors uint64

	// Link is the link endpoint's statistics (nil for other endpoints).
	Link *link.Stats
}

// Stats returns a snapshot of the counters.
func (s *Stack) Stats() Stats {
	st := Stats{
		ActiveTCPConns:       int(s.conns.Load()),
		InFlightDials:        len(s.dials),
		Dialed:               s.counters.dialed.Load(),
		DialFailed:           s.counters.dialFailed.Load(),
		Accepted:             s.counters.accepted.Load(),
		ConnLimitHits:        s.counters.connLimit.Load(),
		DialLimitHits:        s.counters.dialLimit.Load(),
		AddressAborts:        s.counters.addrAborts.Load(),
		Bridges:              s.counters.bridges.Load(),
		BridgeExpiries:       s.counters.bridgeExpiries.Load(),
		CLATTranslated:       s.counters.clat.translated.Load(),
		CLATRefused:          s.counters.clat.refused.Load(),
		CLATErrorsSent:       s.counters.clat.icmpErrors.Load(),
		TailProbes:           s.counters.tailProbes.Load(),
		RouterAdverts:        s.counters.ra.Load(),
		RouterAdvertsInvalid: s.counters.raBad.Load(),
		TailACKs:             s.counters.tailACKs.Load(),
	}
	if s.txw != nil {
		st.TXDroppedClosing = s.txw.closeDrops.Load()
	}
	gs := s.gs.Stats()
	if info, ok := s.gs.NICInfo()[nicID]; ok {
		ns := info.Stats
		st.RXPackets, st.RXBytes = ns.Rx.Packets.Value(), ns.Rx.Bytes.Value()
		st.TXPackets, st.TXBytes = ns.Tx.Packets.Value(), ns.Tx.Bytes.Value()
		st.TXDroppedNoBufferSpace = ns.TxPacketsDroppedNoBufferSpace.Value()
	}
	t := gs.TCP
	st.TCPSegmentsSent, st.TCPSegmentsReceived = t.SegmentsSent.Value(), t.ValidSegmentsReceived.Value()
	st.TCPRetransmits, st.TCPTimeouts = t.Retransmits.Value(), t.Timeouts.Value()
	st.TCPResetsSent, st.TCPResetsReceived = t.ResetsSent.Value(), t.ResetsReceived.Value()
	st.TCPFailedConnectionAttempts = t.FailedConnectionAttempts.Value()
	st.UDPReceiveBufferErrors = gs.UDP.ReceiveBufferErrors.Value()
	st.UDPPacketsSent, st.UDPSendErrors = gs.UDP.PacketsSent.Value(), gs.UDP.PacketSendErrors.Value()
	if ep := linkEndpointOf(s.tap.Child()); ep != nil {
		ls := ep.Stats()
		st.Link = &ls
	}
	return st
}
