package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// Tests of the host against the power-management and power-up quirks
// (mhi/sim/quirks_pm.go, docs/QUIRKS.md).

// TestNoM3ProfileSuspendIsRefusedWithoutTouchingTheDevice: a model
// without M3 (no-m3, QDU100: Linux leaves its runtime PM off) refuses
// M3; Suspend says so at once (errors.ErrUnsupported) without writing
// MHICTRL, which the strict modem would report as a violation, and data
// keeps flowing.
func TestNoM3ProfileSuspendIsRefusedWithoutTouchingTheDevice(t *testing.T) {
	p := profile(t, "qcom-qdu100")
	if !p.NoM3 {
		t.Fatal("qcom-qdu100 lacks NoM3")
	}
	r := newRig(t, p.Name, sim.Options{}, mhi.Options{})
	if !slices.Contains(r.m.Quirks(), sim.QuirkNoM3) {
		t.Fatalf("modem quirks %v lack no-m3", r.m.Quirks())
	}
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(51, 52))
	l.exchange(t, rng, 5, 4096)
	// QDU100's timeout is 120 s: a Suspend that asked would still wait.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := l.suspendIdle(ctx)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Suspend = %v, want errors.ErrUnsupported", err)
	}
	if st, _ := r.m.State(); st != mhi.StateM0 {
		t.Fatalf("modem in %s after the refused Suspend, want M0", st)
	}
	if st, _, mission := r.c.State(); st != mhi.StateM0 || !mission {
		t.Fatalf("controller in %s (mission %v) after the refused Suspend", st, mission)
	}
	l.exchange(t, rng, 5, 4096)
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	}
}

// TestD3ColdResumeRecoversTheDevice: power lost while suspended (D3cold;
// Linux pci_generic recovers a device found out of M3 at resume): the
// modem is back in its boot ROM, Resume runs a full recovery (reset,
// firmware download, channels started again) and returns nil, and data
// flows again. Both ways of losing power: Modem.LosePower after Suspend,
// and the d3cold quirk (power goes at every M3 entry).
func TestD3ColdResumeRecoversTheDevice(t *testing.T) {
	for _, tt := range []struct {
		name   string
		quirks []sim.Quirk
	}{
		{"LosePower", nil},
		{"quirk", []sim.Quirk{sim.QuirkD3Cold}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			so := sim.Options{Boot: sim.BootPBL, Quirks: tt.quirks}
			pair := quirkDataPair(profile(t, "qcom-sdx55m"), &so)
			r := newRig(t, "qcom-sdx55m", so, mhi.Options{
				Firmware: func(string) ([]byte, error) { return bootImage(8192), nil },
			})
			r.powerUp()
			l := newLoop(r, pair, 4096, 8, 8)
			rng := rand.New(rand.NewPCG(61, 62))
			l.exchange(t, rng, 5, 4096)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := l.suspendIdle(ctx); err != nil {
				t.Fatalf("Suspend: %v", err)
			}
			if tt.quirks == nil {
				if err := r.m.LosePower(); err != nil {
					t.Fatal(err)
				}
			}
			if st, ee := r.m.State(); st != mhi.StateReset || ee != mhi.EEPBL {
				t.Fatalf("modem in %s/%s after the power loss, want RESET/PBL", st, ee)
			}
			if err := r.c.Resume(ctx); err != nil {
				t.Fatalf("Resume after a power loss: %v", err)
			}
			if st, ee, mission := r.c.State(); st != mhi.StateM0 || ee != mhi.EEAMSS || !mission {
				t.Fatalf("controller in %s/%s (mission %v) after Resume", st, ee, mission)
			}
			l.exchange(t, rng, 5, 4096)
			if st := r.m.Stats(); st.Violations != 0 {
				t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
			} else if st.PowerLosses != 1 {
				t.Errorf("Stats.PowerLosses %d, want 1", st.PowerLosses)
			}
		})
	}
}

