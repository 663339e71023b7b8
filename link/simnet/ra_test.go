package simnet

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/ndp"
)

// oneSession is a started function with one IPv6 session on data
// session 3.
type oneSession struct{ c Carrier }

func (f *oneSession) networkEventLocked(netEvent, mbim.NwError) {}
func (f *oneSession) ipv6SessionsLocked(yield func(uint8, Carrier)) {
	yield(3, f.c)
}

func v6onlyCarrier() Carrier {
	for _, a := range DefaultAPNs() {
		if a.Name == "v6only.mhistack" {
			return a.Carrier
		}
	}
	panic("no v6only.mhistack")
}

// An IPv6 session's advertisement: its /64 with A set and L clear and
// RFC 4861's default lifetimes, the session's MTU, and on an APN with a
// NAT64 its prefix as PREF64 for three intervals; the router lifetime
// is three intervals.
func TestAdvertisementOfASession(t *testing.T) {
	c := v6onlyCarrier()
	n := NewNetwork(NetworkConfig{RAInterval: time.Minute})
	n.mu.Lock()
	stop := n.startLocked(&oneSession{c})
	n.mu.Unlock()
	defer stop()
	p := n.advertisements(time.Now())
	if len(p.sessions) != 1 || p.sessions[0].session != 3 || p.interval != time.Minute {
		t.Fatalf("plan %+v", p)
	}
	ra := p.sessions[0].ra
	want := ndp.PrefixInfo{Prefix: netip.MustParsePrefix("2001:db8:6::/64"), Autonomous: true, ValidLifetime: 30 * 24 * 3600, Preferred: 7 * 24 * 3600}
	if ra.NumPrefixes != 1 || ra.Prefixes[0] != want {
		t.Errorf("prefixes %+v, want %+v", ra.Prefixes[:ra.NumPrefixes], want)
	}
	if ra.MTU != 1500 || ra.PREF64 != c.NAT64 || ra.PREF64Lifetime != 3*time.Minute || ra.RouterLifetime != 180 {
		t.Errorf("MTU %d, PREF64 %v for %v, router lifetime %d", ra.MTU, ra.PREF64, ra.PREF64Lifetime, ra.RouterLifetime)
	}
	if _, err := ndp.ParseRouterAdvert(ndp.AppendRouterAdvert(nil, routerLL, ndp.AllNodes, &ra)); err != nil {
		t.Errorf("the advertisement does not parse: %v", err)
	}
	dual := DefaultCarrier()
	n2 := NewNetwork(NetworkConfig{RAInterval: -1})
	n2.mu.Lock()
	stop2 := n2.startLocked(&oneSession{dual})
	n2.mu.Unlock()
	defer stop2()
	if p := n2.advertisements(time.Now()); len(p.sessions) != 0 {
		t.Errorf("RAInterval -1: %d sessions advertised", len(p.sessions))
	}
}

// RenumberIPv6 moves the session to the /64 128 above, advertises the
// old one deprecated with the valid lifetime left, reports the new
// address in the session's configuration, and once the old one's valid
// lifetime has passed lists it as no longer routed.
func TestRenumberIPv6(t *testing.T) {
	c := DefaultCarrier()
	n := NewNetwork(NetworkConfig{})
	if got := n.RenumberIPv6(time.Second); len(got) != 0 {
		t.Fatalf("renumbered %v with no session up", got)
	}
	n.mu.Lock()
	stop := n.startLocked(&oneSession{c})
	n.mu.Unlock()
	defer stop()
	now := time.Now()
	next := n.RenumberIPv6(10 * time.Second)
	if len(next) != 1 || next[0] != netip.MustParsePrefix("2001:db8:64:80::/64") {
		t.Fatalf("renumbered to %v", next)
	}
	p := n.advertisements(now.Add(time.Second))
	ra := p.sessions[0].ra
	if ra.NumPrefixes != 2 || ra.Prefixes[0].Prefix != next[0] || ra.Prefixes[0].Preferred == 0 ||
		ra.Prefixes[1].Prefix != netip.MustParsePrefix("2001:db8:64::/64") || ra.Prefixes[1].Preferred != 0 ||
		ra.Prefixes[1].ValidLifetime < 8 || ra.Prefixes[1].ValidLifetime > 10 {
		t.Errorf("prefixes after renumbering: %+v", ra.Prefixes[:ra.NumPrefixes])
	}
	if len(p.dead) != 0 || p.expiry.IsZero() {
		t.Errorf("dead %v, next expiry %v", p.dead, p.expiry)
	}
	n.mu.Lock()
	rc := n.renumberedLocked(c)
	n.mu.Unlock()
	if rc.IPv6 != netip.MustParsePrefix("2001:db8:64:80::2/64") || rc.IPv6Gateway != netip.MustParseAddr("2001:db8:64:80::1") {
		t.Errorf("configuration after renumbering: %v via %v", rc.IPv6, rc.IPv6Gateway)
	}
	p = n.advertisements(now.Add(11 * time.Second))
	if ra := p.sessions[0].ra; ra.NumPrefixes != 1 || ra.Prefixes[0].Prefix != next[0] {
		t.Errorf("prefixes after the old one's end: %+v", ra.Prefixes[:ra.NumPrefixes])
	}
	if len(p.dead) != 1 || p.dead[0] != netip.MustParsePrefix("2001:db8:64::/64") {
		t.Errorf("dead %v, want the old prefix", p.dead)
	}
	var r carrierRA
	r.net = n
	r.setDead(p.dead)
	old, cur := netip.MustParseAddr("2001:db8:64::2").As16(), netip.MustParseAddr("2001:db8:64:80::2").As16()
	if !r.deadPrefix(old[:]) || r.deadPrefix(cur[:]) {
		t.Error("deadPrefix does not tell the old prefix from the new")
	}
}
