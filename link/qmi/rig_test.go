package qmi_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestSessionOverMHIReconnectsAfterModemReset: the whole path — an MHI
// controller drives the emulated Telit FN980 v1 (QMI is its only
// control pair) through DialMHI on a strict modem; a SYS_ERR makes the
// client fail its calls with ErrModemReset (the modem forgot its client
// IDs), and the session comes back on its own after recovery.
func TestSessionOverMHIReconnectsAfterModemReset(t *testing.T) {
	p, ok := mhi.Lookup("telit-fn980-hwv1")
	if !ok {
		t.Fatal("no telit-fn980-hwv1 profile")
	}
	fn := sim.NewQMIFunction(sim.QMIConfig{})
	var mu sync.Mutex
	var violations []string
	dev, m, err := sim.NewDevice(p, sim.Options{Strict: true, Functions: map[string]sim.Function{"QMI": fn},
		OnViolation: func(err error) { mu.Lock(); violations = append(violations, err.Error()); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := mhi.New(dev, mhi.Options{Profile: p, Timeout: 3 * time.Second})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	defer func() {
		c.Close()
		dev.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, v := range violations {
			t.Errorf("protocol violation: %s", v)
		}
	}()
	if err := c.PowerUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	cl, err := qmi.DialMHI(testCtx(t), c, qmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var lmu sync.Mutex
	var steps []qmi.Progress
	cfg := fast(qmi.SessionConfig{APN: "internet"}, nil)
	cfg.OnProgress = func(p qmi.Progress) { lmu.Lock(); steps = append(steps, p); lmu.Unlock() }
	s := qmi.NewSession(cl, cfg)
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if fn.Calls() != 2 {
		t.Fatalf("modem has %d calls", fn.Calls())
	}
	if err := m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		lmu.Lock()
		var st []qmi.SessionState
		var cause error
		for _, p := range steps {
			st = append(st, p.State)
			if p.State == qmi.StateDisconnected && cause == nil {
				cause = p.Err
			}
		}
		lmu.Unlock()
		i := slices.Index(st, qmi.StateDisconnected)
		if i >= 0 && slices.Contains(st[i:], qmi.StateConnected) && fn.Calls() == 2 {
			if !errors.Is(cause, qmi.ErrModemReset) {
				t.Errorf("disconnect cause %v, want ErrModemReset", cause)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no re-connect after SYS_ERR: %v (modem calls %d)", st, fn.Calls())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
