package stack_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

func TestOpenSimConfiguresTheStackFromTheMBIMSession(t *testing.T) {
	// Not DefaultCarrier's addresses: 10.9.8.7 is the broadcast address
	// of its /30, which once made every TCP dial time out (the stack
	// added it to the NIC with the session's prefix; see nicPrefixLen).
	car := simnet.DefaultCarrier()
	car.IPv4 = netip.MustParsePrefix("10.9.8.7/30")
	car.IPv4Gateway = netip.MustParseAddr("10.9.8.5")
	car.IPv4DNS = []netip.Addr{netip.MustParseAddr("10.9.8.53"), netip.MustParseAddr("10.9.8.54")}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{APN: "internet", Sim: stack.SimOptions{
		Modem:         sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
		NetworkConfig: simnet.NetworkConfig{APN: "internet", Carrier: car},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addrs := s.Addresses()
	if !slices.Contains(addrs, car.IPv4) || !slices.Contains(addrs, car.IPv6) {
		t.Fatalf("addresses %v, want %v and %v", addrs, car.IPv4, car.IPv6)
	}
	if s.MTU() != 1500 {
		t.Fatalf("MTU %d", s.MTU())
	}
	if dns := s.DNSServers(); len(dns) != 3 {
		t.Fatalf("DNS servers %v", dns)
	}
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	c, err := s.DialContext(dctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	if la := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); la != car.IPv4.Addr() {
		t.Errorf("local address %v, want %v", la, car.IPv4.Addr())
	}
	msg := []byte("through a /30 broadcast-looking address")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
		t.Fatalf("echo %q, %v", got, err)
	}
	c.Close()
	if got, err := s.LookupNetIP(ctx, "ip4", simnet.TestName); err != nil || len(got) != 1 || got[0] != simnet.TestAddr4 {
		t.Fatalf("lookup: %v, %v", got, err)
	}
}

func TestOpenFailsOnARejectedAPN(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := stack.Open(ctx, stack.Options{APN: "wrong", Sim: stack.SimOptions{NetworkConfig: simnet.NetworkConfig{APN: "internet"}}})
	if err == nil {
		t.Fatal("Open with an APN the network refuses succeeded")
	}
	t.Log(err)
}

// An MBIM-only modem: Open picks IP_HW0_MBIM with NTB framing on both
// the link and the carrier network.
func TestOpenSimOnAnMBIMDataChannel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{APN: "internet", Profile: "quectel-rm5xx", FCCUnlock: true, Sim: stack.SimOptions{
		Modem:         sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
		NetworkConfig: simnet.NetworkConfig{APN: "internet"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	c, err := s.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := []byte("over NTBs")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
		t.Fatalf("echo %q, %v", got, err)
	}
}
