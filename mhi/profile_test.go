package mhi

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func mustLookup(t *testing.T, name string) *Profile {
	t.Helper()
	p, ok := Lookup(name)
	if !ok {
		t.Fatalf("Lookup(%q) failed", name)
	}
	return p
}

func TestProfilesValidate(t *testing.T) {
	for _, p := range Profiles() {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		if p.Description == "" {
			t.Errorf("%s: no description", p.Name)
		}
		if len(p.IDs) == 0 {
			t.Errorf("%s: no PCI IDs", p.Name)
		}
	}
}

// TestProfileNamesUniqueAndWellFormed: every name is unique and reads
// vendor-model in lower case ("quectel-rm5xx"), as mhictl's -profile flag
// takes it.
func TestProfileNamesUniqueAndWellFormed(t *testing.T) {
	wellFormed := regexp.MustCompile(`^[a-z]+-[a-z0-9]+(-[a-z0-9]+)*$`)
	seen := map[string]bool{}
	for _, p := range Profiles() {
		if seen[p.Name] {
			t.Errorf("duplicate profile name %q", p.Name)
		}
		seen[p.Name] = true
		if !wellFormed.MatchString(p.Name) {
			t.Errorf("profile name %q is not vendor-model in lower case", p.Name)
		}
	}
}

