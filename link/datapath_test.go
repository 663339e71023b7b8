package link_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestFramingForEveryKind: each framing kind a data path can carry maps
// to its framing; the unknown kind, or one mhi adds later without a
// mapping here, is an error, not raw IP.
func TestFramingForEveryKind(t *testing.T) {
	for k, want := range map[mhi.FramingKind]framing.Framing{
		mhi.FramingRawIP: framing.RawIP{},
		mhi.FramingNTB:   mbim.NTB{},
		mhi.FramingQMAP:  qmap.Framing{Version: 5},
	} {
		if f, err := link.FramingFor(mhi.DataPath{Framing: k}); err != nil || f != want {
			t.Errorf("FramingFor(%v) = %#v, %v; want %#v", k, f, err, want)
		}
	}
	for _, k := range []mhi.FramingKind{mhi.FramingUnknown, mhi.FramingQMAP + 1} {
		if f, err := link.FramingFor(mhi.DataPath{Framing: k}); !errors.Is(err, mhi.ErrNoDataPath) || f != nil {
			t.Errorf("FramingFor(%v) = %#v, %v; want an ErrNoDataPath", k, f, err)
		}
	}
	// The MBIM session offset of a data path reaches the framing.
	if f, err := link.FramingFor(mhi.DataPath{Framing: mhi.FramingNTB, MBIMSessionOffset: 112}); err != nil || f != (mbim.NTB{SessionOffset: 112}) {
		t.Errorf("FramingFor(NTB, offset 112) = %#v, %v", f, err)
	}
	// Every profile's data path has a framing.
	for _, p := range mhi.Profiles() {
		dp, err := p.DataPath("", "")
		if err != nil {
			continue // no data pair (mhi's tests check which)
		}
		if _, err := link.FramingFor(dp); err != nil {
			t.Errorf("%s: %+v: %v", p.Name, dp, err)
		}
	}
}

// TestNewRefusesAPairOfUnknownFraming: New takes no framing on a pair
// whose framing mhi does not know for raw IP: it fails naming the pair,
// and raw IP on IP_HW0_MBIM is refused too.
func TestNewRefusesAPairOfUnknownFraming(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}})
	_, err := link.New(t.Context(), r.c, link.Options{Channel: "DIAG"})
	if !errors.Is(err, mhi.ErrNoDataPath) || !strings.Contains(err.Error(), `"DIAG"`) {
		t.Errorf("New on DIAG without a framing: %v; want an ErrNoDataPath naming the pair", err)
	}
	if _, err := link.New(t.Context(), r.c, link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: framing.RawIP{}}); err == nil || !strings.Contains(err.Error(), "mbim.NTB") {
		t.Errorf("New on IP_HW0_MBIM with raw IP: %v", err)
	}
}
