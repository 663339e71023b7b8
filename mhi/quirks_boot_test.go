package mhi_test

import (
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
// pm.c "Process execution environment changes serially"), while a client
// sets up the SBL's SAHARA channels the moment it sees the SBL, as Linux
// creates the SBL's channel devices at the SBL transition. The host takes
// the EE changes in order: power-up ends in mission mode (EE AMSS, read
// from BHI_EXECENV), SAHARA is down (its Start failed with ErrState, or it
// was taken down host-side at the mission-mode transition), LOOPBACK
// moves data, and the strict modem saw no violation.
func TestEEBackToBackEndsInMissionModeWithTheRightChannels(t *testing.T) {
	for i := range 5 {
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
		// The SBL client: start SAHARA as soon as the host is in the
		// SBL; stop trying once it is in mission mode.
		var wg sync.WaitGroup
		var sawSBL bool
		var startErr error
		wg.Go(func() {
			for ctx.Err() == nil {
				_, ee, mission := r.c.State()
				if mission {
					return
				}
				if ee != mhi.EESBL {
					time.Sleep(50 * time.Microsecond)
					continue
				}
				sawSBL = true
				if startErr = ul.Start(ctx); startErr == nil {
					startErr = dl.Start(ctx)
				}
				return
			}
		})
		if err := r.c.PowerUp(ctx); err != nil {
			t.Fatalf("run %d: PowerUp: %v", i, err)
		}
		wg.Wait()
		if st, ee, mission := r.c.State(); st != mhi.StateM0 || ee != mhi.EEAMSS || !mission {
			t.Fatalf("run %d: controller in %s/%s (mission %v) after power-up", i, st, ee, mission)
		}
		if startErr != nil && !errors.Is(startErr, mhi.ErrState) {
			t.Errorf("run %d: SAHARA Start racing the AMSS event = %v, want nil or ErrState", i, startErr)
		}
		if err := ul.Start(ctx); !errors.Is(err, mhi.ErrState) {
			t.Errorf("run %d: starting SAHARA in AMSS = %v, want ErrState", i, err)
		}
		l := newLoop(r, "LOOPBACK", 4096, 8, 8)
		l.exchange(t, rand.New(rand.NewPCG(81, uint64(i))), 5, 4096)
		if st := r.m.Stats(); st.Violations != 0 {
			t.Fatalf("run %d: %d violations: %v", i, st.Violations, r.m.Violations())
		}
		cancel()
		t.Logf("run %d: the SBL client saw the SBL: %v, its Start: %v", i, sawSBL, startErr)
	}
}
