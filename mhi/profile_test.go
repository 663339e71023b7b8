package mhi

import (
	"reflect"
	"sort"
	"testing"
	"time"
)

// allProfileNames is every modem of docs/PROTOCOL.md §6.3.
var allProfileNames = []string{
	"qcom-sdx24", "qcom-sdx55m", "qcom-sdx65m", "qcom-sdx75m", "qcom-sdx35m",
	"qcom-sa8775p", "qcom-qdu100",
	"quectel-em1xx", "quectel-rm5xx",
	"foxconn-sdx55", "foxconn-t99w175", "foxconn-dw5930e", "foxconn-t99w368",
	"foxconn-t99w373", "foxconn-t99w510", "foxconn-dw5932e", "foxconn-t99w640",
	"foxconn-dw5934e", "foxconn-t99w696", "foxconn-t99w760",
	"cinterion-mv31", "cinterion-mv32",
	"sierra-em919x",
	"telit-fn980-hwv1", "telit-fn990", "telit-fe990a", "telit-fn920c04",
	"telit-fe912c04", "telit-fn990b40", "telit-fe990b40",
	"netprisma-lcur57", "netprisma-fcun69",
}

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

func TestProfileNamesUniqueAndComplete(t *testing.T) {
	seen := map[string]bool{}
	var got []string
	for _, p := range Profiles() {
		if seen[p.Name] {
			t.Errorf("duplicate profile name %q", p.Name)
		}
		seen[p.Name] = true
		got = append(got, p.Name)
	}
	want := append([]string(nil), allProfileNames...)
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("profile names:\n got %v\nwant %v", got, want)
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
		// Plain IDs.
		{0x17cb, 0x0304, 0, 0, "qcom-sdx24"},
		{0x17cb, 0x0116, 0, 0, "qcom-sa8775p"},
		{0x17cb, 0x0601, 0, 0, "qcom-qdu100"},
		{0x1eac, 0x1001, 0, 0, "quectel-em1xx"},
		{0x1eac, 0x1002, 0, 0, "quectel-em1xx"},
		{0x1eac, 0x100d, 0, 0, "quectel-em1xx"},
		{0x1eac, 0x2001, 0, 0, "quectel-em1xx"},
		{0x1eac, 0x1004, 0, 0, "quectel-rm5xx"},
		{0x1eac, 0x1007, 0x1eac, 0x1007, "quectel-rm5xx"},
		{0x105b, 0xe0ab, 0, 0, "foxconn-t99w175"},
		{0x105b, 0xe0bf, 0, 0, "foxconn-t99w175"},
		{0x105b, 0xe0c3, 0, 0, "foxconn-t99w175"},
		{0x03f0, 0x0a6c, 0, 0, "foxconn-t99w175"},
		{0x105b, 0xe0b0, 0, 0, "foxconn-dw5930e"},
		{0x105b, 0xe0b1, 0, 0, "foxconn-dw5930e"},
		{0x105b, 0xe0d8, 0, 0, "foxconn-t99w368"},
		{0x105b, 0xe0d9, 0, 0, "foxconn-t99w373"},
		{0x105b, 0xe0f0, 0, 0, "foxconn-t99w510"},
		{0x105b, 0xe0f1, 0, 0, "foxconn-t99w510"},
		{0x105b, 0xe0f2, 0, 0, "foxconn-t99w510"},
		{0x105b, 0xe0f5, 0, 0, "foxconn-dw5932e"},
		{0x105b, 0xe0f9, 0, 0, "foxconn-dw5932e"},
		{0x105b, 0xe118, 0, 0, "foxconn-t99w640"},
		{0x105b, 0xe11d, 0, 0, "foxconn-dw5934e"},
		{0x105b, 0xe11e, 0, 0, "foxconn-dw5934e"},
		{0x105b, 0xe123, 0, 0, "foxconn-t99w760"},
		{0x1269, 0x00b3, 0, 0, "cinterion-mv31"},
		{0x1269, 0x00b4, 0, 0, "cinterion-mv31"},
		{0x1269, 0x00ba, 0, 0, "cinterion-mv32"},
		{0x1269, 0x00bb, 0, 0, "cinterion-mv32"},
		{0x203e, 0x1000, 0, 0, "netprisma-lcur57"},
		{0x203e, 0x1001, 0, 0, "netprisma-fcun69"},
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

// TestProfileAttributes checks every §6.3 column (and the §6.2 timeouts)
// for every modem.
func TestProfileAttributes(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name       string
		mru        int
		timeout    time.Duration
		readyWait  time.Duration
		fw, edl    string
		sideband   bool
		edlTrigger bool
	}{
		{"qcom-sdx24", 0, 8 * s, 8 * s, "", "qcom/prog_firehose_sdx24.mbn", true, false},
		{"qcom-sdx55m", 32768, 8 * s, 8 * s, "qcom/sdx55m/sbl1.mbn", "qcom/sdx55m/edl.mbn", false, true},
		{"qcom-sdx65m", 0, 8 * s, 8 * s, "qcom/sdx65m/xbl.elf", "qcom/sdx65m/edl.mbn", false, true},
		{"qcom-sdx75m", 0, 8 * s, 50 * s, "qcom/sdx75m/xbl.elf", "qcom/sdx75m/edl.mbn", false, true},
		{"qcom-sdx35m", 32768, 8 * s, 50 * s, "", "", false, true},
		{"qcom-sa8775p", 32768, 8 * s, 8 * s, "", "", false, false},
		{"qcom-qdu100", 0, 120 * s, 120 * s, "qcom/qdu100/xbl_s.melf", "", false, true},
		{"quectel-em1xx", 32768, 20 * s, 50 * s, "", "qcom/prog_firehose_sdx24.mbn", true, false},
		{"quectel-rm5xx", 32768, 20 * s, 50 * s, "", "qcom/prog_firehose_sdx6x.elf", true, false},
		{"foxconn-sdx55", 32768, 20 * s, 20 * s, "", "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn", false, true},
		{"foxconn-t99w175", 32768, 20 * s, 20 * s, "", "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn", false, true},
		{"foxconn-dw5930e", 32768, 20 * s, 20 * s, "", "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn", false, true},
		{"foxconn-t99w368", 32768, 20 * s, 20 * s, "", "qcom/sdx65m/foxconn/prog_firehose_lite.elf", false, true},
		{"foxconn-t99w373", 32768, 20 * s, 20 * s, "", "qcom/sdx65m/foxconn/prog_firehose_lite.elf", false, true},
		{"foxconn-t99w510", 32768, 20 * s, 20 * s, "", "qcom/sdx24m/foxconn/prog_firehose_sdx24.mbn", false, true},
		{"foxconn-dw5932e", 32768, 20 * s, 20 * s, "", "qcom/sdx65m/foxconn/prog_firehose_lite.elf", false, true},
		{"foxconn-t99w640", 32768, 20 * s, 50 * s, "", "qcom/sdx72m/foxconn/edl.mbn", false, true},
		{"foxconn-dw5934e", 32768, 20 * s, 50 * s, "", "qcom/sdx72m/foxconn/edl.mbn", false, true},
		{"foxconn-t99w696", 32768, 20 * s, 20 * s, "", "qcom/sdx61/foxconn/prog_firehose_lite.elf", false, true},
		{"foxconn-t99w760", 32768, 20 * s, 20 * s, "", "qcom/sdx35/foxconn/xbl_s_devprg_ns.melf", false, true},
		{"cinterion-mv31", 32768, 20 * s, 20 * s, "", "", false, false},
		{"cinterion-mv32", 32768, 20 * s, 20 * s, "", "", false, false},
		{"sierra-em919x", 32768, 24 * s, 24 * s, "", "", false, false},
		{"telit-fn980-hwv1", 32768, 20 * s, 20 * s, "qcom/sdx55m/sbl1.mbn", "qcom/sdx55m/edl.mbn", false, false},
		{"telit-fn990", 32768, 20 * s, 20 * s, "", "", false, false},
		{"telit-fe990a", 32768, 20 * s, 20 * s, "", "", false, false},
		{"telit-fn920c04", 32768, 50 * s, 50 * s, "", "", false, true},
		{"telit-fe912c04", 32768, 50 * s, 50 * s, "", "", false, true},
		{"telit-fn990b40", 32768, 50 * s, 50 * s, "", "", false, true},
		{"telit-fe990b40", 32768, 50 * s, 50 * s, "", "", false, true},
		{"netprisma-lcur57", 32768, 20 * s, 50 * s, "", "qcom/prog_firehose_sdx24.mbn", true, false},
		{"netprisma-fcun69", 32768, 20 * s, 50 * s, "", "qcom/prog_firehose_sdx6x.elf", true, false},
	}
	if len(tests) != len(allProfileNames) {
		t.Fatalf("attribute table has %d rows, want %d", len(tests), len(allProfileNames))
	}
	for _, tt := range tests {
		p := mustLookup(t, tt.name)
		if p.MRU != tt.mru {
			t.Errorf("%s: MRU %d, want %d", tt.name, p.MRU, tt.mru)
		}
		if p.Timeout != tt.timeout {
			t.Errorf("%s: Timeout %v, want %v", tt.name, p.Timeout, tt.timeout)
		}
		if p.ReadyWait() != tt.readyWait {
			t.Errorf("%s: ReadyWait %v, want %v", tt.name, p.ReadyWait(), tt.readyWait)
		}
		if p.FirmwareImage != tt.fw {
			t.Errorf("%s: FirmwareImage %q, want %q", tt.name, p.FirmwareImage, tt.fw)
		}
		if p.EDLImage != tt.edl {
			t.Errorf("%s: EDLImage %q, want %q", tt.name, p.EDLImage, tt.edl)
		}
		if p.SidebandWake != tt.sideband {
			t.Errorf("%s: SidebandWake %v, want %v", tt.name, p.SidebandWake, tt.sideband)
		}
		if p.EDLTrigger != tt.edlTrigger {
			t.Errorf("%s: EDLTrigger %v, want %v", tt.name, p.EDLTrigger, tt.edlTrigger)
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

// TestChannelSets checks the exact channel numbers and event ring kinds of
// each configuration family (§6.2).
func TestChannelSets(t *testing.T) {
	C, D, S, H := EventRingCtrl, EventRingData, EventRingSWData, EventRingHWData
	tests := []struct {
		profiles []string
		channels []int
		rings    []EventRingKind
	}{
		{[]string{"qcom-sdx24", "qcom-sdx55m", "qcom-sdx65m", "qcom-sdx75m", "qcom-sdx35m"},
			[]int{4, 5, 12, 13, 14, 15, 20, 21, 34, 35, 46, 47, 100, 101},
			[]EventRingKind{C, D, S, S, H, H}},
		{[]string{"quectel-em1xx", "quectel-rm5xx", "netprisma-lcur57", "netprisma-fcun69"},
			[]int{0, 1, 2, 3, 4, 5, 12, 13, 32, 33, 34, 35, 100, 101},
			[]EventRingKind{C, D, H, H}},
		{[]string{"foxconn-sdx55", "foxconn-t99w175", "foxconn-dw5930e", "foxconn-t99w368", "foxconn-t99w373",
			"foxconn-t99w510", "foxconn-dw5932e", "foxconn-t99w640", "foxconn-dw5934e"},
			[]int{0, 1, 4, 5, 12, 13, 32, 33, 34, 35, 100, 101},
			[]EventRingKind{C, D, H, H}},
		{[]string{"foxconn-t99w696", "foxconn-t99w760"},
			[]int{0, 1, 4, 5, 12, 13, 32, 33, 34, 35, 50, 51, 100, 101},
			[]EventRingKind{C, D, H, H}},
		{[]string{"cinterion-mv31", "cinterion-mv32"},
			[]int{0, 1, 12, 13, 100, 101},
			[]EventRingKind{C, D, H, H}},
		{[]string{"sierra-em919x"},
			[]int{2, 3, 4, 5, 12, 13, 14, 15, 32, 33, 100, 101},
			[]EventRingKind{C, H, H}},
		{[]string{"telit-fn980-hwv1"},
			[]int{14, 15, 20, 21, 100, 101},
			[]EventRingKind{C, H, H}},
		{[]string{"telit-fn990", "telit-fe990a"},
			[]int{2, 3, 4, 5, 12, 13, 32, 33, 92, 93, 94, 95, 100, 101},
			[]EventRingKind{C, D, H, H}},
		{[]string{"telit-fn920c04", "telit-fe912c04", "telit-fn990b40", "telit-fe990b40"},
			[]int{2, 3, 4, 5, 14, 15, 32, 33, 34, 35, 92, 93, 94, 95, 100, 101},
			[]EventRingKind{C, D, H, H}},
		{[]string{"qcom-sa8775p"},
			[]int{46, 47},
			[]EventRingKind{C, S, S}},
		{[]string{"qcom-qdu100"},
			[]int{0, 1, 2, 3, 4, 5, 14, 15, 16, 17, 40, 41, 46, 47, 48, 49, 50, 51, 52, 53},
			[]EventRingKind{C, S, S, S, S, S, S, S, S}},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		var first *Profile
		for _, name := range tt.profiles {
			covered[name] = true
			p := mustLookup(t, name)
			var nums []int
			for _, c := range p.Channels {
				nums = append(nums, c.Num)
			}
			sort.Ints(nums)
			if !reflect.DeepEqual(nums, tt.channels) {
				t.Errorf("%s: channels %v, want %v", name, nums, tt.channels)
			}
			var kinds []EventRingKind
			for _, e := range p.EventRings {
				kinds = append(kinds, e.Kind)
			}
			if !reflect.DeepEqual(kinds, tt.rings) {
				t.Errorf("%s: event ring kinds %v, want %v", name, kinds, tt.rings)
			}
			// Profiles of one configuration share its tables.
			if first == nil {
				first = p
				continue
			}
			if &p.Channels[0] != &first.Channels[0] {
				t.Errorf("%s does not share %s's channel table", name, first.Name)
			}
			if &p.EventRings[0] != &first.EventRings[0] {
				t.Errorf("%s does not share %s's event ring table", name, first.Name)
			}
		}
	}
	for _, name := range allProfileNames {
		if !covered[name] {
			t.Errorf("%s: no channel-set check", name)
		}
	}
	// Configs documented as sharing event rings across families.
	fn990, fn920 := mustLookup(t, "telit-fn990"), mustLookup(t, "telit-fn920c04")
	if &fn990.EventRings[0] != &fn920.EventRings[0] {
		t.Error("FN920C04 does not use the FN990 event rings")
	}
	sdx55, t99w640 := mustLookup(t, "foxconn-t99w175"), mustLookup(t, "foxconn-t99w640")
	if &sdx55.Channels[0] != &t99w640.Channels[0] {
		t.Error("Foxconn SDX72 does not use the SDX55 channel table")
	}
}

// TestChannelSpotChecks compares individual channels with §6.2.
func TestChannelSpotChecks(t *testing.T) {
	tests := []struct {
		profile  string
		num      int
		name     string
		elements int
		ring     int
	}{
		// qcom v1/v2 (later table).
		{"qcom-sdx55m", 4, "DIAG", 16, 1},
		{"qcom-sdx55m", 13, "MBIM", 4, 0},
		{"qcom-sdx55m", 15, "QMI", 4, 0},
		{"qcom-sdx55m", 21, "IPCR", 8, 0},
		{"qcom-sdx24", 34, "FIREHOSE", 32, 0},
		{"qcom-sdx65m", 46, "IP_SW0", 64, 2},
		{"qcom-sdx65m", 47, "IP_SW0", 64, 3},
		{"qcom-sdx75m", 100, "IP_HW0", 128, 4},
		{"qcom-sdx35m", 101, "IP_HW0", 128, 5},
		// Quectel EM1xx.
		{"quectel-rm5xx", 0, "NMEA", 32, 0},
		{"quectel-rm5xx", 3, "SAHARA", 32, 0},
		{"quectel-rm5xx", 5, "DIAG", 32, 1},
		{"quectel-em1xx", 12, "MBIM", 32, 0},
		{"quectel-em1xx", 33, "DUN", 32, 0},
		{"quectel-em1xx", 35, "FIREHOSE", 32, 0},
		{"quectel-rm5xx", 100, "IP_HW0_MBIM", 128, 2},
		{"quectel-rm5xx", 101, "IP_HW0_MBIM", 128, 3},
		// Foxconn SDX55/SDX61/SDX72.
		{"foxconn-sdx55", 1, "LOOPBACK", 32, 0},
		{"foxconn-t99w175", 5, "DIAG", 32, 1},
		{"foxconn-t99w175", 34, "FIREHOSE", 32, 0},
		{"foxconn-t99w696", 50, "NMEA", 32, 0},
		{"foxconn-t99w760", 51, "NMEA", 32, 0},
		{"foxconn-t99w640", 101, "IP_HW0_MBIM", 128, 3},
		// Cinterion MV3x.
		{"cinterion-mv31", 0, "LOOPBACK", 64, 0},
		{"cinterion-mv31", 1, "LOOPBACK", 64, 0},
		{"cinterion-mv32", 13, "MBIM", 64, 0},
		{"cinterion-mv32", 100, "IP_HW0_MBIM", 512, 2},
		{"cinterion-mv32", 101, "IP_HW0_MBIM", 512, 3},
		// Sierra EM919x: SAHARA 32 UL / 256 DL, DIAG on ER0.
		{"sierra-em919x", 2, "SAHARA", 32, 0},
		{"sierra-em919x", 3, "SAHARA", 256, 0},
		{"sierra-em919x", 5, "DIAG", 32, 0},
		{"sierra-em919x", 12, "MBIM", 128, 0},
		{"sierra-em919x", 14, "QMI", 32, 0},
		{"sierra-em919x", 32, "DUN", 32, 0},
		{"sierra-em919x", 100, "IP_HW0", 512, 1},
		{"sierra-em919x", 101, "IP_HW0", 512, 2},
		// Telit FN980 v1.
		{"telit-fn980-hwv1", 14, "QMI", 32, 0},
		{"telit-fn980-hwv1", 21, "IPCR", 16, 0},
		{"telit-fn980-hwv1", 100, "IP_HW0", 128, 1},
		{"telit-fn980-hwv1", 101, "IP_HW0", 128, 2},
		// Telit FN990.
		{"telit-fn990", 2, "SAHARA", 32, 0},
		{"telit-fn990", 4, "DIAG", 64, 1},
		{"telit-fe990a", 13, "MBIM", 32, 0},
		{"telit-fe990a", 32, "DUN", 32, 0},
		{"telit-fn990", 93, "DUN2", 32, 1},
		{"telit-fn990", 95, "NMEA", 32, 1},
		{"telit-fn990", 100, "IP_HW0_MBIM", 128, 2},
		// Telit FN920C04.
		{"telit-fn920c04", 3, "SAHARA", 32, 0},
		{"telit-fn920c04", 5, "DIAG", 64, 1},
		{"telit-fe912c04", 14, "QMI", 32, 0},
		{"telit-fn990b40", 34, "FIREHOSE", 32, 0},
		{"telit-fe990b40", 92, "DUN2", 32, 1},
		{"telit-fn920c04", 94, "NMEA", 32, 1},
		{"telit-fn920c04", 101, "IP_HW0", 128, 3},
		// SA8775P.
		{"qcom-sa8775p", 46, "IP_SW0", 2048, 1},
		{"qcom-sa8775p", 47, "IP_SW0", 2048, 2},
		// QDU100.
		{"qcom-qdu100", 1, "LOOPBACK", 32, 2},
		{"qcom-qdu100", 2, "SAHARA", 128, 1},
		{"qcom-qdu100", 46, "IP_SW0", 256, 5},
		{"qcom-qdu100", 53, "IP_ETH1", 256, 8},
	}
	for _, tt := range tests {
		p := mustLookup(t, tt.profile)
		c, ok := p.Channel(tt.num)
		if !ok {
			t.Errorf("%s: no channel %d", tt.profile, tt.num)
			continue
		}
		if c.Name != tt.name || c.Elements != tt.elements || c.EventRing != tt.ring {
			t.Errorf("%s: channel %d = %s/%d elements/ER%d, want %s/%d/ER%d",
				tt.profile, tt.num, c.Name, c.Elements, c.EventRing, tt.name, tt.elements, tt.ring)
		}
	}
}

// TestEventRingSpotChecks compares event rings with §6.2.
func TestEventRingSpotChecks(t *testing.T) {
	tests := []struct {
		profile  string
		ring     int
		kind     EventRingKind
		elements int
		channel  int
	}{
		{"qcom-sdx55m", 0, EventRingCtrl, 64, -1},
		{"qcom-sdx55m", 1, EventRingData, 128, -1},
		{"qcom-sdx24", 2, EventRingSWData, 64, -1},
		{"qcom-sdx24", 3, EventRingSWData, 64, -1},
		{"qcom-sdx65m", 4, EventRingHWData, 1024, 100},
		{"qcom-sdx65m", 5, EventRingHWData, 2048, 101},
		{"quectel-em1xx", 0, EventRingCtrl, 128, -1},
		{"quectel-em1xx", 1, EventRingData, 128, -1},
		{"quectel-em1xx", 2, EventRingHWData, 1024, 100},
		{"quectel-em1xx", 3, EventRingHWData, 1024, 101},
		{"foxconn-t99w175", 0, EventRingCtrl, 128, -1},
		{"foxconn-t99w696", 3, EventRingHWData, 1024, 101},
		{"cinterion-mv31", 0, EventRingCtrl, 256, -1},
		{"cinterion-mv31", 1, EventRingData, 256, -1},
		{"cinterion-mv32", 2, EventRingHWData, 1024, 100},
		{"cinterion-mv32", 3, EventRingHWData, 1024, 101},
		{"sierra-em919x", 0, EventRingCtrl, 2048, -1},
		{"sierra-em919x", 1, EventRingHWData, 2048, 100},
		{"sierra-em919x", 2, EventRingHWData, 2048, 101},
		{"telit-fn980-hwv1", 0, EventRingCtrl, 128, -1},
		{"telit-fn980-hwv1", 1, EventRingHWData, 1024, 100},
		{"telit-fn980-hwv1", 2, EventRingHWData, 2048, 101},
		{"telit-fn990", 1, EventRingData, 128, -1},
		{"telit-fn990", 2, EventRingHWData, 1024, 100},
		{"telit-fn990", 3, EventRingHWData, 2048, 101},
		{"telit-fn920c04", 3, EventRingHWData, 2048, 101},
		{"qcom-sa8775p", 0, EventRingCtrl, 64, -1},
		{"qcom-sa8775p", 1, EventRingSWData, 64, -1},
		{"qcom-sa8775p", 2, EventRingSWData, 64, -1},
		{"qcom-qdu100", 0, EventRingCtrl, 64, -1},
		{"qcom-qdu100", 2, EventRingSWData, 64, -1},
		{"qcom-qdu100", 8, EventRingSWData, 512, -1},
	}
	for _, tt := range tests {
		p := mustLookup(t, tt.profile)
		if tt.ring >= len(p.EventRings) {
			t.Errorf("%s: no event ring %d", tt.profile, tt.ring)
			continue
		}
		e := p.EventRings[tt.ring]
		if e.Kind != tt.kind || e.Elements != tt.elements || e.Channel != tt.channel {
			t.Errorf("%s: event ring %d = %+v, want kind %d, %d elements, channel %d",
				tt.profile, tt.ring, e, tt.kind, tt.elements, tt.channel)
		}
	}
	// The QDU100 rings stay within the documented 64–512 SW_DATA range.
	for i, e := range mustLookup(t, "qcom-qdu100").EventRings[1:] {
		if e.Elements < 64 || e.Elements > 512 {
			t.Errorf("qcom-qdu100: event ring %d: %d elements", i+1, e.Elements)
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
