package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mhistack/mhistack/mhi"
)

// Quirks are documented behaviours of real modems (docs/QUIRKS.md) that
// the emulated modem plays when they are on. A model's own quirks follow
// from its profile (ProfileQuirks) and are on by default; Options.Quirks
// adds more, Options.NoProfileQuirks drops the profile's.

// Quirk names one behaviour of the registry (Quirks).
type Quirk string

const (
	// QuirkSlowReady: READY comes up Options.ReadyDelay after power-on
	// or a reset, not at once.
	QuirkSlowReady Quirk = "slow-ready"
	// QuirkNoInbandWake: the firmware has no wake doorbell; a write to
	// channel doorbell 127 wedges it.
	QuirkNoInbandWake Quirk = "no-inband-wake"
	// QuirkOneMSI: the platform grants one MSI vector, shared by BHI and
	// every event ring.
	QuirkOneMSI Quirk = "one-msi"

	// Device-written memory (quirks_memory.go).

	// QuirkStaleERWP: at every EE change the device writes each started
	// event ring context's WP back to the ring base, its value before the
	// host handed the ring over (the SBL flushing its whole context).
	QuirkStaleERWP Quirk = "stale-er-wp"
	// QuirkUnalignedERRP: at every EE change the device stores a data
	// event ring context RP 8 bytes before its true RP (inside the ring,
	// not 16-byte aligned) and raises the ring's MSI.
	QuirkUnalignedERRP Quirk = "unaligned-er-rp"
	// QuirkStrayCompletion: before the event of a non-chained UL TRE the
	// device posts one naming the TRE three slots further on.
	QuirkStrayCompletion Quirk = "stray-completion"
	// QuirkBadOffsets: MHI CHDBOFF reads as an offset 8 bytes before the
	// end of the BAR, leaving no room for the channel doorbells.
	QuirkBadOffsets Quirk = "bad-offsets"
)

// QuirkInfo describes a registered quirk.
type QuirkInfo struct {
	Name Quirk
	// Description says what the emulated modem does, in one line.
	Description string
	// Source is the public record of the behaviour: a Linux file and
	// commit subject.
	Source string
	// Models reports whether a profile's model has the quirk (nil: no
	// model does by itself; a platform or test property).
	Models func(*mhi.Profile) bool
	// ModelsText says in words which models have it.
	ModelsText string
}

