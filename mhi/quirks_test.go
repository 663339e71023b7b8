package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// Tests of the host against the emulated modem's quirks, documented real
// modem behaviours (mhi/sim/quirks.go, docs/QUIRKS.md).

// quirkDataPair is the channel pair a quirk test loops data over: the
// profile's LOOPBACK, else its data pair with a loopback function.
func quirkDataPair(p *mhi.Profile, so *sim.Options) string {
	for _, name := range []string{"LOOPBACK", "IP_HW0_MBIM", "IP_HW0", "IP_SW0"} {
		if _, _, ok := p.ChannelPair(name); ok {
			if name != "LOOPBACK" {
				so.Functions = map[string]sim.Function{name: &sim.Loopback{}}
			}
			return name
		}
	}
	return ""
}

// TestSlowReadyWithinTheBudgetPowersUp: a modem whose READY comes up late
// (slow-ready, Linux pci_generic ready_timeout_ms) but inside the
// profile's ReadyTimeout powers up, and the wait reports its progress
// once it has taken more than a second.
func TestSlowReadyWithinTheBudgetPowersUp(t *testing.T) {
	p := *profile(t, "qcom-sdx75m")
	p.ReadyTimeout = 3 * time.Second
	var mu sync.Mutex
	var reports []mhi.Progress
	r := newRigProfile(t, &p, sim.Options{ReadyDelay: 1500 * time.Millisecond}, mhi.Options{Boot: mhi.BootOptions{
		OnProgress: func(pr mhi.Progress) {
			mu.Lock()
			reports = append(reports, pr)
			mu.Unlock()
		},
	}})
	if got := r.m.Quirks(); len(got) == 0 || got[0] != sim.QuirkSlowReady {
		t.Fatalf("modem quirks %v, want the profile's slow-ready", got)
	}
	start := time.Now()
	r.powerUp()
	// The delay runs from New, a little before start.
	if el := time.Since(start); el < time.Second {
		t.Errorf("power-up took %v; the modem's READY delay is 1.5s", el)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 {
		t.Fatal("no progress reported while waiting 1.5s for READY")
	}
	pr := reports[0]
	if pr.Phase != mhi.PhaseReady || pr.Waiting != "READY" || pr.Waited < time.Second || pr.Limit != p.ReadyTimeout {
		t.Errorf("progress %+v, want PhaseReady for READY, after 1s or more of %v", pr, p.ReadyTimeout)
	}
}

// TestSlowReadyOverTheBudgetFailsNamed: READY later than the profile's
// ReadyTimeout fails power-up with ErrTimeout naming the wait and its
// bound; the rig's cleanup and TestMain's goleak check that nothing is
// left running.
func TestSlowReadyOverTheBudgetFailsNamed(t *testing.T) {
	p := *profile(t, "qcom-sdx75m")
	p.ReadyTimeout = 300 * time.Millisecond
	r := newRigProfile(t, &p, sim.Options{ReadyDelay: 1200 * time.Millisecond}, mhi.Options{})
	err := r.c.PowerUp(context.Background())
	if !errors.Is(err, mhi.ErrTimeout) {
		t.Fatalf("PowerUp = %v, want ErrTimeout", err)
	}
	if want := "waited 300ms for READY (profile ReadyTimeout)"; !strings.Contains(err.Error(), want) {
		t.Errorf("PowerUp = %q, want it to say %q", err, want)
	}
	if st, _, mission := r.c.State(); mission || st == mhi.StateM0 {
		t.Errorf("controller in %s (mission %v) after a failed power-up", st, mission)
	}
}

// TestNoInbandWakeProfilesNeverRingTheWakeDoorbell: on every model
// without an in-band wake doorbell (no-inband-wake, Linux
// pci_generic sideband_wake: a channel-127 doorbell "can fuze" them) the
// host powers up, suspends, resumes, goes through device-initiated M1/M2
// and moves data without writing doorbell 127: the modem would wedge and
// the strict rig fail the test.
func TestNoInbandWakeProfilesNeverRingTheWakeDoorbell(t *testing.T) {
	n := 0
	for _, p := range mhi.Profiles() {
		if !p.SidebandWake {
			continue
		}
		n++
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			var so sim.Options
			pair := quirkDataPair(p, &so)
			r := newRig(t, p.Name, so, mhi.Options{})
			if !slices.Contains(r.m.Quirks(), sim.QuirkNoInbandWake) {
				t.Fatalf("modem quirks %v lack no-inband-wake", r.m.Quirks())
			}
			r.powerUp()
			l := newLoop(r, pair, 4096, 8, 8)
			rng := rand.New(rand.NewPCG(31, 32))
			l.exchange(t, rng, 5, 4096)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := l.suspendIdle(ctx); err != nil {
				t.Fatalf("Suspend: %v", err)
			}
			if err := r.c.Resume(ctx); err != nil {
				t.Fatalf("Resume: %v", err)
			}
			l.exchange(t, rng, 5, 4096)
			if err := r.m.EnterM1(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 5*time.Second, "the modem in M2", func() bool { st, _ := r.m.State(); return st == mhi.StateM2 })
			l.exchange(t, rng, 5, 4096)
			if st := r.m.Stats(); st.Violations != 0 {
				t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
			}
		})
	}
	if n == 0 {
		t.Fatal("no profile has sideband wake")
	}
}

