package ndp

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

var (
	routerLL = netip.MustParseAddr("fe80::1")
	hostLL   = netip.MustParseAddr("fe80::2")
)

func sampleRA() RouterAdvert {
	ra := RouterAdvert{HopLimit: 64, RouterLifetime: 1800, MTU: 1400,
		PREF64: netip.MustParsePrefix("64:ff9b::/96"), PREF64Lifetime: 1800 * time.Second, NumPrefixes: 2}
	ra.Prefixes[0] = PrefixInfo{Prefix: netip.MustParsePrefix("2001:db8:1::/64"), Autonomous: true, ValidLifetime: Infinity, Preferred: 3600}
	ra.Prefixes[1] = PrefixInfo{Prefix: netip.MustParsePrefix("2001:db8:2::/64"), Autonomous: true, ValidLifetime: 30}
	return ra
}

// A Router Advertisement the network encodes is what the host parses:
// both prefixes with A set and L clear, the MTU, the PREF64.
func TestRouterAdvertRoundTrip(t *testing.T) {
	ra := sampleRA()
	pkt := AppendRouterAdvert(nil, routerLL, AllNodes, &ra)
	if !IsRouterAdvert(pkt) || IsRouterSolicit(pkt) {
		t.Fatal("IsRouterAdvert false on a router advertisement")
	}
	got, err := ParseRouterAdvert(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if got != ra {
		t.Errorf("parsed %+v, want %+v", got, ra)
	}
}

// RFC 8781 §4: every prefix length code, and the lifetime in 8-second
// units, rounded up and capped at 13 bits.
func TestPREF64LengthsAndLifetime(t *testing.T) {
	for _, bits := range []int{32, 40, 48, 56, 64, 96} {
		ra := RouterAdvert{PREF64: netip.PrefixFrom(netip.MustParseAddr("2001:db8:64:6400::"), bits).Masked(), PREF64Lifetime: 9 * time.Second}
		got, err := ParseRouterAdvert(AppendRouterAdvert(nil, routerLL, AllNodes, &ra))
		if err != nil {
			t.Fatal(err)
		}
		if got.PREF64 != ra.PREF64 || got.PREF64Lifetime != 16*time.Second {
			t.Errorf("/%d: got %v for %v", bits, got.PREF64, got.PREF64Lifetime)
		}
	}
	ra := RouterAdvert{PREF64: netip.MustParsePrefix("64:ff9b::/96"), PREF64Lifetime: 100 * time.Hour}
	got, _ := ParseRouterAdvert(AppendRouterAdvert(nil, routerLL, AllNodes, &ra))
	if got.PREF64Lifetime != MaxPREF64Lifetime {
		t.Errorf("lifetime %v, want the cap %v", got.PREF64Lifetime, MaxPREF64Lifetime)
	}
	ra.PREF64 = netip.MustParsePrefix("64:ff9b::/80") // no code for /80: no option
	got, _ = ParseRouterAdvert(AppendRouterAdvert(nil, routerLL, AllNodes, &ra))
	if got.PREF64.IsValid() {
		t.Errorf("a /80 PREF64 was sent: %v", got.PREF64)
	}
}

// RFC 4861 §6.1.2: what a host must drop.
func TestRouterAdvertValidation(t *testing.T) {
	ra := sampleRA()
	good := AppendRouterAdvert(nil, routerLL, AllNodes, &ra)
	mod := func(f func(p []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	global := ra
	for name, c := range map[string]struct {
		pkt  []byte
		want error
	}{
		"hop limit 64":      {mod(func(p []byte) []byte { p[7] = 64; return p }), errHop},
		"global source":     {AppendRouterAdvert(nil, netip.MustParseAddr("2001:db8::1"), AllNodes, &global), errSource},
		"checksum":          {mod(func(p []byte) []byte { p[len(p)-1] ^= 1; return p }), errSum},
		"code 1":            {mod(func(p []byte) []byte { p[41] = 1; return fixSum(p) }), errCode},
		"truncated":         {good[:len(good)-3], errShort},
		"payload too short": {mod(func(p []byte) []byte { p[4], p[5] = 0, 8; return p[:48] }), errShort},
		"not ICMPv6":        {mod(func(p []byte) []byte { p[6] = 17; return p }), errNotRA},
		"option length 0": {mod(func(p []byte) []byte {
			p[40+16+1] = 0
			return fixSum(p)
		}), errOption},
		"option past the end": {mod(func(p []byte) []byte {
			p[40+16+1] = 200
			return fixSum(p)
		}), errOption},
	} {
		_, err := ParseRouterAdvert(c.pkt)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func fixSum(p []byte) []byte {
	msg := p[40:]
	msg[2], msg[3] = 0, 0
	s := ^checksum(p[8:24], p[24:40], msg)
	msg[2], msg[3] = byte(s>>8), byte(s)
	return p
}

func TestRouterSolicit(t *testing.T) {
	for _, src := range []netip.Addr{hostLL, netip.IPv6Unspecified()} {
		rs := AppendRouterSolicit(nil, src)
		got, ok := SolicitSource(rs)
		if !ok || got != src {
			t.Errorf("SolicitSource = %v, %v; want %v", got, ok, src)
		}
		rs[len(rs)-1] ^= 1
		if _, ok := SolicitSource(rs); ok {
			t.Error("a solicitation with a bad checksum was taken")
		}
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	ra := sampleRA()
	pkt := AppendRouterAdvert(nil, routerLL, AllNodes, &ra)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseRouterAdvert(pkt) }); n != 0 {
		t.Errorf("%v allocations per parse", n)
	}
}

// Whatever arrives, the parser returns without panicking, and what it
// accepts encodes back into a packet it parses the same way.
func FuzzParseRouterAdvert(f *testing.F) {
	ra := sampleRA()
	f.Add(AppendRouterAdvert(nil, routerLL, AllNodes, &ra))
	f.Add(AppendRouterSolicit(nil, hostLL))
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		got, err := ParseRouterAdvert(pkt)
		SolicitSource(pkt)
		if err != nil {
			return
		}
		again, err := ParseRouterAdvert(AppendRouterAdvert(nil, routerLL, AllNodes, &got))
		if err != nil {
			t.Fatalf("re-encoded advertisement does not parse: %v", err)
		}
		if again.NumPrefixes != got.NumPrefixes || again.MTU != got.MTU || again.RouterLifetime != got.RouterLifetime {
			t.Fatalf("re-encoded %+v, parsed %+v", got, again)
		}
	})
}
