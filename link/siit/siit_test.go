package siit

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/mhistack/mhistack/internal/csum"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// prefixMapper is a stateless SIIT mapping: every address of either
// family is the other's under one prefix, except for one host mapped
// explicitly (as a CLAT maps its IPv4 address).
type prefixMapper struct {
	pfx    Prefix
	host4  [4]byte
	host6  [16]byte
	noHost bool
}

func (m *prefixMapper) To6(a [4]byte) ([16]byte, bool) {
	if !m.noHost && a == m.host4 {
		return m.host6, true
	}
	return m.pfx.Embed(a)
}

func (m *prefixMapper) To4(a [16]byte) ([4]byte, bool) {
	if !m.noHost && a == m.host6 {
		return m.host4, true
	}
	return m.pfx.Extract(a)
}

var (
	host4   = netip.MustParseAddr("192.0.0.1")
	host6   = netip.MustParseAddr("2001:db8:1:2::c1a7")
	remote4 = netip.MustParseAddr("198.51.100.7")
	nsp     = netip.MustParsePrefix("2001:db8:64::/96")
)

func newTranslator(t testing.TB, p netip.Prefix) *Translator {
	pfx, err := NewPrefix(p)
	if err != nil {
		t.Fatal(err)
	}
	return &Translator{Map: &prefixMapper{pfx: pfx, host4: host4.As4(), host6: host6.As16()}}
}

func embed(t testing.TB, p netip.Prefix, a netip.Addr) netip.Addr {
	pfx, _ := NewPrefix(p)
	b, ok := pfx.Embed(a.As4())
	if !ok {
		t.Fatalf("embed %v in %v refused", a, p)
	}
	return netip.AddrFrom16(b)
}

func addr(a netip.Addr) tcpip.Address { return tcpip.AddrFromSlice(a.AsSlice()) }

// ipv4 builds an IPv4 packet with payload (whose transport checksum the
// caller has set) and a valid header checksum.
func ipv4(src, dst netip.Addr, proto uint8, ttl uint8, flags uint8, off uint16, payload []byte) []byte {
	b := make([]byte, header.IPv4MinimumSize+len(payload))
	h := header.IPv4(b)
	h.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), ID: 0x1234, Flags: flags, FragmentOffset: off, TTL: ttl,
		Protocol: proto, SrcAddr: addr(src), DstAddr: addr(dst)})
	h.SetChecksum(^h.CalculateChecksum())
	copy(b[header.IPv4MinimumSize:], payload)
	return b
}

func ipv6(src, dst netip.Addr, nh uint8, hop uint8, payload []byte) []byte {
	b := make([]byte, header.IPv6MinimumSize+len(payload))
	header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(len(payload)), TransportProtocol: tcpip.TransportProtocolNumber(nh),
		HopLimit: hop, SrcAddr: addr(src), DstAddr: addr(dst)})
	copy(b[header.IPv6MinimumSize:], payload)
	return b
}

// tcpSeg is a TCP segment from src to dst with a valid checksum.
func tcpSeg(src, dst netip.Addr, data string) []byte {
	b := make([]byte, header.TCPMinimumSize+len(data))
	header.TCP(b).Encode(&header.TCPFields{SrcPort: 40000, DstPort: 80, SeqNum: 1, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagSyn, WindowSize: 65535})
	copy(b[header.TCPMinimumSize:], data)
	x := header.PseudoHeaderChecksum(header.TCPProtocolNumber, addr(src), addr(dst), uint16(len(b)))
	header.TCP(b).SetChecksum(^checksum.Checksum(b, x))
	return b
}

func udpDgram(src, dst netip.Addr, data string, withSum bool) []byte {
	b := make([]byte, header.UDPMinimumSize+len(data))
	header.UDP(b).Encode(&header.UDPFields{SrcPort: 5353, DstPort: 53, Length: uint16(len(b))})
	copy(b[header.UDPMinimumSize:], data)
	if withSum {
		x := header.PseudoHeaderChecksum(header.UDPProtocolNumber, addr(src), addr(dst), uint16(len(b)))
		header.UDP(b).SetChecksum(^checksum.Checksum(b, x))
	}
	return b
}

