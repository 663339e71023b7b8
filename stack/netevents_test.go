package stack_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// netProfiles are the control protocols the network events are tested
// on: MBIM (NTB framing) and QMI (QMAP).
var netProfiles = []struct{ name, profile string }{
	{"mbim", "quectel-rm5xx"},
	{"qmi", "telit-fn980-hwv1"},
}

// bulkEcho sends n bytes on a new TCP connection to a host echo server
// through s and checks they come back.
func bulkEcho(t *testing.T, s *stack.Stack, n int) {
	t.Helper()
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	c, err := s.DialContext(ctxT(t, 10*time.Second), "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := bytes.Repeat([]byte("mtu!"), n/4)
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("bulk echo of %d bytes: %v", len(msg), err)
	}
}

// The MTU the network gives the session (MBIM IP_CONFIGURATION IPv4Mtu
// and IPv6Mtu, QMI WDS Get Runtime Settings TLV 0x29) is the NIC's, so
// TCP's MSS follows it: the largest packet the carrier sees is exactly
// the MTU, before and after the network changes it.
func TestMTUFromTheSessionBoundsWhatTheCarrierSees(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			car := simnet.DefaultCarrier()
			car.MTU = 1280
			nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", Carrier: car})
			s := openOn(t, p.profile, nw, car)
			if s.MTU() != 1280 {
				t.Fatalf("MTU %d, want the session's 1280", s.MTU())
			}
			bulkEcho(t, s, 64<<10)
			checkLargestUL(t, s, 1280)

			car.MTU = 1400
			nw.SetCarrier(car)
			waitEvent(t, s.Events(), "mtu-changed", func(e stack.Event) bool { return e.Kind == stack.EventMTUChanged && e.MTU == 1400 })
			bulkEcho(t, s, 64<<10)
			checkLargestUL(t, s, 1400)
		})
	}
}

// checkLargestUL checks the largest UL packet the carrier saw is a full
// segment of a link of MTU mtu: at most mtu, and less only by TCP options
// (timestamps, 12 bytes, and the rounding of the segment's payload).
func checkLargestUL(t *testing.T, s *stack.Stack, mtu uint32) {
	t.Helper()
	if got := stack.CarrierStatsForTest(s).ULLargest; got > mtu || got+64 < mtu {
		t.Fatalf("largest UL packet %d bytes, want a full segment of MTU %d", got, mtu)
	}
}

// An MTU no IPv6 link may have (below 1280, RFC 8200 §5) is the modem's
// error: the stack keeps a usable one.
func TestMTUBelowTheIPv6MinimumIsIgnored(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			car := simnet.DefaultCarrier()
			car.MTU = 600
			nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", Carrier: car})
			s := openOn(t, p.profile, nw, car)
			if s.MTU() < 1280 {
				t.Fatalf("MTU %d from a network reporting 600", s.MTU())
			}
			bulkEcho(t, s, 16<<10)
		})
	}
}

// A session that comes back with other addresses (a new IPv4 address,
// a new IPv6 prefix, as after a PDN re-establishment) takes the
// connections of the old ones with it: they fail with ECONNABORTED, new
// dials use the new addresses and a listener keeps accepting, on them.
func TestReaddressAfterReconnectAbortsOldConnectionsAndKeepsListeners(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			car := simnet.DefaultCarrier()
			nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", Carrier: car})
			s := openOn(t, p.profile, nw, car)
			ctx := ctxT(t, 20*time.Second)
			port := hostEcho(t, "tcp4", "127.0.0.1:0")
			dst := netip.AddrPortFrom(simnet.TestAddr4, port).String()
			old, err := s.DialContext(ctx, "tcp4", dst)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			echoOnce(t, old, "before")
			ln, err := s.Listen("tcp", ":7007")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go serveEcho(ln)

			// Out of service; the network gives the session other
			// addresses when it comes back.
			nw.Configure(func(c *simnet.NetworkConfig) { c.NotRegistered = true })
			nw.NetworkLost()
			waitEvent(t, s.Events(), "link-down", kindIs(stack.EventLinkDown))
			next := car
			next.IPv4 = netip.MustParsePrefix("10.0.0.6/30")
			next.IPv6 = netip.MustParsePrefix("2001:db8:64:1::2/64")
			nw.SetCarrier(next)
			nw.Configure(func(c *simnet.NetworkConfig) { c.NotRegistered = false })
			nw.Reregister()
			waitEvent(t, s.Events(), "link-up", kindIs(stack.EventLinkUp))

			old.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := old.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
				t.Errorf("read on a connection from the old address: %v, want ECONNABORTED", err)
			}
			for _, q := range []struct {
				network string
				dst     netip.Addr
				from    netip.Addr
			}{{"tcp4", simnet.TestAddr4, next.IPv4.Addr()}, {"tcp6", simnet.TestAddr6, next.IPv6.Addr()}} {
				port := hostEcho(t, q.network, map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[q.network])
				c, err := s.DialContext(ctx, q.network, netip.AddrPortFrom(q.dst, port).String())
				if err != nil {
					t.Fatal(err)
				}
				if la := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); la != q.from {
					t.Errorf("new %s connection from %v, want %v", q.network, la, q.from)
				}
				echoOnce(t, c, "after, "+q.network)
				c.Close()
			}
			for _, a := range []netip.Addr{next.IPv4.Addr(), next.IPv6.Addr()} {
				c, err := stack.CarrierForTest(s).Dial(ctx, "tcp", netip.AddrPortFrom(a, 7007))
				if err != nil {
					t.Fatalf("dial the listener on %v from the network: %v", a, err)
				}
				echoOnce(t, c, "to the listener")
				c.Close()
			}
		})
	}
}

