package stack_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// fccOpen opens the emulated modem of profile (presenting its ID idx)
// and returns the network it plays.
func fccOpen(t *testing.T, profile string, idx int, unlock bool, control string) (*stack.Stack, *simnet.Network, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, _ := mhi.Lookup(profile)
	cfg := simnet.NetworkConfig{APN: "internet", FCCLock: p.EmulatedFCCUnlock(idx)}
	nw := simnet.NewNetwork(cfg)
	s, err := stack.Open(ctx, stack.Options{APN: "internet", Profile: profile, Control: control, FCCUnlock: unlock,
		Sim: stack.SimOptions{NetworkConfig: cfg, Network: nw,
			Modem: sim.Options{IDIndex: idx, Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }}}})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, nw, err
}

// TestOpenFCCLockedModemFailsNamingTheFlag: without Options.FCCUnlock a
// locked modem's refusal to turn the radio on is ErrFCCLocked, whose
// text names the option and the mhiproxy flag; nothing was unlocked.
func TestOpenFCCLockedModemFailsNamingTheFlag(t *testing.T) {
	for _, profile := range []string{"quectel-rm5xx", "foxconn-t99w175"} {
		t.Run(profile, func(t *testing.T) {
			_, nw, err := fccOpen(t, profile, 0, false, "")
			if !errors.Is(err, stack.ErrFCCLocked) {
				t.Fatalf("Open: %v, want ErrFCCLocked", err)
			}
			var fe *stack.FCCError
			if !errors.As(err, &fe) || fe.Tried {
				t.Fatalf("Open: %#v", err)
			}
			for _, want := range []string{"Options.FCCUnlock", "-fcc-unlock", string(fe.Procedure)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			if !nw.FCCLocked() {
				t.Error("the modem was unlocked without Options.FCCUnlock")
			}
		})
	}
}

// TestOpenFCCUnlockRunsTheProfilesProcedure: with Options.FCCUnlock the
// Quectel MBIM RADIO_STATE and the Foxconn DMS v2 unlock carried in the
// MBIM QMI service unlock the modem, and the session comes up.
func TestOpenFCCUnlockRunsTheProfilesProcedure(t *testing.T) {
	for _, c := range []struct{ profile, control string }{
		{"quectel-rm5xx", ""}, {"quectel-em1xx", ""}, {"foxconn-t99w175", ""},
	} {
		t.Run(c.profile+"/"+c.control, func(t *testing.T) {
			s, nw, err := fccOpen(t, c.profile, 0, true, c.control)
			if err != nil {
				t.Fatal(err)
			}
			if nw.FCCLocked() || len(s.Addresses()) == 0 {
				t.Fatalf("locked %v, addresses %v", nw.FCCLocked(), s.Addresses())
			}
		})
	}
}

// TestOpenFCCUnlockedIDNeedsNoFlag: 105b:e0bf is a T99W175 that
// ModemManager does not list as locked: it opens without the option.
func TestOpenFCCUnlockedIDNeedsNoFlag(t *testing.T) {
	p, _ := mhi.Lookup("foxconn-t99w175")
	if p.IDs[1].Device != 0xe0bf || p.EmulatedFCCUnlock(1) != mhi.FCCUnlockNone {
		t.Fatalf("profile IDs %v", p.IDs)
	}
	if _, _, err := fccOpen(t, "foxconn-t99w175", 1, false, ""); err != nil {
		t.Fatal(err)
	}
}

// TestFCCUnlockRunsAgainAfterASysErr: a modem locks again at every
// restart, a SYS_ERR recovery included. The session loop brings the
// session back by itself, so it must run the unlock again
// (mbim.SessionConfig.RadioRefused); without that the session never came
// back after the first crash.
func TestFCCUnlockRunsAgainAfterASysErr(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, _ := mhi.Lookup("quectel-rm5xx")
	cfg := simnet.NetworkConfig{APN: "internet", FCCLock: p.EmulatedFCCUnlock(0)}
	nw := simnet.NewNetwork(cfg)
	m, err := stack.OpenModem(ctx, stack.Options{Profile: p.Name, FCCUnlock: true,
		Sim: stack.SimOptions{NetworkConfig: cfg, Network: nw}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.OpenSession(ctx, stack.SessionOptions{APN: "internet"})
	if err != nil {
		t.Fatal(err)
	}
	dev, ok := m.Controller().Device().(*vpci.Device)
	if !ok {
		t.Fatalf("device %T", m.Controller().Device())
	}
	modem, ok := dev.Model().(*sim.Modem)
	if !ok {
		t.Fatalf("model %T", dev.Model())
	}
	for crash := 1; crash <= 2; crash++ {
		if err := modem.TriggerSysErr(); err != nil {
			t.Fatal(err)
		}
		down := false
	wait:
		for {
			select {
			case e := <-s.Events():
				switch e.Kind {
				case stack.EventLinkDown:
					down = true
				case stack.EventLinkUp:
					if down {
						break wait
					}
				}
			case <-ctx.Done():
				t.Fatalf("crash %d: the session did not come back (link lost: %v, network locked: %v)", crash, down, nw.FCCLocked())
			}
		}
		if nw.FCCLocked() {
			t.Fatalf("crash %d: the session is back but the network says the radio is locked", crash)
		}
	}
}
