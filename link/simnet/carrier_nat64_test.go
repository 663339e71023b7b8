package simnet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/siit"
)

// nsp is the network-specific NAT64 prefix of these tests (a /64: the
// IPv4 address sits after the "u" octet, RFC 6052 §2.2).
var nsp = netip.MustParsePrefix("2001:db8:46::/64")

func embedded(t testing.TB, p netip.Prefix, a netip.Addr) netip.Addr {
	t.Helper()
	pfx, err := siit.NewPrefix(p)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := pfx.Embed(a.As4())
	if !ok {
		t.Fatalf("%v cannot be embedded in %v", a, p)
	}
	return netip.AddrFrom16(b)
}

// TestNAT64CarriesTCPFromAnIPv6OnlyHostToIPv4 dials, from a host stack
// with only IPv6, TestAddr4 embedded in the carrier's network-specific
// NAT64 prefix: the carrier translates the flow to IPv4 (from a pool
// address) and forwards it to the host's 127.0.0.1, and the reply comes
// back translated, on raw IP and on an NTB-framed pair.
func TestNAT64CarriesTCPFromAnIPv6OnlyHostToIPv4(t *testing.T) {
	for _, k := range []carrierPair{{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, 0}, {"mbim-ntb16", "quectel-em1xx", "IP_HW0_MBIM", mbim.NTB{}, 0}} {
		t.Run(k.name, func(t *testing.T) {
			car := DefaultCarrier()
			car.NAT64 = nsp
			h := newCarrierHostWith(t, k, CarrierOptions{Carrier: car}, true)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			data := testData(200_000, 3)
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				c.Write(data)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dst := embedded(t, nsp, TestAddr4)
			conn, err := gonet.DialContextTCP(ctx, h.s, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom16(dst.As16()),
				Port: uint16(l.Addr().(*net.TCPAddr).Port)}, ipv6.ProtocolNumber)
			if err != nil {
				t.Fatalf("dial [%v]: %v (carrier %+v)", dst, err, h.cn.Stats())
			}
			defer conn.Close()
			conn.SetReadDeadline(time.Now().Add(time.Minute))
			got, err := io.ReadAll(conn)
			if err != nil || !slices.Equal(got, data) {
				t.Fatalf("read %d of %d bytes: %v", len(got), len(data), err)
			}
			st := h.cn.Stats()
			if st.NAT64Translated < 100 || st.NAT64Refused != 0 || st.TCPFlows != 1 {
				t.Fatalf("NAT64 translated %d, refused %d, TCP flows %d", st.NAT64Translated, st.NAT64Refused, st.TCPFlows)
			}
		})
	}
}

func dnsQuery(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func dnsAnswers(t *testing.T, resp []byte) []netip.Addr {
	t.Helper()
	var p dnsmessage.Parser
	if _, err := p.Start(resp); err != nil {
		t.Fatal(err)
	}
	p.SkipAllQuestions()
	var out []netip.Addr
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return out
		}
		switch h.Type {
		case dnsmessage.TypeA:
			r, _ := p.AResource()
			out = append(out, netip.AddrFrom4(r.A))
		case dnsmessage.TypeAAAA:
			r, _ := p.AAAAResource()
			out = append(out, netip.AddrFrom16(r.AAAA))
		default:
			p.SkipAnswer()
		}
	}
}

