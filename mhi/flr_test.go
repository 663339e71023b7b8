package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// waitOutcome waits for the end of a recovery: EventRecovered or
// EventRecoveryFailed.
func (r *rig) waitOutcome(d time.Duration) mhi.Event {
	r.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-r.evCh:
			if e.Kind == mhi.EventRecovered || e.Kind == mhi.EventRecoveryFailed {
				return e
			}
		case <-deadline:
			r.t.Fatalf("recovery did not end within %v", d)
			return mhi.Event{}
		}
	}
}

// A modem whose firmware hangs never clears MHICTRL.RESET: recovery
// through MHI reset fails, and the controller resets the PCI function,
// restores config space and powers up again, as Linux pci_generic's
// recovery work does. Data flows again on the same channels.
func TestRecoveryFallsBackToFunctionLevelReset(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{Timeout: time.Second})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 2048, 16, 16)
	rng := rand.New(rand.NewPCG(3, 4))
	l.exchange(t, rng, 10, 5000)
	if err := r.m.Hang(); err != nil {
		t.Fatal(err)
	}
	fr := r.waitEvent(mhi.EventFunctionReset, 10*time.Second)
	if !errors.Is(fr.Err, mhi.ErrTimeout) {
		t.Errorf("function-reset event error %v, want the MHI reset's timeout", fr.Err)
	}
	if e := r.waitOutcome(15 * time.Second); e.Kind != mhi.EventRecovered {
		t.Fatalf("recovery ended with %s: %v", e.Kind, e.Err)
	}
	if st, ee, mission := r.c.State(); !mission || ee != mhi.EEAMSS || st != mhi.StateM0 {
		t.Fatalf("after the function-level reset: %s/%s mission %v, want M0/AMSS in mission mode", st, ee, mission)
	}
	l.exchange(t, rng, 20, 5000)
	if s := r.c.Stats(); s.Recoveries != 1 {
		t.Errorf("Recoveries = %d, want 1", s.Recoveries)
	}
}

// noFLR is a backend that cannot reset the function.
type noFLR struct{ *vpci.Device }

func (noFLR) Reset() error { return pci.ErrNotSupported }

// Without a function-level reset the controller gives up, and the error
// says what failed at each step.
func TestRecoveryGivesUpWhenTheFunctionCannotBeReset(t *testing.T) {
	r := newRigWrap(t, profile(t, "foxconn-sdx55"), sim.Options{}, mhi.Options{Timeout: 500 * time.Millisecond},
		func(d *vpci.Device) pci.Device { return noFLR{d} })
	r.powerUp()
	if err := r.m.Hang(); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(mhi.EventFunctionReset, 10*time.Second)
	e := r.waitOutcome(10 * time.Second)
	if e.Kind != mhi.EventRecoveryFailed {
		t.Fatalf("recovery ended with %s, want %s", e.Kind, mhi.EventRecoveryFailed)
	}
	if !errors.Is(e.Err, pci.ErrNotSupported) {
		t.Errorf("error %v does not wrap pci.ErrNotSupported", e.Err)
	}
	for _, want := range []string{"MHICTRL.RESET", "function-level reset"} {
		if e.Err == nil || !strings.Contains(e.Err.Error(), want) {
			t.Errorf("error %v does not mention %q", e.Err, want)
		}
	}
	ch, err := r.c.Channel(0, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ch.Start(ctx); !errors.Is(err, mhi.ErrSysErr) {
		t.Errorf("channel start after recovery gave up = %v, want ErrSysErr", err)
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