func icmp4(typ, code uint8, rest uint32, body []byte) []byte {
	b := make([]byte, 8+len(body))
	b[0], b[1] = typ, code
	binary.BigEndian.PutUint32(b[4:], rest)
	copy(b[8:], body)
	binary.BigEndian.PutUint16(b[2:], ^checksum.Checksum(b, 0))
	return b
}

func icmp6(src, dst netip.Addr, typ, code uint8, rest uint32, body []byte) []byte {
	b := make([]byte, 8+len(body))
	b[0], b[1] = typ, code
	binary.BigEndian.PutUint32(b[4:], rest)
	copy(b[8:], body)
	x := header.PseudoHeaderChecksum(header.ICMPv6ProtocolNumber, addr(src), addr(dst), uint16(len(b)))
	binary.BigEndian.PutUint16(b[2:], ^checksum.Checksum(b, x))
	return b
}

func icmp6OK(p []byte) bool {
	h := header.IPv6(p)
	x := header.PseudoHeaderChecksum(header.ICMPv6ProtocolNumber, h.SourceAddress(), h.DestinationAddress(), h.PayloadLength())
	return checksum.Checksum(p[40:40+int(h.PayloadLength())], x) == 0xffff
}

func icmp4OK(p []byte) bool {
	h := header.IPv4(p)
	return checksum.Checksum(p[h.HeaderLength():h.TotalLength()], 0) == 0xffff
}

func TestPrefixEmbedsAsRFC6052Section24Examples(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.33").As4()
	for _, c := range []struct{ p, want string }{
		{"2001:db8::/32", "2001:db8:c000:221::"},
		{"2001:db8:100::/40", "2001:db8:1c0:2:21::"},
		{"2001:db8:122::/48", "2001:db8:122:c000:2:2100::"},
		{"2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"},
		{"2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"},
		{"2001:db8:122:344::/96", "2001:db8:122:344::c000:221"},
	} {
		p, err := NewPrefix(netip.MustParsePrefix(c.p))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := p.Embed(a)
		if !ok || netip.AddrFrom16(got) != netip.MustParseAddr(c.want) {
			t.Errorf("%s: embed = %v %v, want %s", c.p, netip.AddrFrom16(got), ok, c.want)
		}
		back, ok := p.Extract(got)
		if !ok || back != a {
			t.Errorf("%s: extract = %v %v", c.p, back, ok)
		}
	}
}

func TestPrefixRefusesWhatRFC6052Forbids(t *testing.T) {
	for _, p := range []string{"2001:db8::/33", "2001:db8::/128", "10.0.0.0/8", "2001:db8:0:0:100::/96"} {
		if _, err := NewPrefix(netip.MustParsePrefix(p)); err == nil {
			t.Errorf("NewPrefix(%s) accepted", p)
		}
	}
	wkp, _ := NewPrefix(WellKnownPrefix)
	if _, ok := wkp.Embed(netip.MustParseAddr("203.0.113.5").As4()); ok {
		t.Error("the Well-Known Prefix carried a documentation address (RFC 6052 §3.1)")
	}
	if _, ok := wkp.Extract(netip.MustParseAddr("64:ff9b::10.1.2.3").As16()); ok {
		t.Error("the Well-Known Prefix gave up a private address (RFC 6052 §3.1)")
	}
	if a, ok := wkp.Embed([4]byte{8, 8, 8, 8}); !ok || netip.AddrFrom16(a) != netip.MustParseAddr("64:ff9b::808:808") {
		t.Errorf("8.8.8.8 under the WKP = %v %v", netip.AddrFrom16(a), ok)
	}
}

