package simnet

import (
	"net"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// probeWaiting reports whether a tail loss probe is due while the data
// pair is stopped (the prober waits for Start).
func (t *tailProber) probeWaiting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waitPort
}

// TestCarrierTailLossProbeRepairsALostFlight: a download through the
// carrier, the data pair stopped mid-transfer (what a SYS_ERR does to
// the network's side) until the carrier's TCP has sent its whole flight
// into it and waits, limited by its congestion window, for ACKs that
// cannot come: a tail loss, nothing above the hole reached the host.
// When the pair starts again the network's sender must repair it with one
// tail loss probe, not its retransmission timeout, as a Linux server does
// (RACK-TLP): the test counts the carrier stack's timeouts and the
// probes, not wall time. Without the probe, or with a probe of one
// segment (which the carrier's RFC 6675 sender does not count as enough
// to start recovery), the carrier takes a timeout.
func TestCarrierTailLossProbeRepairsALostFlight(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	for _, k := range []carrierPair{{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, 0}, framedPairs[0]} {
		t.Run(k.name, func(t *testing.T) {
			h := newCarrierHost(t, k, CarrierOptions{})
			sack := tcpip.TCPSACKEnabled(true) // as mhistack's stack and Linux hosts
			if err := h.s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
				t.Fatal(err)
			}
			blob := testData(64<<10, 3)
			stop := make(chan struct{})
			conn, served := h.dialHost(t, func(c net.Conn) error {
				for {
					select {
					case <-stop:
						return nil
					default:
					}
					if _, err := c.Write(blob); err != nil {
						return nil
					}
				}
			})
			var got atomic.Int64
			read := make(chan struct{})
			go func() {
				defer close(read)
				buf := make([]byte, 64<<10)
				for {
					n, err := conn.Read(buf)
					got.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
			waitFor(t, "1 MiB downloaded", func() bool { return got.Load() >= 1<<20 })

			port := h.cn.ep.port.Load()
			h.cn.Stop()
			waitFor(t, "a tail loss probe due with the pair stopped", h.cn.tlp.probeWaiting)
			rtos, probes := h.cn.s.Stats().TCP.Timeouts.Value(), h.cn.Stats().TailLossProbes
			at := got.Load()
			h.cn.Start(port)
			waitFor(t, "256 KiB more downloaded", func() bool { return got.Load() >= at+256<<10 })
			if n := h.cn.s.Stats().TCP.Timeouts.Value() - rtos; n != 0 {
				t.Errorf("the carrier's TCP took %d retransmission timeouts to repair the lost flight; want 0", n)
			}
			if n := h.cn.Stats().TailLossProbes - probes; n != 1 {
				t.Errorf("%d tail loss probes; want 1", n)
			}
			close(stop)
			conn.Close()
			<-read
			if err := served(); err != nil {
				t.Fatal(err)
			}
		})
	}
	goleak.VerifyNone(t, ignore)
}
