package link_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/experiment"
	"github.com/mhistack/mhistack/mhi"
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

// TestBlockedWriterWakesOnTXCompletionNotOnATimer: a writer blocked on a
// full UL ring sleeps until TX completions free room (netif_stop_queue /
// netif_wake_queue), instead of waking every few microseconds to look.
func TestBlockedWriterWakesOnTXCompletionNotOnATimer(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true, TXTimeout: 20 * time.Second}})
	_, dl := r.ep.Channels()
	waitUntil(t, 5*time.Second, "DL ring filled", func() bool { return dl.FreeCount() < r.ep.RefillLevel() })
	// No DL buffers come back: the loopback fills the DL ring, then
	// leaves UL transfers in the ring, which fills.
	release := r.ep.StarveRX()
	const n = 600
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i] = udp4(t, i, 100)
	}
	type result struct {
		n   int
		err tcpip.Error
	}
	done := make(chan result, 1)
	go func() {
		k, err := writeN(r.ep, pkts...)
		done <- result{k, err}
	}()
	ul, _ := r.ep.Channels()
	// Blocked, and the modem stopped consuming: the completion count
	// stays put between two looks.
	last := ^uint64(0)
	waitUntil(t, 10*time.Second, "the writer blocked on a stalled UL ring", func() bool {
		c := r.ep.Stats().TXCompletions
		stalled := c == last && ul.Full() && r.ep.Stats().TXFull > 0
		last = c
		if !stalled {
			time.Sleep(2 * time.Millisecond)
		}
		return stalled
	})
	// Observe the blocked writer for a while: nothing completes, so it
	// has no reason to wake.
	const window = 50 * time.Millisecond
	s0 := r.ep.Stats()
	time.Sleep(window)
	s1 := r.ep.Stats()
	idle := s1.TXWakeups - s0.TXWakeups
	freed := s1.TXCompletions - s0.TXCompletions
	select {
	case res := <-done:
		t.Fatalf("the writer returned while the ring was stalled: %d, %v", res.n, res.err)
	default:
	}
	release()
	var res result
	select {
	case res = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the blocked writer did not resume after TX completions")
	}
	if res.n != n {
		t.Fatalf("WritePackets = %d, %v; want %d", res.n, res.err, n)
	}
	r.snk.waitFor(t, n, 10*time.Second)
	s := r.ep.Stats()
	t.Logf("stalled %v: %d wake-ups (%.0f/s); whole write: %d wake-ups, %d TXFull, %d TX completions",
		window, idle, float64(idle)/window.Seconds(), s.TXWakeups, s.TXFull, s.TXCompletions)
	if idle > freed+1 {
		t.Errorf("a writer blocked on a stalled ring woke %d times in %v (%d TX completions meanwhile): it polls on a timer", idle, window, freed)
	}
}

// TestStoppedWriterResumesBeforeTheModeratedInterrupt: the host sets BEI
// on every UL TRE of a moderated event ring, and the device may raise
// the MSI for their completions INTMODT later (1 ms on Linux's hardware
// data rings), though the events are in host memory at once. A writer
// stopped on a full UL ring must not wait for that MSI: the poller polls
// deferred while writers are stopped, however slow the device. Here the
// UL ring's moderation is 10 s, so no UL interrupt comes during the test,
// and the device polls the burst channel every 2 ms; before the change a
// refill of the ring waited for the idle poller's missed-interrupt check
// (every 100 ms) whenever the device had not completed anything within
// two deferred polls of the writer's stop.
func TestStoppedWriterResumesBeforeTheModeratedInterrupt(t *testing.T) {
	// Threaded and inline polling alike: with InlinePoll no inline pass
	// runs while RX is idle, and the poller goroutine polls for the
	// stopped writer.
	for _, inline := range []bool{false, true} {
		t.Run(map[bool]string{false: "threaded", true: "inline"}[inline], func(t *testing.T) {
			stoppedWriterResumes(t, inline)
		})
	}
}