func TestSIITTCPBothWaysKeepsChecksumsValidAndDecrementsTTL(t *testing.T) {
	for _, bits := range []int{32, 40, 48, 56, 64, 96} {
		p := netip.PrefixFrom(netip.MustParseAddr("2001:db8:122:344::"), bits).Masked()
		tr := newTranslator(t, p)
		in := ipv4(host4, remote4, protoTCP, 64, 0, 0, tcpSeg(host4, remote4, "hello"))
		out := make([]byte, 2048)
		n, err := tr.To6(out, in)
		if err != nil {
			t.Fatalf("/%d: %v", bits, err)
		}
		h := header.IPv6(out[:n])
		if n != len(in)+20 || !h.IsValid(n) || h.HopLimit() != 63 || h.NextHeader() != protoTCP {
			t.Fatalf("/%d: IPv6 packet %x", bits, out[:n])
		}
		if h.SourceAddress() != addr(host6) || h.DestinationAddress() != addr(embed(t, p, remote4)) {
			t.Fatalf("/%d: addresses %v → %v", bits, h.SourceAddress(), h.DestinationAddress())
		}
		if !csum.PacketOK(out[:n], header.IPv6ProtocolNumber) {
			t.Fatalf("/%d: TCP checksum wrong after 4→6", bits)
		}
		back := make([]byte, 2048)
		m, err := tr.To4(back, out[:n])
		if err != nil {
			t.Fatal(err)
		}
		h4 := header.IPv4(back[:m])
		if m != len(in) || !csum.PacketOK(back[:m], header.IPv4ProtocolNumber) || h4.TTL() != 62 ||
			h4.SourceAddress() != addr(host4) || h4.DestinationAddress() != addr(remote4) {
			t.Fatalf("/%d: back to IPv4: %x", bits, back[:m])
		}
		if string(back[m-5:m]) != "hello" {
			t.Fatalf("payload %q", back[m-5:m])
		}
	}
}

func TestSIITUDPWithoutChecksumGetsOneOrIsDroppedIfFragmented(t *testing.T) {
	tr := newTranslator(t, nsp)
	out := make([]byte, 2048)
	in := ipv4(host4, remote4, protoUDP, 64, 0, 0, udpDgram(host4, remote4, "q", false))
	n, err := tr.To6(out, in)
	if err != nil || !csum.PacketOK(out[:n], header.IPv6ProtocolNumber) {
		t.Fatalf("unfragmented UDP without checksum: %v, checksum valid %v", err, err == nil && csum.PacketOK(out[:n], header.IPv6ProtocolNumber))
	}
	frag := ipv4(host4, remote4, protoUDP, 64, header.IPv4FlagMoreFragments, 0, udpDgram(host4, remote4, "q", false))
	if _, err := tr.To6(out, frag); !errors.Is(err, ErrDrop) {
		t.Fatalf("fragmented UDP without checksum: %v, want ErrDrop", err)
	}
}

func TestSIITEchoBothWays(t *testing.T) {
	tr := newTranslator(t, nsp)
	r6 := embed(t, nsp, remote4)
	out := make([]byte, 2048)
	n, err := tr.To6(out, ipv4(host4, remote4, protoICMP, 64, 0, 0, icmp4(icmp4Echo, 0, 0x00070001, []byte("ping"))))
	if err != nil || out[40] != icmp6Echo || !icmp6OK(out[:n]) {
		t.Fatalf("echo request 4→6: %v %x", err, out[:n])
	}
	n, err = tr.To4(out, ipv6(r6, host6, protoICMPv6, 64, icmp6(r6, host6, icmp6EchoReply, 0, 0x00070001, []byte("ping"))))
	if err != nil || out[20] != icmp4EchoReply || !icmp4OK(out[:n]) || header.IPv4(out).Protocol() != protoICMP {
		t.Fatalf("echo reply 6→4: %v %x", err, out[:n])
	}
}