// TestDNS64SynthesisesAAAAForNamesWithOnlyA: the DNS64 of an APN with a
// NAT64 answers AAAA for a name with only A records with the A records
// embedded in its prefix (RFC 6147 §5.1.7), keeps real AAAA records
// (§5.1.4), answers ipv4only.arpa (RFC 7050 §2.2) under the Well-Known
// Prefix too, and does not put a non-global address under the
// Well-Known Prefix (RFC 6052 §3.1).
func TestDNS64SynthesisesAAAAForNamesWithOnlyA(t *testing.T) {
	cn := &CarrierNetwork{opts: CarrierOptions{Hosts: map[string][]netip.Addr{
		"v4only.test": {netip.MustParseAddr("8.8.8.8")},
		"doc.test":    {netip.MustParseAddr("203.0.113.5")},
	}}}
	wkp, _ := siit.NewPrefix(siit.WellKnownPrefix)
	ns, _ := siit.NewPrefix(nsp)
	for _, c := range []struct {
		pfx  siit.Prefix
		name string
		typ  dnsmessage.Type
		want []string
	}{
		{wkp, "v4only.test.", dnsmessage.TypeAAAA, []string{"64:ff9b::808:808"}},
		{wkp, "v4only.test.", dnsmessage.TypeA, []string{"8.8.8.8"}},
		{ns, "v4only.test.", dnsmessage.TypeAAAA, []string{"2001:db8:46:0:8:808:800:0"}},
		{wkp, "ipv4only.arpa.", dnsmessage.TypeAAAA, []string{"64:ff9b::c000:aa", "64:ff9b::c000:ab"}},
		{ns, "ipv4only.arpa.", dnsmessage.TypeAAAA, []string{"2001:db8:46:0:c0:0:aa00:0", "2001:db8:46:0:c0:0:ab00:0"}},
		{wkp, "doc.test.", dnsmessage.TypeAAAA, nil},
		{ns, "doc.test.", dnsmessage.TypeAAAA, []string{"2001:db8:46:0:cb:71:500:0"}},
		{wkp, TestName + ".", dnsmessage.TypeAAAA, []string{TestAddr6.String()}},
		{siit.Prefix{}, "v4only.test.", dnsmessage.TypeAAAA, nil},
		{ns, TestName4 + ".", dnsmessage.TypeAAAA, []string{"2001:db8:46:0:c6:1200:100:0"}},
		{ns, TestName4 + ".", dnsmessage.TypeA, []string{TestAddr4.String()}},
		{siit.Prefix{}, TestName4 + ".", dnsmessage.TypeAAAA, nil},
	} {
		got := dnsAnswers(t, cn.answerDNS(dnsQuery(t, c.name, c.typ), c.pfx))
		var want []netip.Addr
		for _, w := range c.want {
			want = append(want, netip.MustParseAddr(w))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s %v via %v: %v, want %v", c.name, c.typ, c.pfx.Prefix(), got, want)
		}
	}
}

// TestNAT64BindsEachHostToItsOwnPoolAddress: two IPv6 hosts get two pool
// addresses, the same host keeps its own, and an address with no binding
// is refused.
func TestNAT64BindsEachHostToItsOwnPoolAddress(t *testing.T) {
	n, err := newNAT64([]Carrier{{NAT64: nsp}})
	if err != nil || n == nil {
		t.Fatal(n, err)
	}
	a := netip.MustParseAddr("2001:db8:6::2").As16()
	b := netip.MustParseAddr("2001:db8:6:1::2").As16()
	pa, _ := n.bind(a, 0)
	pb, _ := n.bind(b, 0)
	pa2, _ := n.bind(a, 0)
	if pa == pb || pa != pa2 || !NAT64Pool.Contains(netip.AddrFrom4(pa)) {
		t.Fatalf("bindings %v %v %v", netip.AddrFrom4(pa), netip.AddrFrom4(pb), netip.AddrFrom4(pa2))
	}
	if h, ok := n.xl[0].To6(pa); !ok || h != a {
		t.Fatalf("pool address maps back to %v %v", netip.AddrFrom16(h), ok)
	}
	if _, ok := n.xl[0].To6(netip.MustParseAddr("100.64.3.200").As4()); ok {
		t.Fatal("a pool address without a binding was translated")
	}
	if _, err := newNAT64([]Carrier{{NAT64: netip.MustParsePrefix("2001:db8::/33")}}); err == nil {
		t.Fatal("a /33 NAT64 prefix was accepted")
	}
}