func stoppedWriterResumes(t *testing.T, inline bool) {
	base, _ := mhi.Lookup("qcom-sdx55m")
	p := *base
	p.Channels = slices.Clone(base.Channels)
	p.EventRings = slices.Clone(base.EventRings)
	ul := slices.IndexFunc(p.Channels, func(c mhi.ChannelConfig) bool { return c.Name == link.DefaultChannel && c.Dir == mhi.ChanTypeOutbound })
	if ul < 0 {
		t.Fatalf("%s has no UL %s channel", p.Name, link.DefaultChannel)
	}
	p.EventRings[p.Channels[ul].EventRing].IntModMs = 10_000
	if !p.Channels[ul].Burst {
		t.Fatalf("%s %s UL is not a burst channel", p.Name, link.DefaultChannel)
	}
	g := &sim.Generator{} // a UL sink: no credit, nothing sent DL
	// A burst channel the device polls every 2 ms, longer than the
	// poller's deferred polling lasts after it last found work (two
	// passes of DeferPoll): the device is busy, only slower than that.
	// It never gives up polling for doorbell mode (whose DB_MODE event
	// would raise an MSI at once).
	r := newRig(t, rigOptions{custom: &p, fn: g, sim: sim.Options{PollInterval: 2 * time.Millisecond, PollSpin: time.Microsecond, BurstIdle: time.Minute},
		link: link.Options{NoGRO: true, TXTimeout: 20 * time.Second, Experiments: &experiment.Options{InlinePoll: inline}}})
	ulCh, _ := r.ep.Channels()
	const rings = 20
	n := rings * ulCh.Elements()
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i] = udp4(t, i, 100)
	}
	s0 := r.ep.Stats()
	write(t, r.ep, pkts...)
	waitUntil(t, 20*time.Second, "the modem consumed every packet", func() bool {
		tds, _ := g.Received()
		return tds >= uint64(n)
	})
	s := r.ep.Stats()
	missed := s.MissedInterrupts - s0.MissedInterrupts
	t.Logf("%d packets, %d ring-fulls: %d TXFull, %d writer wake-ups, %d deferred polls, %d missed-interrupt checks, %d interrupts",
		n, rings, s.TXFull-s0.TXFull, s.TXWakeups-s0.TXWakeups, s.DeferredPolls-s0.DeferredPolls, missed, s.Interrupts-s0.Interrupts)
	if s.TXFull == s0.TXFull {
		t.Fatal("the writer never found the UL ring full: the test proves nothing")
	}
	if missed >= rings/2 {
		t.Errorf("%d of the ring refills waited for the idle poller's missed-interrupt check (every %v): a stopped writer waits for the moderated MSI",
			missed, 100*time.Millisecond)
	}
}

// TestInlinePollHandsOverAfterItsSliceSoControlEventsRun: with InlinePoll
// and one MSI vector for everything, RX passes run on the goroutine that
// also handles the control ring. An RX flood that exhausts every pass must
// not starve it: after a softirq-like slice the rest goes to the poller
// goroutine, and a command completes while the flood goes on.
func TestInlinePollHandsOverAfterItsSliceSoControlEventsRun(t *testing.T) {
	g := &sim.Generator{Frames: [][]byte{udp4(t, 0, 100)}}
	r := newRig(t, rigOptions{fn: g, sim: sim.Options{MSIVectors: 1},
		link: link.Options{Budget: 2, NoGRO: true, Experiments: &experiment.Options{InlinePoll: true}}})
	// Delivery is slower than the modem: every pass uses its budget.
	var slow atomic.Bool
	slow.Store(true)
	r.snk.onPacket = func([]byte) {
		if slow.Load() {
			time.Sleep(50 * time.Microsecond)
		}
	}
	defer slow.Store(false)
	const flood = 1 << 30
	g.Add(flood)
	waitUntil(t, 10*time.Second, "the flood under way", func() bool { return r.ep.Stats().BudgetExhausted > 20 })
	diag, err := r.c.Channel(4, mhi.ChannelOptions{}) // DIAG UL: a START_CHAN on the control ring
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = diag.Start(ctx)
	took := time.Since(start)
	s := r.ep.Stats()
	if err != nil {
		t.Fatalf("START_CHAN during an inline RX flood: %v after %v (%d passes exhausted the budget, %d hand-offs)",
			err, took, s.BudgetExhausted, s.InlineHandoffs)
	}
	t.Logf("START_CHAN completed in %v during the flood (%d packets so far, %d hand-offs)", took, s.RXPackets, s.InlineHandoffs)
	slow.Store(false)
	if err := diag.Reset(ctx); err != nil {
		t.Errorf("reset DIAG: %v", err)
	}
}
