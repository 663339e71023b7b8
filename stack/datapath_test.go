package stack_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// TestOpenDataPathSelection: a forced data pair the profile lacks, one
// whose framing is not known, or a profile without a control pair fails
// Open with an ErrNoDataPath that says so; no other pair is taken.
func TestOpenDataPathSelection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct{ profile, channel, want string }{
		{"qcom-sdx55m", mhi.ChannelIPHW0MBIM, `no channel pair "IP_HW0_MBIM"`},
		{"quectel-rm5xx", mhi.ChannelIPHW0, `no channel pair "IP_HW0"`},
		{"foxconn-sdx55", mhi.ChannelLoopback, `"LOOPBACK" carries no known framing`},
		{"qcom-sa8775p", "", "neither an MBIM nor a QMI channel pair"},
	} {
		_, err := stack.Open(ctx, stack.Options{Profile: tc.profile, Link: link.Options{Channel: tc.channel}})
		if !errors.Is(err, mhi.ErrNoDataPath) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s on %q: %v, want an ErrNoDataPath containing %q", tc.profile, tc.channel, err, tc.want)
		}
	}
}

// TestOpenOnAForcedDataPair: Link.Channel moves the session to another
// pair the profile has (IP_SW0 on the SDX55, raw IP), the emulated
// carrier network with it.
func TestOpenOnAForcedDataPair(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{APN: "internet", Link: link.Options{Channel: mhi.ChannelIPSW0}, Sim: stack.SimOptions{
		Modem: sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	shaThroughTCP(t, ctx, s, 64<<10)
	if _, _, err := s.Controller().ChannelPair(mhi.ChannelIPSW0, mhi.ChannelOptions{}, mhi.ChannelOptions{}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("IP_SW0 is not the link's pair: claiming it gave %v", err)
	}
	if ls := s.Stats().Link; ls == nil || ls.RXPackets == 0 {
		t.Errorf("link stats %+v: nothing received", ls)
	}
}
