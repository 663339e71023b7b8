package link

import (
	"fmt"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi"
)

// FramingFor returns the framing that encodes what a data path carries
// (mhi.Profile.DataPath decides it; docs/LINK.md, "Framings"):
// framing.RawIP{} for raw IP, mbim.NTB (one datagram per NTB16, as
// Linux's mhi_wwan_mbim, with the path's MBIM session offset) for MBIM
// NTBs, and qmap.Framing{Version: 5} for QMAP, the version a QMI session
// asks WDA for (the session's answer, its version and UL limits, takes
// its place). Any other kind is an error wrapping mhi.ErrNoDataPath.
func FramingFor(dp mhi.DataPath) (framing.Framing, error) {
	switch dp.Framing {
	case mhi.FramingRawIP:
		return framing.RawIP{}, nil
	case mhi.FramingNTB:
		return mbim.NTB{SessionOffset: dp.MBIMSessionOffset}, nil
	case mhi.FramingQMAP:
		return qmap.Framing{Version: 5}, nil
	}
	return nil, fmt.Errorf("link: %w: no framing for %v", mhi.ErrNoDataPath, dp.Framing)
}

// checkFraming refuses a framing f (nil: raw IP) on the data pair named
// channel that cannot be what the pair carries: raw IP on a pair of MBIM
// NTBs (mhi_wwan_mbim frames everything in NTBs, docs/PROTOCOL.md §7.2:
// raw IP would send garbage to the modem), or no framing at all on a pair
// whose framing mhi does not know (mhi.ChannelFraming), which must be
// named rather than taken for raw IP.
func checkFraming(channel string, f framing.Framing) error {
	k, err := mhi.ChannelFraming(channel)
	_, raw := f.(framing.RawIP)
	switch {
	case err != nil && f == nil:
		return fmt.Errorf("link: %w: set Options.Framing", err)
	case k == mhi.FramingNTB && (f == nil || raw):
		return fmt.Errorf("link: %s carries MBIM NTBs: set Options.Framing to mbim.NTB{}", channel)
	}
	return nil
}
