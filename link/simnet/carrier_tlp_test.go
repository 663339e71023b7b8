package simnet

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// probeWaiting reports whether a tail loss probe waits for Start: one due
// while the data pair is stopped, or one sent before the stop and lost.
func (t *tailProber) probeWaiting() bool {
	stops := t.stops.Load()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waitPort {
		return true
	}
	for _, f := range t.flows {
		if f.probeLost(stops) {
			return true
		}
	}
	return false
}

// testMinRTO is the carrier's minimum RTO in the tail loss tests: far
// beyond any PTO and any scheduling delay of a loaded machine, so that a
// timeout counted is a tail the probe did not repair, not a test that was
// slow to restart the pair (at the default 200 ms it was, under load).
const testMinRTO = 5 * time.Second

// tailLossDownload is a carrier host whose network's TCP has SACK with
// the host and testMinRTO, and a download from the network running into
// it; got counts the bytes read. end stops it.
func tailLossDownload(t *testing.T, k carrierPair) (h *carrierHost, got *atomic.Int64, end func()) {
	t.Helper()
	h = newCarrierHost(t, k, CarrierOptions{})
	sack := tcpip.TCPSACKEnabled(true) // as mhistack's stack and Linux hosts
	if err := h.s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
		t.Fatal(err)
	}
	minRTO := tcpip.TCPMinRTOOption(testMinRTO)
	if err := h.cn.s.SetTransportProtocolOption(tcp.ProtocolNumber, &minRTO); err != nil {
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
	got = new(atomic.Int64)
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
	return h, got, func() {
		close(stop)
		conn.Close()
		<-read
		if err := served(); err != nil {
			t.Fatal(err)
		}
	}
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
			h, got, end := tailLossDownload(t, k)
			defer end()
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
		})
	}
	goleak.VerifyNone(t, ignore)
}

// TestCarrierTailLossProbeLostWithThePairGoesAgainOnStart: the probe goes
// out while the data pair still runs but is lost with the rest of the
// flight (the host takes nothing: what a SYS_ERR does to a probe sent
// between the crash and the pair's stop), then the pair stops and starts
// again. The probe was the tail's only one; the prober must send it again
// when the pair starts, and the network's TCP must repair the tail without
// a retransmission timeout (counted by gVisor, with a 5 s minimum RTO so
// that no scheduling delay counts). Before the fix the second probe never
// went and the carrier took a timeout.
func TestCarrierTailLossProbeLostWithThePairGoesAgainOnStart(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	for _, k := range []carrierPair{{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, 0}, framedPairs[0]} {
		t.Run(k.name, func(t *testing.T) {
			h, got, end := tailLossDownload(t, k)
			defer end()
			rtos, probes := h.cn.s.Stats().TCP.Timeouts.Value(), h.cn.Stats().TailLossProbes
			// The host's NIC down: the flight and the probe reach the
			// host's link and are dropped, and no ACK goes back.
			if err := h.s.DisableNIC(1); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a tail loss probe into the dead pair", func() bool { return h.cn.Stats().TailLossProbes > probes })
			port := h.cn.ep.port.Load()
			h.cn.Stop()
			if err := h.s.EnableNIC(1); err != nil {
				t.Fatal(err)
			}
			at := got.Load()
			h.cn.Start(port)
			waitFor(t, "256 KiB more downloaded", func() bool { return got.Load() >= at+256<<10 })
			if n := h.cn.s.Stats().TCP.Timeouts.Value() - rtos; n != 0 {
				t.Errorf("the carrier's TCP took %d retransmission timeouts to repair the lost flight; want 0", n)
			}
			if n := h.cn.Stats().TailLossProbes - probes; n != 2 {
				t.Errorf("%d tail loss probes; want 2 (the lost one and one after Start)", n)
			}
			if n := h.cn.Stats().TailLossProbesAgain; n != 1 {
				t.Errorf("%d tail loss probes counted as sent again; want 1", n)
			}
		})
	}
	goleak.VerifyNone(t, ignore)
}
