package mhi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// healthPeriod is the health-check interval of these tests; the bounds
// they wait are counted in periods, with room for a loaded machine.
const healthPeriod = 50 * time.Millisecond

// newHealthRig is a rig whose only check of the device is the vendor-ID
// health check (the MHISTATUS liveness check is off), powered up and idle.
func newHealthRig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{HealthCheckInterval: healthPeriod, LivenessInterval: -1})
	r.powerUp()
	return r
}

// closePromptly closes the controller and fails if that takes longer
// than bound.
func closePromptly(t *testing.T, c *mhi.Controller, bound time.Duration) {
	t.Helper()
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > bound {
		t.Errorf("Close took %v, want at most %v", d, bound)
	}
}

// A function whose config space reads all-ones, its registers still
// answering, is removed by the health check alone, idle as it is.
func TestHealthCheckVendorIDAllOnesRemovesAnIdleDevice(t *testing.T) {
	r := newHealthRig(t)
	r.dev.SetDead(vpci.DeadConfigOnes)
	start := time.Now()
	e := r.waitEvent(mhi.EventRemoved, 40*healthPeriod)
	if !errors.Is(e.Err, mhi.ErrRemoved) {
		t.Errorf("EventRemoved carries %v, want ErrRemoved", e.Err)
	}
	t.Logf("removed %v after the vendor ID went 0xFFFF (%d health checks)", time.Since(start).Round(time.Millisecond), r.c.Stats().HealthChecks)
	if _, err := r.c.OpenControl(t.Context(), "LOOPBACK", mhi.ControlOptions{BufSize: 1024}); !errors.Is(err, mhi.ErrRemoved) {
		t.Errorf("OpenControl after removal = %v, want ErrRemoved", err)
	}
	closePromptly(t, r.c, time.Second)
}

// A function whose vendor ID reads 0 gets a function-level reset (Linux
// pci_generic's recovery); still 0 after it, the device is removed.
func TestHealthCheckVendorIDZeroResetsThenRemoves(t *testing.T) {
	r := newHealthRig(t)
	r.dev.SetDead(vpci.DeadConfigZero)
	e := r.waitEvent(mhi.EventFunctionReset, 40*healthPeriod)
	t.Logf("function reset: %v", e.Err)
	r.waitEvent(mhi.EventRemoved, 5*time.Second)
	e = r.waitEvent(mhi.EventRecoveryFailed, 5*time.Second)
	if !errors.Is(e.Err, mhi.ErrRemoved) {
		t.Errorf("EventRecoveryFailed carries %v, want ErrRemoved", e.Err)
	}
	closePromptly(t, r.c, time.Second)
}

// A function whose vendor ID reads 0 until a function-level reset comes
// back from it: mission mode again, channels usable.
func TestHealthCheckVendorIDZeroRecoveredByFunctionReset(t *testing.T) {
	r := newHealthRig(t)
	r.dev.SetDead(vpci.DeadConfigZero | vpci.DeadUntilReset)
	r.waitEvent(mhi.EventFunctionReset, 40*healthPeriod)
	r.waitEvent(mhi.EventRecovered, 10*time.Second)
	port, err := r.c.OpenControl(t.Context(), "LOOPBACK", mhi.ControlOptions{BufSize: 1024})
	if err != nil {
		t.Fatalf("OpenControl after the recovery: %v", err)
	}
	port.Close()
	closePromptly(t, r.c, 5*time.Second)
}

// With the health check disabled (and the liveness check too) nothing reads
// config space: a dead vendor ID goes unnoticed.
func TestHealthCheckDisabled(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{HealthCheckInterval: -1, LivenessInterval: -1})
	r.powerUp()
	r.dev.SetDead(vpci.DeadConfigOnes)
	time.Sleep(4 * healthPeriod) // what a check would have had to act
	if n := r.c.Stats().HealthChecks; n != 0 {
		t.Errorf("%d health checks with the check disabled", n)
	}
	r.mu.Lock()
	for _, e := range r.events {
		if e.Kind == mhi.EventRemoved {
			t.Error("EventRemoved with the health check disabled")
		}
	}
	r.mu.Unlock()
	r.dev.SetDead(0)
	closePromptly(t, r.c, 5*time.Second)
}
