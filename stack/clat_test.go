package stack_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// nsp is a network-specific NAT64 prefix (RFC 6052 §2.2, a /64).
var nsp = netip.MustParsePrefix("2001:db8:46::/64")

// openV6Only opens a stack on the emulated modem's IPv6-only APN
// (simnet's v6only.mhistack) whose NAT64 and DNS64 use nat64, with the
// carrier's DNS resolving v4only.test to TestAddr4 only.
func openV6Only(t *testing.T, nat64 netip.Prefix, cfg stack.Config) *stack.Stack {
	t.Helper()
	apns := simnet.DefaultAPNs()
	for i := range apns {
		if apns[i].Name == "v6only.mhistack" {
			apns[i].Carrier.NAT64 = nat64
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{APN: "v6only.mhistack", Config: cfg, Sim: stack.SimOptions{
		NetworkConfig: simnet.NetworkConfig{APN: "internet", APNs: apns[1:]},
		Carrier:       simnet.CarrierOptions{Hosts: map[string][]netip.Addr{"v4only.test": {simnet.TestAddr4}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitCLAT waits for the CLAT to run (discovery is a DNS query away).
func waitCLAT(t *testing.T, s *stack.Stack) netip.Prefix {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !s.NAT64Prefix().IsValid() {
		if time.Now().After(deadline) {
			t.Fatal("the CLAT did not start within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	return s.NAT64Prefix()
}

// echoServer is a TCP server on the host's loopback that echoes one line.
func echoServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func echoVia(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if n, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo of %d bytes: %d back, %v", len(msg), n, err)
	}
}

// TestCLATCarriesIPv4OverAnIPv6OnlySession: on an IPv6-only session
// the stack discovers the network's NAT64 prefix (RFC 7050) and runs its
// CLAT: a TCP dial to an IPv4 literal, UDP to one, a ping, and a name
// with only A records (as tcp4, and as tcp through DNS64's AAAA) all
// reach the IPv4 side, and the CLAT's IPv4 MTU is the session's less 20.
func TestCLATCarriesIPv4OverAnIPv6OnlySession(t *testing.T) {
	s := openV6Only(t, nsp, stack.Config{})
	for _, a := range s.Addresses() {
		if a.Addr().Is4() {
			t.Fatalf("an IPv6-only session gave IPv4 address %v", a)
		}
	}
	if got := waitCLAT(t, s); got != nsp {
		t.Fatalf("discovered %v, want %v", got, nsp)
	}
	if info, ok := s.GVisor().NICInfo()[2]; !ok || info.MTU != s.MTU()-20 {
		t.Fatalf("CLAT NIC MTU %d (present %v), want %d", info.MTU, ok, s.MTU()-20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := strconv.Itoa(echoServer(t))

	c, err := s.DialContext(ctx, "tcp4", net.JoinHostPort(simnet.TestAddr4.String(), port))
	if err != nil {
		t.Fatal(err)
	}
	if la := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); la != stack.CLATAddr4 {
		t.Errorf("local address %v, want the CLAT's %v", la, stack.CLATAddr4)
	}
	echoVia(t, c, "over 464XLAT")
	for _, network := range []string{"tcp4", "tcp"} {
		c, err := s.DialContext(ctx, network, net.JoinHostPort("v4only.test", port))
		if err != nil {
			t.Fatalf("%s v4only.test: %v", network, err)
		}
		echoVia(t, c, network+" by name")
	}

	u, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			u.WriteTo(buf[:n], from)
		}
	}()
	uc, err := s.DialContext(ctx, "udp4", net.JoinHostPort(simnet.TestAddr4.String(), strconv.Itoa(u.LocalAddr().(*net.UDPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	echoVia(t, uc, "datagram over 464XLAT")
	// A datagram larger than the MTU: IPv4 fragments, each of which
	// becomes an IPv6 fragment 28 bytes longer.
	uc, err = s.DialContext(ctx, "udp4", net.JoinHostPort(simnet.TestAddr4.String(), strconv.Itoa(u.LocalAddr().(*net.UDPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	echoVia(t, uc, strings.Repeat("fragmented datagram ", 150))

	if _, err := s.Ping(ctx, netip.MustParseAddr("203.0.113.5")); err != nil {
		t.Errorf("ping 203.0.113.5 through the CLAT: %v", err)
	}
	if st := s.Stats(); st.CLATTranslated < 10 || st.CLATRefused != 0 {
		t.Errorf("CLAT translated %d, refused %d", st.CLATTranslated, st.CLATRefused)
	}
}

// TestCLATWithTheWellKnownPrefixRefusesNonGlobalIPv4: on the default
// IPv6-only APN (NAT64 on 64:ff9b::/96) the CLAT runs, but an address RFC
// 6052 §3.1 keeps off the Well-Known Prefix (a documentation address
// here) is refused and counted, not sent.
func TestCLATWithTheWellKnownPrefixRefusesNonGlobalIPv4(t *testing.T) {
	s := openV6Only(t, netip.MustParsePrefix("64:ff9b::/96"), stack.Config{})
	if got := waitCLAT(t, s); got.String() != "64:ff9b::/96" {
		t.Fatalf("discovered %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c, err := s.DialContext(ctx, "tcp4", "203.0.113.5:80"); err == nil {
		c.Close()
		t.Fatal("a dial to 203.0.113.5 went through the Well-Known Prefix")
	}
	if s.Stats().CLATRefused == 0 {
		t.Fatal("the refused SYN was not counted")
	}
}

// TestCLATOffLeavesAnIPv6OnlySessionWithoutIPv4: with CLATOff there is
// no CLAT and no IPv4.
func TestCLATOffLeavesAnIPv6OnlySessionWithoutIPv4(t *testing.T) {
	s := openV6Only(t, nsp, stack.Config{CLAT: stack.CLATOff})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.DialContext(ctx, "tcp4", net.JoinHostPort(simnet.TestAddr4.String(), "80"))
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("tcp4 dial without a CLAT: %v, want an immediate error", err)
	}
	if p := s.NAT64Prefix(); p.IsValid() {
		t.Fatalf("CLAT running with prefix %v", p)
	}
}

// TestCLATForceRunsOnADualStackSession: on a dual-stack session whose
// network has a NAT64, CLATAuto leaves IPv4 native and CLATForce sends it
// through the CLAT.
func TestCLATForceRunsOnADualStackSession(t *testing.T) {
	port := strconv.Itoa(echoServer(t))
	for _, c := range []struct {
		mode  stack.CLATMode
		local netip.Addr
	}{
		{stack.CLATAuto, simnet.DefaultCarrier().IPv4.Addr()},
		{stack.CLATForce, stack.CLATAddr4},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			car := simnet.DefaultCarrier()
			car.NAT64 = nsp
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := stack.Open(ctx, stack.Options{APN: "internet", Config: stack.Config{CLAT: c.mode},
				Sim: stack.SimOptions{NetworkConfig: simnet.NetworkConfig{APN: "internet", Carrier: car}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if c.mode == stack.CLATForce && s.NAT64Prefix() != nsp {
				t.Fatalf("forced CLAT runs with prefix %v, want %v", s.NAT64Prefix(), nsp)
			}
			if c.mode == stack.CLATAuto && s.NAT64Prefix().IsValid() {
				t.Fatalf("CLAT runs on a dual-stack session in auto mode (prefix %v)", s.NAT64Prefix())
			}
			conn, err := s.DialContext(ctx, "tcp4", net.JoinHostPort(simnet.TestAddr4.String(), port))
			if err != nil {
				t.Fatal(err)
			}
			if la := conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); la != c.local {
				t.Errorf("local address %v, want %v", la, c.local)
			}
			echoVia(t, conn, "dual stack "+c.mode.String())
		})
	}
}