func TestSIITPacketTooBigBecomesFragNeededWithMTU20Less(t *testing.T) {
	tr := newTranslator(t, nsp)
	r6 := embed(t, nsp, remote4)
	// The packet the host sent (4→6 already), quoted by a router.
	orig := ipv6(host6, r6, protoTCP, 63, tcpSeg(host6, r6, "data"))
	router := netip.MustParseAddr("2001:db8:ffff::1") // no IPv4 address
	in := ipv6(router, host6, protoICMPv6, 64, icmp6(router, host6, icmp6TooBig, 0, 1400, orig))
	out := make([]byte, 2048)
	n, err := tr.To4(out, in)
	if err != nil {
		t.Fatal(err)
	}
	h := header.IPv4(out[:n])
	if h.SourceAddress() != addr(netip.AddrFrom4(dummy4)) || !icmp4OK(out[:n]) {
		t.Fatalf("error from an untranslatable router: source %v, checksum valid %v", h.SourceAddress(), icmp4OK(out[:n]))
	}
	icmp := out[20:n]
	if icmp[0] != icmp4Unreachable || icmp[1] != 4 || binary.BigEndian.Uint16(icmp[6:]) != 1380 {
		t.Fatalf("ICMPv4 %d/%d MTU %d, want 3/4 MTU 1380", icmp[0], icmp[1], binary.BigEndian.Uint16(icmp[6:]))
	}
	ih := header.IPv4(icmp[8:])
	if ih.SourceAddress() != addr(host4) || ih.DestinationAddress() != addr(remote4) || ih.Protocol() != protoTCP {
		t.Fatalf("inner packet %v → %v", ih.SourceAddress(), ih.DestinationAddress())
	}

	// And the other way: Frag Needed from an IPv4 router, MTU + 20.
	orig4 := ipv4(remote4, host4, protoTCP, 60, header.IPv4FlagDontFragment, 0, tcpSeg(remote4, host4, "data"))
	r4 := netip.MustParseAddr("198.51.100.1")
	n, err = tr.To6(out, ipv4(r4, remote4, protoICMP, 64, 0, 0, icmp4(icmp4Unreachable, 4, 1480, orig4)))
	if err != nil {
		t.Fatal(err)
	}
	if out[40] != icmp6TooBig || binary.BigEndian.Uint32(out[44:]) != 1500 || !icmp6OK(out[:n]) {
		t.Fatalf("ICMPv6 %d MTU %d checksum %v", out[40], binary.BigEndian.Uint32(out[44:]), icmp6OK(out[:n]))
	}
}

func TestSIITFragmentsBecomeFragmentHeaderAndBack(t *testing.T) {
	tr := newTranslator(t, nsp)
	out := make([]byte, 2048)
	data := make([]byte, 64)
	in := ipv4(host4, remote4, protoUDP, 64, header.IPv4FlagMoreFragments, 0, udpDgram(host4, remote4, string(data), true))
	n, err := tr.To6(out, in)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(in)+28 || out[6] != nhFragment || out[40] != protoUDP {
		t.Fatalf("first fragment: %d bytes, next header %d/%d", n, out[6], out[40])
	}
	if v := binary.BigEndian.Uint16(out[42:]); v != 1 || binary.BigEndian.Uint32(out[44:]) != 0x1234 {
		t.Fatalf("fragment header offset/M %#x id %#x", v, binary.BigEndian.Uint32(out[44:]))
	}
	// A later fragment: offset 72 bytes, last.
	later := ipv4(host4, remote4, protoUDP, 64, 0, 72, data[:16])
	n, err = tr.To6(out, later)
	if err != nil || binary.BigEndian.Uint16(out[42:]) != 72 {
		t.Fatalf("later fragment: %v, offset field %#x", err, binary.BigEndian.Uint16(out[42:]))
	}
	back := make([]byte, 2048)
	m, err := tr.To4(back, out[:n])
	if err != nil {
		t.Fatal(err)
	}
	h := header.IPv4(back[:m])
	if h.FragmentOffset() != 72 || h.More() || h.ID() != 0x1234 || h.Flags()&header.IPv4FlagDontFragment != 0 || m != len(later) {
		t.Fatalf("IPv4 fragment: offset %d more %v id %#x flags %#x len %d", h.FragmentOffset(), h.More(), h.ID(), h.Flags(), m)
	}
}

