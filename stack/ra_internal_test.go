package stack

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/ndp"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

var (
	raSession = netip.MustParsePrefix("2001:db8:6::2/64")
	raRouter  = netip.MustParseAddr("fe80::1")
)

// raStack is a stack on an IPv6-only session over a channel endpoint,
// without DNS servers (RFC 7050 discovery finds nothing), and a way to
// hand it advertisements from the link.
func raStack(t *testing.T) (*Stack, func(ra *ndp.RouterAdvert, src netip.Addr)) {
	t.Helper()
	ep := channel.New(64, 1500, "")
	s, err := New(ep, Config{Addresses: []netip.Prefix{raSession}, TXQueueLen: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	inject := func(ra *ndp.RouterAdvert, src netip.Addr) {
		b := ndp.AppendRouterAdvert(nil, src, ndp.AllNodes, ra)
		pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
		ep.InjectInbound(header.IPv6ProtocolNumber, pkt)
		pkt.DecRef()
	}
	return s, inject
}

func waitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The CLAT takes the network's PREF64 (RFC 8781) from a Router
// Advertisement, where RFC 7050 discovery found nothing, moves to a new
// one, and stops when its lifetime 0 withdraws it.
func TestCLATTakesPREF64FromTheRouterAdvertisement(t *testing.T) {
	s, inject := raStack(t)
	s.followCLAT(s.Addresses())
	s.waitCLAT(t.Context())
	if p := s.NAT64Prefix(); p.IsValid() {
		t.Fatalf("CLAT on %v without DNS servers or PREF64", p)
	}
	for _, p := range []netip.Prefix{netip.MustParsePrefix("2001:db8:99::/96"), netip.MustParsePrefix("2001:db8:98::/64")} {
		inject(&ndp.RouterAdvert{PREF64: p, PREF64Lifetime: 30 * time.Minute}, raRouter)
		waitTrue(t, "the CLAT on "+p.String(), func() bool { return s.NAT64Prefix() == p })
	}
	inject(&ndp.RouterAdvert{PREF64: netip.MustParsePrefix("2001:db8:98::/64")}, raRouter)
	waitTrue(t, "the CLAT stopped", func() bool { return !s.NAT64Prefix().IsValid() })
}

// A new /64 gets the session's interface identifier; a prefix whose
// preferred lifetime is 0 is deprecated (no new connection picks it) and
// one whose valid lifetime ends is removed; the MTU option is followed
// within 1280 and the session's MTU; an advertisement that fails RFC 4861
// §6.1.2's checks changes nothing and is counted.
func TestRouterAdvertisementAddressesAndMTU(t *testing.T) {
	s, inject := raStack(t)
	newAddr := netip.MustParseAddr("2001:db8:7::2")
	has := func(a netip.Addr) bool {
		return slices.ContainsFunc(s.Addresses(), func(p netip.Prefix) bool { return p.Addr() == a })
	}
	ra := ndp.RouterAdvert{MTU: 1400, NumPrefixes: 2}
	ra.Prefixes[0] = ndp.PrefixInfo{Prefix: netip.MustParsePrefix("2001:db8:7::/64"), Autonomous: true, ValidLifetime: 3600, Preferred: 3600}
	ra.Prefixes[1] = ndp.PrefixInfo{Prefix: raSession.Masked(), Autonomous: true, ValidLifetime: 2}

	bad := ra
	inject(&bad, netip.MustParseAddr("2001:db8::1")) // not link-local
	waitTrue(t, "the invalid advertisement counted", func() bool { return s.Stats().RouterAdvertsInvalid == 1 })
	if has(newAddr) || s.MTU() != 1500 {
		t.Fatalf("an invalid advertisement was followed: %v, MTU %d", s.Addresses(), s.MTU())
	}

	inject(&ra, raRouter)
	waitTrue(t, "the new prefix's address", func() bool { return has(newAddr) })
	if s.MTU() != 1400 {
		t.Errorf("MTU %d, want the advertised 1400", s.MTU())
	}
	if g := globals6(s.Addresses()); len(g) != 2 || g[0] != newAddr {
		t.Errorf("global addresses %v, want the preferred %v before the deprecated session address", g, newAddr)
	}
	waitTrue(t, "the session address removed at its valid lifetime's end", func() bool { return !has(raSession.Addr()) })

	for _, m := range []uint32{1000, 9000} {
		inject(&ndp.RouterAdvert{MTU: m}, raRouter)
	}
	waitTrue(t, "three advertisements followed", func() bool { return s.Stats().RouterAdverts == 3 })
	if s.MTU() != 1500 {
		t.Errorf("MTU %d after advertisements of 1000 and 9000, want the session's 1500", s.MTU())
	}
}