// TestNoInbandWakeQuirkCatchesTheWakeDoorbell is the check above seen
// failing: a profile that has the wake doorbell, played with the quirk
// forced on, is woken from M2 with it, and the modem records the
// violation and wedges.
func TestNoInbandWakeQuirkCatchesTheWakeDoorbell(t *testing.T) {
	var violations atomic.Int32
	// No function-level reset: the wedged modem stays wedged until the
	// test resets it.
	r := newRigWrap(t, profile(t, "foxconn-sdx55"), sim.Options{
		Quirks:      []sim.Quirk{sim.QuirkNoInbandWake},
		OnViolation: func(error) { violations.Add(1) },
	}, mhi.Options{Timeout: 500 * time.Millisecond}, func(d *vpci.Device) pci.Device { return noFLR{d} })
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	if err := r.m.EnterM1(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the modem in M2", func() bool { st, _ := r.m.State(); return st == mhi.StateM2 })
	// Traffic in M2 makes the host write the wake doorbell.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.send(ctx, []byte("wake")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the modem wedged in SYS_ERR", func() bool { st, _ := r.m.State(); return st == mhi.StateSysErr })
	if violations.Load() == 0 {
		t.Fatal("the wake doorbell write was not reported as a violation")
	}
	// Wedged: the host's MHI reset times out.
	if e := r.waitOutcome(15 * time.Second); e.Kind != mhi.EventRecoveryFailed || !errors.Is(e.Err, mhi.ErrTimeout) {
		t.Fatalf("recovery ended with %s: %v, want a failure by timeout", e.Kind, e.Err)
	}
	// Unwedge the modem behind the controller's back, so that Close
	// finds a device that answers its MHI reset.
	if err := r.dev.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
}

// TestOneMSIVectorSharesVectorZero: on a platform that grants one MSI
// vector (one-msi; Linux pci_generic "using shared MSI") every event
// ring signals on vector 0; the host drains them all: power-up, data
// both ways, SYS_ERR recovery, data again.
func TestOneMSIVectorSharesVectorZero(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{
		Quirks:    []sim.Quirk{sim.QuirkOneMSI},
		Functions: map[string]sim.Function{"IP_HW0_MBIM": &sim.Loopback{}},
	}, mhi.Options{})
	if n := r.m.Identity().MSIVectors; n != 1 {
		t.Fatalf("modem asks for %d MSI vectors, want 1", n)
	}
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	data := newLoop(r, "IP_HW0_MBIM", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(41, 42))
	l.exchange(t, rng, 20, 4096)
	data.exchange(t, rng, 20, 4096)
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(mhi.EventRecovered, 10*time.Second)
	l.exchange(t, rng, 20, 4096)
	data.exchange(t, rng, 20, 4096)
}