// serveEcho echoes every connection ln accepts until ln is closed.
func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// Out of coverage for a while (the network stops carrying packets and
// reports the modem deregistered, then registers it again): the stack
// reports the loss with its cause and the return, and a connection
// survives an outage shorter than TCP's timeouts, both one the stack
// bridges (under 5 s) and one it does not.
func TestCoverageLostForAWhileKeepsConnections(t *testing.T) {
	for _, p := range netProfiles {
		for _, o := range []struct {
			name   string
			bridge time.Duration // 0: the stack's
		}{{"bridged", 0}, {"beyond-the-bridge", 50 * time.Millisecond}} {
			t.Run(p.name+"/"+o.name, func(t *testing.T) {
				if o.bridge != 0 {
					defer stack.SetBridgeTimeForTest(o.bridge)()
				}
				car := simnet.DefaultCarrier()
				nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", Carrier: car})
				s := openOn(t, p.profile, nw, car)
				port := hostEcho(t, "tcp4", "127.0.0.1:0")
				c, err := s.DialContext(ctxT(t, 10*time.Second), "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				echoOnce(t, c, "before")

				nw.OutOfCoverage(time.Second)
				seen := waitEvent(t, s.Events(), "link-down", kindIs(stack.EventLinkDown))
				if _, err := c.Write([]byte("during")); err != nil {
					t.Fatal(err)
				}
				seen = append(seen, waitEvent(t, s.Events(), "link-up", kindIs(stack.EventLinkUp))...)
				i := slices.IndexFunc(seen, func(e stack.Event) bool {
					return e.Kind == stack.EventSession && e.Session == "disconnected" && (errors.Is(e.Err, mbim.ErrNoService) || errors.Is(e.Err, qmi.ErrNoService))
				})
				if i < 0 {
					t.Errorf("no disconnected session event with the registration's loss: %v", seen)
				}
				got := make([]byte, len("during"))
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != "during" {
					t.Fatalf("echo of what was written out of coverage: %q, %v", got, err)
				}
				echoOnce(t, c, "after")
				if o.bridge != 0 && s.Stats().BridgeExpiries == 0 {
					t.Error("the outage did not outlast the bridge")
				}
			})
		}
	}
}

// A roaming modem gets no data session unless Options.AllowRoaming: Open
// fails with ErrRoaming, naming the option; with it the session comes up
// and carries traffic. A session up at home is dropped when the network
// reports roaming.
func TestRoamingNeedsAllowRoaming(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			cfg := simnet.NetworkConfig{APN: "internet", Roaming: true}
			_, err := stack.Open(ctxT(t, 20*time.Second), stack.Options{APN: "internet", Profile: p.profile, FCCUnlock: true,
				Sim: stack.SimOptions{NetworkConfig: cfg}})
			if !errors.Is(err, stack.ErrRoaming) || !strings.Contains(err.Error(), "Options.AllowRoaming") {
				t.Fatalf("Open on a roaming modem: %v, want ErrRoaming naming Options.AllowRoaming", err)
			}

			s, err := stack.Open(ctxT(t, 20*time.Second), stack.Options{APN: "internet", Profile: p.profile, FCCUnlock: true, AllowRoaming: true,
				Sim: stack.SimOptions{NetworkConfig: cfg}})
			if err != nil {
				t.Fatalf("Open with AllowRoaming: %v", err)
			}
			defer s.Close()
			bulkEcho(t, s, 4<<10)
		})
	}
}

func TestRoamingStartedMidSessionDropsIt(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet"})
			s := openOn(t, p.profile, nw, simnet.DefaultCarrier())
			nw.Configure(func(c *simnet.NetworkConfig) { c.Roaming = true })
			nw.Reregister()
			// The session is lost (MBIM: for roaming; QMI: first for the
			// search before the new registration) and each attempt to
			// bring it back fails for roaming.
			waitEvent(t, s.Events(), "link-down", kindIs(stack.EventLinkDown))
			waitEvent(t, s.Events(), "a session event with the roaming cause", func(e stack.Event) bool {
				return e.Kind == stack.EventSession && (errors.Is(e.Err, mbim.ErrRoaming) || errors.Is(e.Err, qmi.ErrRoaming))
			})
			if s.LinkUp() {
				t.Error("link up while roaming without AllowRoaming")
			}
		})
	}
}
