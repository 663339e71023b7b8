package siit

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// withSourceRoute is p with a loose source route option (RFC 791) in
// its header.
func withSourceRoute(p []byte) []byte {
	opt := []byte{131, 7, 4, 198, 51, 100, 1, 0} // LSRR, one address, then end of options
	b := make([]byte, 0, len(p)+len(opt))
	b = append(append(append(b, p[:20]...), opt...), p[20:]...)
	h := header.IPv4(b)
	b[0] = 4<<4 | 7
	h.SetTotalLength(uint16(len(b)))
	h.SetChecksum(0)
	h.SetChecksum(^h.CalculateChecksum())
	return b
}

// TestErrorTo4AnswersWhatRFC7915Section4Names: a source route option
// gets Destination Unreachable code 5, a TTL run out Time Exceeded, a
// DF packet too big Fragmentation Needed with the IPv6 MTU less 20; each
// from 192.0.0.8 to the sender, quoting the packet, checksums right. No
// error answers an ICMP error, a non-first fragment, or a refusal the
// RFC names no error for.
func TestErrorTo4AnswersWhatRFC7915Section4Names(t *testing.T) {
	tr := newTranslator(t, nsp)
	out, e := make([]byte, 2048), make([]byte, 2048)
	udp := ipv4(host4, remote4, protoUDP, 64, 0, 0, udpDgram(host4, remote4, "hello", true))
	check := func(name string, n int, err error, p []byte, typ, code byte, rest uint32) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		q := e[:n]
		h := header.IPv4(q)
		if !h.IsValid(n) || !h.IsChecksumValid() || h.Protocol() != protoICMP || !icmp4OK(q) {
			t.Fatalf("%s: invalid ICMPv4 error %x", name, q)
		}
		if h.SourceAddress().As4() != [4]byte{192, 0, 0, 8} || h.DestinationAddress().As4() != host4.As4() {
			t.Fatalf("%s: from %v to %v", name, h.SourceAddress(), h.DestinationAddress())
		}
		m := q[20:]
		if m[0] != typ || m[1] != code || binary.BigEndian.Uint32(m[4:]) != rest || string(m[8:]) != string(p) {
			t.Fatalf("%s: type %d code %d rest %d quoting %x", name, m[0], m[1], binary.BigEndian.Uint32(m[4:]), m[8:])
		}
	}
	sr := withSourceRoute(udp)
	_, err := tr.To6(out, sr)
	n, err := ErrorTo4(e, sr, err)
	check("source route", n, err, sr, 3, 5, 0)

	ttl := ipv4(host4, remote4, protoUDP, 1, 0, 0, udpDgram(host4, remote4, "hello", true))
	_, err = tr.To6(out, ttl)
	n, err = ErrorTo4(e, ttl, err)
	check("TTL", n, err, ttl, 11, 0, 0)

	n, err = FragNeeded4(e, udp, 1280)
	check("too big", n, err, udp, 3, 4, 1260)

	big := ipv4(host4, remote4, protoUDP, 64, 0, 0, udpDgram(host4, remote4, string(make([]byte, 1000)), true))
	if n, err = FragNeeded4(e, big, 1280); err != nil || n != 576 {
		t.Fatalf("error about a 1048-byte packet: %d bytes (want 576, RFC 1812 §4.3.2.3), %v", n, err)
	}

	for _, c := range []struct {
		name string
		p    []byte
		err  error
	}{
		{"ICMP error", ipv4(host4, remote4, protoICMP, 1, 0, 0, icmp4(icmp4Unreachable, 3, 0, udp)), ErrTTL},
		{"later fragment", ipv4(host4, remote4, protoUDP, 1, 0, 8, make([]byte, 16)), ErrTTL},
		{"no error for this refusal", udp, errICMPFrag},
		{"to a multicast group", ipv4(host4, netip.MustParseAddr("224.0.0.251"), protoUDP, 1, 0, 0, udpDgram(host4, remote4, "", true)), ErrTTL},
	} {
		if _, err := ErrorTo4(e, c.p, c.err); !errors.Is(err, ErrDrop) {
			t.Errorf("%s: %v, want ErrDrop", c.name, err)
		}
	}
}