func TestPCIIDsUnique(t *testing.T) {
	seen := map[PCIID]string{}
	for _, p := range Profiles() {
		for _, id := range p.IDs {
			if other, ok := seen[id]; ok {
				t.Errorf("PCI ID %v in both %s and %s", id, other, p.Name)
			}
			seen[id] = p.Name
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	if p, ok := Lookup("qcom-sdx99"); ok || p != nil {
		t.Errorf("Lookup of unknown name = %v, %v", p, ok)
	}
	if _, ok := Lookup(""); ok {
		t.Error("Lookup of empty name succeeded")
	}
}

func TestProfilesReturnsCopy(t *testing.T) {
	ps := Profiles()
	first := ps[0]
	ps[0] = nil
	if Profiles()[0] != first {
		t.Error("Profiles() exposes the table slice")
	}
}

func TestMatchOrder(t *testing.T) {
	tests := []struct {
		vendor, device, subVendor, subDevice uint16
		want                                 string // "" = no match
	}{
		// 17cb:0306: Foxconn, Sierra, Telit FN980 v1, then the reference design.
		{0x17cb, 0x0306, 0x17cb, 0x010c, "foxconn-sdx55"},
		{0x17cb, 0x0306, 0x18d7, 0x0200, "sierra-em919x"},
		{0x17cb, 0x0306, 0x1c5d, 0x2000, "telit-fn980-hwv1"},
		{0x17cb, 0x0306, 0x1c5d, 0x2010, "qcom-sdx55m"}, // FN990 sub on the wrong device
		{0x17cb, 0x0306, 0x18d7, 0x0301, "qcom-sdx55m"},
		{0x17cb, 0x0306, 0x17cb, 0x010d, "qcom-sdx55m"},
		{0x17cb, 0x0306, 0x0000, 0x0000, "qcom-sdx55m"},
		// 17cb:0308: Sierra, Telit FN990/FE990A, any Foxconn sub, then SDX65.
		{0x17cb, 0x0308, 0x18d7, 0x0301, "sierra-em919x"},
		{0x17cb, 0x0308, 0x1c5d, 0x2010, "telit-fn990"},
		{0x17cb, 0x0308, 0x1c5d, 0x2015, "telit-fe990a"},
		{0x17cb, 0x0308, 0x105b, 0x1234, "foxconn-t99w696"},
		{0x17cb, 0x0308, 0x105b, 0x0000, "foxconn-t99w696"},
		{0x17cb, 0x0308, 0x105b, 0xffff, "foxconn-t99w696"},
		{0x17cb, 0x0308, 0x1c5d, 0x2000, "qcom-sdx65m"},
		{0x17cb, 0x0308, 0x17cb, 0x010c, "qcom-sdx65m"},
		{0x17cb, 0x0308, 0x0000, 0x0000, "qcom-sdx65m"},
		// 17cb:0309: Telit FN990B40/FE990B40, then SDX75.
		{0x17cb, 0x0309, 0x1c5d, 0x201a, "telit-fn990b40"},
		{0x17cb, 0x0309, 0x1c5d, 0x2025, "telit-fe990b40"},
		{0x17cb, 0x0309, 0x1c5d, 0x2020, "qcom-sdx75m"},
		{0x17cb, 0x0309, 0x105b, 0x1234, "qcom-sdx75m"},
		// 17cb:011a: Telit FN920C04/FE912C04, then SDX35.
		{0x17cb, 0x011a, 0x1c5d, 0x2020, "telit-fn920c04"},
		{0x17cb, 0x011a, 0x1c5d, 0x2045, "telit-fe912c04"},
		{0x17cb, 0x011a, 0x1c5d, 0x201a, "qcom-sdx35m"},
		{0x17cb, 0x011a, 0x0000, 0x0000, "qcom-sdx35m"},
		// Plain IDs (every ID of the table: TestEveryIDReachesItsProfile).
		{0x1eac, 0x1007, 0x1eac, 0x1007, "quectel-rm5xx"},
		{0x03f0, 0x0a6c, 0, 0, "foxconn-t99w175"},
		// Unknown functions.
		{0x17cb, 0x0305, 0, 0, ""},
		{0x105b, 0xe0ac, 0, 0, ""},
		{0x1eac, 0x1003, 0, 0, ""},
		{0x18d7, 0x0200, 0, 0, ""},
	}
	for _, tt := range tests {
		p, ok := Match(tt.vendor, tt.device, tt.subVendor, tt.subDevice)
		got := ""
		if ok {
			got = p.Name
		}
		if got != tt.want {
			t.Errorf("Match(%04x:%04x [%04x:%04x]) = %q, want %q",
				tt.vendor, tt.device, tt.subVendor, tt.subDevice, got, tt.want)
		}
	}
}

// TestEveryIDReachesItsProfile catches shadowing: each table ID must match
// its own profile, not an earlier, more generic one.
func TestEveryIDReachesItsProfile(t *testing.T) {
	for _, p := range Profiles() {
		for _, id := range p.IDs {
			subDevice := id.SubDevice
			if id.AnySubDevice {
				subDevice = 0x4242
			}
			got, ok := Match(id.Vendor, id.Device, id.SubVendor, subDevice)
			if !ok || got != p {
				name := "<none>"
				if ok {
					name = got.Name
				}
				t.Errorf("%s: ID %v matches %s", p.Name, id, name)
			}
		}
	}
}

// TestSubsystemEntriesPrecedePlain checks the ordering rule of §6.3 over
// the whole table.
func TestSubsystemEntriesPrecedePlain(t *testing.T) {
	type vd struct{ v, d uint16 }
	plainAt := map[vd]int{}
	ps := Profiles()
	for i, p := range ps {
		for _, id := range p.IDs {
			if !id.MatchSub {
				if _, ok := plainAt[vd{id.Vendor, id.Device}]; !ok {
					plainAt[vd{id.Vendor, id.Device}] = i
				}
			}
		}
	}
	for i, p := range ps {
		for _, id := range p.IDs {
			if !id.MatchSub {
				continue
			}
			if j, ok := plainAt[vd{id.Vendor, id.Device}]; ok && j < i {
				t.Errorf("%s (%v) comes after plain entry %s", p.Name, id, ps[j].Name)
			}
		}
	}
}

func TestPCIIDString(t *testing.T) {
	for _, tt := range []struct {
		id   PCIID
		want string
	}{
		{pciDev(0x1eac, 0x1007), "1eac:1007"},
		{pciDevSub(0x17cb, 0x0306, 0x18d7, 0x0200), "17cb:0306 [18d7:0200]"},
		{pciDevSubAny(0x17cb, 0x0308, 0x105b), "17cb:0308 [105b:any]"},
	} {
		if got := tt.id.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// TestChannelFlags checks the per-channel rules common to every profile:
// SAHARA runs in SBL, FIREHOSE in FP, everything else in AMSS; only the
// IP_HW0 channels are burst, and each burst channel completes on a
// hardware ring dedicated to it; nothing is auto-queued (later table).
func TestChannelFlags(t *testing.T) {
	for _, p := range Profiles() {
		for _, c := range p.Channels {
			want := eeAMSS
			switch c.Name {
			case "SAHARA":
				want = eeSBL
			case "FIREHOSE":
				want = eeFP
			}
			if c.EE != want {
				t.Errorf("%s: channel %d %s: EE mask %#x, want %#x", p.Name, c.Num, c.Name, c.EE, want)
			}
			wantBurst := c.Name == "IP_HW0" || c.Name == "IP_HW0_MBIM"
			if c.Burst != wantBurst {
				t.Errorf("%s: channel %d %s: burst %v, want %v", p.Name, c.Num, c.Name, c.Burst, wantBurst)
			}
			er := p.EventRings[c.EventRing]
			if c.Burst != er.Hardware() || (er.Hardware() && er.Channel != c.Num) {
				t.Errorf("%s: channel %d %s on event ring %d (%+v)", p.Name, c.Num, c.Name, c.EventRing, er)
			}
			if c.AutoQueue {
				t.Errorf("%s: channel %d %s auto-queued", p.Name, c.Num, c.Name)
			}
		}
		for i, e := range p.EventRings {
			wantMod := map[EventRingKind]int{EventRingCtrl: 0, EventRingData: 5, EventRingSWData: 0, EventRingHWData: 1}[e.Kind]
			if e.IntModMs != wantMod {
				t.Errorf("%s: event ring %d: moderation %d ms, want %d", p.Name, i, e.IntModMs, wantMod)
			}
			if !e.Hardware() && e.Channel != -1 {
				t.Errorf("%s: event ring %d: non-hardware ring dedicated to %d", p.Name, i, e.Channel)
			}
			if i > 0 && e.Kind == EventRingCtrl {
				t.Errorf("%s: event ring %d is a second control ring", p.Name, i)
			}
		}
	}
}

// isDataChannel reports whether a channel carries IP traffic (IP_HW0,
// IP_HW0_MBIM, IP_SW0, IP_ETH1, …) rather than control or boot traffic.
func isDataChannel(c ChannelConfig) bool { return strings.HasPrefix(c.Name, "IP_") }

// TestDataPairsHaveEventRingsOfTheirOwn: a data pair's completions never
// share an event ring with another pair's (nor the control ring), so that
// the data path's interrupt and poll see only its own events; its rings are
// large enough for a burst of packets.
func TestDataPairsHaveEventRingsOfTheirOwn(t *testing.T) {
	for _, p := range Profiles() {
		data := 0
		for _, c := range p.Channels {
			if !isDataChannel(c) {
				continue
			}
			data++
			if c.EventRing == 0 {
				t.Errorf("%s: data channel %d %s completes on the control ring", p.Name, c.Num, c.Name)
			}
			if c.Elements < 64 {
				t.Errorf("%s: data channel %d %s has a %d-element ring, want at least 64", p.Name, c.Num, c.Name, c.Elements)
			}
			for _, o := range p.Channels {
				if o.EventRing == c.EventRing && o.Num/2 != c.Num/2 {
					t.Errorf("%s: data channel %d %s shares event ring %d with channel %d %s", p.Name, c.Num, c.Name, c.EventRing, o.Num, o.Name)
				}
			}
		}
		if data == 0 {
			t.Errorf("%s: no data channel pair", p.Name)
		}
	}
}

// TestChannelNumbersAgreeAcrossProfiles: pci_generic gives a channel name
// the same number in every configuration (Linux's clients bind by name, and
// mhistack's control clients find their pair by name); only NMEA moves.
func TestChannelNumbersAgreeAcrossProfiles(t *testing.T) {
	num := map[string]int{}
	where := map[string]string{}
	for _, p := range Profiles() {
		for _, c := range p.Channels {
			if c.Name == "NMEA" || c.Dir != ChanTypeOutbound {
				continue
			}
			if n, ok := num[c.Name]; ok && n != c.Num {
				t.Errorf("%s: %s is channel %d, but %d in %s", p.Name, c.Name, c.Num, n, where[c.Name])
			}
			num[c.Name], where[c.Name] = c.Num, p.Name
		}
	}
}

// TestMBIMDataHasMBIMControl: a modem whose data channel carries MBIM NTBs
// (IP_HW0_MBIM) has the MBIM control pair that sets its sessions up.
func TestMBIMDataHasMBIMControl(t *testing.T) {
	for _, p := range Profiles() {
		if _, _, ok := p.ChannelPair("IP_HW0_MBIM"); !ok {
			continue
		}
		if _, _, ok := p.ChannelPair("MBIM"); !ok {
			t.Errorf("%s: IP_HW0_MBIM without an MBIM control pair", p.Name)
		}
	}
}

// TestEventRingOrder: the control ring first, then the software rings, the
// hardware rings last (pci_generic's order; the hardware rings are seeded
// only at the mission-mode transition), each hardware ring dedicated to a
// different channel.
func TestEventRingOrder(t *testing.T) {
	for _, p := range Profiles() {
		hw := false
		dedicated := map[int]bool{}
		for i, e := range p.EventRings {
			if hw && !e.Hardware() {
				t.Errorf("%s: software event ring %d after a hardware ring", p.Name, i)
			}
			if e.Hardware() {
				hw = true
				if dedicated[e.Channel] {
					t.Errorf("%s: two hardware event rings for channel %d", p.Name, e.Channel)
				}
				dedicated[e.Channel] = true
			}
		}
	}
}

// TestTimeoutsMRUAndImages: pci_generic's timeouts are whole milliseconds
// between 1 s and 120 s and a READY timeout, when set, is the longer one;
// the MRU is unset or pci_generic's 32 KiB mru_default; image names are
// relative paths under the firmware directory's qcom/.
func TestTimeoutsMRUAndImages(t *testing.T) {
	image := regexp.MustCompile(`^qcom/[a-z0-9_/.]+\.(mbn|elf|melf)$`)
	for _, p := range Profiles() {
		if p.Timeout < time.Second || p.Timeout > 120*time.Second || p.Timeout%time.Millisecond != 0 {
			t.Errorf("%s: Timeout %v", p.Name, p.Timeout)
		}
		if p.ReadyTimeout != 0 && (p.ReadyTimeout <= p.Timeout || p.ReadyTimeout%time.Millisecond != 0) {
			t.Errorf("%s: ReadyTimeout %v with Timeout %v", p.Name, p.ReadyTimeout, p.Timeout)
		}
		if want := max(p.ReadyTimeout, p.Timeout); p.ReadyWait() != want {
			t.Errorf("%s: ReadyWait %v, want %v", p.Name, p.ReadyWait(), want)
		}
		if p.MRU != 0 && p.MRU != 32768 {
			t.Errorf("%s: MRU %d, want 0 or 32768", p.Name, p.MRU)
		}
		for _, img := range []string{p.FirmwareImage, p.EDLImage} {
			if img != "" && (!image.MatchString(img) || strings.Contains(img, "..")) {
				t.Errorf("%s: image name %q", p.Name, img)
			}
		}
	}
}

// TestEqualTablesAreShared: profiles with equal channel (or event ring)
// tables use one copy of it, as pci_generic's infos point at one config.
func TestEqualTablesAreShared(t *testing.T) {
	ps := Profiles()
	for i, a := range ps {
		for _, b := range ps[i+1:] {
			if reflect.DeepEqual(a.Channels, b.Channels) && &a.Channels[0] != &b.Channels[0] {
				t.Errorf("%s and %s have equal channel tables, not one shared", a.Name, b.Name)
			}
			if reflect.DeepEqual(a.EventRings, b.EventRings) && &a.EventRings[0] != &b.EventRings[0] {
				t.Errorf("%s and %s have equal event ring tables, not one shared", a.Name, b.Name)
			}
		}
	}
}

// TestKnownVendors: every PCI vendor and subsystem vendor is one of §6's.
func TestKnownVendors(t *testing.T) {
	known := map[uint16]bool{
		pciVendorQcom: true, pciVendorFoxconn: true, pciVendorQuectel: true, pciVendorThales: true,
		pciVendorNetPrisma: true, pciVendorHP: true, pciSubVendorSierra: true, pciSubVendorTelit: true,
	}
	for _, p := range Profiles() {
		for _, id := range p.IDs {
			if !known[id.Vendor] || (id.MatchSub && !known[id.SubVendor]) {
				t.Errorf("%s: ID %v has an unknown vendor", p.Name, id)
			}
		}
	}
}

// describe writes a profile's channels as pairs, "4/5 DIAG 16 ER1/ER1",
// with the UL and DL ring sizes when they differ, the EE when it is not
// AMSS and "burst"; and its event rings, "CTRL 64", "HW 1024 ch100".
func describe(p *Profile) (pairs, rings []string) {
	for _, ul := range p.Channels {
		if ul.Dir != ChanTypeOutbound {
			continue
		}
		dl, _ := p.Channel(ul.Num + 1)
		s := fmt.Sprintf("%d/%d %s %d", ul.Num, dl.Num, ul.Name, ul.Elements)
		if dl.Elements != ul.Elements {
			s += fmt.Sprintf("/%d", dl.Elements)
		}
		s += fmt.Sprintf(" ER%d/ER%d", ul.EventRing, dl.EventRing)
		switch ul.EE {
		case eeSBL:
			s += " SBL"
		case eeFP:
			s += " FP"
		}
		if ul.Burst {
			s += " burst"
		}
		pairs = append(pairs, s)
	}
	kind := map[EventRingKind]string{EventRingCtrl: "CTRL", EventRingData: "DATA", EventRingSWData: "SW", EventRingHWData: "HW"}
	for _, e := range p.EventRings {
		s := fmt.Sprintf("%s %d", kind[e.Kind], e.Elements)
		if e.Hardware() {
			s += fmt.Sprintf(" ch%d", e.Channel)
		}
		rings = append(rings, s)
	}
	return pairs, rings
}

// TestSpotChecksAgainstPciGeneric compares a few modems, every fact, with
// their entries in Linux drivers/bus/mhi/host/pci_generic.c (the
// mhi_pci_dev_info named, its mhi_controller_config, channel and event
// tables, and its mhi_pci_id_table lines). The rules above hold for every
// modem; these catch a rule-abiding but wrong table.
func TestSpotChecksAgainstPciGeneric(t *testing.T) {
	const s = time.Second
	for _, tt := range []struct {
		name, source         string
		ids                  []string
		mru                  int
		timeout, ready       time.Duration
		fw, edl              string
		sideband, edlTrigger bool
		pairs, rings         []string
	}{
		{
			name: "qcom-sdx55m", source: "mhi_qcom_sdx55_info, modem_qcom_v1_mhiv_config",
			ids: []string{"17cb:0306"}, mru: 32768, timeout: 8 * s,
			fw: "qcom/sdx55m/sbl1.mbn", edl: "qcom/sdx55m/edl.mbn", edlTrigger: true,
			pairs: []string{"4/5 DIAG 16 ER1/ER1", "12/13 MBIM 4 ER0/ER0", "14/15 QMI 4 ER0/ER0", "20/21 IPCR 8 ER0/ER0",
				"34/35 FIREHOSE 32 ER0/ER0 FP", "46/47 IP_SW0 64 ER2/ER3", "100/101 IP_HW0 128 ER4/ER5 burst"},
			rings: []string{"CTRL 64", "DATA 128", "SW 64", "SW 64", "HW 1024 ch100", "HW 2048 ch101"},
		},
		{
			name: "quectel-rm5xx", source: "mhi_quectel_rm5xx_info, modem_quectel_em1xx_config",
			ids: []string{"1eac:1004", "1eac:1007"}, mru: 32768, timeout: 20 * s, ready: 50 * s,
			edl: "qcom/prog_firehose_sdx6x.elf", sideband: true,
			pairs: []string{"0/1 NMEA 32 ER0/ER0", "2/3 SAHARA 32 ER0/ER0 SBL", "4/5 DIAG 32 ER1/ER1", "12/13 MBIM 32 ER0/ER0",
				"32/33 DUN 32 ER0/ER0", "34/35 FIREHOSE 32 ER0/ER0 FP", "100/101 IP_HW0_MBIM 128 ER2/ER3 burst"},
			rings: []string{"CTRL 128", "DATA 128", "HW 1024 ch100", "HW 1024 ch101"},
		},
		{
			name: "sierra-em919x", source: "mhi_sierra_em919x_info, modem_sierra_em919x_config",
			ids: []string{"17cb:0306 [18d7:0200]", "17cb:0308 [18d7:0301]"}, mru: 32768, timeout: 24 * s,
			pairs: []string{"2/3 SAHARA 32/256 ER0/ER0 SBL", "4/5 DIAG 32 ER0/ER0", "12/13 MBIM 128 ER0/ER0", "14/15 QMI 32 ER0/ER0",
				"32/33 DUN 32 ER0/ER0", "100/101 IP_HW0 512 ER1/ER2 burst"},
			rings: []string{"CTRL 2048", "HW 2048 ch100", "HW 2048 ch101"},
		},
		{
			name: "telit-fn990", source: "mhi_telit_fn990_info, modem_telit_fn990_config",
			ids: []string{"17cb:0308 [1c5d:2010]"}, mru: 32768, timeout: 20 * s,
			pairs: []string{"2/3 SAHARA 32 ER0/ER0 SBL", "4/5 DIAG 64 ER1/ER1", "12/13 MBIM 32 ER0/ER0", "32/33 DUN 32 ER0/ER0",
				"92/93 DUN2 32 ER1/ER1", "94/95 NMEA 32 ER1/ER1", "100/101 IP_HW0_MBIM 128 ER2/ER3 burst"},
			rings: []string{"CTRL 128", "DATA 128", "HW 1024 ch100", "HW 2048 ch101"},
		},
		{
			name: "foxconn-t99w640", source: "mhi_foxconn_t99w640_info, modem_foxconn_sdx72_config",
			ids: []string{"105b:e118"}, mru: 32768, timeout: 20 * s, ready: 50 * s,
			edl: "qcom/sdx72m/foxconn/edl.mbn", edlTrigger: true,
			pairs: []string{"0/1 LOOPBACK 32 ER0/ER0", "4/5 DIAG 32 ER1/ER1", "12/13 MBIM 32 ER0/ER0", "32/33 DUN 32 ER0/ER0",
				"34/35 FIREHOSE 32 ER0/ER0 FP", "100/101 IP_HW0_MBIM 128 ER2/ER3 burst"},
			rings: []string{"CTRL 128", "DATA 128", "HW 1024 ch100", "HW 1024 ch101"},
		},
		{
			name: "cinterion-mv32", source: "mhi_mv32_info, modem_mv3x_config",
			ids: []string{"1269:00ba", "1269:00bb"}, mru: 32768, timeout: 20 * s,
			pairs: []string{"0/1 LOOPBACK 64 ER0/ER0", "12/13 MBIM 64 ER0/ER0", "100/101 IP_HW0_MBIM 512 ER2/ER3 burst"},
			rings: []string{"CTRL 256", "DATA 256", "HW 1024 ch100", "HW 1024 ch101"},
		},
	} {
		p := mustLookup(t, tt.name)
		var ids []string
		for _, id := range p.IDs {
			ids = append(ids, id.String())
		}
		pairs, rings := describe(p)
		got := []any{ids, p.MRU, p.Timeout, p.ReadyTimeout, p.FirmwareImage, p.EDLImage, p.SidebandWake, p.EDLTrigger, pairs, rings}
		want := []any{tt.ids, tt.mru, tt.timeout, tt.ready, tt.fw, tt.edl, tt.sideband, tt.edlTrigger, tt.pairs, tt.rings}
		fields := []string{"IDs", "MRU", "Timeout", "ReadyTimeout", "FirmwareImage", "EDLImage", "SidebandWake", "EDLTrigger", "channels", "event rings"}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("%s: %s = %v, want %v (pci_generic.c %s)", tt.name, fields[i], got[i], want[i], tt.source)
			}
		}
	}
}

func TestChannelPairLookup(t *testing.T) {
	p := mustLookup(t, "quectel-rm5xx")
	ul, dl, ok := p.ChannelPair("IP_HW0_MBIM")
	if !ok || ul.Num != 100 || dl.Num != 101 || !ul.Burst || !dl.Burst {
		t.Errorf("IP_HW0_MBIM pair = %+v, %+v, %v", ul, dl, ok)
	}
	if _, _, ok := p.ChannelPair("IP_SW0"); ok {
		t.Error("quectel-rm5xx has an IP_SW0 pair")
	}
	ul, dl, ok = mustLookup(t, "qcom-sdx55m").ChannelPair("IP_SW0")
	if !ok || ul.Num != 46 || dl.Num != 47 || ul.Burst || dl.Burst {
		t.Errorf("qcom IP_SW0 pair = %+v, %+v, %v", ul, dl, ok)
	}
}
