// Package siit translates packets between IPv4 and IPv6 as RFC 7915
// (the Stateless IP/ICMP Translation algorithm, SIIT) describes: the IP
// header, TCP and UDP checksums, ICMPv4 and ICMPv6 messages (echo and
// errors, the packet inside an error included), fragments, and what the
// RFC says to drop. Addresses are mapped by a Mapper; Prefix is the RFC
// 6052 mapping of IPv4 addresses into an IPv6 prefix, which the host's
// CLAT (package stack) and the emulated carrier's NAT64 (link/simnet)
// build theirs on.
//
// The first calls:
//
//	pfx, _ := siit.NewPrefix(siit.WellKnownPrefix)
//	t := &siit.Translator{Map: myMapper{pfx}}
//	n, err := t.To6(buf, ipv4Packet) // buf[:n] is the IPv6 packet
//
// A Translator writes into the caller's buffer and allocates nothing;
// its methods may be called from any goroutine. A packet it refuses
// comes back as an error wrapping ErrDrop (the RFC says to drop it),
// ErrMalformed (it does not parse), ErrTTL (the hop limit ran out: a
// router sends Time Exceeded), ErrAddress (an address the Mapper cannot
// map) or ErrShort (dst too small).
//
// What a translator does around the translation is here too, for its
// caller to do: FragmentLimit and NextFragment cut a translated packet
// into IPv6 fragments (RFC 7915 §4: DF clear, at most LowestIPv6MTU
// bytes), SplitFragment a fragment into two, and ErrorTo4, FragNeeded4
// and ErrorTo6 build the ICMP errors RFC 7915 has a translator send for
// what it refuses (the caller rate-limits them).
package siit
