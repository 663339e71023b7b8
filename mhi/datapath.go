package mhi

import (
	"errors"
	"fmt"
	"strings"
)

// Names of the channel pairs the host binds by name, as Linux does
// (docs/PROTOCOL.md §6, §7): the data pairs mhi_net and mhi_wwan_mbim
// turn into network interfaces, the control pairs of a data session, and
// the loopback pair of the self-test. Numbers differ between vendors;
// names do not.
const (
	// ChannelIPHW0 is mhi_net's hardware data pair (mhi_hwip%d): raw
	// IP, or QMAP when a QMI session negotiated it.
	ChannelIPHW0 = "IP_HW0"
	// ChannelIPHW0MBIM is mhi_wwan_mbim's data pair (wwan%d): MBIM
	// NTB16 (docs/PROTOCOL.md §7.2).
	ChannelIPHW0MBIM = "IP_HW0_MBIM"
	// ChannelIPSW0 is mhi_net's software data pair (mhi_swip%d): raw
	// IP, or QMAP under a QMI session.
	ChannelIPSW0 = "IP_SW0"
	// ChannelMBIM and ChannelQMI are the control pairs of a data
	// session (mhi_wwan_ctrl's wwan%dmbim%d and wwan%dqmi%d).
	ChannelMBIM = "MBIM"
	ChannelQMI  = "QMI"
	// ChannelLoopback is the pair the modem loops back (mhictl
	// selftest).
	ChannelLoopback = "LOOPBACK"
	// ChannelDUN and ChannelDUN2 carry AT commands (mhi_wwan_ctrl's
	// WWAN AT ports, wwan%dat%d); ChannelNMEA streams the GNSS
	// receiver's NMEA 0183 sentences.
	ChannelDUN  = "DUN"
	ChannelDUN2 = "DUN2"
	ChannelNMEA = "NMEA"
)

// Control protocols of a data session (DataPath.Control).
const (
	ControlMBIM = "mbim"
	ControlQMI  = "qmi"
)

// dataChannels are the data pairs whose framing is known, in the order
// Profile.DataPath prefers them when none is forced.
var dataChannels = [...]string{ChannelIPHW0, ChannelIPHW0MBIM, ChannelIPSW0}

// DataChannels returns the data channel pairs whose framing is known
// (ChannelFraming), in the order Profile.DataPath prefers them: IP_HW0,
// IP_HW0_MBIM, IP_SW0.
func DataChannels() []string { return dataChannels[:] }

// FramingKind is what a data pair carries. The mhi layer names it; link
// (link.FramingFor) maps a DataPath to the framing that encodes it.
type FramingKind uint8

const (
	// FramingUnknown: no known framing (the zero value; never in a
	// DataPath Profile.DataPath returns).
	FramingUnknown FramingKind = iota
	// FramingRawIP: one IP packet per transfer (mhi_net).
	FramingRawIP
	// FramingNTB: MBIM NTB16 (mhi_wwan_mbim).
	FramingNTB
	// FramingQMAP: QMAP frames, of the version and with the UL
	// aggregation limits a QMI session agrees to in WDA Set Data Format
	// (rmnet over mhi_net; docs/FRAMING.md).
	FramingQMAP
)

func (k FramingKind) String() string {
	switch k {
	case FramingUnknown:
		return "unknown"
	case FramingRawIP:
		return "raw IP"
	case FramingNTB:
		return "MBIM NTB"
	case FramingQMAP:
		return "QMAP"
	}
	return fmt.Sprintf("FramingKind(%d)", uint8(k))
}

// ErrNoDataPath is wrapped by every error of Profile.DataPath and
// ChannelFraming: the profile lacks the pair asked for, or the pair's
// framing is not known.
var ErrNoDataPath = errors.New("mhi: no data path")

// ChannelFraming returns what the data pair named name carries on its
// own, without a QMI session: raw IP on IP_HW0 and IP_SW0, MBIM NTBs on
// IP_HW0_MBIM. Any other name is an error wrapping ErrNoDataPath.
func ChannelFraming(name string) (FramingKind, error) {
	switch name {
	case ChannelIPHW0, ChannelIPSW0:
		return FramingRawIP, nil
	case ChannelIPHW0MBIM:
		return FramingNTB, nil
	}
	return FramingUnknown, fmt.Errorf("%w: channel pair %q carries no known framing; the data pairs are %s",
		ErrNoDataPath, name, strings.Join(dataChannels[:], ", "))
}

