package mhi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// A modem whose firmware crashes shortly after every arrival in AMSS (a
// wrong image) is recovered CrashLoopLimit-1 times; the next crash stops
// recovery with an error that names the cause, the device is left reset
// and quiet, and the controller closes promptly.
func TestCrashLoopStopsRecovery(t *testing.T) {
	const every = 50 * time.Millisecond
	r := newRig(t, "foxconn-sdx55", sim.Options{CrashLoop: every}, mhi.Options{CrashLoopLimit: 3, CrashLoopWindow: 10 * time.Second})
	r.powerUp()
	r.waitEvent(mhi.EventRecovered, 10*time.Second)
	r.waitEvent(mhi.EventRecovered, 10*time.Second)
	e := r.waitEvent(mhi.EventRecoveryFailed, 10*time.Second)
	if !errors.Is(e.Err, mhi.ErrCrashLoop) || !errors.Is(e.Err, mhi.ErrSysErr) {
		t.Fatalf("EventRecoveryFailed carries %v, want ErrCrashLoop (and ErrSysErr)", e.Err)
	}
	for _, want := range []string{"firmware crashed 3 times in 10s", "recovery stopped", "mhictl flash"} {
		if !strings.Contains(e.Err.Error(), want) {
			t.Errorf("error %q does not say %q", e.Err, want)
		}
	}
	// Quiet: no further crash is seen or recovered from. (A crash during
	// a recovery is retried within it, so SYS_ERRs may exceed 3.)
	before := r.c.Stats()
	time.Sleep(10 * every)
	if s := r.c.Stats(); s.SysErrs != before.SysErrs || s.Recoveries != 2 {
		t.Errorf("after the crash loop: %d SYS_ERRs (%d when it stopped), %d recoveries; want no new one and 2 recoveries", s.SysErrs, before.SysErrs, s.Recoveries)
	}
	if st, ee := r.m.State(); st != mhi.StateReady {
		t.Errorf("modem in %s (EE %s) after recovery stopped; want READY (reset, not booted)", st, ee)
	}
	if _, err := r.c.OpenControl(t.Context(), "LOOPBACK", mhi.ControlOptions{BufSize: 1024}); !errors.Is(err, mhi.ErrCrashLoop) {
		t.Errorf("OpenControl after the crash loop = %v, want ErrCrashLoop", err)
	}
	// PowerUp starts afresh.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.PowerDown(ctx); err != nil {
		t.Errorf("PowerDown: %v", err)
	}
	if err := r.c.PowerUp(ctx); err != nil {
		t.Fatalf("PowerUp after the crash loop: %v", err)
	}
	closePromptly(t, r.c, 5*time.Second)
}

// Crashes farther apart than CrashLoopWindow are each recovered.
func TestCrashLoopWindowForgetsOldCrashes(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{CrashLoop: 20 * time.Millisecond}, mhi.Options{CrashLoopLimit: 2, CrashLoopWindow: time.Nanosecond})
	r.powerUp()
	for range 4 {
		r.waitEvent(mhi.EventRecovered, 10*time.Second)
	}
	closePromptly(t, r.c, 5*time.Second)
}
