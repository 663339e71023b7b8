package mhi_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// Tests of the host against the boot quirks (mhi/sim/quirks_boot.go,
// docs/QUIRKS.md).

// TestEEBackToBackEndsInMissionModeWithTheRightChannels: an SBL that
// announces itself and mission mode back to back (ee-back-to-back; Linux
// pm.c "Process execution environment changes serially"), with a client
// that sets up the SBL's SAHARA channel the moment the host shows it the
// SBL, as Linux creates the SBL's channel devices at the SBL transition
// (the hook holds the control ring until the client's START_CHAN is on
// the command ring). The host must take the two EE changes in order as
// one step: the SBL, already left when the host read it, is never shown,
// so no START_CHAN(SAHARA) reaches a device in AMSS (the strict modem's
// violation); power-up ends in mission mode, SAHARA is refused with
// ErrState, LOOPBACK moves data. Before, the host published the SBL
// alone and the client's START reached the modem in AMSS.
func TestEEBackToBackEndsInMissionModeWithTheRightChannels(t *testing.T) {
	p := *profile(t, "qcom-qdu100")
	r := newRigProfile(t, &p, sim.Options{
		Boot:      sim.BootPBL,
		Quirks:    []sim.Quirk{sim.QuirkEEBackToBack},
		Functions: map[string]sim.Function{"SAHARA": &sim.Loopback{}},
	}, mhi.Options{Firmware: func(string) ([]byte, error) { return []byte("sbl image"), nil }})
	if !slices.Contains(r.m.Quirks(), sim.QuirkEEBackToBack) {
		t.Fatalf("modem quirks %v lack ee-back-to-back", r.m.Quirks())
	}
	ul, dl, err := r.c.ChannelPair("SAHARA", mhi.ChannelOptions{}, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		published []mhi.EE
		startErr  = errors.New("SAHARA never started")
	)
	mhi.SetEEHookForTest(r.c, func(ee mhi.EE) {
		mu.Lock()
		published = append(published, ee)
		mu.Unlock()
		if ee != mhi.EESBL {
			return
		}
		cmds := r.c.Stats().Commands
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			err := ul.Start(ctx)
			if err == nil {
				err = dl.Start(ctx)
			}
			mu.Lock()
			startErr = err
			mu.Unlock()
		})
		// Hold the control ring until the START is sent (or Start
		// refused without sending one).
		for r.c.Stats().Commands == cmds {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	})
	if err := r.c.PowerUp(ctx); err != nil {
		t.Fatalf("PowerUp: %v", err)
	}
	wg.Wait()
	if st, ee, mission := r.c.State(); st != mhi.StateM0 || ee != mhi.EEAMSS || !mission {
		t.Fatalf("controller in %s/%s (mission %v) after power-up", st, ee, mission)
	}
	mu.Lock()
	t.Logf("EEs shown to clients: %v; SAHARA start: %v", published, startErr)
	if slices.Contains(published, mhi.EESBL) {
		t.Errorf("the host showed its clients the SBL after reading AMSS behind it (EEs shown: %v)", published)
	}
	mu.Unlock()
	if err := ul.Start(ctx); !errors.Is(err, mhi.ErrState) {
		t.Errorf("starting SAHARA in AMSS = %v, want ErrState", err)
	}
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(81, 82)), 5, 4096)
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	}
}