// DataPath is how a data session runs on a modem: its control protocol,
// its data channel pair and what that pair carries.
type DataPath struct {
	// Control is ControlMBIM or ControlQMI, or "" when the profile has
	// neither control pair (no data session can run; the data pair can
	// still move data, e.g. for a self-test).
	Control string
	// Channel is the data channel pair's name.
	Channel string
	// Framing is what Channel carries under Control.
	Framing FramingKind
	// MBIMSessionOffset is the profile's (Profile.MBIMSessionOffset)
	// when Framing is FramingNTB, else 0.
	MBIMSessionOffset uint8
}

// DataPath decides the data path of a session on p, given a forced data
// pair (channel, "" for the default) and a forced control protocol
// (control, "" for the default):
//
//   - Control: the forced one, which p must have the pair of (MBIM or
//     QMI); else MBIM if p has an MBIM pair, else QMI if it has a QMI
//     pair, else "".
//   - Channel: the forced one, which p must have and whose framing must
//     be known (ChannelFraming); else the first of IP_HW0, IP_HW0_MBIM,
//     IP_SW0 that p has. A profile with none of them has no data path.
//   - Framing: ChannelFraming's, except that a raw-IP pair (IP_HW0,
//     IP_SW0) carries QMAP under QMI (rmnet over mhi_net, as
//     ModemManager sets it up); IP_HW0_MBIM carries NTBs under either.
//
// Every error wraps ErrNoDataPath and names the profile; a pair p lacks
// or does not know is never replaced by another.
func (p *Profile) DataPath(channel, control string) (DataPath, error) {
	var dp DataPath
	switch control {
	case "":
		switch {
		case p.hasPair(ChannelMBIM):
			dp.Control = ControlMBIM
		case p.hasPair(ChannelQMI):
			dp.Control = ControlQMI
		}
	case ControlMBIM, ControlQMI:
		if pair := strings.ToUpper(control); !p.hasPair(pair) {
			return DataPath{}, fmt.Errorf("%w: profile %s has no channel pair %q for control %q", ErrNoDataPath, p.Name, pair, control)
		}
		dp.Control = control
	default:
		return DataPath{}, fmt.Errorf("%w: unknown control protocol %q (want %s or %s)", ErrNoDataPath, control, ControlMBIM, ControlQMI)
	}
	if channel == "" {
		for _, n := range dataChannels {
			if p.hasPair(n) {
				channel = n
				break
			}
		}
		if channel == "" {
			return DataPath{}, fmt.Errorf("%w: profile %s has no data channel pair (%s)", ErrNoDataPath, p.Name, strings.Join(dataChannels[:], ", "))
		}
	} else if !p.hasPair(channel) {
		return DataPath{}, fmt.Errorf("%w: profile %s has no channel pair %q", ErrNoDataPath, p.Name, channel)
	}
	pp, err := p.PairPath(channel)
	if err != nil {
		return DataPath{}, err
	}
	pp.Control = dp.Control
	if pp.Framing == FramingRawIP && dp.Control == ControlQMI {
		pp.Framing = FramingQMAP
	}
	return pp, nil
}

// PairPath is the data path of the pair named channel on its own, with
// no control protocol (Control ""): what the pair carries when nothing
// negotiates another framing (ChannelFraming), with p's
// MBIMSessionOffset on an NTB pair. The pair need not be in p. An
// unknown pair is an error wrapping ErrNoDataPath.
func (p *Profile) PairPath(channel string) (DataPath, error) {
	k, err := ChannelFraming(channel)
	if err != nil {
		return DataPath{}, fmt.Errorf("%w (profile %s)", err, p.Name)
	}
	dp := DataPath{Channel: channel, Framing: k}
	if k == FramingNTB {
		dp.MBIMSessionOffset = p.MBIMSessionOffset
	}
	return dp, nil
}

// hasPair reports whether p has both channels of the pair named name.
func (p *Profile) hasPair(name string) bool {
	_, _, ok := p.ChannelPair(name)
	return ok
}
