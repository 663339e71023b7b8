package link_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/internal/gvloop"
	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestGVisorTCPOverTheModemLoopback runs a TCP connection of a real gVisor
// stack through the endpoint: both addresses sit on the modem NIC and the
// stack does not short-cut local traffic, so every segment (with GSO on
// the way out and GRO on the way in) crosses the emulated modem.
func TestGVisorTCPOverTheModemLoopback(t *testing.T) {
	for _, mode := range []link.GSOMode{link.GSOSegment, link.GSOGVisor} {
		t.Run(mode.String(), func(t *testing.T) { tcpOverTheModemLoopback(t, mode) })
	}
}

func tcpOverTheModemLoopback(t *testing.T, mode link.GSOMode) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, noAttach: true, link: link.Options{GSO: mode}})
	el := tcpLoopbackTransfer(t, r, 4<<20)
	st := r.ep.Stats()
	t.Logf("4 MiB in %v (%.0f Mbit/s); link: rx %d tx %d packets, GRO merges %d, ul frames %d, doorbells %d, GSO segments cut %d",
		el, float64(4<<20)*8/el.Seconds()/1e6, st.RXPackets, st.TXPackets, st.GROMerges, st.TXFrames, st.TXDoorbells, st.TXGSO)
	if st.RXPackets == 0 || st.TXPackets == 0 {
		t.Fatal("traffic did not cross the link")
	}
	switch mode {
	case link.GSOSegment:
		// 4 MiB in one write: TCP hands over 64 KiB segments, each cut
		// here and sent with one doorbell.
		if st.TXGSO == 0 || st.TXDoorbells*4 > st.TXPackets {
			t.Errorf("host GSO: %d segments cut, %d doorbells for %d packets", st.TXGSO, st.TXDoorbells, st.TXPackets)
		}
	case link.GSOGVisor:
		if st.TXGSO != 0 {
			t.Errorf("gVisor GSO: the endpoint cut %d segments", st.TXGSO)
		}
	}
}

// TestStackTeardownDuringTrafficDoesNotDeadlock tears a gVisor stack down
// while segments are in flight, both ways: closing the endpoint first
// (its close action removes the NIC, which closes it again), and
// Stack.Destroy (whose Wait holds the stack lock while the poller may be
// delivering a segment that needs it).
func TestStackTeardownDuringTrafficDoesNotDeadlock(t *testing.T) {
	for _, closeFirst := range []bool{true, false} {
		for round := 0; round < 5; round++ {
			r := newRig(t, rigOptions{fn: &sim.Loopback{}, noAttach: true})
			s, a, b := twoAddressStack(t, r.ep)
			// SYNs to a closed port: every one is answered with a RST,
			// which needs a route (the stack lock) from the poller.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			for i := 0; i < 20; i++ {
				go func(port uint16) {
					c, err := gonet.DialTCPWithBind(ctx, s, tcpip.FullAddress{NIC: 1, Addr: a}, tcpip.FullAddress{NIC: 1, Addr: b, Port: port}, ipv4.ProtocolNumber)
					if err == nil {
						c.Close()
					}
				}(uint16(9000 + i))
			}
			time.Sleep(time.Duration(round) * time.Millisecond)
			done := make(chan struct{})
			go func() {
				if closeFirst {
					r.ep.Close()
				}
				s.Destroy()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("teardown (close first: %v, round %d) deadlocked", closeFirst, round)
			}
			cancel()
		}
	}
}

// twoAddressStack is gvloop.New for a test: every segment between a and
// b crosses the modem.
func twoAddressStack(t testing.TB, ep stack.LinkEndpoint) (s *stack.Stack, a, b tcpip.Address) {
	t.Helper()
	s, a, b, err := gvloop.New(ep)
	if err != nil {
		t.Fatal(err)
	}
	return s, a, b
}

// tcpLoopbackTransfer sends size random bytes over one TCP connection
// between the two addresses of a gVisor stack on r's endpoint (the modem
// loops UL back to DL), checks that they arrive intact and returns how
// long it took. The stack is destroyed when the test ends.
func tcpLoopbackTransfer(t testing.TB, r *rig, size int) time.Duration {
	t.Helper()
	s, a, b := twoAddressStack(t, r.ep)
	// Destroy removes the NIC, which closes the endpoint (gVisor's Wait
	// alone would wait forever: link endpoints are stopped by their own
	// mechanism, here Close).
	t.Cleanup(s.Destroy)
	l, err := gonet.ListenTCP(s, tcpip.FullAddress{NIC: 1, Addr: b, Port: 8080}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	got := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := gonet.DialTCPWithBind(ctx, s, tcpip.FullAddress{NIC: 1, Addr: a}, tcpip.FullAddress{NIC: 1, Addr: b, Port: 8080}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("dial over the modem: %v", err)
	}
	start := time.Now()
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.Close()
	var rcv []byte
	select {
	case rcv = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("transfer did not finish")
	}
	el := time.Since(start)
	if !bytes.Equal(rcv, data) {
		t.Fatalf("received %d bytes, sent %d", len(rcv), len(data))
	}
	return el
}

// TestTCPUploadWithULAggregation: a 4 MiB TCP transfer through the
// modem arrives intact with UL aggregation, the endpoint's TX buffers
// sized from the framing's limits alone (no TXBufferSize), in fewer UL
// frames (TREs) than packets: at least two packets a frame on average
// (host GSO hands over 64 KiB segments, cut into ~44 packets).
// The emulated modem loops UL frames back as DL: QMAPv5 with what a
// Quectel modem grants in WDA (11 datagrams, 8 KiB), NTB16 with an NTB
// OUT of 16 datagrams and 16 KiB.
func TestTCPUploadWithULAggregation(t *testing.T) {
	for _, c := range []struct {
		name, profile, channel string
		f                      framing.Framing
		session                uint8
	}{
		{"qmap-v5", "qcom-sdx55m", "IP_HW0", qmap.Framing{Version: 5, MaxDatagrams: 11, MaxBytes: 8192}, 1},
		{"mbim-ntb16", "quectel-rm5xx", "IP_HW0_MBIM", mbim.NTB{MaxDatagrams: 16, MaxBytes: 16384}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, rigOptions{profile: c.profile, fn: &sim.Loopback{}, noAttach: true,
				link: link.Options{Channel: c.channel, Framing: c.f, Session: c.session}})
			tcpLoopbackTransfer(t, r, 4<<20)
			st := r.ep.Stats()
			t.Logf("%d TX packets in %d frames, %d doorbells; %s", st.TXPackets, st.TXFrames, st.TXDoorbells, fmtStats(st))
			if st.TXFrames*2 > st.TXPackets || st.RXErrors != 0 {
				t.Errorf("%d TX packets in %d frames (%d RX errors): not aggregated", st.TXPackets, st.TXFrames, st.RXErrors)
			}
		})
	}
}
