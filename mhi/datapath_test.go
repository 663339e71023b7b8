package mhi_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// TestDataPathOfEveryProfile: the default data path of every profile, and
// the one under a forced QMI control, follow the rules: IP_HW0 carries
// raw IP, or QMAP under QMI; a profile with only IP_HW0_MBIM carries NTBs
// (under either control); one with only IP_SW0 carries raw IP; the
// control is MBIM when the profile has that pair, else QMI, else none;
// an NTB path carries the profile's MBIM session offset.
func TestDataPathOfEveryProfile(t *testing.T) {
	has := func(p *mhi.Profile, name string) bool { _, _, ok := p.ChannelPair(name); return ok }
	seen := map[mhi.FramingKind]bool{}
	for _, p := range mhi.Profiles() {
		for _, force := range []string{"", mhi.ControlQMI} {
			var want mhi.DataPath
			switch {
			case force != "":
				want.Control = force
			case has(p, "MBIM"):
				want.Control = mhi.ControlMBIM
			case has(p, "QMI"):
				want.Control = mhi.ControlQMI
			}
			qmi := want.Control == mhi.ControlQMI
			rules := []struct {
				pair        string
				raw, framed mhi.FramingKind // without, with a QMI session
			}{
				{"IP_HW0", mhi.FramingRawIP, mhi.FramingQMAP},
				{"IP_HW0_MBIM", mhi.FramingNTB, mhi.FramingNTB},
				{"IP_SW0", mhi.FramingRawIP, mhi.FramingQMAP},
			}
			for _, r := range rules {
				if has(p, r.pair) {
					want.Channel, want.Framing = r.pair, r.raw
					if qmi {
						want.Framing = r.framed
					}
					if want.Framing == mhi.FramingNTB {
						want.MBIMSessionOffset = p.MBIMSessionOffset
					}
					break
				}
			}
			got, err := p.DataPath("", force)
			switch {
			case force != "" && !has(p, "QMI"):
				if !errors.Is(err, mhi.ErrNoDataPath) || !strings.Contains(err.Error(), `no channel pair "QMI"`) {
					t.Errorf("%s: forced QMI without a QMI pair: %+v, %v", p.Name, got, err)
				}
			case want.Channel == "":
				if !errors.Is(err, mhi.ErrNoDataPath) {
					t.Errorf("%s has no data pair: %+v, %v", p.Name, got, err)
				}
			case err != nil || got != want:
				t.Errorf("%s (control %q): %+v, %v; want %+v", p.Name, force, got, err, want)
			default:
				seen[got.Framing] = true
			}
		}
	}
	// The table holds each kind: the rules above were exercised.
	for _, k := range []mhi.FramingKind{mhi.FramingRawIP, mhi.FramingNTB, mhi.FramingQMAP} {
		if !seen[k] {
			t.Errorf("no profile's data path carries %v", k)
		}
	}
}

// TestDataPathForced: a forced pair or control the profile has is taken;
// one it lacks, a pair whose framing is not known, or an unknown control
// fails with ErrNoDataPath, naming what is missing, and never falls back
// to another pair.
func TestDataPathForced(t *testing.T) {
	for _, tc := range []struct {
		profile, channel, control string
		want                      mhi.DataPath
		err                       string
	}{
		{"qcom-sdx55m", "IP_SW0", "", mhi.DataPath{Control: "mbim", Channel: "IP_SW0", Framing: mhi.FramingRawIP}, ""},
		{"qcom-sdx55m", "IP_SW0", "qmi", mhi.DataPath{Control: "qmi", Channel: "IP_SW0", Framing: mhi.FramingQMAP}, ""},
		{"qcom-sdx55m", "IP_HW0", "mbim", mhi.DataPath{Control: "mbim", Channel: "IP_HW0", Framing: mhi.FramingRawIP}, ""},
		{"sierra-em919x", "", "qmi", mhi.DataPath{Control: "qmi", Channel: "IP_HW0", Framing: mhi.FramingQMAP}, ""},
		{"telit-fn980-hwv1", "", "", mhi.DataPath{Control: "qmi", Channel: "IP_HW0", Framing: mhi.FramingQMAP}, ""},
		{"quectel-rm5xx", "IP_HW0_MBIM", "", mhi.DataPath{Control: "mbim", Channel: "IP_HW0_MBIM", Framing: mhi.FramingNTB}, ""},
		{"qcom-sa8775p", "", "", mhi.DataPath{Channel: "IP_SW0", Framing: mhi.FramingRawIP}, ""},
		{"qcom-sdx55m", "IP_HW0_MBIM", "", mhi.DataPath{}, `profile qcom-sdx55m has no channel pair "IP_HW0_MBIM"`},
		{"quectel-rm5xx", "IP_HW0", "", mhi.DataPath{}, `profile quectel-rm5xx has no channel pair "IP_HW0"`},
		{"quectel-rm5xx", "", "qmi", mhi.DataPath{}, `no channel pair "QMI" for control "qmi"`},
		{"telit-fn980-hwv1", "", "mbim", mhi.DataPath{}, `no channel pair "MBIM" for control "mbim"`},
		{"qcom-sdx55m", "", "at", mhi.DataPath{}, `unknown control protocol "at"`},
		{"foxconn-sdx55", "LOOPBACK", "", mhi.DataPath{}, `channel pair "LOOPBACK" carries no known framing`},
		{"qcom-qdu100", "IP_ETH0", "", mhi.DataPath{}, `channel pair "IP_ETH0" carries no known framing`},
		{"qcom-sdx55m", "IP_HW1", "", mhi.DataPath{}, `no channel pair "IP_HW1"`},
	} {
		p, ok := mhi.Lookup(tc.profile)
		if !ok {
			t.Fatalf("no profile %s", tc.profile)
		}
		got, err := p.DataPath(tc.channel, tc.control)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("%s %q/%q: %+v, %v; want %+v", tc.profile, tc.channel, tc.control, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, mhi.ErrNoDataPath) || !strings.Contains(err.Error(), tc.err) || got != (mhi.DataPath{}) {
			t.Errorf("%s %q/%q: %+v, %v; want an ErrNoDataPath containing %q", tc.profile, tc.channel, tc.control, got, err, tc.err)
		}
	}
}

// TestChannelFramingOfAnUnknownPair: a data pair name the mhi layer does
// not know (a new one, a misspelt one) is an error, not raw IP.
func TestChannelFramingOfAnUnknownPair(t *testing.T) {
	for _, name := range []string{"IP_HW1", "IP_ETH0", "ip_hw0", "", "MBIM"} {
		if k, err := mhi.ChannelFraming(name); !errors.Is(err, mhi.ErrNoDataPath) || k != mhi.FramingUnknown {
			t.Errorf("ChannelFraming(%q) = %v, %v; want FramingUnknown and ErrNoDataPath", name, k, err)
		}
	}
	for _, name := range mhi.DataChannels() {
		if k, err := mhi.ChannelFraming(name); err != nil || k == mhi.FramingUnknown {
			t.Errorf("ChannelFraming(%q) = %v, %v", name, k, err)
		}
	}
}
