package link_test

import (
	"testing"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
)

// TestRXSteadyStateAllocs fails when the receive path allocates per packet
// (or per frame) in steady state: 1500-byte packets, 32 per MAPv5 frame
// (OVERFLOW chains of two 32 KiB buffers) and 1400-byte packets, 23 per
// NTB16, from the emulated modem to a counting dispatcher. The count covers
// the whole process (modem and host), so it bounds both at 1 per 100
// packets: what remains (measured: 4 to 21 in 4096 packets) is the
// emulated modem's queue and timers and sync.Pool refills after a GC, far
// below one per frame. (With one packet per buffer the emulated modem
// itself allocates while it waits for ring room, so raw IP is not checked
// here.)
func TestRXSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("steady-state traffic; run without -short")
	}
	if underRace {
		t.Skip("sync.Pool drops Puts under the race detector; run without -race")
	}
	cases := []struct {
		name           string
		size, perFrame int
		o              link.Options
		devCsum        bool
	}{
		{"qmap5-32x1500B", 1500, 32, link.Options{Framing: qmap.Framing{Version: 5}}, true},
		{"qmap1-32x1500B", 1500, 32, link.Options{Framing: qmap.Framing{Version: 1}}, false},
		{"ntb16-23x1400B", 1400, 23, link.Options{Channel: "IP_HW0_MBIM", Framing: mbim.NTB{}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, run := rxTraffic(t, c.size, c.perFrame, c.o, c.devCsum)
			const pkts = 32 * 128
			run(20000) // warm the pools (gVisor's, the modem's queues)
			// One run counted whole: AllocsPerRun's average is an
			// integer division, which would hide up to runs-1
			// allocations.
			allocs := testing.AllocsPerRun(1, func() { run(pkts) })
			t.Logf("%.0f allocations in %d packets", allocs, pkts)
			// One allocation per frame would be 128 (1/32 per packet);
			// the bound, 1 per 100 packets, is below that.
			if allocs > pkts/100 {
				t.Errorf("%.0f allocations in %d packets, want at most %d (1 per 100) in steady state", allocs, pkts, pkts/100)
			}
		})
	}
}
