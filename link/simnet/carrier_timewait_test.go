package simnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
)

// TestCarrierAcceptsASYNOnAPortItHoldsInTimeWait: the host's stack dials
// through the carrier from the same few source ports over and over, to a
// host server that closes first, so every connection after a port's
// first finds the carrier's endpoint of that 4-tuple in TIME-WAIT. Every
// dial succeeds and every reuse is counted: with gVisor's behaviour (a
// TIME-WAIT endpoint hands a SYN over only to a listener, and the
// carrier has a forwarder) the second dial of a port waited for the
// carrier's 60 s TIME-WAIT, and the test failed at its first dial.
func TestCarrierAcceptsASYNOnAPortItHoldsInTimeWait(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	rawIP := carrierPair{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, 0}
	for _, c := range []struct {
		k  carrierPair
		v6 bool
	}{{rawIP, false}, {framedPairs[0], false}, {rawIP, true}} {
		name := c.k.name + "/ipv4"
		if c.v6 {
			name = c.k.name + "/ipv6"
		}
		t.Run(name, func(t *testing.T) {
			h := newCarrierHostWith(t, c.k, CarrierOptions{}, c.v6)
			testTimeWaitChurn(t, h, c.v6)
		})
	}
	goleak.VerifyNone(t, ignore)
}

func testTimeWaitChurn(t *testing.T, h *carrierHost, v6 bool) {
	const ports, rounds = 4, 25
	const bye = "bye"
	lo, to, src, proto := "127.0.0.1:0", TestAddr4, DefaultCarrier().IPv4.Addr(), ipv4.ProtocolNumber
	if v6 {
		lo, to, src, proto = "[::1]:0", TestAddr6, DefaultCarrier().IPv6.Addr(), ipv6.ProtocolNumber
	}
	l, err := net.Listen("tcp", lo)
	if err != nil {
		t.Fatal(err)
	}
	var served sync.WaitGroup
	defer served.Wait()
	defer l.Close()
	served.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// The server closes first: the carrier's endpoint is the
			// active closer and ends in TIME-WAIT.
			c.Write([]byte(bye))
			c.Close()
		}
	})
	dst := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(to.AsSlice()), Port: uint16(l.Addr().(*net.TCPAddr).Port)}
	failed := 0
	for r := range rounds {
		errs := make([]error, ports)
		var wg sync.WaitGroup
		for i := range ports {
			wg.Go(func() {
				// Generous: a dial through the carrier takes
				// milliseconds; one that hits a TIME-WAIT the carrier
				// does not give up waits for it (60 s).
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				la := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(src.AsSlice()), Port: uint16(40000 + i)}
				c, err := gonet.DialTCPWithBind(ctx, h.s, la, dst, proto)
				if err != nil {
					errs[i] = fmt.Errorf("round %d, port %d: dial: %w", r, la.Port, err)
					return
				}
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				got, err := io.ReadAll(c)
				if err != nil || string(got) != bye {
					errs[i] = fmt.Errorf("round %d, port %d: read %q, %v", r, la.Port, got, err)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				failed++
				t.Error(err)
			}
		}
		if failed > 0 {
			t.Fatalf("%d of %d connections failed in round %d of %d; carrier: %+v", failed, ports, r+1, rounds, h.cn.Stats())
		}
		// The host's endpoints (passive closers) leave LAST-ACK when
		// the carrier acknowledges their FIN; their ports are free
		// again once none is left.
		waitFor(t, "the host's endpoints to close", func() bool { return h.s.Stats().TCP.CurrentConnected.Value() == 0 })
	}
	cs := h.cn.Stats()
	if want := uint64(ports * (rounds - 1)); cs.TimeWaitReused != want {
		t.Errorf("%d SYNs took over a TIME-WAIT 4-tuple, want %d (every connection after a port's first)", cs.TimeWaitReused, want)
	}
	if want := uint64(ports * rounds); cs.TCPFlows != want {
		t.Errorf("%d TCP flows forwarded, want %d", cs.TCPFlows, want)
	}
}

// waitFor polls cond until it holds; a test fails if it does not within
// 10 s (a liveness bound, not a measurement).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still not after 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
