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

// TestPowerUpNamesTheWaitThatRanOut: a modem left in its boot ROM with no
// image to load never raises READY. PowerUp must fail with ErrTimeout after
// the profile's ReadyTimeout (or its Timeout when ReadyTimeout is unset)
// and say which wait ran out, how long it waited and which setting bounds
// it (docs/PROTOCOL.md §4.9).
func TestPowerUpNamesTheWaitThatRanOut(t *testing.T) {
	const d = 300 * time.Millisecond
	for _, tt := range []struct {
		name         string
		ready        time.Duration
		wantSetting  string
		wantDuration time.Duration
	}{
		{"ReadyTimeout set", d, "(profile ReadyTimeout)", d},
		{"ReadyTimeout unset", 0, "(profile Timeout, as ReadyTimeout is unset)", d + 100*time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := *profile(t, "qcom-sdx35m") // no FirmwareImage: nothing to load in PBL
			p.Timeout, p.ReadyTimeout = d+100*time.Millisecond, tt.ready
			r := newRigProfile(t, &p, sim.Options{Boot: sim.BootPBL}, mhi.Options{})
			start := time.Now()
			err := r.c.PowerUp(context.Background())
			if !errors.Is(err, mhi.ErrTimeout) {
				t.Fatalf("PowerUp = %v, want ErrTimeout", err)
			}
			want := "waited " + tt.wantDuration.String() + " for READY " + tt.wantSetting
			if !strings.Contains(err.Error(), want) {
				t.Errorf("PowerUp = %q, want it to say %q", err, want)
			}
			if el := time.Since(start); el < tt.wantDuration {
				t.Errorf("PowerUp gave up after %v, before the %v bound", el, tt.wantDuration)
			}
			if st, ee := r.m.State(); st == mhi.StateReady || ee != mhi.EEPBL {
				t.Errorf("device in %s/%s, want it still in PBL, not READY", st, ee)
			}
		})
	}
}

// TestStateWaitNamesOptionsTimeout: a wait bounded by the state timeout
// names Options.Timeout when the caller set it (here the MHI reset of a
// device that ignores MHICTRL).
func TestStateWaitNamesOptionsTimeout(t *testing.T) {
	r := newRig(t, "cinterion-mv31", sim.Options{}, mhi.Options{Timeout: 200 * time.Millisecond, NoRecovery: true})
	r.powerUp()
	if err := r.m.Hang(); err != nil {
		t.Fatal(err)
	}
	err := r.c.PowerDown(context.Background())
	want := "waited 200ms for MHICTRL.RESET to clear (Options.Timeout)"
	if !errors.Is(err, mhi.ErrTimeout) || !strings.Contains(err.Error(), want) {
		t.Fatalf("PowerDown of a hung modem = %v, want ErrTimeout saying %q", err, want)
	}
}