var quirkRegistry = []QuirkInfo{
	{
		Name:        QuirkSlowReady,
		Description: "MHISTATUS.READY is set only Options.ReadyDelay after power-on or a reset",
		Source:      `drivers/bus/mhi/host/pci_generic.c, init.c: "bus: mhi: host: Add a separate timeout parameter for waiting ready"`,
		// The models Linux gives a READY budget of its own
		// (ready_timeout_ms) are the slow ones.
		Models:     func(p *mhi.Profile) bool { return p.ReadyTimeout > 0 },
		ModelsText: "profiles with a ReadyTimeout (pci_generic ready_timeout_ms)",
	},
	{
		Name:        QuirkNoInbandWake,
		Description: "no wake doorbell: a write to channel doorbell 127 wedges the firmware (strict mode: a violation)",
		Source:      `drivers/bus/mhi/host/pci_generic.c: "bus: mhi: pci_generic: No-Op for device_wake operations"`,
		Models:      func(p *mhi.Profile) bool { return p.SidebandWake },
		ModelsText:  "profiles with SidebandWake (pci_generic sideband_wake)",
	},
	{
		Name:        QuirkOneMSI,
		Description: "the platform grants a single MSI vector: BHI and every event ring share vector 0",
		Source:      `drivers/bus/mhi/host/pci_generic.c (mhi_pci_get_irqs, "using shared MSI")`,
		ModelsText:  "none by model (a platform limit)",
	},
	// Device-written memory (quirks_memory.go).
	{
		Name:        QuirkStaleERWP,
		Description: "at every EE change each started event ring context WP is written back to the ring base (its value before the host handed the ring over)",
		Source:      `drivers/bus/mhi/host/main.c: "bus: mhi: host: Use cached values for calculating the shared write pointer"`,
		ModelsText:  "none by model (SBL firmware flushing its event contexts)",
	},
	{
		Name:        QuirkUnalignedERRP,
		Description: "at every EE change each data event ring context RP is stored 8 bytes before the true RP (in the ring, unaligned) and the ring's MSI raised",
		Source:      `drivers/bus/mhi/host/main.c: "bus: mhi: host: Add alignment check for event ring read pointer"`,
		ModelsText:  "none by model (a broken or hostile device)",
	},
	{
		Name:        QuirkStrayCompletion,
		Description: "before the event of a non-chained UL TRE an EOT event naming the TRE three slots on is posted",
		Source:      `drivers/bus/mhi/host/main.c: "bus: mhi: host: Detect events pointing to unexpected TREs"`,
		ModelsText:  "none by model (a device that moves its RP before writing the event)",
	},
	{
		Name:        QuirkBadOffsets,
		Description: "CHDBOFF reads 8 bytes before the end of the BAR (no room for the channel doorbells)",
		Source:      `drivers/bus/mhi/host/init.c: "bus: mhi: host: Sanity check values from remote device before use"`,
		ModelsText:  "none by model (a broken or hostile device)",
	},
	// Power management and power-up (quirks_pm.go).
	{
		Name:        QuirkNoM3,
		Description: "no M3: MHICTRL = M3 is refused (a violation); the device stays in M0",
		Source:      `drivers/bus/mhi/host/pci_generic.c: "bus: mhi: host: pci_generic: Disable runtime PM for QDU100"`,
		Models:      func(p *mhi.Profile) bool { return p.NoM3 },
		ModelsText:  "profiles with NoM3 (QDU100)",
	},
	{
		Name:        QuirkD3Cold,
		Description: "power is lost in M3 (D3cold): right after entering M3 the modem is back at its power-on state",
		Source:      `drivers/bus/mhi/host/pci_generic.c: "bus: mhi: host: pci_generic: Add suspend/resume/recovery procedure", "Early MHI resume failure in non M3 state"`,
		ModelsText:  "none by model (a platform property)",
	},
	{
		Name:        QuirkSysErrAtPowerUp,
		Description: "SYS_ERR at power-on, before host interrupts; PBL/SBL act on MHI RESET only in SYS_ERR",
		Source:      `drivers/bus/mhi/host/pm.c: "bus: mhi: host: Fix check for syserr at power_up", "bus: mhi: host: Address conflict between power_up and syserr"`,
		ModelsText:  "none by model (Cloud AI 100 firmware; not a modem profile here)",
	},
	{
		Name:        QuirkM0DuringPrepare,
		Description: "the STATE_CHANGE(M0) of the wake that carried a burst channel's START_CHAN comes at the channel's first doorbell, and every burst channel stops polling (doorbell mode) then",
		Source:      `drivers/bus/mhi/host/main.c: "bus: mhi: host: Fix race between channel preparation and M0 event"`,
		ModelsText:  "none by model (any device whose M0 event races a channel's preparation; burst channels are the HW data channels)",
	},
	{
		Name:        QuirkResetOnRemove,
		Description: "an MHI reset requested in mission mode (M0, AMSS) leaves the firmware running: READY comes back, but every later M0 request is ignored (power-up stalls) until a SoC reset",
		Source:      `drivers/bus/mhi/host/pci_generic.c: "bus: mhi: host: pci_generic: Reset QDU100 while the MHI driver is removed"`,
		Models:      func(p *mhi.Profile) bool { return p.ResetOnRemove },
		ModelsText:  "profiles with ResetOnRemove (QDU100)",
	},
	{
		Name:        QuirkLateStateChange,
		Description: "at an MHI reset requested in M0 a queued STATE_CHANGE(M0) is posted first (READY follows the reset); a doorbell before the host's next state request is a violation",
		Source:      `drivers/bus/mhi/host/pm.c: "bus: mhi: host: Wait for ready state after reset"`,
		ModelsText:  "none by model (any device whose state change races the host's teardown)",
	},
	// Boot (quirks_boot.go).
	{
		Name:        QuirkEEBackToBack,
		Description: "at M0 in the SBL, EE_EVENT(SBL) and EE_EVENT(AMSS) are posted back to back under one MSI; the SBL's channels end at once",
		Source:      `drivers/bus/mhi/host/pm.c, main.c: "bus: mhi: host: Process execution environment changes serially"`,
		ModelsText:  "none by model (any SBL that finds its image at once)",
	},
	{
		Name:        QuirkEDLReadyAgain,
		Description: "in EDL the boot ROM shows READY before any download; after the flash programmer's download that READY stands 20 ms (MHICTRL ignored), then MHI reset and READY again under EE FP",
		Source:      `drivers/bus/mhi/host/pm.c, boot.c: "bus: mhi: host: Wait for ready after an EDL firmware download"`,
		ModelsText:  "none by model (EDL boot ROMs that bring MHI up before the download)",
	},
	{
		Name:        QuirkPBLSysErrTwice,
		Description: "the first two images the PBL receives hang before any EE change: SYS_ERR with BHI_EXECENV still PBL, the reset keeps PBL; the third boots",
		Source:      `drivers/bus/mhi/host/main.c: "bus: mhi: host: Remove duplicate ee check for syserr"`,
		ModelsText:  "none by model (a bad SBL image)",
	},
	{
		Name:        QuirkBHIeLE,
		Description: "the BHIe vector table is read strictly little-endian: an entry that looks byte-swapped (length 0 or >= 4 GiB) fails the download (TXVECSTATUS error) and is a violation",
		Source:      `drivers/bus/mhi/host/boot.c: "bus: mhi: host: Fix endianness of BHI vector table"`,
		ModelsText:  "none by model (every device reads it little-endian; the quirk makes the check strict)",
	},
}

