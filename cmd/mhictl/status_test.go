package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

func TestStatusBringsTheEmulatedModemUpAndPrintsTheSession(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"status", "-device", "sim"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"registration", "home", "mhistack (00101)", "-73 dBm", "attached", "activated", "10.0.0.2/30", "2001:db8:64::2/64", "10.0.0.53", "MTU             1500", "rx_alloc_fail"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"status", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("-json exit %d: %s", code, errb.String())
	}
	var o statusOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if o.Registration != "home" || o.ProviderID != "00101" || o.ProviderName != "mhistack" || o.Session != "activated" ||
		!o.LinkUp || o.MTU != 1500 || len(o.IPv4) != 1 || o.IPv4[0] != "10.0.0.2/30" || len(o.IPv6) == 0 || len(o.DNS) == 0 ||
		o.RSSIdBm == nil || o.PacketSvc != "attached" {
		t.Errorf("-json: %+v", o)
	}
	// status and info emulate the same modem by default, and say so in
	// their -profile help.
	if o.Profile != defaultSimProfile {
		t.Errorf("status -device sim emulates %s, info %s", o.Profile, defaultSimProfile)
	}
}

// TestEmulatedModemsPresentTheirOwnProfilesIDs: -device sim -profile P
// presents PCI IDs that match P again (the profile info reports comes
// from matching them).
func TestEmulatedModemsPresentTheirOwnProfilesIDs(t *testing.T) {
	for _, p := range mhi.Profiles() {
		for i := range p.IDs {
			m, err := sim.New(p, sim.Options{IDIndex: i})
			if err != nil {
				t.Fatalf("%s #%d: %v", p.Name, i, err)
			}
			id := m.Identity()
			if got, ok := mhi.Match(id.Vendor, id.Device, id.SubVendor, id.SubDev); !ok || got != p {
				t.Errorf("emulated %s (ID #%d) presents %04x:%04x sub %04x:%04x, which matches %v", p.Name, i, id.Vendor, id.Device, id.SubVendor, id.SubDev, got)
			}
		}
	}
}

func TestStatusFailsWithExitCode1AndAHintWhenBringUpFails(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-sim-absent"}, "insert a SIM"},
		{[]string{"status", "-sim-apn", "internet", "-apn", "nosuch.apn"}, "check -apn"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &out); code != 1 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("mhictl %q: exit %d, want 1; output %q should contain %q", tc.args, code, out.String(), tc.want)
		}
	}
}

func TestStatusRejectsBadUsageWithExitCode2(t *testing.T) {
	for _, args := range [][]string{
		{"status", "extra"},
		{"status", "-profile", "nope"},
		{"status", "-device", "not-an-address"},
		{"status", "-bogus"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), args, &out, &out); code != 2 {
			t.Errorf("mhictl %q: exit %d, want 2; output %q", args, code, out.String())
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"status", "--help"}, &out, &out); code != 0 || !strings.Contains(out.String(), "usage: mhictl status") || !strings.Contains(out.String(), "-apn") {
		t.Errorf("status --help: exit %d, output %q", code, out.String())
	}
}

