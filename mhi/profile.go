package mhi

import (
	"fmt"
	"time"
)

// Profile describes one modem family's MHI configuration, as Linux's
// mhi_pci_generic knows it (docs/PROTOCOL.md §6): PCI IDs, channels, event
// rings, MRU and timeouts. The host engine and the emulated modem both
// read it; nothing else about a modem is hard-coded.
type Profile struct {
	Name        string
	Description string
	// IDs match in order; entries with subsystem IDs precede generic ones
	// in the table, so Match's first hit is the right one.
	IDs        []PCIID
	Channels   []ChannelConfig
	EventRings []EventRingConfig
	// MRU is the receive buffer size for data channels (0: not set,
	// clients choose: mhi_wwan_mbim uses 3500).
	MRU int
	// Timeout (pci_generic timeout_ms) bounds every wait of the host
	// that is not a power-up wait: MHICTRL.RESET clearing after the host
	// set it, a BHI or BHIe transfer, EE EDL after the SoC reset, M3 on
	// suspend, M0 on resume, each command's completion.
	// Options.Timeout overrides it. docs/PROTOCOL.md §4.9 lists the waits.
	Timeout time.Duration
	// ReadyTimeout (pci_generic ready_timeout_ms, newer kernels) bounds
	// the power-up waits, which some modems need longer for: READY (at
	// power-up, after the reset of a device found running, after the
	// power-down reset), EE SBL in a full-boot-chain boot, and mission
	// mode with M0. 0: Timeout (the profile's; Options.Timeout does not
	// shorten them). ReadyWait returns the bound in force.
	ReadyTimeout time.Duration
	// FirmwareImage is the BHI image loaded in PBL ("" if none), and
	// EDLImage the flash programmer loaded in EDL; both relative to the
	// firmware directory.
	FirmwareImage, EDLImage string
	// SidebandWake: the wake doorbell is never written (GPIO wake).
	SidebandWake bool
	// EDLTrigger: EDL can be forced with the doorbell-91 cookie and a
	// SoC reset.
	EDLTrigger bool
	// NoM3: the device does not support M3 (Linux pci_generic leaves
	// runtime PM off for it); Suspend refuses without writing MHICTRL.
	NoM3 bool
	// ResetOnRemove: an MHI reset in mission mode does not restart the
	// device's firmware, and a host that finds it so cannot power it up
	// again; PowerDown ends with a SoC reset (Linux pci_generic
	// reset_on_remove: "bus: mhi: host: pci_generic: Reset QDU100 while
	// the MHI driver is removed").
	ResetOnRemove bool
	// MBIMSessionOffset is added to the MBIM session ID in the NDPs of
	// the IP_HW0_MBIM pair: MBIM session n (MBIM_CID_CONNECT's
	// SessionId) travels with NDP session n+offset. SDX72/SDX75-based
	// Foxconn modems map MBIM sessions to mux IDs 112 and up (0x70-0x8F)
	// and take 112 (Linux drivers/net/wwan/mhi_wwan_mbim.c: "net: wwan:
	// mhi: make default data link id configurable", "net: wwan:
	// mhi_wwan_mbim: use correct mux_id for multiplexing", "net: wwan:
	// mhi: Add network support for Foxconn T99W760"; Linux matches the
	// controller's name, here the profile carries it). 0 elsewhere.
	MBIMSessionOffset uint8
	// NTBSequenceGlitches: the firmware's DL NTBs do not number
	// wSequence one by one: it restarts at 0 or repeats mid-stream
	// (the X55 of a ThinkPad X13s: Linux mhi_wwan_mbim.c, "net: wwan:
	// mhi_wwan_mbim: Silence sequence number glitch errors"). The host
	// counts and ignores it on every profile; the emulated carrier plays
	// it on these (simnet.ProfileNTBQuirks).
	NTBSequenceGlitches bool
	// RDDMSize is how many bytes of RAM dump the host collects over BHIe
	// when the firmware crashes into EE RDDM (Linux
	// mhi_controller.rddm_size); 0: DefaultRDDMSize. Linux pci_generic
	// sets none (it does not collect dumps); set it to what the
	// modem's firmware dumps.
	RDDMSize int
	// FCCLock is the FCC lock the profile's laptop SKUs ship with
	// (ModemManager's fcc-unlock.d list; zero: none).
	FCCLock FCCLock
}

// DefaultRDDMSize is the RDDM dump size of a profile that sets none
// (0x420000, the RDDM_DUMP_SIZE of Linux drivers/net/wireless/ath/ath11k,
// an MHI device of the same family).
const DefaultRDDMSize = 0x420000

// CrashDumpSize returns RDDMSize, or DefaultRDDMSize when unset.
func (p *Profile) CrashDumpSize() int {
	if p.RDDMSize > 0 {
		return p.RDDMSize
	}
	return DefaultRDDMSize
}

