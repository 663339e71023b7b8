package reliability

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestQuirkMatrix: every modem profile, on the emulated modem with its
// own quirks on (slow-ready scaled down), powers up, opens its data
// session (MBIM or QMI; a link on IP_SW0 for the profiles without a
// control pair), moves data both ways, recovers from a SYS_ERR,
// suspends to M3 and resumes (a model without M3 has Suspend refused),
// and moves data again, with no host protocol violation. The table is
// logged (go test ./reliability -run Matrix -v); `mhictl sim quirks`
// prints the same.
func TestQuirkMatrix(t *testing.T) {
	o := QuirkMatrixOptions{}
	if underRace {
		o.Bytes = 16 << 10
	}
	rows, err := RunQuirkMatrix(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteQuirkMatrix(&b, rows, o); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	profiles := mhi.Profiles()
	if len(rows) != len(profiles) {
		t.Fatalf("%d rows for %d profiles", len(rows), len(profiles))
	}
	for i, row := range rows {
		p := profiles[i]
		if row.Profile != p.Name {
			t.Errorf("row %d is %s, want %s", i, row.Profile, p.Name)
		}
		if want := sim.ProfileQuirks(p); !slices.Equal(row.Quirks, want) {
			t.Errorf("%s: the modem played quirks %v, want the profile's %v", p.Name, row.Quirks, want)
		}
		if err := row.Err(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}