// A QMI-only modem (the Telit FN980 v1 has no MBIM channel) is brought up
// over QMI, and the same with -control qmi on a modem that has both.
func TestStatusOverQMI(t *testing.T) {
	for _, args := range [][]string{
		{"status", "-device", "sim", "-profile", "telit-fn980-hwv1", "-json"},
		{"status", "-device", "sim", "-profile", "qcom-sdx55m", "-control", "qmi", "-json"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("mhictl %q: exit %d: %s", args, code, errb.String())
		}
		var o statusOut
		if err := json.Unmarshal(out.Bytes(), &o); err != nil {
			t.Fatalf("-json: %v\n%s", err, out.String())
		}
		if o.Registration != "home" || o.ProviderID != "00101" || o.ProviderName != "mhistack" || o.Session != "activated" ||
			!o.LinkUp || o.MTU != 1500 || len(o.IPv4) != 1 || o.IPv4[0] != "10.0.0.2/30" || len(o.IPv6) == 0 || len(o.DNS) != 3 ||
			o.RSSIdBm == nil || *o.RSSIdBm != -73 || o.PacketSvc != "attached" || o.IPType != "ipv4v6" {
			t.Errorf("mhictl %q: %+v", args, o)
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"status", "-control", "at"}, &out, &out); code != 2 || !strings.Contains(out.String(), "want mbim or qmi") {
		t.Errorf("-control at: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"status", "-profile", "telit-fn980-hwv1", "-control", "mbim"}, &out, &out); code != 1 || !strings.Contains(out.String(), `no channel pair "MBIM"`) {
		t.Errorf("-control mbim on telit-fn980-hwv1: exit %d, %q", code, out.String())
	}
}

// A modem whose firmware had crashed into RDDM: the bring-up collects its
// RAM dump, status reports it and -dump writes it.
func TestStatusReportsAndWritesTheCrashDump(t *testing.T) {
	file := filepath.Join(t.TempDir(), "modem.rddm")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"status", "-device", "sim", "-sim-crash", "-dump", file}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "crash dump") || !strings.Contains(out.String(), "written to "+file) {
		t.Errorf("status output does not report the dump:\n%s", out.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if img := simCrashImage(); !bytes.HasPrefix(b, img) {
		t.Errorf("-dump wrote %d bytes not starting with the modem's image", len(b))
	}
	out.Reset()
	if code := run(context.Background(), []string{"status", "-device", "sim", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var o statusOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	if o.CrashDump != nil {
		t.Errorf("a modem that never crashed reports a dump: %+v", o.CrashDump)
	}
	if code := run(context.Background(), []string{"status", "-device", "0000:01:00.0", "-sim-crash"}, &out, &errb); code != 2 {
		t.Errorf("-sim-crash without -device sim: exit %d, want 2", code)
	}
}

// TestStatusShowsTheFCCLockAndUnlocksWithTheFlag: an emulated
// quectel-rm5xx ships FCC-locked: status prints "radio fcc-locked" and
// fails naming -fcc-unlock; with -fcc-unlock the radio is on.
func TestStatusShowsTheFCCLockAndUnlocksWithTheFlag(t *testing.T) {
	var out bytes.Buffer
	code := run(context.Background(), []string{"status", "-device", "sim", "-profile", "quectel-rm5xx"}, &out, &out)
	if code != 1 || !regexp.MustCompile(`radio\s+fcc-locked`).MatchString(out.String()) || !strings.Contains(out.String(), "-fcc-unlock") {
		t.Fatalf("locked: exit %d:\n%s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"status", "-device", "sim", "-profile", "quectel-rm5xx", "-fcc-unlock"}, &out, &out); code != 0 ||
		!regexp.MustCompile(`radio\s+on`).MatchString(out.String()) {
		t.Fatalf("-fcc-unlock: exit %d:\n%s", code, out.String())
	}
}

// TestStatusPINFlags: -pin with -pin-file, and -puk without a new PIN,
// are usage errors (exit 2); the PIN given never shows in the output;
// -pin-file feeds a PIN (an unlocked emulated SIM ignores it).
func TestStatusPINFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pin")
	if err := os.WriteFile(file, []byte("1234\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(stack.PINEnv, "")
	for _, args := range [][]string{
		{"status", "-pin", "97531", "-pin-file", file},
		{"status", "-puk", "12345678"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), args, &out, &out); code != 2 || strings.Contains(out.String(), "97531") {
			t.Errorf("mhictl %q: exit %d, want 2:\n%s", args, code, out.String())
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"status", "-pin-file", file}, &out, &out); code != 0 {
		t.Errorf("-pin-file: exit %d:\n%s", code, out.String())
	}
}

// TestStatusShowsTheCellOverQMI: status reads the operator name (UCS2
// on the air), RAT, bands, carrier aggregation and LTE/NR signal that
// -sim-operator and -sim-cell configure, in text and -json.
func TestStatusShowsTheCellOverQMI(t *testing.T) {
	args := []string{"status", "-device", "sim", "-control", "qmi", "-sim-operator", "中国移动",
		"-sim-cell", "lte=-101/-12/7.5,nr=-88/-11/18.2,bands=B3+B7+n78"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"rat             lte+nr", "bands           B3, B7, n78", "primary    B3, PCI 101",
		"secondary  B7, PCI 102", "LTE signal      RSRP -101 dBm, RSRQ -12 dB, SINR 7.5 dB",
		"NR signal       RSRP -88 dBm, RSRQ -11 dB, SINR 18.2 dB", "SIM card        ready", "中国移动"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), append(args, "-json"), &out, &errb); code != 0 {
		t.Fatalf("-json exit %d: %s", code, errb.String())
	}
	var o statusOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if o.OperatorName != "中国移动" || o.RAT != "lte+nr" || len(o.Bands) != 3 || len(o.Carriers) != 2 || o.Carriers[0].Role != "primary" ||
		o.LTE == nil || o.LTE.RSRP != -101 || o.LTE.SINR != 7.5 || o.NR == nil || o.NR.RSRQ == nil || *o.NR.RSRQ != -11 || o.SIMState != "ready" {
		t.Errorf("-json radio: %+v", o.radioOut)
	}
}

func TestStatusShowsTheSIMStateAndRATOverMBIM(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"status", "-device", "sim", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var o statusOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v", err)
	}
	// The default cell: LTE B3, read through MBIMEx 2.0.
	if o.SIMState != "ready" || o.RAT != "lte" || len(o.Bands) != 1 || o.Bands[0] != "B3" || o.LTE == nil {
		t.Errorf("MBIM radio: %+v", o.radioOut)
	}
}

// TestStatusShowsTheCellOverMBIM: over MBIM, status prints the fields
// it prints over QMI (TestStatusShowsTheCellOverQMI) from the MBIMEx 2.0
// SIGNAL_STATE and the MBIMEx 3.0 BASE_STATIONS_INFO: RAT, the LTE and NR
// bands and serving cells, RSRP/RSRQ/SINR (SINR in 0.5 dB steps), NR's
// RSRQ included, in text and -json.
func TestStatusShowsTheCellOverMBIM(t *testing.T) {
	args := []string{"status", "-device", "sim", "-sim-cell", "lte=-101/-12/7.5,nr=-88/-11/18.2,bands=B3+B7+n78"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"rat             lte+nr", "bands           B3, n78\n", "primary    B3, PCI 101, EARFCN 1574\n",
		"secondary  n78, PCI 103, NR-ARFCN 636666\n",
		"LTE signal      RSRP -101 dBm, RSRQ -12 dB, SINR 7.5 dB", "NR signal       RSRP -88 dBm, RSRQ -11 dB, SINR 18 dB",
		"SIM card        ready"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), append(args, "-json"), &out, &errb); code != 0 {
		t.Fatalf("-json exit %d: %s", code, errb.String())
	}
	var o statusOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if !slices.Equal(o.Bands, []string{"B3", "n78"}) || len(o.Carriers) != 2 || o.Carriers[1].NRARFCN != 636666 ||
		o.Carriers[1].EARFCN != 0 || o.NR == nil || o.NR.RSRQ == nil || *o.NR.RSRQ != -11 {
		t.Errorf("-json radio: %+v", o.radioOut)
	}
}

func TestStatusRejectsABadSimCell(t *testing.T) {
	for _, v := range []string{"lte=-93/-9", "lte=0/-9/13", "bands=X3", "bands=B", "drift=7", "foo=1", "lte"} {
		var out bytes.Buffer
		if code := run(context.Background(), []string{"status", "-sim-cell", v}, &out, &out); code != 2 {
			t.Errorf("-sim-cell %q: exit %d, want 2: %s", v, code, out.String())
		}
	}
}

// TestStatusOnARoamingModemNeedsAllowRoaming: a modem registered on a
// visited network gets no session unless -allow-roaming is given; the
// error names the flag.
func TestStatusOnARoamingModemNeedsAllowRoaming(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"status", "-device", "sim", "-sim-roaming"}, &out, &out); code != 1 || !strings.Contains(out.String(), "-allow-roaming") {
		t.Fatalf("roaming without -allow-roaming: exit %d, want 1 naming the flag:\n%s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"status", "-device", "sim", "-sim-roaming", "-allow-roaming"}, &out, &out); code != 0 {
		t.Fatalf("-allow-roaming: exit %d:\n%s", code, out.String())
	}
}
