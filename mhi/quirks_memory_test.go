package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// Tests of the host against the quirks of device-written memory
// (mhi/sim/quirks_memory.go, docs/QUIRKS.md).

// TestStaleEventWPIsNeverReadBack: a device that writes the event ring
// contexts' WP back to an old value at every EE change (stale-er-wp;
// Linux main.c "Use cached values for calculating the shared write
// pointer") does not disturb a host that computes the WP it hands back
// from its own copy: power-up, channel commands, data, SYS_ERR recovery
// (another EE change), data again, and no violation. After the control
// ring's next events (the channel commands) its context WP is the host's
// own again, one slot behind the device's RP: a host that read the stale
// WP back and advanced it would leave it behind.
func TestStaleEventWPIsNeverReadBack(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{Quirks: []sim.Quirk{sim.QuirkStaleERWP}}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(51, 52))
	l.exchange(t, rng, 40, 4096)
	waitUntil(t, 5*time.Second, "control ring context WP one behind its RP", func() bool {
		return mhi.EventContextSettledForTest(r.c, 0)
	})
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(mhi.EventRecovered, 10*time.Second)
	l.exchange(t, rng, 40, 4096)
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	}
}

// dataRingStats sums the stats of event rings 1 and up (the data rings).
func dataRingStats(c *mhi.Controller) (s mhi.EventRingStats) {
	for i := 1; ; i++ {
		er, err := c.EventRing(i)
		if err != nil {
			return s
		}
		st := er.Stats()
		s.Events += st.Events
		s.Invalid += st.Invalid
	}
}

// TestUnalignedEventRPIsIgnored: a device that stores a data event
// ring's context RP inside the ring but not on an element boundary
// (unaligned-er-rp; Linux main.c "Add alignment check for event ring
// read pointer") and raises the ring's interrupt has the pointer
// refused and counted, no event read from it (a host that rounded it
// down would walk the whole ring of stale elements), and the rings work
// once the device stores a true RP again.
func TestUnalignedEventRPIsIgnored(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{Quirks: []sim.Quirk{sim.QuirkUnalignedERRP}}, mhi.Options{})
	r.powerUp()
	waitUntil(t, 5*time.Second, "the unaligned RP counted", func() bool { return dataRingStats(r.c).Invalid > 0 })
	if st := dataRingStats(r.c); st.Events != 0 {
		t.Fatalf("data rings read %d events from an unaligned RP before any transfer", st.Events)
	}
	if st := r.c.Stats(); st.InvalidEvents == 0 {
		t.Error("controller InvalidEvents 0 after an unaligned RP")
	}
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(53, 54)), 20, 4096)
}

// TestStrayCompletionIsRefused: a device that posts, before a UL
// transfer's event, an EOT event naming the TRE three slots on
// (stray-completion; Linux main.c "Detect events pointing to unexpected
// TREs") has it refused and counted: no buffer completes before the
// device has read its TRE, and every buffer completes once.
func TestStrayCompletionIsRefused(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{Quirks: []sim.Quirk{sim.QuirkStrayCompletion}}, mhi.Options{})
	r.powerUp()
	const n = 6
	var done atomic.Int32
	early := make(chan string, n)
	seen := make(map[*pci.Buffer]bool)
	// Only UL runs: the modem's TRE count is the UL TREs it has read.
	ul, _, err := r.c.ChannelPair("LOOPBACK", mhi.ChannelOptions{OnComplete: func(c mhi.Completion) {
		k := done.Add(1)
		if read := r.m.Stats().TREs; uint64(k) > read {
			early <- "completion before the device read its TRE"
		}
		if seen[c.Buf] {
			early <- "buffer completed twice"
		}
		seen[c.Buf] = true
	}}, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ul.Start(ctx); err != nil {
		t.Fatal(err)
	}
	before := r.c.Stats().InvalidEvents
	for range n {
		b, err := r.dev.DMA().Alloc(64, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := ul.Queue(b, 64, mhi.EOT); err != nil {
			t.Fatal(err)
		}
	}
	ul.Ring()
	waitUntil(t, 5*time.Second, "every UL buffer completed", func() bool { return done.Load() >= n })
	select {
	case why := <-early:
		t.Fatal(why)
	default:
	}
	if got := done.Load(); got != n {
		t.Fatalf("%d completions of %d buffers", got, n)
	}
	if r.c.Stats().InvalidEvents == before {
		t.Error("stray completion events not counted in InvalidEvents")
	}
}

// TestBadDoorbellOffsetFailsPowerUp: a device whose CHDBOFF leaves no
// room for the channel doorbells in its BAR (bad-offsets; Linux init.c
// "Sanity check values from remote device before use") fails power-up
// with ErrProtocol naming the register, before any doorbell is written
// outside the BAR.
func TestBadDoorbellOffsetFailsPowerUp(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{Quirks: []sim.Quirk{sim.QuirkBadOffsets}}, mhi.Options{Timeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.c.PowerUp(ctx)
	if !errors.Is(err, mhi.ErrProtocol) || !strings.Contains(err.Error(), "CHDBOFF") {
		t.Fatalf("PowerUp = %v, want ErrProtocol naming CHDBOFF", err)
	}
	if _, _, mission := r.c.State(); mission {
		t.Error("controller in mission mode after a failed power-up")
	}
}
