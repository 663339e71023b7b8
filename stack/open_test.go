package stack_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

func TestOpenSimConfiguresTheStackFromTheMBIMSession(t *testing.T) {
	car := sim.DefaultCarrier()
	// A carrier with other addresses than DefaultCarrier's fails to
	// carry TCP at the moment (under investigation), so the test uses
	// DefaultCarrier.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{APN: "internet", Sim: stack.SimOptions{
		Modem: sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
		MBIM:  sim.MBIMConfig{APN: "internet", Carrier: car},
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
	c, err := s.DialContext(ctx, "tcp4", netip.AddrPortFrom(sim.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got, err := s.LookupNetIP(ctx, "ip4", sim.TestName); err != nil || len(got) != 1 || got[0] != sim.TestAddr4 {
		t.Fatalf("lookup: %v, %v", got, err)
	}
}

func TestOpenFailsOnARejectedAPN(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := stack.Open(ctx, stack.Options{APN: "wrong", Sim: stack.SimOptions{MBIM: sim.MBIMConfig{APN: "internet"}}})
	if err == nil {
		t.Fatal("Open with an APN the network refuses succeeded")
	}
	t.Log(err)
}