// PCIID is a vendor:device pair with optional subsystem IDs.
type PCIID struct {
	Vendor, Device uint16
	// SubVendor/SubDevice are matched only when MatchSub is set;
	// AnySubDevice matches any subsystem device of SubVendor.
	SubVendor, SubDevice uint16
	MatchSub             bool
	AnySubDevice         bool
}

func (id PCIID) String() string {
	switch {
	case !id.MatchSub:
		return fmt.Sprintf("%04x:%04x", id.Vendor, id.Device)
	case id.AnySubDevice:
		return fmt.Sprintf("%04x:%04x [%04x:any]", id.Vendor, id.Device, id.SubVendor)
	}
	return fmt.Sprintf("%04x:%04x [%04x:%04x]", id.Vendor, id.Device, id.SubVendor, id.SubDevice)
}

// Matches reports whether a function with these IDs matches id.
func (id PCIID) Matches(vendor, device, subVendor, subDevice uint16) bool {
	if id.Vendor != vendor || id.Device != device {
		return false
	}
	if !id.MatchSub {
		return true
	}
	return id.SubVendor == subVendor && (id.AnySubDevice || id.SubDevice == subDevice)
}

// ChannelConfig is one channel of a profile. Channels come in pairs: UL on
// the even number, DL on the odd one, sharing a name.
type ChannelConfig struct {
	Num       int
	Name      string // ChannelIPHW0MBIM, ChannelMBIM, ChannelLoopback, …
	Dir       ChanType
	Elements  int // TRE ring elements (a power of two)
	EventRing int
	EE        EEMask
	// Burst: BRSTMODE enabled (pci_generic HW channels); the device polls
	// the context wp and sends DB_MODE when it stops.
	Burst bool
	// AutoQueue: the host fills DL buffers itself (pci_generic
	// DL_AUTOQUEUE); informational for clients.
	AutoQueue bool
}

// EventRingKind says what an event ring carries (host bookkeeping only).
type EventRingKind uint8

const (
	EventRingCtrl   EventRingKind = iota // state, EE and command events
	EventRingData                        // moderated software data ring
	EventRingSWData                      // unmoderated software data ring
	EventRingHWData                      // hardware ring dedicated to one channel
)

// EventRingConfig is one event ring of a profile.
type EventRingConfig struct {
	Kind     EventRingKind
	Elements int
	// IntModMs is the interrupt moderation time in ms (INTMODT); TREs of
	// channels completing here carry BEI when it is non-zero.
	IntModMs int
	// Channel is the dedicated channel of a hardware ring, -1 otherwise.
	Channel int
}

// Hardware reports whether the ring is a hardware (per-channel) ring, seeded
// only at the mission-mode transition.
func (e EventRingConfig) Hardware() bool { return e.Kind == EventRingHWData }

// Channel returns the channel config with number n.
func (p *Profile) Channel(n int) (ChannelConfig, bool) {
	for _, c := range p.Channels {
		if c.Num == n {
			return c, true
		}
	}
	return ChannelConfig{}, false
}

// ChannelPair returns the UL and DL channels named name.
func (p *Profile) ChannelPair(name string) (ul, dl ChannelConfig, ok bool) {
	var hasUL, hasDL bool
	for _, c := range p.Channels {
		if c.Name != name {
			continue
		}
		if c.Dir == ChanTypeOutbound && !hasUL {
			ul, hasUL = c, true
		} else if c.Dir == ChanTypeInbound && !hasDL {
			dl, hasDL = c, true
		}
	}
	return ul, dl, hasUL && hasDL
}

// ATChannel names the pair that carries AT commands: DUN, or DUN2 on a
// profile with only that; ok is false when the modem has neither.
func (p *Profile) ATChannel() (name string, ok bool) {
	for _, n := range []string{ChannelDUN, ChannelDUN2} {
		if _, _, ok := p.ChannelPair(n); ok {
			return n, true
		}
	}
	return "", false
}

// NMEAChannel names the pair that streams NMEA sentences; ok is false
// when the modem has none.
func (p *Profile) NMEAChannel() (name string, ok bool) {
	_, _, ok = p.ChannelPair(ChannelNMEA)
	return ChannelNMEA, ok
}

// ReadyWait returns the bound of the power-up waits: ReadyTimeout, or
// Timeout when it is unset.
func (p *Profile) ReadyWait() time.Duration { return p.readyBound().d }

// readyBound is ReadyWait with the field it comes from, for the error of
// a wait that runs out.
func (p *Profile) readyBound() bound {
	if p.ReadyTimeout > 0 {
		return bound{d: p.ReadyTimeout, from: "profile ReadyTimeout", power: true}
	}
	return bound{d: p.Timeout, from: "profile Timeout, as ReadyTimeout is unset", power: true}
}