func TestSIITRefusesWhatTheRFCDrops(t *testing.T) {
	tr := newTranslator(t, nsp)
	r6 := embed(t, nsp, remote4)
	out := make([]byte, 2048)
	for _, c := range []struct {
		name string
		to6  bool
		p    []byte
		want error
	}{
		{"TTL 1", true, ipv4(host4, remote4, protoTCP, 1, 0, 0, tcpSeg(host4, remote4, "")), ErrTTL},
		{"hop limit 1", false, ipv6(r6, host6, protoTCP, 1, tcpSeg(r6, host6, "")), ErrTTL},
		{"neighbor solicitation", false, ipv6(r6, host6, protoICMPv6, 255, icmp6(r6, host6, 135, 0, 0, make([]byte, 16))), ErrDrop},
		{"ICMPv4 timestamp", true, ipv4(host4, remote4, protoICMP, 64, 0, 0, icmp4(13, 0, 0, make([]byte, 12))), ErrDrop},
		{"fragmented ping", true, ipv4(host4, remote4, protoICMP, 64, header.IPv4FlagMoreFragments, 0, icmp4(icmp4Echo, 0, 0, make([]byte, 16))), ErrDrop},
		{"routing header with segments left", false, ipv6(r6, host6, nhRouting, 64, append([]byte{protoTCP, 0, 0, 1, 0, 0, 0, 0}, tcpSeg(r6, host6, "")...)), ErrDrop},
		{"unknown source", false, ipv6(netip.MustParseAddr("2001:db8:ffff::1"), host6, protoTCP, 64, tcpSeg(r6, host6, "")), ErrAddress},
		{"bad header checksum", true, func() []byte {
			b := ipv4(host4, remote4, protoTCP, 64, 0, 0, tcpSeg(host4, remote4, ""))
			b[10]++
			return b
		}(), ErrMalformed},
		{"bad ICMPv6 checksum", false, func() []byte {
			b := ipv6(r6, host6, protoICMPv6, 64, icmp6(r6, host6, icmp6Echo, 0, 0, nil))
			b[42]++
			return b
		}(), ErrMalformed},
	} {
		var err error
		if c.to6 {
			_, err = tr.To6(out, c.p)
		} else {
			_, err = tr.To4(out, c.p)
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// 65,535 bytes of IPv6 payload are 20 too many for IPv4.
	big := ipv6(r6, host6, protoUDP, 64, udpDgram(r6, host6, string(make([]byte, 65535-8)), true))
	if _, err := tr.To4(make([]byte, 70000), big); !errors.Is(err, ErrDrop) {
		t.Errorf("an IPv6 packet too long for IPv4: %v, want ErrDrop", err)
	}
	// Source route option (RFC 791 LSRR) in an otherwise valid packet.
	opt := []byte{131, 7, 4, 0, 0, 0, 0, 0}
	p := ipv4(host4, remote4, protoTCP, 64, 0, 0, tcpSeg(host4, remote4, ""))
	withOpt := append(append(append([]byte{}, p[:20]...), opt...), p[20:]...)
	withOpt[0] = 4<<4 | 7
	binary.BigEndian.PutUint16(withOpt[2:], uint16(len(withOpt)))
	withOpt[10], withOpt[11] = 0, 0
	binary.BigEndian.PutUint16(withOpt[10:], ^checksum.Checksum(withOpt[:28], 0))
	if _, err := tr.To6(out, withOpt); !errors.Is(err, ErrDrop) {
		t.Errorf("source route option: %v, want ErrDrop", err)
	}
}

func TestSIITTranslatesWithoutAllocating(t *testing.T) {
	tr := newTranslator(t, nsp)
	in := ipv4(host4, remote4, protoTCP, 64, 0, 0, tcpSeg(host4, remote4, "hello"))
	out, back := make([]byte, 2048), make([]byte, 2048)
	allocs := testing.AllocsPerRun(100, func() {
		n, err := tr.To6(out, in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.To4(back, out[:n]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round trip", allocs)
	}
}

func BenchmarkSIITTo6TCP(b *testing.B) {
	tr := newTranslator(b, nsp)
	in := ipv4(host4, remote4, protoTCP, 64, 0, 0, tcpSeg(host4, remote4, string(make([]byte, 1400))))
	out := make([]byte, 2048)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.To6(out, in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPrefixDiscoverFindsEachRFC6052LengthAsRFC7050Section3(t *testing.T) {
	for _, p := range []string{"2001:db8::/32", "2001:db8:100::/40", "2001:db8:122::/48", "2001:db8:122:300::/56",
		"2001:db8:122:344::/64", "2001:db8:122:344::/96", "64:ff9b::/96"} {
		pfx, _ := NewPrefix(netip.MustParsePrefix(p))
		for _, a := range []netip.Addr{netip.MustParseAddr("192.0.0.170"), netip.MustParseAddr("192.0.0.171")} {
			b, ok := pfx.EmbedAny(a.As4())
			if !ok {
				t.Fatalf("%s: EmbedAny(%v) refused", p, a)
			}
			got, ok := Discover(netip.AddrFrom16(b))
			if !ok || got.Prefix() != pfx.Prefix() {
				t.Errorf("Discover(%v) = %v %v, want %s", netip.AddrFrom16(b), got.Prefix(), ok, p)
			}
		}
	}
	if _, ok := Discover(netip.MustParseAddr("64:ff9b::808:808")); ok {
		t.Error("Discover found a prefix in an address that embeds neither 192.0.0.170 nor .171")
	}
}

func TestSplitFragmentKeepsTranslatedFragmentsWithinTheMTU(t *testing.T) {
	tr := newTranslator(t, nsp)
	// An IPv4 first fragment cut for an MTU of 1480 (the CLAT's on a
	// 1500-byte link): 1460 bytes of payload, a multiple of 8.
	data := make([]byte, 1460)
	for i := range data {
		data[i] = byte(i)
	}
	// A middle fragment: its payload passes untouched.
	in := ipv4(host4, remote4, protoUDP, 64, header.IPv4FlagMoreFragments, 1480, data)
	out := make([]byte, 2048)
	n, err := tr.To6(out, in)
	if err != nil || n != 1508 {
		t.Fatalf("To6: %d bytes, %v", n, err)
	}
	second := make([]byte, 2048)
	n1, n2, err := SplitFragment(second, out[:n], 1500)
	if err != nil || n1 > 1500 || n2 > 1500 {
		t.Fatalf("split into %d and %d: %v", n1, n2, err)
	}
	a, b := header.IPv6(out[:n1]), header.IPv6(second[:n2])
	if !a.IsValid(n1) || !b.IsValid(n2) {
		t.Fatal("a piece is not a valid IPv6 packet")
	}
	fa, fb := header.IPv6Fragment(out[40:n1]), header.IPv6Fragment(second[40:n2])
	if !fa.More() || !fb.More() || int(fa.FragmentOffset())*8 != 1480 || int(fb.FragmentOffset())*8 != 1480+n1-48 || fa.ID() != fb.ID() {
		t.Fatalf("fragments: more %v/%v offsets %d/%d ids %d/%d", fa.More(), fb.More(), fa.FragmentOffset(), fb.FragmentOffset(), fa.ID(), fb.ID())
	}
	got := append(append([]byte{}, out[48:n1]...), second[48:n2]...)
	if string(got) != string(data) {
		t.Fatal("the pieces do not hold the fragment's payload")
	}
	if _, _, err := SplitFragment(second, ipv6(host6, host6, protoUDP, 64, make([]byte, 1600)), 1500); !errors.Is(err, ErrDrop) {
		t.Fatalf("splitting a packet that is no fragment: %v", err)
	}
}
