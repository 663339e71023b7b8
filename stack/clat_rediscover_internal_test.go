package stack

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/ndp"
	"github.com/mhistack/mhistack/link/siit"
	"github.com/mhistack/mhistack/link/simnet"
)

// fakeDiscovery answers RFC 7050 discovery with answers[i] on the i-th
// call (the last one from then on), and records the prefix the CLAT ran
// with when each call came.
type fakeDiscovery struct {
	s       *Stack
	answers []fakeAnswer
	mu      sync.Mutex
	running []netip.Prefix
}

type fakeAnswer struct {
	pfx netip.Prefix
	ttl time.Duration
	err error
}

func (f *fakeDiscovery) discover(ctx context.Context) (siit.Prefix, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = append(f.running, f.s.NAT64Prefix())
	a := f.answers[min(len(f.running), len(f.answers))-1]
	if a.err != nil {
		return siit.Prefix{}, 0, a.err
	}
	p, err := siit.NewPrefix(a.pfx)
	return p, a.ttl, err
}

func (f *fakeDiscovery) calls() []netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]netip.Prefix(nil), f.running...)
}

var (
	dnsPrefixA = netip.MustParsePrefix("2001:db8:a::/96")
	dnsPrefixB = netip.MustParsePrefix("2001:db8:b::/96")
)

// TestCLATRediscoversWhenTheTTLRunsOut: discovery runs again when the
// TTL of what it found runs out; a failed discovery keeps the prefix
// and is retried; a changed prefix moves the CLAT to it.
func TestCLATRediscoversWhenTheTTLRunsOut(t *testing.T) {
	s, _ := raStack(t)
	f := &fakeDiscovery{s: s, answers: []fakeAnswer{
		{pfx: dnsPrefixA, ttl: time.Millisecond}, // under the floor: kept for clatTTLMin
		{err: errors.New("no answer")},
		{err: errors.New("no answer")},
		{pfx: dnsPrefixA, ttl: 0},
		{pfx: dnsPrefixB, ttl: time.Hour},
	}}
	s.clatDiscover, s.clatTTLMin = f.discover, 5*time.Millisecond
	s.followCLAT(s.Addresses())
	s.waitCLAT(t.Context())
	if p := s.NAT64Prefix(); p != dnsPrefixA && p != dnsPrefixB {
		t.Fatalf("CLAT on %v, want %v", p, dnsPrefixA)
	}
	waitTrue(t, "the CLAT moved to "+dnsPrefixB.String(), func() bool { return s.NAT64Prefix() == dnsPrefixB })
	calls := f.calls()
	if len(calls) != 5 {
		t.Fatalf("%d discoveries, want 5 (the last TTL is an hour)", len(calls))
	}
	for i, p := range calls[1:] {
		if p != dnsPrefixA {
			t.Fatalf("discovery %d ran with the CLAT on %v, want %v kept", i+2, p, dnsPrefixA)
		}
	}
}

// TestCLATRediscoveryLeavesConfiguredAndAdvertisedPrefixesAlone:
// Config.NAT64Prefix means no discovery at all; a PREF64 from a router
// advertisement takes the CLAT off a discovered prefix and discovery is
// not run again while it holds.
func TestCLATRediscoveryLeavesConfiguredAndAdvertisedPrefixesAlone(t *testing.T) {
	s, inject := raStack(t)
	f := &fakeDiscovery{s: s, answers: []fakeAnswer{{pfx: dnsPrefixA, ttl: time.Hour}}}
	s.clatDiscover = f.discover
	s.followCLAT(s.Addresses())
	s.waitCLAT(t.Context())
	if p := s.NAT64Prefix(); p != dnsPrefixA {
		t.Fatalf("CLAT on %v, want %v", p, dnsPrefixA)
	}
	ra := netip.MustParsePrefix("2001:db8:99::/96")
	f.mu.Lock()
	f.answers = []fakeAnswer{{pfx: dnsPrefixB, ttl: time.Millisecond}}
	f.mu.Unlock()
	inject(&ndp.RouterAdvert{PREF64: ra, PREF64Lifetime: 30 * time.Minute}, raRouter)
	waitTrue(t, "the CLAT on the PREF64", func() bool { return s.NAT64Prefix() == ra })
	s.waitCLAT(t.Context())
	if n := len(f.calls()); n != 1 {
		t.Fatalf("%d discoveries with a PREF64 in force, want the first only", n)
	}

	s2, _ := raStack(t)
	s2.cfg.NAT64Prefix = dnsPrefixB
	f2 := &fakeDiscovery{s: s2, answers: []fakeAnswer{{pfx: dnsPrefixA, ttl: time.Hour}}}
	s2.clatDiscover = f2.discover
	s2.followCLAT(s2.Addresses())
	s2.waitCLAT(t.Context())
	if p := s2.NAT64Prefix(); p != dnsPrefixB || len(f2.calls()) != 0 {
		t.Fatalf("CLAT on %v after %d discoveries, want %v and none", p, len(f2.calls()), dnsPrefixB)
	}
}

// TestNAT64DiscoveryReportsTheRecordsTTL: discovery over the emulated
// network's DNS64 learns the TTL of the ipv4only.arpa records (simnet
// answers with 60 s).
func TestNAT64DiscoveryReportsTheRecordsTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{APN: "v6only.mhistack", Config: Config{CLAT: CLATOff},
		Sim: SimOptions{NetworkConfig: simnet.NetworkConfig{APN: "internet", APNs: simnet.DefaultAPNs()[1:]}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pfx, ttl, err := s.discoverNAT64(ctx)
	if err != nil || pfx.Prefix() != siit.WellKnownPrefix || ttl != time.Minute {
		t.Fatalf("discovered %v with TTL %v (%v), want %v and 1m0s", pfx.Prefix(), ttl, err, siit.WellKnownPrefix)
	}
}