// TestEDLReadyAgainWaitsForTheFlashProgrammersReady: a boot ROM whose MHI
// is up (READY) in EDL before the download, and whose flash programmer
// resets MHI and comes READY again a little after its download
// (edl-ready-again; Linux pm.c "Wait for ready after an EDL firmware
// download"). The host must not take the boot ROM's READY for the
// programmer's: it waits for BHI_EXECENV = FP, then for READY, and only
// then programs MHI and asks for M0. EnterEDL ends in mission mode with EE
// FP and FIREHOSE answers. Before, the host asked the boot ROM for M0 (the
// request was lost with the handover) and waited for an M0 that never
// came.
func TestEDLReadyAgainWaitsForTheFlashProgrammersReady(t *testing.T) {
	fh := &sim.Firehose{}
	r := newRig(t, "qcom-sdx55m", sim.Options{
		Quirks:    []sim.Quirk{sim.QuirkEDLReadyAgain},
		Functions: map[string]sim.Function{"FIREHOSE": fh},
	}, mhi.Options{Timeout: 2 * time.Second})
	r.powerUp()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.EnterEDL(ctx, bootImage(4096)); err != nil {
		t.Fatalf("EnterEDL: %v", err)
	}
	if st, ee, mission := r.c.State(); st != mhi.StateM0 || ee != mhi.EEFP || !mission {
		t.Fatalf("host after EnterEDL: %s/%s mission %v, want M0/FP in mission mode", st, ee, mission)
	}
	l := newLoop(r, "FIREHOSE", 4096, 8, 8)
	if err := l.send(ctx, []byte(`<?xml version="1.0" ?><data><nop /></data>`)); err != nil {
		t.Fatal(err)
	}
	if got, err := l.recv(5 * time.Second); err != nil || string(got) != string(sim.FirehoseACK) {
		t.Fatalf("FIREHOSE answered %q, %v; want ACK", got, err)
	}
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	}
}

// TestPBLSysErrTwiceReloadsTheImageEachTime: an image that hangs in the
// boot ROM before any EE change, twice (pbl-syserr-twice; Linux main.c
// "Remove duplicate ee check for syserr": a SYS_ERR in PBL after one in
// PBL was ignored, the EE being unchanged). Each SYS_ERR in PBL is handled
// like the first: MHI reset, the image downloaded again; power-up ends in
// mission mode after three downloads, and data moves. Before, power-up
// failed at the first ("waiting for READY: device in SYS_ERR").
func TestPBLSysErrTwiceReloadsTheImageEachTime(t *testing.T) {
	var mu sync.Mutex
	loads := 0
	so := sim.Options{Boot: sim.BootPBL, Quirks: []sim.Quirk{sim.QuirkPBLSysErrTwice}}
	pair := quirkDataPair(profile(t, "qcom-sdx55m"), &so)
	r := newRig(t, "qcom-sdx55m", so, mhi.Options{Firmware: func(string) ([]byte, error) {
		mu.Lock()
		loads++
		mu.Unlock()
		return bootImage(8192), nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.c.PowerUp(ctx); err != nil {
		t.Fatalf("PowerUp: %v", err)
	}
	if st, ee, mission := r.c.State(); st != mhi.StateM0 || ee != mhi.EEAMSS || !mission {
		t.Fatalf("controller in %s/%s (mission %v)", st, ee, mission)
	}
	mu.Lock()
	n := loads
	mu.Unlock()
	if n != 3 {
		t.Errorf("boot image loaded %d times, want 3 (two SYS_ERRs in PBL, each reloaded)", n)
	}
	l := newLoop(r, pair, 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(91, 92)), 5, 4096)
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	}
}

// TestBHIeVectorTableIsLittleEndian: the host writes its BHIe vector table
// little-endian (Linux boot.c "bus: mhi: host: Fix endianness of BHI
// vector table"); a device that reads it strictly so (bhie-le) takes the
// image byte-exact and sees no byte-swapped entry.
func TestBHIeVectorTableIsLittleEndian(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{Boot: sim.BootPBL, Quirks: []sim.Quirk{sim.QuirkBHIeLE}}, mhi.Options{})
	img := bootImage(5*4096 + 7)
	if err := r.c.LoadBHIe(context.Background(), img, mhi.BHIeOptions{SegLen: 4096}); err != nil {
		t.Fatalf("LoadBHIe: %v", err)
	}
	if got := r.m.BHIeImage(); !bytes.Equal(got.Data, img) {
		t.Fatalf("device received %d bytes, want the %d-byte image byte-exact", len(got.Data), len(img))
	}
	if st := r.m.Stats(); st.Violations != 0 {
		t.Fatalf("%d violations: %v", st.Violations, r.m.Violations())
	}
}