// TestSysErrAtPowerUpResetsAndBoots: a device that crashed before the
// host enabled its interrupts (syserr-at-powerup; Linux pm.c "Fix check
// for syserr at power_up") and whose boot ROM acts on MHI RESET only in
// SYS_ERR: power-up finds SYS_ERR in MHISTATUS, resets the device (which
// stays in PBL), re-writes BHI_INTVEC, downloads the firmware and reaches
// mission mode.
func TestSysErrAtPowerUpResetsAndBoots(t *testing.T) {
	img := bootImage(8192)
	so := sim.Options{Boot: sim.BootPBL, Quirks: []sim.Quirk{sim.QuirkSysErrAtPowerUp}}
	pair := quirkDataPair(profile(t, "qcom-sdx55m"), &so)
	r := newRig(t, "qcom-sdx55m", so, mhi.Options{
		Firmware: func(string) ([]byte, error) { return img, nil },
	})
	if st, ee := r.m.State(); st != mhi.StateSysErr || ee != mhi.EEPBL {
		t.Fatalf("modem in %s/%s before power-up, want SYS_ERR/PBL", st, ee)
	}
	r.powerUp()
	if _, ee, mission := r.c.State(); ee != mhi.EEAMSS || !mission {
		t.Fatalf("after power-up: ee %s mission %v", ee, mission)
	}
	if got := r.m.BHIImage(); got.Size == 0 {
		t.Error("no BHI download: the reset did not leave the device in PBL")
	}
	l := newLoop(r, pair, 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(71, 72)), 5, 4096)
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	}
}

// suspendIdle suspends the controller once every UL buffer of l is back:
// Suspend refuses while UL transfers are outstanding, and moderated
// completions may still be on their way after an exchange.
func (l *loop) suspendIdle(ctx context.Context) error {
	waitUntil(l.r.t, 5*time.Second, "every UL buffer back", func() bool { return len(l.txFree) == cap(l.txFree) })
	return l.r.c.Suspend(ctx)
}

// TestM0DuringBurstChannelPreparationReRingsTheChannel: the M0 state
// change arrives while a burst channel is being prepared, after its first
// doorbell (m0-during-prepare; Linux main.c "bus: mhi: host: Fix race
// between channel preparation and M0 event"), and the device has put its
// burst channels back in doorbell mode. The host is in M0 already; it must
// still re-arm doorbell mode on every burst channel and ring the ones with
// queued TREs, or the TREs it queues next sit behind a context wp nobody
// reads. The doorbell-mode watchdog, which would find them, is off.
func TestM0DuringBurstChannelPreparationReRingsTheChannel(t *testing.T) {
	so := sim.Options{
		Quirks:         []sim.Quirk{sim.QuirkM0DuringPrepare},
		Functions:      map[string]sim.Function{"IP_HW0": &sim.Loopback{}},
		DBModeWatchdog: time.Hour,
	}
	r := newRig(t, "qcom-sdx55m", so, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "IP_HW0", 4096, 8, 8)
	if !l.ul.Config().Burst || !l.dl.Config().Burst {
		t.Fatal("IP_HW0 is not a burst pair")
	}
	l.exchange(t, rand.New(rand.NewPCG(81, 82)), 20, 4096)
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	} else if st.WPWithoutDoorbell != 0 {
		t.Errorf("the device found %d context wp moves without a doorbell", st.WPWithoutDoorbell)
	}
}

// TestLateStateChangeDuringPowerDownIsIgnored: the device reports M0 after
// the host began tearing it down (late-state-change: STATE_CHANGE(M0) with
// its MSI at the power-down MHI reset, READY after it; Linux pm.c "bus:
// mhi: host: Wait for ready state after reset"). PowerDown ignores it: no
// doorbell after the reset (the strict modem reports one), PowerDown
// returns nil, and a following PowerUp carries data.
func TestLateStateChangeDuringPowerDownIsIgnored(t *testing.T) {
	so := sim.Options{Quirks: []sim.Quirk{sim.QuirkLateStateChange}}
	pair := quirkDataPair(profile(t, "qcom-sdx55m"), &so)
	r := newRig(t, "qcom-sdx55m", so, mhi.Options{})
	r.powerUp()
	l := newLoop(r, pair, 4096, 8, 8)
	rng := rand.New(rand.NewPCG(91, 92))
	l.exchange(t, rng, 5, 4096)
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := r.c.PowerDown(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: PowerDown: %v", round, err)
		}
		if st, _, mission := r.c.State(); st != mhi.StateReset || mission {
			t.Fatalf("round %d: controller in %s (mission %v) after PowerDown", round, st, mission)
		}
		if v := r.m.Stats().Violations; v != 0 {
			t.Fatalf("round %d: %d violations: %v", round, v, r.m.Violations())
		}
		r.powerUp()
		l = newLoopOn(r, l)
		l.exchange(t, rng, 5, 4096)
	}
}

