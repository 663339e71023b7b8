package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// TestQuirkRegistry: every quirk is described and sourced, names parse,
// unknown ones are refused, and the set keeps one bit per quirk.
func TestQuirkRegistry(t *testing.T) {
	for i, q := range Registry() {
		if q.Description == "" || !strings.Contains(q.Source, "drivers/bus/mhi/host/") || q.ModelsText == "" {
			t.Errorf("quirk %s: description %q, source %q, models %q", q.Name, q.Description, q.Source, q.ModelsText)
		}
		if quirkBit(q.Name) != 1<<i {
			t.Errorf("quirk %s has bit %#x, want %#x", q.Name, quirkBit(q.Name), 1<<i)
		}
	}
	qs, err := ParseQuirks("slow-ready, one-msi")
	if err != nil || !slices.Equal(qs, []Quirk{QuirkSlowReady, QuirkOneMSI}) {
		t.Errorf("ParseQuirks = %v, %v", qs, err)
	}
	if _, err := ParseQuirks("slow-ready,bogus"); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("ParseQuirks(bogus) = %v, want an error naming it", err)
	}
	p, _ := mhi.Lookup("qcom-sdx55m")
	if _, err := New(p, Options{Quirks: []Quirk{"bogus"}}); err == nil {
		t.Error("New accepted an unknown quirk")
	}
}

// TestProfileQuirksAreOnByDefault: a modem plays its profile's quirks
// unless NoProfileQuirks, and Options.Quirks adds to them.
func TestProfileQuirksAreOnByDefault(t *testing.T) {
	p, _ := mhi.Lookup("quectel-em1xx") // slow-ready and no-inband-wake
	want := []Quirk{QuirkSlowReady, QuirkNoInbandWake}
	if got := ProfileQuirks(p); !slices.Equal(got, want) {
		t.Fatalf("ProfileQuirks(%s) = %v, want %v", p.Name, got, want)
	}
	for _, tt := range []struct {
		opts Options
		want []Quirk
	}{
		{Options{}, want},
		{Options{NoProfileQuirks: true}, nil},
		{Options{NoProfileQuirks: true, Quirks: []Quirk{QuirkOneMSI}}, []Quirk{QuirkOneMSI}},
		{Options{Quirks: []Quirk{QuirkOneMSI}}, []Quirk{QuirkSlowReady, QuirkNoInbandWake, QuirkOneMSI}},
	} {
		m, err := New(p, tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Quirks(); !slices.Equal(got, tt.want) {
			t.Errorf("%+v: quirks %v, want %v", tt.opts, got, tt.want)
		}
		if n := m.Identity().MSIVectors; (n == 1) != slices.Contains(tt.want, QuirkOneMSI) {
			t.Errorf("%+v: %d MSI vectors", tt.opts, n)
		}
	}
}
