package link_test

import (
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestSharedEventRingChargesOnlyRXAgainstTheBudget: on qcom-qdu100 the
// IP_SW0 pair completes UL and DL on one event ring. TX completions stay
// outside the budget there too: a pass over a ring holding budget RX and
// budget TX completions delivers budget packets, not half as many.
func TestSharedEventRingChargesOnlyRXAgainstTheBudget(t *testing.T) {
	const budget = 8
	r := newRig(t, rigOptions{profile: "qcom-qdu100", fn: &sim.Loopback{},
		link: link.Options{Channel: "IP_SW0", Budget: budget, NoGRO: true, DeferPoll: -1}})
	ul, dl := r.ep.Channels()
	if ul.EventRing() != dl.EventRing() {
		t.Fatal("qcom-qdu100 IP_SW0 UL and DL are not on one event ring")
	}
	waitUntil(t, 5*time.Second, "DL ring filled", func() bool { return dl.FreeCount() < r.ep.RefillLevel() })
	waitUntil(t, 5*time.Second, "the poller idle", func() bool { return link.HoldPollerForTest(r.ep) })
	ev0 := r.m.Stats().Events
	pkts := make([][]byte, budget)
	for i := range pkts {
		pkts[i] = udp4(t, i, 100)
	}
	write(t, r.ep, pkts...)
	// The loopback completes each UL transfer, then echoes it: the ring
	// holds UL and DL completions interleaved.
	waitUntil(t, 5*time.Second, "UL and DL completions posted", func() bool { return r.m.Stats().Events >= ev0+2*budget })
	rx := link.PassForTest(r.ep)
	got := r.snk.count()
	s := r.ep.Stats()
	link.ReleasePollerForTest(r.ep)
	if got != budget || rx != budget {
		t.Errorf("one pass delivered %d packets (work %d) from a ring with %d RX and %d TX completions, want %d: TX completions were charged",
			got, rx, budget, budget, budget)
	}
	if s.TXCompletions != budget {
		t.Errorf("the pass reaped %d TX completions, want %d", s.TXCompletions, budget)
	}
	r.snk.waitFor(t, budget, 5*time.Second)
}
