package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

// TestSBLChannelsEndAtMissionMode: SAHARA (qcom-qdu100, SBL only) runs in
// the SBL with receive buffers queued; then the modem moves to AMSS
// (sim.Modem.LeaveSBL, whose SBL channels end with it). Like Linux
// mhi_pm_mission_mode_transition, the host must take SAHARA down
// host-side, without RESET_CHAN (the host's command count shows it sends
// none; the modem drops one for an ended channel without a violation, as
// the host may send it before it has seen EE_EVENT(AMSS)): every queued
// buffer back through Release exactly once, Queue refused with
// ErrNotRunning wrapping ErrState, the channel claimable again and not
// startable in AMSS, and mission-mode channels working. Before, SAHARA
// stayed ENABLED with its buffers queued on a ring nobody served.
func TestSBLChannelsEndAtMissionMode(t *testing.T) {
	r, errc, cancel := startInSBL(t)
	defer cancel()
	ctx, cancelOps := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelOps()
	l := saharaLoop(t, r, 41)
	cmds := r.c.Stats().Commands
	if err := r.m.LeaveSBL(); err != nil {
		t.Fatal(err)
	}
	waitPowerUp(ctx, t, errc)
	if n := r.c.Stats().Commands - cmds; n != 0 {
		t.Errorf("%d commands sent at the mission-mode transition, want none (no RESET_CHAN for SAHARA)", n)
	}
	checkDLBuffersBackOnce(t, l)
	b := <-l.txFree
	if err := l.ul.Queue(b, 1, mhi.EOT); !errors.Is(err, mhi.ErrNotRunning) || !errors.Is(err, mhi.ErrState) {
		t.Errorf("Queue on SAHARA in AMSS = %v, want ErrNotRunning wrapping ErrState", err)
	}
	ul, _, err := r.c.ChannelPair("SAHARA", mhi.ChannelOptions{}, mhi.ChannelOptions{})
	if err != nil {
		t.Fatalf("claiming SAHARA again: %v", err)
	}
	if err := ul.Start(ctx); !errors.Is(err, mhi.ErrState) {
		t.Errorf("starting SAHARA in AMSS = %v, want ErrState", err)
	}
	lb := newLoop(r, "LOOPBACK", 4096, 8, 8)
	lb.exchange(t, rand.New(rand.NewPCG(43, 44)), 10, 4096)
}

// TestSBLChannelResetRacingTheSBLExit: a client resets SAHARA while the
// modem leaves the SBL. The host sends RESET_CHAN while it still sees the
// SBL (the modem holds its command ring, sim.Modem.HoldCommands), then the
// modem moves to AMSS, where the SBL's channels are gone: it reads the
// RESET_CHAN only then and, like firmware that no longer has the channel,
// never completes it. Once the host has learnt of AMSS (EE_EVENT) the
// reset cannot be answered and is host-side only, as at the mission-mode
// transition: Reset returns nil, every buffer comes back once, PowerUp
// reaches mission mode and LOOPBACK moves data. Before, Reset waited for
// the completion until its context ended (the profile's 120 s command
// timeout without one), holding up the mission-mode transition, and the
// strict modem reported RESET_CHAN for a channel that was not started.
func TestSBLChannelResetRacingTheSBLExit(t *testing.T) {
	r, errc, cancel := startInSBL(t)
	defer cancel()
	ctx, cancelOps := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelOps()
	l := saharaLoop(t, r, 45)
	cmds := r.c.Stats().Commands
	r.m.HoldCommands(true)
	defer r.m.HoldCommands(false)
	resetErr := make(chan error, 1)
	go func() { resetErr <- l.dl.Reset(ctx) }()
	waitFor(t, 5*time.Second, "RESET_CHAN issued", func() bool { return r.c.Stats().Commands > cmds })
	if err := r.m.LeaveSBL(); err != nil {
		t.Fatal(err)
	}
	r.m.HoldCommands(false) // the modem reads the RESET_CHAN in AMSS
	select {
	case err := <-resetErr:
		if err != nil {
			t.Fatalf("Reset of SAHARA racing the SBL exit: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Reset of SAHARA did not return")
	}
	waitPowerUp(ctx, t, errc)
	checkDLBuffersBackOnce(t, l)
	lb := newLoop(r, "LOOPBACK", 4096, 8, 8)
	lb.exchange(t, rand.New(rand.NewPCG(47, 48)), 10, 4096)
}

// saharaLoop moves data over SAHARA in the SBL and waits until its eight
// DL buffers are queued again and the UL is idle.
func saharaLoop(t *testing.T, r *rig, seed uint64) *loop {
	t.Helper()
	l := newLoop(r, "SAHARA", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(seed, seed+1)), 5, 4096)
	waitFor(t, 5*time.Second, "UL completions and all 8 DL buffers queued again", func() bool {
		return l.ul.Outstanding() == 0 && l.dl.Outstanding() == 8
	})
	return l
}

// waitPowerUp waits for the PowerUp started by startInSBL to succeed.
func waitPowerUp(ctx context.Context, t *testing.T, errc <-chan error) {
	t.Helper()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("PowerUp after the SBL: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("PowerUp did not return after the SBL")
	}
}

// checkDLBuffersBackOnce checks that each of l's 8 DL buffers came back
// through Release exactly once and none is outstanding.
func checkDLBuffersBackOnce(t *testing.T, l *loop) {
	t.Helper()
	l.mu.Lock()
	rx := append([]*pci.Buffer(nil), l.rxFree...)
	l.mu.Unlock()
	seen := map[*pci.Buffer]bool{}
	for _, b := range rx {
		seen[b] = true
	}
	if len(rx) != 8 || len(seen) != 8 {
		t.Errorf("%d DL buffers back (%d distinct), want each of the 8 once", len(rx), len(seen))
	}
	if n := l.dl.Outstanding(); n != 0 {
		t.Errorf("SAHARA DL still has %d buffers outstanding", n)
	}
}