// Validate checks the profile is self-consistent: channel pairs, event
// ring references, power-of-two ring sizes.
func (p *Profile) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("mhi: profile without a name")
	}
	if len(p.EventRings) == 0 || p.EventRings[0].Kind != EventRingCtrl {
		return fmt.Errorf("mhi: profile %s: event ring 0 must be the control ring", p.Name)
	}
	if p.Timeout <= 0 {
		return fmt.Errorf("mhi: profile %s: no timeout", p.Name)
	}
	if p.RDDMSize < 0 || p.RDDMSize > 1<<30 {
		return fmt.Errorf("mhi: profile %s: RDDM size %d outside 0..1 GiB", p.Name, p.RDDMSize)
	}
	seen := map[int]bool{}
	for _, c := range p.Channels {
		if c.Num < 0 || c.Num >= MaxChannels || seen[c.Num] {
			return fmt.Errorf("mhi: profile %s: bad or duplicate channel %d", p.Name, c.Num)
		}
		seen[c.Num] = true
		wantDir := ChanTypeOutbound
		if c.Num%2 == 1 {
			wantDir = ChanTypeInbound
		}
		if c.Dir != wantDir {
			return fmt.Errorf("mhi: profile %s: channel %d %s: UL must be even, DL odd", p.Name, c.Num, c.Name)
		}
		if c.Elements < 2 || c.Elements&(c.Elements-1) != 0 {
			return fmt.Errorf("mhi: profile %s: channel %d: %d elements is not a power of two", p.Name, c.Num, c.Elements)
		}
		if c.EventRing < 0 || c.EventRing >= len(p.EventRings) {
			return fmt.Errorf("mhi: profile %s: channel %d: event ring %d does not exist", p.Name, c.Num, c.EventRing)
		}
		if c.EE == 0 {
			return fmt.Errorf("mhi: profile %s: channel %d: empty EE mask", p.Name, c.Num)
		}
	}
	for _, c := range p.Channels {
		peer := c.Num ^ 1
		pc, ok := p.Channel(peer)
		if !ok || pc.Name != c.Name {
			return fmt.Errorf("mhi: profile %s: channel %d %s has no pair", p.Name, c.Num, c.Name)
		}
	}
	for i, e := range p.EventRings {
		if e.Elements < 2 || e.Elements&(e.Elements-1) != 0 {
			return fmt.Errorf("mhi: profile %s: event ring %d: %d elements is not a power of two", p.Name, i, e.Elements)
		}
		if e.Hardware() {
			c, ok := p.Channel(e.Channel)
			if !ok || c.EventRing != i {
				return fmt.Errorf("mhi: profile %s: hardware event ring %d: dedicated channel %d does not complete on it", p.Name, i, e.Channel)
			}
		}
	}
	return nil
}

// Lookup returns the profile named name.
func Lookup(name string) (*Profile, bool) {
	for _, p := range profiles {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// Match returns the first profile whose IDs match a function, honouring
// the table order (subsystem-specific entries first).
func Match(vendor, device, subVendor, subDevice uint16) (*Profile, bool) {
	for _, p := range profiles {
		for _, id := range p.IDs {
			if id.Matches(vendor, device, subVendor, subDevice) {
				return p, true
			}
		}
	}
	return nil, false
}

// Profiles returns every known profile in matching order.
func Profiles() []*Profile {
	out := make([]*Profile, len(profiles))
	copy(out, profiles)
	return out
}

// Channel table helpers, named after pci_generic's config macros.
const (
	eeAMSS = EEMask(1 << EEAMSS)
	eeSBL  = EEMask(1 << EESBL)
	eeFP   = EEMask(1 << EEFP)
)

// pair returns the UL/DL channel pair (num, num+1) in environments ee.
func pair(num int, name string, elems, ulER, dlER int, ee EEMask) []ChannelConfig {
	return []ChannelConfig{
		{Num: num, Name: name, Dir: ChanTypeOutbound, Elements: elems, EventRing: ulER, EE: ee},
		{Num: num + 1, Name: name, Dir: ChanTypeInbound, Elements: elems, EventRing: dlER, EE: ee},
	}
}

// hwPair is a burst-mode hardware channel pair (HW_UL/HW_DL).
func hwPair(num int, name string, elems, ulER, dlER int) []ChannelConfig {
	c := pair(num, name, elems, ulER, dlER, eeAMSS)
	c[0].Burst, c[1].Burst = true, true
	return c
}

func channels(groups ...[]ChannelConfig) []ChannelConfig {
	var out []ChannelConfig
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func ctrlRing(n int) EventRingConfig {
	return EventRingConfig{Kind: EventRingCtrl, Elements: n, Channel: -1}
}
func dataRing(n int) EventRingConfig {
	return EventRingConfig{Kind: EventRingData, Elements: n, IntModMs: 5, Channel: -1}
}
func swDataRing(n int) EventRingConfig {
	return EventRingConfig{Kind: EventRingSWData, Elements: n, Channel: -1}
}
func hwRing(n, ch int) EventRingConfig {
	return EventRingConfig{Kind: EventRingHWData, Elements: n, IntModMs: 1, Channel: ch}
}