// Registry returns the registered quirks, in a stable order.
func Registry() []QuirkInfo { return slices.Clone(quirkRegistry) }

// LookupQuirk returns the registry entry of name.
func LookupQuirk(name string) (QuirkInfo, bool) {
	for _, q := range quirkRegistry {
		if string(q.Name) == name {
			return q, true
		}
	}
	return QuirkInfo{}, false
}

// ParseQuirks parses a comma-separated list of quirk names.
func ParseQuirks(list string) ([]Quirk, error) {
	var qs []Quirk
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if _, ok := LookupQuirk(n); !ok {
			return nil, fmt.Errorf("sim: unknown quirk %q (known: %s)", n, strings.Join(QuirkNames(), ", "))
		}
		qs = append(qs, Quirk(n))
	}
	return qs, nil
}

// QuirkNames lists the registered names.
func QuirkNames() []string {
	var ns []string
	for _, q := range quirkRegistry {
		ns = append(ns, string(q.Name))
	}
	return ns
}

// ProfileQuirks returns the quirks of p's model.
func ProfileQuirks(p *mhi.Profile) []Quirk {
	var qs []Quirk
	for _, q := range quirkRegistry {
		if q.Models != nil && q.Models(p) {
			qs = append(qs, q.Name)
		}
	}
	return qs
}

// quirkSet is the set of quirks a modem plays.
type quirkSet uint32

func (s quirkSet) has(q Quirk) bool { return s&quirkBit(q) != 0 }

func quirkBit(q Quirk) quirkSet {
	for i, r := range quirkRegistry {
		if r.Name == q {
			return 1 << i
		}
	}
	return 0
}

// activeQuirks resolves Options.Quirks and the profile's quirks.
func activeQuirks(p *mhi.Profile, o *Options) (quirkSet, error) {
	var s quirkSet
	if !o.NoProfileQuirks {
		for _, q := range ProfileQuirks(p) {
			s |= quirkBit(q)
		}
	}
	for _, q := range o.Quirks {
		b := quirkBit(q)
		if b == 0 {
			return 0, fmt.Errorf("sim: unknown quirk %q (known: %s)", q, strings.Join(QuirkNames(), ", "))
		}
		s |= b
	}
	return s, nil
}

// Quirks returns the quirks the modem plays.
func (m *Modem) Quirks() []Quirk {
	var qs []Quirk
	for _, q := range quirkRegistry {
		if m.quirks.has(q.Name) {
			qs = append(qs, q.Name)
		}
	}
	return qs
}