// TestErrorTo6AnswersARoutingHeaderWithParameterProblem: a routing
// header with segments left is answered with Parameter Problem code 0
// pointing at the Segments Left field (RFC 7915 §5.1), after a
// hop-by-hop header too; a hop limit run out with Time Exceeded; an
// ICMPv6 error with nothing.
func TestErrorTo6AnswersARoutingHeaderWithParameterProblem(t *testing.T) {
	tr := newTranslator(t, nsp)
	r6 := embed(t, nsp, remote4)
	out, e := make([]byte, 2048), make([]byte, 2048)
	rh := []byte{protoUDP, 0, 0, 1, 0, 0, 0, 0}
	hbh := []byte{nhRouting, 0, 1, 4, 0, 0, 0, 0}
	for _, c := range []struct {
		name      string
		p         []byte
		typ, code byte
		rest      uint32
	}{
		{"routing header", ipv6(r6, host6, nhRouting, 64, append(rh, udpDgram(r6, host6, "x", true)...)), 4, 0, 43},
		{"routing after hop-by-hop", ipv6(r6, host6, nhHopByHop, 64, append(append(hbh, rh...), udpDgram(r6, host6, "x", true)...)), 4, 0, 51},
		{"hop limit", ipv6(r6, host6, protoUDP, 1, udpDgram(r6, host6, "x", true)), 3, 0, 0},
	} {
		_, err := tr.To4(out, c.p)
		n, err := ErrorTo6(e, c.p, host6.As16(), err)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		q := e[:n]
		h := header.IPv6(q)
		if !h.IsValid(n) || h.NextHeader() != protoICMPv6 || !icmp6OK(q) {
			t.Fatalf("%s: invalid ICMPv6 error %x", c.name, q)
		}
		if h.SourceAddress().As16() != host6.As16() || h.DestinationAddress().As16() != r6.As16() {
			t.Fatalf("%s: from %v to %v", c.name, h.SourceAddress(), h.DestinationAddress())
		}
		m := q[40:]
		if m[0] != c.typ || m[1] != c.code || binary.BigEndian.Uint32(m[4:]) != c.rest || string(m[8:]) != string(c.p) {
			t.Fatalf("%s: type %d code %d rest %d", c.name, m[0], m[1], binary.BigEndian.Uint32(m[4:]))
		}
	}
	inner := ipv6(host6, r6, protoUDP, 64, udpDgram(host6, r6, "x", true))
	errPkt := ipv6(r6, host6, protoICMPv6, 1, icmp6(r6, host6, icmp6Unreachable, 0, 0, inner))
	_, err := tr.To4(out, errPkt)
	if _, err := ErrorTo6(e, errPkt, host6.As16(), err); !errors.Is(err, ErrDrop) {
		t.Fatalf("an ICMPv6 error answered: %v", err)
	}
}

// TestNextFragmentCutsADFClearPacketWithinTheLowestIPv6MTU: a 2000-byte
// UDP datagram with DF clear becomes IPv6 fragments of at most 1280
// bytes with the IPv4 Identification and 8-byte offsets, whose data is
// the datagram's; an IPv4 fragment keeps its offset, and M on its last
// piece only if it had it.
func TestNextFragmentCutsADFClearPacketWithinTheLowestIPv6MTU(t *testing.T) {
	tr := newTranslator(t, nsp)
	out, piece := make([]byte, 4096), make([]byte, 4096)
	cut := func(p []byte) (pieces []header.IPv6, data []byte) {
		t.Helper()
		n, err := tr.To6(out, p)
		if err != nil {
			t.Fatal(err)
		}
		limit, id, ok := FragmentLimit(p, 1500)
		if !ok || limit != LowestIPv6MTU {
			t.Fatalf("FragmentLimit: %d %v for a DF-clear packet", limit, ok)
		}
		for at, i := 0, 0; ; i++ {
			m, next, err := NextFragment(piece, out[:n], id, at, limit)
			if err != nil || m > limit || i > 10 {
				t.Fatalf("piece %d at %d: %d bytes, %v", i, at, m, err)
			}
			h := header.IPv6(append([]byte{}, piece[:m]...))
			if !h.IsValid(m) || h.NextHeader() != nhFragment {
				t.Fatalf("piece %d: invalid %x", i, h)
			}
			pieces = append(pieces, h)
			data = append(data, h[48:]...)
			if next == 0 {
				return pieces, data
			}
			at = next
		}
	}
	payload := udpDgram(host4, remote4, string(make([]byte, 1992)), true)
	p := ipv4(host4, remote4, protoUDP, 64, 0, 0, payload)
	pieces, data := cut(p)
	if len(pieces) != 2 {
		t.Fatalf("%d pieces, want 2", len(pieces))
	}
	for i, h := range pieces {
		f := header.IPv6Fragment(h[40:])
		if f.ID() != 0x1234 || f.More() != (i == 0) || f.NextHeader() != protoUDP || int(f.FragmentOffset())*8 != i*1232 {
			t.Fatalf("piece %d: id %#x more %v nh %d offset %d", i, f.ID(), f.More(), f.NextHeader(), f.FragmentOffset())
		}
	}
	n, _ := tr.To6(out, p)
	if string(data) != string(out[40:n]) {
		t.Fatal("the pieces do not hold the translated datagram")
	}

	frag := ipv4(host4, remote4, protoUDP, 64, 0, 2400, make([]byte, 1600)) // a last fragment at 2400
	pieces, _ = cut(frag)
	last := header.IPv6Fragment(pieces[len(pieces)-1][40:])
	first := header.IPv6Fragment(pieces[0][40:])
	if first.FragmentOffset()*8 != 2400 || !first.More() || last.More() || len(pieces) != 2 {
		t.Fatalf("%d pieces, first at %d more %v, last more %v", len(pieces), first.FragmentOffset()*8, first.More(), last.More())
	}
	if _, _, ok := FragmentLimit(ipv4(host4, remote4, protoUDP, 64, header.IPv4FlagDontFragment, 0, payload), 1500); ok {
		t.Fatal("FragmentLimit lets a whole DF packet be cut")
	}
	if limit, _, ok := FragmentLimit(ipv4(host4, remote4, protoUDP, 64, header.IPv4FlagDontFragment|header.IPv4FlagMoreFragments, 0, payload), 1500); !ok || limit != 1500 {
		t.Fatalf("a DF fragment: limit %d, %v; want 1500, true", limit, ok)
	}
}
