package stack_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// TestOpenSimWithTheLTERadioDownloadsAtItsRateAndDelay opens the
// in-process emulated modem with the lte preset on its carrier network
// (Sim.Carrier.Radio) and checks what the preset promises from the host's
// side: pings take at least its round trip, a download completes, no
// faster than the preset's DL rate, and TCP's smoothed RTT is at least
// the round trip. Only lower bounds are asserted, plus a generous upper
// one for the ping: a loaded machine is slower, never faster.
func TestOpenSimWithTheLTERadioDownloadsAtItsRateAndDelay(t *testing.T) {
	for _, profile := range []string{"qcom-sdx55m", "quectel-rm5xx"} { // raw IP; MBIM NTBs
		t.Run(profile, func(t *testing.T) {
			cfg, err := radio.Preset("lte")
			if err != nil {
				t.Fatal(err)
			}
			rtt := cfg.Down.Delay + cfg.Up.Delay
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s, err := stack.Open(ctx, stack.Options{APN: "internet", Profile: profile, FCCUnlock: true, Sim: stack.SimOptions{
				Modem:   sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
				Carrier: simnet.CarrierOptions{Radio: &cfg},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			best := time.Hour
			for range 5 {
				d, err := s.Ping(ctx, simnet.TestAddr4)
				if err != nil {
					t.Fatal(err)
				}
				if d < rtt {
					t.Errorf("ping took %v, less than the preset's round trip %v", d, rtt)
				}
				best = min(best, d)
			}
			if best > rtt+500*time.Millisecond {
				t.Errorf("best ping %v, far above the preset's round trip %v", best, rtt)
			}
			t.Logf("ping: best %v (preset round trip %v)", best, rtt)

			const size = 4 << 20
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				io.Copy(c, io.LimitReader(newRand(3), size))
			}()
			c, err := s.DialTCP(ctx, netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(50 * time.Second))
			start := time.Now()
			n, err := io.Copy(io.Discard, c)
			took := time.Since(start)
			if err != nil || n != size {
				t.Fatalf("downloaded %d of %d bytes: %v", n, size, err)
			}
			rate := float64(n) * 8 / took.Seconds()
			if rate > float64(cfg.Down.Rate)*1.05 {
				t.Errorf("downloaded at %.1f Mbit/s, above the preset's %.1f", rate/1e6, float64(cfg.Down.Rate)/1e6)
			}
			info := c.Info()
			if info.RTT < rtt {
				t.Errorf("TCP's smoothed RTT %v, below the preset's round trip %v", info.RTT, rtt)
			}
			t.Logf("download: %d bytes in %v (%.1f Mbit/s), TCP RTT %v", n, took, rate/1e6, info.RTT)
		})
	}
}
