package stack_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// hostUDPEcho6 is a UDP echo server on the host's ::1.
func hostUDPEcho6(t *testing.T) uint16 {
	t.Helper()
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback on the host: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, a, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], a)
		}
	}()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// waitAddrs waits until cond holds of the stack's addresses (a bound of
// 20 s, not a measurement).
func waitAddrs(t *testing.T, s *stack.Stack, what string, cond func([]netip.Prefix) bool) {
	t.Helper()
	waitUntil(t, what+" (addresses "+fmt.Sprint(s.Addresses())+")", func() bool { return cond(s.Addresses()) })
}

// waitUntil waits until cond holds (a bound of 20 s, not a measurement).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func hasAddr(a netip.Addr) func([]netip.Prefix) bool {
	return func(l []netip.Prefix) bool {
		return slices.ContainsFunc(l, func(p netip.Prefix) bool { return p.Addr() == a })
	}
}

// The network renumbers the session's IPv6 prefix while the session
// stays up (Router Advertisements on the bearer, docs/STACK.md): the
// stack adds the new prefix with the session's interface identifier and
// deprecates the old address. Until the old prefix's valid lifetime ends
// a TCP connection and a UDP socket on the old address keep working, new
// dials use the new address and a listener on the unspecified address
// accepts on both; then the old address goes and takes its connection
// with it (ECONNABORTED).
func TestRenumberedPrefixKeepsOldConnectionsUntilItsValidLifetimeEnds(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			car := simnet.DefaultCarrier()
			nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", Carrier: car})
			s := openOn(t, p.profile, nw, car)
			ctx := ctxT(t, 60*time.Second)
			oldAddr := car.IPv6.Addr()
			waitUntil(t, "the network's advertisement", func() bool { return s.Stats().RouterAdverts > 0 })

			port := hostEcho(t, "tcp6", "[::1]:0")
			dst := netip.AddrPortFrom(simnet.TestAddr6, port).String()
			old, err := s.DialContext(ctx, "tcp6", dst)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if la := old.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); la != oldAddr {
				t.Fatalf("connection from %v, want the session's %v", la, oldAddr)
			}
			echoOnce(t, old, "before")
			uport := hostUDPEcho6(t)
			uc, err := s.DialUDP(ctx, netip.AddrPortFrom(oldAddr, 0), netip.AddrPortFrom(simnet.TestAddr6, uport))
			if err != nil {
				t.Fatal(err)
			}
			defer uc.Close()
			udpRoundTrip(t, uc, "udp before")
			ln, err := s.Listen("tcp", ":7007")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go serveEcho(ln)

			const oldValid = 4 * time.Second
			next := nw.RenumberIPv6(oldValid)
			if len(next) != 1 {
				t.Fatalf("renumbered %v, want one session", next)
			}
			b, iid := next[0].Addr().As16(), oldAddr.As16()
			copy(b[8:], iid[8:])
			newAddr := netip.AddrFrom16(b)
			waitAddrs(t, s, "the new address "+newAddr.String(), hasAddr(newAddr))
			if !hasAddr(oldAddr)(s.Addresses()) {
				t.Fatalf("the old address went at once: %v", s.Addresses())
			}

			echoOnce(t, old, "during")
			udpRoundTrip(t, uc, "udp during")
			c, err := s.DialContext(ctx, "tcp6", dst)
			if err != nil {
				t.Fatal(err)
			}
			if la := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); la != newAddr {
				t.Errorf("new connection from %v, want the new prefix's %v (the old one is deprecated)", la, newAddr)
			}
			echoOnce(t, c, "new")
			c.Close()
			for _, a := range []netip.Addr{oldAddr, newAddr} {
				c, err := stack.CarrierForTest(s).Dial(ctx, "tcp", netip.AddrPortFrom(a, 7007))
				if err != nil {
					t.Fatalf("dial the listener on %v from the network: %v", a, err)
				}
				echoOnce(t, c, "to the listener on "+a.String())
				c.Close()
			}

			// The old prefix's valid lifetime ends.
			waitAddrs(t, s, "the old address gone", func(l []netip.Prefix) bool { return !hasAddr(oldAddr)(l) })
			old.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := old.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
				t.Errorf("read on the old address's connection after its end: %v, want ECONNABORTED", err)
			}
			// A UDP socket bound to the old address stays open, but
			// cannot send from an address the stack no longer has.
			if _, err := uc.Write([]byte("udp after")); !errors.Is(err, syscall.ENOTCONN) {
				t.Errorf("UDP write from the old address after its end: %v, want ENOTCONN", err)
			}
			c, err = s.DialContext(ctx, "tcp6", dst)
			if err != nil {
				t.Fatal(err)
			}
			echoOnce(t, c, "after")
			c.Close()
			if st := s.Stats(); st.RouterAdvertsInvalid != 0 {
				t.Errorf("%d advertisements dropped as invalid", st.RouterAdvertsInvalid)
			}
		})
	}
}

// The network advertises every RAInterval besides the session's start
// and the stack's solicitation, and the stack follows each.
func TestPeriodicRouterAdvertisementsAreFollowed(t *testing.T) {
	car := simnet.DefaultCarrier()
	nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", Carrier: car, RAInterval: 50 * time.Millisecond})
	s := openOn(t, "quectel-rm5xx", nw, car)
	waitUntil(t, "five advertisements", func() bool { return s.Stats().RouterAdverts >= 5 })
	if st := stack.CarrierStatsForTest(s); st.RouterAdverts < 5 {
		t.Errorf("the network counts %d advertisements sent", st.RouterAdverts)
	}
}
