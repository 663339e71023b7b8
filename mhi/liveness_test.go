package mhi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// An idle controller whose only user is a ControlPort blocked in Recv with
// no deadline: nothing reads a register, so only the liveness check can
// notice that the device has gone. The Recv must fail with ErrRemoved.
func TestLivenessCheckEndsARecvBlockedOnAnIdleControllerAfterRemoval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
	}{
		{"default interval", 0},
		{"100 ms", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{LivenessInterval: tc.interval})
			r.powerUp()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			port, err := r.c.OpenControl(ctx, "LOOPBACK", mhi.ControlOptions{BufSize: 1024})
			if err != nil {
				t.Fatal(err)
			}
			defer port.Close()
			got := make(chan error, 1)
			go func() {
				_, err := port.Recv(context.Background())
				got <- err
			}()
			time.Sleep(20 * time.Millisecond) // Recv is waiting
			checks := r.c.Stats().LivenessChecks
			r.dev.Remove()
			start := time.Now()
			select {
			case err := <-got:
				if !errors.Is(err, mhi.ErrRemoved) {
					t.Fatalf("Recv after removal = %v, want ErrRemoved", err)
				}
				t.Logf("Recv returned %v %v after the removal (liveness checks before it: %d)", err, time.Since(start).Round(time.Millisecond), checks)
			case <-time.After(10 * time.Second):
				t.Fatal("Recv still blocked 10 s after the removal: nothing noticed it")
			}
			r.waitEvent(mhi.EventRemoved, time.Second)
		})
	}
}

// The check runs only while the controller is powered, and not at all when
// disabled.
func TestLivenessCheckRunsWhilePoweredOnly(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{LivenessInterval: 10 * time.Millisecond})
	time.Sleep(50 * time.Millisecond)
	if n := r.c.Stats().LivenessChecks; n != 0 {
		t.Errorf("%d liveness checks before PowerUp", n)
	}
	r.powerUp()
	deadline := time.Now().Add(5 * time.Second)
	for r.c.Stats().LivenessChecks < 3 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 liveness checks in 5 s at a 10 ms interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.c.PowerDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := r.c.Stats().LivenessChecks
	time.Sleep(50 * time.Millisecond)
	if m := r.c.Stats().LivenessChecks; m != n {
		t.Errorf("%d liveness checks after PowerDown", m-n)
	}

	off := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{LivenessInterval: -1})
	off.powerUp()
	time.Sleep(50 * time.Millisecond)
	if n := off.c.Stats().LivenessChecks; n != 0 {
		t.Errorf("%d liveness checks with LivenessInterval -1", n)
	}
}