// TestResetOnRemoveLetsTheNextHostPowerUp: QDU100's firmware outlives an
// MHI reset in mission mode and ignores the next M0 request until a SoC
// reset (reset-on-remove, on by default for the profile; Linux
// pci_generic.c: "bus: mhi: host: pci_generic: Reset QDU100 while the MHI
// driver is removed"). A host that closes the modem after moving data
// (PowerDown ends with a SoC reset for a ResetOnRemove profile), or one
// that dies leaving it in M0 (the next host's power-up reset is followed
// by a SoC reset), leaves it to a new controller that powers it up and
// moves data, with no violation. Without the SoC resets the new host's
// power-up times out waiting for M0.
func TestResetOnRemoveLetsTheNextHostPowerUp(t *testing.T) {
	for _, leave := range []string{"close", "die"} {
		t.Run(leave, func(t *testing.T) {
			r := newRig(t, "qcom-qdu100", sim.Options{}, mhi.Options{})
			r.powerUp()
			rng := rand.New(rand.NewPCG(101, 102))
			old := newLoop(r, "LOOPBACK", 4096, 8, 8)
			old.exchange(t, rng, 5, 4096)
			if leave == "close" {
				if err := r.c.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			} else {
				freeAll(t, r, append(mhi.AbandonForTest(r.c), old.bufs...))
			}
			c2, err := mhi.New(r.dev, mhi.Options{Profile: r.p, Timeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := c2.Close(); err != nil {
					t.Errorf("second controller Close: %v", err)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c2.PowerUp(ctx); err != nil {
				t.Fatalf("PowerUp after the first host left (%s): %v", leave, err)
			}
			r.c = c2
			l := newLoop(r, "LOOPBACK", 4096, 8, 8)
			l.exchange(t, rng, 5, 4096)
			if n := r.m.Stats().Violations; n != 0 {
				t.Errorf("the modem saw %d protocol violations: %v", n, r.m.Violations())
			}
		})
	}
}

// TestRestoreFromHibernationReinitialisesTheDevice: the host suspended the
// modem, then was restored from a hibernation image; the restore kernel
// had brought MHI up with contexts of its own, so the modem, in M3 again,
// holds ring pointers that are not the host's (Modem.HibernationRestore;
// Linux pci-generic: "bus: mhi: pci-generic: Fix hibernation"). Restore
// resets the modem and programs the contexts again instead of resuming:
// M0, mission mode, data on the loopback pair, no violation. With Resume
// in its place the modem, its command ring rp back at the base, replayed
// the host's earlier START_CHANs of channels 100 and 101 (the strict modem
// reports them: CHSTATE RUNNING, not ENABLED).
func TestRestoreFromHibernationReinitialisesTheDevice(t *testing.T) {
	var so sim.Options
	pair := quirkDataPair(profile(t, "qcom-sdx55m"), &so)
	r := newRig(t, "qcom-sdx55m", so, mhi.Options{})
	r.powerUp()
	l := newLoop(r, pair, 4096, 8, 8)
	rng := rand.New(rand.NewPCG(111, 112))
	l.exchange(t, rng, 13, 4096) // the rings' pointers away from their bases
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.suspendIdle(ctx); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if err := r.m.HibernationRestore(); err != nil {
		t.Fatal(err)
	}
	if err := r.c.Restore(ctx); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if st, ee, mission := r.c.State(); st != mhi.StateM0 || ee != mhi.EEAMSS || !mission {
		t.Fatalf("controller in %s/%s (mission %v) after Restore", st, ee, mission)
	}
	l.exchange(t, rng, 13, 4096)
	if v := r.m.Stats().Violations; v != 0 {
		t.Fatalf("%d violations: %v", v, r.m.Violations())
	}
}

// TestRestoreOutsideSuspendIsRefused: Restore is for a suspended device.
func TestRestoreOutsideSuspendIsRefused(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{}, mhi.Options{})
	r.powerUp()
	if err := r.c.Restore(context.Background()); !errors.Is(err, mhi.ErrState) {
		t.Fatalf("Restore in M0: %v, want ErrState", err)
	}
}
