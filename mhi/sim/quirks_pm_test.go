package sim

import (
	"slices"
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// TestNoM3IsQDU100sProfileQuirk: the no-m3 quirk follows from
// Profile.NoM3, which QDU100 alone sets; d3cold and syserr-at-powerup
// belong to no model.
func TestNoM3IsQDU100sProfileQuirk(t *testing.T) {
	for _, p := range mhi.Profiles() {
		qs := ProfileQuirks(p)
		if got, want := slices.Contains(qs, QuirkNoM3), p.Name == "qcom-qdu100"; got != want {
			t.Errorf("%s: no-m3 %v, want %v", p.Name, got, want)
		}
		if slices.Contains(qs, QuirkD3Cold) || slices.Contains(qs, QuirkSysErrAtPowerUp) {
			t.Errorf("%s: profile quirks %v name a platform quirk", p.Name, qs)
		}
	}
}
