package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// fakeKO is the part of a mhi_pci_generic.ko the harness reads: the
// .modinfo aliases (in reverse table order, as modinfo stores them) and
// channel-name literals.
func fakeKO(aliases []string, names ...string) []byte {
	var b strings.Builder
	b.WriteString("\x00")
	for _, a := range aliases {
		b.WriteString("alias=" + a + "\x00")
	}
	for _, n := range names {
		b.WriteString(n + "\x00")
	}
	return []byte(b.String())
}

func profile(t *testing.T, name string) *mhi.Profile {
	t.Helper()
	p, ok := mhi.Lookup(name)
	if !ok {
		t.Fatalf("no profile %s", name)
	}
	return p
}

func TestExpectationsFollowTheProfileMinusChannelsTheKernelNeverNames(t *testing.T) {
	ko := fakeKO(nil, "DIAG", "MBIM", "QMI", "IPCR", "IP_HW0", "FIREHOSE") // no IP_SW0, like 6.1
	e := expectFor(profile(t, "qcom-sdx55m"), ko)
	if got := strings.Join(e.channels, " "); got != "mhi0_DIAG mhi0_IPCR mhi0_IP_HW0 mhi0_MBIM mhi0_QMI" {
		t.Errorf("channels %q (FIREHOSE is EDL-only, IP_SW0 unknown to the kernel)", got)
	}
	if strings.Join(e.absent, " ") != "IP_SW0" || strings.Join(e.netdevs, " ") != "mhi_hwip0" || e.pingDev != "mhi_hwip0" {
		t.Errorf("absent %v netdevs %v ping %q", e.absent, e.netdevs, e.pingDev)
	}
	if got := strings.Join(e.ports, " "); got != "qcdm0 mbim0 qmi0" {
		t.Errorf("ports %q", got)
	}
	e = expectFor(profile(t, "quectel-em1xx"), fakeKO(nil, "NMEA", "SAHARA", "DIAG", "MBIM", "DUN", "FIREHOSE", "IP_HW0_MBIM"))
	if e.pingDev != "wwan0" || strings.Join(e.netdevs, " ") != "wwan0" || strings.Join(e.ports, " ") != "qcdm0 at0 mbim0" {
		t.Errorf("quectel: %+v", e)
	}
}

func TestDrivesTakesTheFirstMatchOfTheKernelTable(t *testing.T) {
	// Reverse table order, as in 6.1: the Sierra and Telit subsystem
	// entries come before the 17cb:0306 wildcard in the table.
	ko := fakeKO([]string{
		"pci:v00001EACd00001001sv*sd*bc*sc*i*",
		"pci:v000017CBd00000306sv*sd*bc*sc*i*",
		"pci:v000017CBd00000306sv00001C5Dsd00002000bc*sc*i*",
		"pci:v000017CBd00000306sv000018D7sd00000200bc*sc*i*",
	})
	aliases := pciAliases(ko)
	if len(aliases) != 4 || aliases[2].subVendor != 0x1c5d || aliases[1].subVendor != -1 {
		t.Fatalf("aliases %+v", aliases)
	}
	for name, want := range map[string]bool{
		"qcom-sdx55m":      true,  // wildcard entry
		"quectel-em1xx":    true,  // 1eac:1001
		"sierra-em919x":    true,  // its own subsystem entry
		"telit-fn980-hwv1": true,  // its own subsystem entry
		"foxconn-sdx55":    false, // 17cb:0306 sub 17cb:010c: only the wildcard (qcom-sdx55m's config)
		"cinterion-mv31":   false, // not in the table
	} {
		if got := drives(aliases, profile(t, name)); got != want {
			t.Errorf("%s: drives %v, want %v", name, got, want)
		}
	}
}

func TestDmesgComplaintsAndKnownMessages(t *testing.T) {
	lines := []string{
		"[    1.0] mhi-pci-generic 0000:00:01.0: MHI PCI device found: qcom-sdx55m",
		"[    3.1] mhi mhi0: System error detected",
		"[    3.2] mhi mhi0: Transitioning from PM state: SYS ERROR Detect to: SYS ERROR Process",
		"[    3.3] mhi mhi0: Error moving to state POWER ON RESET from M0",
		"[    9.0] mhi mhi0: Device failed to enter MHI Ready",
		"[    9.1] usb 1-1: device descriptor read error", // not the MHI stack
	}
	suspendFail := []string{"[   27.6] mhi mhi0: Could not enter M0/M1 state", "[   27.6] mhi-pci-generic 0000:00:01.0: failed to suspend device: -5"}
	// Without the double SYS_ERR before it, a failed suspend is the
	// modem's problem (it never announced M0, say).
	if complaints, _ := dmesgErrors(suspendFail); len(complaints) != 2 {
		t.Errorf("failed suspend without a double SYS_ERR: complaints %q", complaints)
	}
	complaints, tolerated := dmesgErrors(append(lines, suspendFail...))
	if len(complaints) != 1 || !strings.Contains(complaints[0], "failed to enter MHI Ready") {
		t.Errorf("complaints %q", complaints)
	}
	if len(tolerated) != 3 || !strings.Contains(tolerated[0], "POWER ON RESET") {
		t.Errorf("tolerated %q", tolerated)
	}
}

func TestInitScriptIsFilledIn(t *testing.T) {
	s := script(expectFor(profile(t, "qcom-sdx55m"), fakeKO(nil, "DIAG", "IP_HW0")), 42)
	if m := regexp.MustCompile(`@[A-Z]+@`).FindString(s); m != "" {
		t.Errorf("placeholder %s left in the init script", m)
	}
	for _, want := range []string{"WAIT=42", `PINGDEV="mhi_hwip0"`, "mhi:dyndbg=+p", "MHISTACK-REQUEST syserr"} {
		if !strings.Contains(s, want) {
			t.Errorf("init script lacks %q", want)
		}
	}
	for _, c := range guestChecks {
		if !strings.Contains(s, "check "+c+" ") && !strings.Contains(s, "ping_check "+c) {
			t.Errorf("init script never reports %s", c)
		}
	}
}

func TestFirmwareDownloadsWantTwoIntactBHIImages(t *testing.T) {
	fw := firmware("qcom/sdx55m/sbl1.mbn")
	if string(fw) != string(firmware("qcom/sdx55m/sbl1.mbn")) || string(fw[:64]) == string(firmware("other")[:64]) {
		t.Fatal("firmware is not a deterministic function of its name")
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(fw))
	line := func(size int, sha string) string {
		return fmt.Sprintf(`level=INFO msg="boot image received" via=BHI size=%d sha256=%s session=0x1234`+"\n", size, sha)
	}
	if ok, d := firmwareDownloads(line(len(fw), sum)+line(len(fw), sum), fw, 2); !ok {
		t.Errorf("two intact downloads rejected: %s", d)
	}
	if ok, _ := firmwareDownloads(line(len(fw), sum), fw, 2); ok {
		t.Error("one download accepted (the SYS_ERR recovery must download again)")
	}
	if ok, d := firmwareDownloads(line(len(fw), sum)+line(len(fw)-1, sum), fw, 2); ok {
		t.Errorf("a truncated download accepted: %s", d)
	}
	files := firmwareFiles("qcom/sdx55m/sbl1.mbn", fw)
	for _, d := range []string{"lib/firmware", "lib/firmware/qcom", "lib/firmware/qcom/sdx55m"} {
		if files[d].Mode != initramfs.Dir {
			t.Errorf("%s missing", d)
		}
	}
	if len(files["lib/firmware/qcom/sdx55m/sbl1.mbn"].Data) != len(fw) {
		t.Error("firmware file missing")
	}
}

func TestResumeFailuresAreToleratedOnlyInsideTheSysErrInM3Window(t *testing.T) {
	fail := "[   10.0] mhi-pci-generic 0000:00:01.0: failed to resume device: -22"
	if complaints, _ := dmesgErrors([]string{fail}); len(complaints) != 1 {
		t.Errorf("a resume failure outside the check was tolerated")
	}
	complaints, tolerated := dmesgErrors([]string{"[    9.9] mhistack: syserr-in-m3 begin", fail, "[   11.0] mhistack: syserr-in-m3 end", fail})
	if len(complaints) != 1 || len(tolerated) != 1 {
		t.Errorf("complaints %q tolerated %q: want the one inside the window tolerated", complaints, tolerated)
	}
	// mhi_net's TX of the waking ping fails with -EIO while the kernel
	// powers the crashed modem down (6.1, sierra-em919x): tolerated in
	// the window only.
	tx := "[   34.988386] mhi_hwip0: Failed to queue TX buf (-5)"
	complaints, tolerated = dmesgErrors([]string{"[   33.7] mhistack: syserr-in-m3 begin", fail, tx, "[   37.2] mhistack: syserr-in-m3 end", tx})
	if len(complaints) != 1 || len(tolerated) != 2 {
		t.Errorf("complaints %q tolerated %q: want the TX failure inside the window tolerated, the one after it not", complaints, tolerated)
	}
}

func TestTCPSectionRunsBeforeTheMBIMSectionAndTheAggregationIsReadFromTwoStatsLines(t *testing.T) {
	e := expectFor(profile(t, "quectel-em1xx"), fakeKO(nil, "MBIM", "IP_HW0_MBIM"))
	if got := carrierPair(e); got != "IP_HW0_MBIM" {
		t.Fatalf("carrier pair %q, want IP_HW0_MBIM", got)
	}
	e.tcpPort, e.tcpSum = 1234, "abc"
	s := script(e, 10)
	tcp, mbim, crash := strings.Index(s, "tcp_section\n"), strings.Index(s, "mbim_section\n"), strings.Index(s, mbimAnchor)
	if tcp < 0 || mbim < 0 || !(tcp < mbim && mbim < crash) {
		t.Fatalf("sections at %d (tcp), %d (mbim), %d (SYS_ERR): want tcp < mbim < SYS_ERR", tcp, mbim, crash)
	}
	if !strings.Contains(s, "http://198.18.0.1:1234/blob") || !strings.Contains(s, `= "abc"`) {
		t.Error("the TCP section lacks the blob's URL or sum")
	}
	log := `level=INFO msg="carrier stats" channel=IP_HW0_MBIM ul_packets=10 dl_packets=5 dl_frames=5 per_frame=1.0 echoes=5 tcp_flows=0 udp_flows=0 refused=0 dns=0 dropped=0
level=INFO msg="carrier stats" channel=IP_HW0_MBIM ul_packets=210 dl_packets=3005 dl_frames=155 per_frame=19.4 echoes=5 tcp_flows=1 udp_flows=0 refused=0 dns=0 dropped=2
`
	got, ok := aggregation(log)
	if want := "UL 200 packets; DL 3000 datagrams in 150 NTBs: 20.0 per NTB, 2 dropped"; !ok || got != want {
		t.Errorf("aggregation: %q, %v; want %q", got, ok, want)
	}
	if _, ok := aggregation(log[:strings.Index(log, "\n")+1]); ok {
		t.Error("aggregation from one stats line: want a failure")
	}
}

// shellFunction is the text of the init script's function name, from
// "name() {" to the "}" that closes it at the start of a line.
func shellFunction(t *testing.T, script, name string) string {
	t.Helper()
	start := strings.Index(script, "\n"+name+"() {\n")
	if start < 0 {
		t.Fatalf("no function %s in the init script", name)
	}
	end := strings.Index(script[start:], "\n}\n")
	if end < 0 {
		t.Fatalf("function %s never closes", name)
	}
	return script[start+1 : start+end+3]
}

// hostBusybox returns the host's busybox, which runs parts of the guest
// script in tests; without it the test skips (fails with
// MHISTACK_REQUIRE_BUSYBOX=1).
func hostBusybox(t *testing.T) string {
	t.Helper()
	bb := "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		if os.Getenv("MHISTACK_REQUIRE_BUSYBOX") == "1" {
			t.Fatalf("busybox: %v", err)
		}
		t.Skip("no /bin/busybox (apt-get install busybox-static); CI sets MHISTACK_REQUIRE_BUSYBOX=1")
	}
	return bb
}

// TestPingBurstFailsCleanlyWhenAPingPrintsNoStatistics runs the guest's
// ping_burst in the host's busybox sh with a fake ping: a stream whose
// ping dies on a sendto error (no statistics line) must give a FAIL
// verdict naming what it printed, and the script must go on, where the
// shell arithmetic on the missing count used to end /init (exit status 2,
// "Attempted to kill init").
func TestPingBurstFailsCleanlyWhenAPingPrintsNoStatistics(t *testing.T) {
	bb := hostBusybox(t)
	dir := t.TempDir()
	fn := strings.ReplaceAll(shellFunction(t, initScript, "ping_burst"), "/tmp/", dir+"/")
	// The fake ping: -s 600 (the second stream) dies when DIE is set,
	// every other stream gets all 250 replies to 251 requests.
	fake := `
check() { echo "MHISTACK-CHECK $1 $2 $3"; }
ping() {
	local size=""
	while [ $# -gt 0 ]; do [ "$1" = -s ] && size=$2; shift; done
	echo "PING 192.0.2.2 (192.0.2.2): $size data bytes"
	if [ -n "$DIE" ] && [ "$size" = 600 ]; then echo "ping: sendto: No buffer space available" >&2; return 1; fi
	echo
	echo "--- 192.0.2.2 ping statistics ---"
	echo "251 packets transmitted, 250 packets received, 0% packet loss"
	echo "round-trip min/avg/max = 0.100/0.200/0.300 ms"
}
PINGDEV=lo
`
	run := func(die string) string {
		t.Helper()
		cmd := exec.Command(bb, "sh", "-c", fake+fn+"ping_burst\necho MHISTACK-END\n")
		cmd.Env = append(os.Environ(), "DIE="+die)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("DIE=%q: the script failed (%v): %s", die, err, out)
		}
		if !strings.Contains(string(out), "MHISTACK-END") {
			t.Fatalf("DIE=%q: the script stopped inside ping_burst: %s", die, out)
		}
		return string(out)
	}
	if _, err := os.Stat("/sys/class/net/lo"); err != nil {
		t.Skip("no /sys/class/net/lo: ping_burst wants the interface to exist")
	}
	if out := run(""); !strings.Contains(out, "MHISTACK-CHECK ping-burst PASS 1000 replies to 1004 requests") {
		t.Errorf("four full streams: %s", out)
	}
	out := run("1")
	for _, want := range []string{"MHISTACK-CHECK ping-burst FAIL 750 replies to 753 requests", "-s 600 printed no statistics", "sendto: No buffer space available"} {
		if !strings.Contains(out, want) {
			t.Errorf("a stream that died: output lacks %q: %s", want, out)
		}
	}
}

// fakeQmicli answers like Debian's qmicli 1.32 over the emulated modem
// (the answers TestQmicliThroughProxy in link/qmi prints), with the
// serving system's registration state from $REG.
const fakeQmicli = `#!/bin/busybox sh
say() { echo "[/dev/wwan0qmi0] $*"; }
case "$*" in
*--dms-get-ids*) say "Device IDs retrieved:"; printf "\t    ESN: 'unknown'\n\t   IMEI: '867929060000017'\n\t   MEID: 'unknown'\n" ;;
*--nas-get-serving-system*) say "Successfully got serving system:"
	printf "\tRegistration state: '%s'\n\tCS: 'attached'\n\tPS: 'attached'\n\tSelected network: '3gpp'\n\tRadio interfaces: '1'\n\t\t[0]: '5gnr'\n" "$REG"
	printf "\tRoaming status: 'off'\n\tCurrent PLMN:\n\t\tMCC: '1'\n\t\tMNC: '1'\n\t\tDescription: 'mhistack'\n" ;;
*--wds-start-network=apn=internet,ip-type=4\ --client-no-release-cid*) say "Network started"; printf "\tPacket data handle: '3'\n"
	say "Client ID not released:"; printf "\tService: 'wds'\n\t    CID: '4'\n" ;;
*--client-cid=4\ --client-no-release-cid\ --wds-get-packet-service-status*) say "Connection status: 'connected'" ;;
*--wds-get-packet-service-status*) say "Connection status: 'disconnected'" ;;
*--client-cid=4\ --client-no-release-cid\ --wds-get-current-settings*) say "Current settings retrieved:"
	printf "           IP Family: IPv4\n        IPv4 address: 10.0.0.2\n    IPv4 subnet mask: 255.255.255.252\nIPv4 gateway address: 10.0.0.1\n                 MTU: 1500\n" ;;
*--client-cid=4\ --wds-stop-network=3*) echo "Network cancelled... releasing resources"; say "Network stopped" ;;
*) echo "error: unexpected arguments: $*" >&2; exit 1 ;;
esac
`

// TestQMISectionReadsQmicliAndTheHarnessComparesTheIdentity runs the
// guest's QMI section in the host's busybox sh against a fake qmicli that
// prints what the real one does: every check passes with the values
// parsed from it, a modem that is not registered fails the serving-system
// check, and the harness then holds the IMEI and PLMN against the modem's
// log (a different IMEI fails qmi-dms-ids).
func TestQMISectionReadsQmicliAndTheHarnessComparesTheIdentity(t *testing.T) {
	bb := hostBusybox(t)
	dir := t.TempDir()
	fake := filepath.Join(dir, "qmicli")
	if err := os.WriteFile(fake, []byte(strings.Replace(fakeQmicli, "/bin/busybox", bb, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(dir, "wwan0qmi0")
	if err := os.WriteFile(dev, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := expectFor(profile(t, "qcom-sdx55m"), fakeKO(nil, "DIAG", "MBIM", "QMI", "IP_HW0"))
	s := script(e, 10)
	qmi, crash := strings.Index(s, "qmi_section\n"), strings.Index(s, mbimAnchor)
	if mbim := strings.Index(s, "mbim_section\n"); qmi < 0 || !(mbim < qmi && qmi < crash) {
		t.Fatalf("sections at %d (mbim), %d (qmi), %d (SYS_ERR): want mbim < qmi < SYS_ERR", mbim, qmi, crash)
	}
	sec := s[strings.Index(s, "# ---- QMI control plane"):strings.Index(s, "# ---- end of the QMI section")]
	sec = strings.NewReplacer("dev=/dev/wwan0qmi0", "dev="+dev, "qmicli=/usr/bin/qmicli", "qmicli="+fake).Replace(sec)
	run := func(reg string) *result {
		t.Helper()
		cmd := exec.Command(bb, "sh", "-c", `check() { echo "MHISTACK-CHECK $1 $2 $3"; }`+"\n"+sec)
		cmd.Env = append(os.Environ(), "REG="+reg, "PATH="+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the QMI section failed (%v): %s", err, out)
		}
		r := &result{}
		for _, line := range strings.Split(string(out), "\n") {
			if name, st, detail, ok := qh.ParseCheck(line); ok {
				r.add(name, st != qh.Fail, detail)
			}
		}
		if len(r.order) != len(qmiChecks) {
			t.Fatalf("checks %v, want %v; output:\n%s", r.order, qmiChecks, out)
		}
		return r
	}
	r := run("registered")
	want := map[string]string{
		"qmi-dms-ids":            "IMEI 867929060000017",
		"qmi-nas-serving-system": "registered, PS attached, radio 5gnr, MCC 1 MNC 1",
		"qmi-wds-start-network":  "packet data handle 3 on WDS client 4",
		"qmi-wds-packet-status":  "connected (client 4)",
		"qmi-wds-settings":       "IPv4 10.0.0.2 gateway 10.0.0.1 MTU 1500",
		"qmi-wds-stop-network":   "stopped, client 4 released; a new client reads disconnected",
	}
	for name, d := range want {
		if c := r.checks[name]; !c.pass || c.detail != d {
			t.Errorf("%s: pass %v %q, want PASS %q", name, c.pass, c.detail, d)
		}
	}
	modemLog := `level=INFO msg="qmi function" part=modem channel=QMI imei=867929060000017 plmn=00101 shares_network_with_mbim=true` + "\n"
	qmiIdentity(r, modemLog)
	if c := r.checks["qmi-dms-ids"]; !c.pass || !strings.HasSuffix(c.detail, "(the modem's)") {
		t.Errorf("qmi-dms-ids against the modem's IMEI: %v %q", c.pass, c.detail)
	}
	if c := r.checks["qmi-nas-serving-system"]; !c.pass || !strings.HasSuffix(c.detail, "(the modem's 00101)") {
		t.Errorf("qmi-nas-serving-system against the modem's PLMN: %v %q", c.pass, c.detail)
	}
	r = run("registered")
	qmiIdentity(r, strings.Replace(modemLog, "imei=867929060000017 plmn=00101", "imei=867929060000025 plmn=310260", 1))
	for _, name := range []string{"qmi-dms-ids", "qmi-nas-serving-system"} {
		if c := r.checks[name]; c.pass {
			t.Errorf("%s passed against another modem's identity: %q", name, c.detail)
		}
	}
	r = run("searching")
	if c := r.checks["qmi-nas-serving-system"]; c.pass || !strings.Contains(c.detail, "registration 'searching'") {
		t.Errorf("a searching modem: %v %q", c.pass, c.detail)
	}
}

func TestQMIPlanSkipsOrFailsWithAReason(t *testing.T) {
	sdx := expectFor(profile(t, "qcom-sdx55m"), fakeKO(nil, "DIAG", "MBIM", "QMI", "IP_HW0"))
	noQMI := expectFor(profile(t, "qcom-sdx55m"), fakeKO(nil, "DIAG", "MBIM", "IP_HW0"))
	quectel := expectFor(profile(t, "quectel-em1xx"), fakeKO(nil, "MBIM", "IP_HW0_MBIM"))
	for _, c := range []struct {
		e                      expect
		hasQMI, have, require  bool
		verdict, reasonContain string
	}{
		{sdx, true, true, false, "", ""},
		{sdx, true, true, true, "", ""},
		{sdx, true, false, false, "SKIP", "apt-get install libqmi-utils"},
		{sdx, true, false, true, "FAIL", "MHISTACK_REQUIRE_QMICLI=1"},
		{noQMI, true, true, true, "SKIP", "this kernel's mhi_pci_generic has no QMI channel"},
		{quectel, false, true, true, "SKIP", "the profile has no QMI channel"},
	} {
		v, why := qmiPlan(c.e, c.hasQMI, c.have, c.require)
		if v != c.verdict || !strings.Contains(why, c.reasonContain) || (v == "") != (why == "") {
			t.Errorf("qmiPlan(ports %v, qmi %v, qmicli %v, require %v) = %q %q, want %q …%q…", c.e.ports, c.hasQMI, c.have, c.require, v, why, c.verdict, c.reasonContain)
		}
	}
	telit := expectFor(profile(t, "telit-fn980-hwv1"), fakeKO(nil, "QMI", "IPCR", "IP_HW0"))
	if s := script(telit, 10); !strings.Contains(s, `if [ "0" != 1 ]; then for c in mbim-device-caps`) {
		t.Error("the MBIM section of a QMI-only profile does not skip its checks")
	}
	if s := script(quectel, 10); !strings.Contains(s, `if [ "1" != 1 ]; then for c in mbim-device-caps`) {
		t.Error("the MBIM section of an MBIM profile is not planned to run")
	}
	quectel.qmiVerdict, quectel.qmiReason = qmiPlan(quectel, false, true, false)
	if s := script(quectel, 10); !strings.Contains(s, `if [ -n "the profile has no QMI channel" ]; then qmi_all SKIP "the profile has no QMI channel"`) {
		t.Error("the section of a profile without QMI does not skip its checks with the reason")
	}
}

// TestStallWatcherDumpsTheKernelLogOnceWhenNoVerdictComes runs the guest's
// stall watcher in the host's busybox sh with a fake clock and dmesg: no
// verdict for STALL seconds makes it print the kernel log, prefixed for
// the harness, once per stall; the checks' own "wait" does not wait for
// it.
func TestStallWatcherDumpsTheKernelLogOnceWhenNoVerdictComes(t *testing.T) {
	bb := hostBusybox(t)
	dir := t.TempDir()
	e := expectFor(profile(t, "qcom-sdx55m"), fakeKO(nil, "DIAG", "IP_HW0"))
	e.stallDump = 2
	s := script(e, 10)
	i, j := strings.Index(s, "STALL=2\n"), strings.Index(s, "# (end of the stall watcher)")
	if i < 0 || j < i {
		t.Fatalf("no stall watcher with STALL=2 in the script")
	}
	sec := strings.NewReplacer("/tmp/", dir+"/", "sleep 5", "sleep 0.05").Replace(s[i:j])
	out := filepath.Join(dir, "out")
	sh := `exec >` + out + ` 2>&1
up() { cat ` + dir + `/uptime; }
dmesg() { echo "[   1.000000] mhi mhi0: first"; echo "[   2.000000] mhi mhi0: last"; }
echo 100.25 > ` + dir + `/uptime
` + sec + `
check syserr-recovery FAIL "not recovered"
wait
echo 103.5 > ` + dir + `/uptime
n=0
while [ $n -lt 200 ] && [ "$(grep -c 'mhi0: last' ` + out + `)" = 0 ]; do sleep 0.05; n=$((n+1)); done
sleep 0.3
touch ` + dir + `/stall-watcher-stop
`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bb, "sh", "-c", sh)
	// The watcher is a grandchild the script cannot wait for; if it
	// misses the stop file before t.TempDir goes, it would loop on for
	// good: its process group goes with the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("the script failed (%v; a \"wait\" waiting for the watcher times out)", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	var dump []string
	for _, line := range strings.Split(got, "\n") {
		if l, ok := strings.CutPrefix(line, stallDmesgPrefix); ok {
			dump = append(dump, l)
		}
	}
	if len(dump) != 2 || !strings.HasSuffix(dump[1], "mhi0: last") {
		t.Fatalf("want the 2 kernel log lines once, got %q in:\n%s", dump, got)
	}
	if !strings.Contains(got, "MHISTACK-CHECK syserr-recovery FAIL not recovered") || !strings.Contains(got, "no verdict since 100.25s") {
		t.Errorf("output:\n%s", got)
	}
}

// TestStallWatchStopsTheGuestAndNamesTheLastVerdict: with no verdict
// within the limit the watch cancels the guest's context and says which
// verdict came last; verdicts in time keep it quiet.
func TestStallWatchStopsTheGuestAndNamesTheLastVerdict(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStallWatch(50*time.Millisecond, cancel)
	s.progress("ping-burst")
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the guest was not stopped")
	}
	if last, ok := s.stalled(); !ok || last != "ping-burst" {
		t.Errorf("stalled() = %q, %v", last, ok)
	}
	s.stop()

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	quiet := newStallWatch(time.Hour, cancel2)
	quiet.progress("ping")
	quiet.stop()
	if _, ok := quiet.stalled(); ok || ctx2.Err() != nil {
		t.Error("a watch with verdicts in time stopped the guest")
	}
	r := &result{}
	for _, name := range guestChecks[:3] {
		r.add(name, true, "")
	}
	if got := nextCheck(r); got != guestChecks[3] {
		t.Errorf("nextCheck = %q, want %q", got, guestChecks[3])
	}
	if got := stallDetail(time.Minute, "", &result{}, 0); !strings.Contains(got, "hung in the boot (no /init yet)") {
		t.Errorf("before /init: %q", got)
	}
	r.boot = time.Second
	if got := stallDetail(time.Minute, guestChecks[2], r, 7); !strings.Contains(got, "hung after "+guestChecks[2]+", in "+guestChecks[3]) || !strings.Contains(got, "7 kernel log lines") {
		t.Errorf("after a verdict: %q", got)
	}
	if d := stallDumpAfter(150 * time.Second); d != 75 {
		t.Errorf("stallDumpAfter(150s) = %d, want 75", d)
	}
}

// fakeLatePing is a ping that answers like busybox's: -W bounds the wait
// for the first reply only; once a reply came, a reply later than about
// two round trips (at least 1 s) after the last request is counted lost.
// The second request of each LATE size gets its reply 2 s late (a guest
// starved on a loaded host); every other reply is at once.
const fakeLatePing = `
ping() {
	local c=1 size=56
	while [ $# -gt 0 ]; do
		case $1 in -c) c=$2; shift ;; -s) size=$2; shift ;; -W|-i|-w) shift ;; esac
		shift
	done
	local f=$DIR/sent-$size sent rx=0 j=0 delay window
	while [ $j -lt $c ]; do
		sent=$(( $(cat $f 2>/dev/null || echo 0) + 1 )); echo $sent > $f
		delay=0
		case " $LATE " in *" $size "*) [ $sent = 2 ] && delay=2 ;; esac
		window=5
		[ $rx -gt 0 ] && window=1
		[ $delay -le $window ] && rx=$((rx + 1))
		j=$((j + 1))
	done
	echo "$c packets transmitted, $rx packets received"
}
`

// TestPingSizesWaitsForEachLateReply runs the guest's ping_sizes with a
// ping that behaves like busybox's: a 32741-byte reply 2 s late must not
// fail the check, as it did when two requests shared one ping process
// ("ping -c 2 -i 0.2": 1 of 2 replies on a loaded host).
func TestPingSizesWaitsForEachLateReply(t *testing.T) {
	bb := hostBusybox(t)
	dir := t.TempDir()
	fns := shellFunction(t, initScript, "pings") + "\n" + shellFunction(t, initScript, "ping_sizes")
	sh := `check() { echo "MHISTACK-CHECK $1 $2 $3"; }
ip() { :; }
PINGDEV=lo
DIR=` + dir + `
LATE=32741
` + fakeLatePing + fns + "\nping_sizes\n"
	out, err := exec.Command(bb, "sh", "-c", sh).CombinedOutput()
	if err != nil {
		t.Fatalf("the script failed (%v): %s", err, out)
	}
	if !strings.Contains(string(out), "MHISTACK-CHECK ping-sizes PASS") {
		t.Errorf("a late reply failed the check:\n%s", out)
	}
	// The fake is busybox-like: one process for both requests loses it.
	late := exec.Command(bb, "sh", "-c", "DIR="+t.TempDir()+"\nLATE=32741\n"+fakeLatePing+"ping -c 2 -i 0.2 -W 5 -s 32741 192.0.2.2")
	if got, _ := late.CombinedOutput(); !strings.Contains(string(got), "2 packets transmitted, 1 packets received") {
		t.Errorf("fake ping -c 2: %s", got)
	}
}

// TestRuntimeSuspendRefusedDuringATransitionIsTolerated: the -EBUSY of a
// runtime suspend that fired during the Mission Mode transition of a
// SYS_ERR recovery (as logged by 6.1 in a PBL run) is the kernel's "not
// now", not a complaint; the same message away from a transition is.
func TestRuntimeSuspendRefusedDuringATransitionIsTolerated(t *testing.T) {
	during := []string{
		"[   65.267360] mhi mhi0: Handling state transition: SBL",
		"[   65.272047] mhi mhi0: Received EE event: MISSION MODE",
		"[   65.272297] mhi mhi0: Handling state transition: MISSION MODE",
		"[   65.272308] mhi mhi0: Processing Mission Mode transition",
		"[   65.273597] mhi-pci-generic 0000:00:01.0: failed to suspend device: -16",
	}
	if complaints, tolerated := dmesgErrors(during); len(complaints) != 0 || len(tolerated) != 1 {
		t.Errorf("during a transition: complaints %q tolerated %q", complaints, tolerated)
	}
	away := append(append([]string{}, during[:4]...),
		"[   66.000000] mhi_net mhi0_IP_HW0: 100: Updating channel state to: START",
		"[   66.000001] mhi mhi0: local ee: MISSION MODE state: M0 device ee: MISSION MODE state: M0",
		"[   66.000002] mhi mhi0: local ee: MISSION MODE state: M0 device ee: MISSION MODE state: M0",
		"[   66.000003] mhi mhi0: local ee: MISSION MODE state: M0 device ee: MISSION MODE state: M0",
		"[   66.000004] mhi mhi0: local ee: MISSION MODE state: M0 device ee: MISSION MODE state: M0",
		"[   70.000000] mhi-pci-generic 0000:00:01.0: failed to suspend device: -16")
	if complaints, _ := dmesgErrors(away); len(complaints) != 1 {
		t.Errorf("away from a transition: complaints %q, want the -16", complaints)
	}
}

// TestPingBurstJudgesByTheIPLayer runs ping_burst in busybox sh with fake
// pings and a fake /proc/net/snmp: when every request's echo reply
// reached the guest's IP layer (Icmp InEchoReps up by as much as
// OutEchos), replies ping itself missed are socket drops, reported in a
// PASS; a reply missing at the IP layer fails, naming both counts.
// Before, ping's count alone decided: 998/1000 failed the run though the
// modem had answered every request.
func TestPingBurstJudgesByTheIPLayer(t *testing.T) {
	bb := hostBusybox(t)
	if _, err := os.Stat("/sys/class/net/lo"); err != nil {
		t.Skip("no /sys/class/net/lo: ping_burst wants the interface to exist")
	}
	dir := t.TempDir()
	fn := strings.ReplaceAll(shellFunction(t, initScript, "icmp_count")+shellFunction(t, initScript, "echo_reps_since")+shellFunction(t, initScript, "ping_burst"), "/tmp/", dir+"/")
	snmp := filepath.Join(dir, "snmp")
	// The -s 1200 stream (the last) moves the counters to what the
	// guest's kernel would count for the whole burst: 1004 requests out,
	// $REPS replies in. The -s 600 stream's ping missed two replies.
	fake := `
check() { echo "MHISTACK-CHECK $1 $2 $3"; }
snmp() { printf 'Ip: Forwarding\nIp: 2\nIcmp: InMsgs InEchoReps OutMsgs OutEchos\nIcmp: 0 %s 0 %s\n' "$2" "$1" > $SNMP; }
ping() {
	local size=""
	while [ $# -gt 0 ]; do [ "$1" = -s ] && size=$2; shift; done
	[ "$size" = 1200 ] && snmp 1004 $REPS
	echo "--- 192.0.2.2 ping statistics ---"
	if [ "$size" = 600 ]; then echo "250 packets transmitted, 248 packets received, 0% packet loss"
	else echo "251 packets transmitted, 250 packets received, 0% packet loss"; fi
}
PINGDEV=lo
` + shellFunction(t, qh.GuestPreamble, "wait_for")
	run := func(reps string) string {
		t.Helper()
		cmd := exec.Command(bb, "sh", "-c", fake+fn+"snmp 0 0\nping_burst\necho MHISTACK-END\n")
		cmd.Env = append(os.Environ(), "SNMP="+snmp, "REPS="+reps)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "MHISTACK-END") {
			t.Fatalf("REPS=%s: the script failed (%v): %s", reps, err, out)
		}
		return string(out)
	}
	if out := run("1004"); !strings.Contains(out, "MHISTACK-CHECK ping-burst PASS every request's reply reached the IP layer (1004/1004); ping counted 998/1000 (2 dropped at the ping sockets' receive buffers)") {
		t.Errorf("every reply at the IP layer: %s", out)
	}
	if out := run("1002"); !strings.Contains(out, "MHISTACK-CHECK ping-burst FAIL 1002 echo replies reached the guest's IP layer for 1004 requests sent") {
		t.Errorf("two replies missing at the IP layer: %s", out)
	}
}

// The ping checks run on the data pair a session uses (mhi.Profile.
// DataPath) when the kernel creates it; profiles whose only data pair is
// IP_SW0 have none.
func TestPingRunsOnTheDataPathsPair(t *testing.T) {
	all := fakeKO(nil, "MBIM", "QMI", "IP_HW0", "IP_SW0", "IP_HW0_MBIM")
	for _, tc := range []struct {
		profile string
		ko      []byte
		want    string
	}{
		{"qcom-sdx55m", all, "mhi_hwip0"},
		{"telit-fn980-hwv1", all, "mhi_hwip0"},
		{"quectel-rm5xx", all, "wwan0"},
		{"qcom-sa8775p", all, ""},
		{"qcom-sdx55m", fakeKO(nil, "MBIM", "IP_SW0"), ""}, // a kernel without IP_HW0: no other pair instead
	} {
		if got := expectFor(profile(t, tc.profile), tc.ko).pingDev; got != tc.want {
			t.Errorf("%s: ping on %q, want %q", tc.profile, got, tc.want)
		}
	}
}

func TestQuirkScriptRunsTheStepsAfterTheInitScriptsFunctions(t *testing.T) {
	e := expectFor(profile(t, "qcom-sdx55m"), fakeKO(nil, "DIAG", "IP_HW0"))
	for _, q := range quirkRuns {
		s, err := quirkScript(e, 42, q.steps)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`@[A-Z]+@`).FindString(s); m != "" {
			t.Errorf("%s: placeholder %s left in the script", q.name, m)
		}
		_, body, _ := strings.Cut(s, functionsEnd)
		want := "\nbring_up\nping_check ping\n" + strings.Join(q.steps, "\n") + "\nfinish\n"
		if body != want {
			t.Errorf("%s: the script runs %q, want %q", q.name, body, want)
		}
		for _, step := range q.steps {
			fn, _, _ := strings.Cut(step, " ")
			if !strings.Contains(s, "\n"+fn+"() {\n") {
				t.Errorf("%s: step %s has no function in the script", q.name, fn)
			}
		}
		for _, c := range q.guestChecks() {
			if !strings.Contains(s, "check "+c+" ") && !strings.Contains(s, "ping_check "+c) && !strings.Contains(s, "lost_in_m3 "+c+" ") {
				t.Errorf("%s: the script never reports %s", q.name, c)
			}
		}
	}
}

func TestQuirkRunsAreOneKernelEachAndFallBackToTheLastKernel(t *testing.T) {
	c := config{kernels: kernelFlag{{"6.1", "/k61"}, {"6.12", "/k612"}}, quirks: []string{"all"}}
	jobs, err := planJobs(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(quirkRuns) {
		t.Fatalf("%d jobs, want the %d quirk runs", len(jobs), len(quirkRuns))
	}
	for i, j := range jobs {
		if j.quirk == nil || j.k.label != quirkRuns[i].kernel {
			t.Errorf("job %d: %+v, want quirk run %s on %s", i, j, quirkRuns[i].name, quirkRuns[i].kernel)
		}
	}
	c.kernels = kernelFlag{{"6.1", "/k61"}}
	c.quirks = []string{string(sim.QuirkSlowReady)}
	if jobs, err = planJobs(c); err != nil || len(jobs) != 1 || jobs[0].k.label != "6.1" || jobs[0].p != "quectel-em1xx" {
		t.Errorf("slow-ready with 6.1 only: %+v, %v", jobs, err)
	}
	c.quirks = []string{"no-such-quirk"}
	if _, err := planJobs(c); !qh.IsPrereq(err) {
		t.Errorf("an unknown quirk: %v, want a prerequisite error", err)
	}
	c.quirks = nil
	if jobs, _ := planJobs(c); len(jobs) != 0 {
		t.Errorf("-quirks '': %d jobs", len(jobs))
	}
}

// quirkModemLog is a modem log of a quirk run: the serving line with
// quirks, the given states one second apart (READY delay seconds after
// a RESET) and a summary with violations.
func quirkModemLog(quirks string, readyDelay time.Duration, violations int, states ...string) string {
	t := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	q := "[" + quirks + "]"
	if strings.Contains(quirks, " ") {
		q = `"` + q + `"` // as slog quotes a value with spaces
	}
	fmt.Fprintf(&b, "time=%s level=INFO msg=\"serving the emulated modem\" profile=x quirks=%s\n", t.Format(time.RFC3339Nano), q)
	prev := ""
	for _, s := range states {
		st, ee, _ := strings.Cut(s, "/")
		if prev == "RESET" && st == "READY" {
			t = t.Add(readyDelay)
		} else {
			t = t.Add(time.Second)
		}
		fmt.Fprintf(&b, "time=%s level=INFO msg=\"modem state\" state=%s ee=%s\n", t.Format(time.RFC3339Nano), st, ee)
		prev = st
	}
	if violations > 0 {
		fmt.Fprintf(&b, "time=%s level=WARN msg=violation rule=x detail=\"channel doorbell 127 written (0x1) on firmware without an in-band wake doorbell\"\n", t.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(&b, "time=%s level=INFO msg=summary violations=%d dma_faults=0\n", t.Format(time.RFC3339Nano), violations)
	return b.String()
}

// TestQuirkVerdictsTellTheEmulatorFromLinux judges the profile-quirks run
// (slow-ready, no-inband-wake) from made-up logs: a modem that did not
// play a behaviour fails it as not played, a Linux that failed fails it
// (counted) unless the behaviour names a documented finding, which is
// reported and not counted.
func TestQuirkVerdictsTellTheEmulatorFromLinux(t *testing.T) {
	q := quirkRuns[0]
	states := []string{"READY/AMSS", "M0/AMSS", "M3/AMSS", "M0/AMSS", "SYS_ERR/AMSS", "RESET/AMSS", "READY/AMSS", "M0/AMSS", "RESET/AMSS", "READY/AMSS"}
	dmesg := []string{"[ 1.0] mhi mhi0: Device in READY State"}
	stalled := false // the guest was stopped: dmesg is its stall watcher's tail
	judge := func(q quirkRun, mlog string, failed ...string) *result {
		t.Helper()
		g := &guestRun{quirk: &q, r: &result{kernel: "6.12", profile: q.profile}, dir: t.TempDir()}
		for _, c := range q.guestChecks() {
			if !stalled || !slices.Contains(failed, c) {
				g.r.add(c, !slices.Contains(failed, c), c+" detail")
			}
		}
		out := guestOutput{dmesg: dmesg}
		if stalled {
			g.r.add("guest-finished", false, "stopped: no verdict")
			out = guestOutput{stallDmesg: dmesg}
		}
		g.judgeQuirks(out, mlog)
		return g.r
	}
	verdict := func(r *result, q sim.Quirk) check {
		t.Helper()
		c, ok := r.checks["quirk "+string(q)]
		if !ok {
			t.Fatalf("no verdict for %s: %v", q, r.checks)
		}
		return c
	}
	quirks := "slow-ready no-inband-wake"

	r := judge(q, quirkModemLog(quirks, 2*time.Second, 0, states...))
	for _, b := range q.behaviours {
		if c := verdict(r, b.quirk); !c.pass || !strings.Contains(c.detail, "its source: ") {
			t.Errorf("everything right: %s %+v", b.quirk, c)
		}
	}
	if r.failed() != 0 || len(r.checks) != len(q.behaviours) {
		t.Errorf("everything right: %d failed, verdicts %v", r.failed(), r.checks)
	}

	// READY at once: the modem did not play slow-ready.
	r = judge(q, quirkModemLog(quirks, 0, 0, states...))
	if c := verdict(r, sim.QuirkSlowReady); c.pass || !strings.HasPrefix(c.detail, "not played") {
		t.Errorf("READY at once: %+v", c)
	}
	// The modem not serving a quirk fails it as not played.
	r = judge(q, quirkModemLog("slow-ready", 2*time.Second, 0, states...))
	if c := verdict(r, sim.QuirkNoInbandWake); c.pass || !strings.Contains(c.detail, "did not serve") {
		t.Errorf("quirk not served: %+v", c)
	}
	// Linux writing the wake doorbell fails no-inband-wake.
	r = judge(q, quirkModemLog(quirks, 2*time.Second, 1, states...))
	if c := verdict(r, sim.QuirkNoInbandWake); c.pass || !strings.Contains(c.detail, "channel doorbell 127") || r.failed() != 1 {
		t.Errorf("wake doorbell written: %+v (%d failed)", c, r.failed())
	}
	// Linux not recovering from the SYS_ERR: counted, and with a finding
	// recorded for the behaviour, reported but not counted.
	r = judge(q, quirkModemLog(quirks, 2*time.Second, 0, states...), "syserr-recovery")
	if c := verdict(r, sim.QuirkSlowReady); c.pass || c.finding != "" || !strings.Contains(c.detail, "does not explain") || r.failed() != 1 {
		t.Errorf("Linux failed: %+v (%d failed)", c, r.failed())
	}
	// The race of docs/QUIRKS.md: suspended during the mission-mode
	// transition and never resumed before the verdict (the resume at
	// rmmod comes after it).
	race := []string{
		"[ 11.13] mhi mhi0: Transitioning from PM state: SYS ERROR Detect to: SYS ERROR Process",
		"[ 13.15] mhi mhi0: Processing Mission Mode transition",
		"[ 13.16] mhi mhi0: Allowing M3 transition",
		"[ 13.17] mhi mhi0: State change event to state: M3",
		"[ 80.00] mhistack: syserr-recovery end",
		"[ 81.00] mhi mhi0: Entered with PM state: M3, MHI state: M3",
	}
	dmesg = race
	r = judge(q, quirkModemLog(quirks, 2*time.Second, 0, states...), "syserr-recovery")
	if c := verdict(r, sim.QuirkSlowReady); c.pass || !strings.Contains(c.finding, "never resumed") || r.failed() != 0 {
		t.Errorf("Linux failed, the race: %+v (%d failed)", c, r.failed())
	}
	rows := r.report().Rows()
	if rows[0].Status != qh.Fail || !strings.Contains(rows[0].Detail, "finding, not counted") {
		t.Errorf("a finding's row: %+v", rows[0])
	}
	// A guest stopped in the recovery: the stall watcher's tail, which
	// may start after the SYS_ERR, shows the race.
	dmesg, stalled = race[1:4], true
	r = judge(q, quirkModemLog(quirks, 2*time.Second, 0, states...), "syserr-recovery", "channels-after-syserr", "ping-after-syserr", "module-unload")
	if c := verdict(r, sim.QuirkSlowReady); c.pass || c.finding == "" || r.failed() != 0 || !strings.Contains(c.detail, "guest-finished FAIL") {
		t.Errorf("stopped guest, the race: %+v (%d failed)", c, r.failed())
	}
	stalled = false
	// Resumed before the verdict: not the race, counted.
	dmesg = append(slices.Clone(race[:4]), race[5], race[4])
	r = judge(q, quirkModemLog(quirks, 2*time.Second, 0, states...), "syserr-recovery")
	if c := verdict(r, sim.QuirkSlowReady); c.pass || c.finding != "" || r.failed() != 1 {
		t.Errorf("Linux failed otherwise: %+v (%d failed)", c, r.failed())
	}
}

// fakeLockTools are mbimcli and qmicli answering as the guest's did
// against a locked modem (6.1/qcom-sdx55m+locks), with the software radio
// state, PIN state and QMI mode from RADIO, PIN and MODE.
const fakeMbimcliLocks = `#!/bin/busybox sh
case "$3" in
--query-radio-state) printf "[/dev/wwan0mbim0] Radio state retrieved:\n\t     Hardware radio state: 'on'\n\t     Software radio state: '%s'\n" "$RADIO" ;;
--query-subscriber-ready-status) printf "[/dev/wwan0mbim0] Subscriber ready status retrieved:\n\t      Ready state: 'device-locked'\n" ;;
--query-pin-state) printf "[/dev/wwan0mbim0] PIN info:\n\t         PIN state: '%s'\n\t          PIN type: 'pin1'\n\tRemaining attempts: '3'\n" "$PIN" ;;
esac
`

const fakeQmicliLocks = `#!/bin/busybox sh
case "$3" in
--dms-get-operating-mode) printf "[/dev/wwan0qmi0] Operating mode retrieved:\n\tMode: '%s'\n\tHW restricted: 'no'\n" "$MODE" ;;
--uim-get-card-status) printf "Slot [1]:\n\tApplication [1]:\n\t\tApplication type:  'usim (2)'\n\t\tApplication state: 'pin1-or-upin-pin-required'\n\t\tPIN1 state: 'enabled-not-verified'\n\t\t\tPIN1 retries: '3'\n\t\tPIN2 state: 'enabled-not-verified'\n" ;;
esac
`

// TestLockSectionReadsTheLocksAsMhictlStatusReportsThem: the lock run's
// guest checks pass on what mbimcli and qmicli printed against the
// locked modem, and fail when the radio is on although the modem should
// be FCC-locked, or the PIN is not locked.
func TestLockSectionReadsTheLocksAsMhictlStatusReportsThem(t *testing.T) {
	bb := hostBusybox(t)
	dir := t.TempDir()
	tool := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Replace(body, "/bin/busybox", bb, 1)), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mbimcli, qmicli := tool("mbimcli", fakeMbimcliLocks), tool("qmicli", fakeQmicliLocks)
	mdev, qdev := tool("wwan0mbim0", ""), tool("wwan0qmi0", "")
	run := func(l lockRun, env ...string) map[string]check {
		t.Helper()
		e := expectFor(profile(t, l.profile), fakeKO(nil, "DIAG", "MBIM", "QMI", "IP_HW0", "IP_HW0_MBIM"))
		s, err := lockScript(e, 10, &l)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`@[A-Z]+@`).FindString(s); m != "" {
			t.Fatalf("placeholder %s left in the script", m)
		}
		sec := s[strings.Index(s, "# ---- locks as mbimcli"):strings.Index(s, "# ---- end of the lock section")]
		sec = strings.NewReplacer("/dev/wwan0mbim0", mdev, "/dev/wwan0qmi0", qdev, "/usr/bin/mbimcli", mbimcli, "/usr/bin/qmicli", qmicli).Replace(sec)
		cmd := exec.Command(bb, "sh", "-c", `check() { echo "MHISTACK-CHECK $1 $2 $3"; }; wait_for() { shift; "$@"; }`+"\n"+sec)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the lock section failed (%v): %s", err, out)
		}
		r := &result{}
		for _, line := range strings.Split(string(out), "\n") {
			if name, st, detail, ok := qh.ParseCheck(line); ok {
				r.add(name, st != qh.Fail, detail)
				if st == qh.Skip {
					r.skipped(name)
				}
			}
		}
		if !slices.Equal(r.order, lockChecks) {
			t.Fatalf("checks %v, want %v; output:\n%s", r.order, lockChecks, out)
		}
		return r.checks
	}
	fcc, pin := lockRuns[0], lockRuns[1]
	if !fcc.fcc || pin.fcc {
		t.Fatalf("lockRuns %+v: want the FCC-locked run first", lockRuns)
	}
	for name, c := range run(pin, "RADIO=on", "PIN=locked", "MODE=online") {
		if !c.pass {
			t.Errorf("PIN-locked SDX55: %s FAIL %q", name, c.detail)
		}
	}
	c := run(fcc, "RADIO=on", "PIN=locked", "MODE=online")
	if c["lock-mbim-radio"].pass {
		t.Errorf("an FCC-locked run passed a radio that is on: %q", c["lock-mbim-radio"].detail)
	}
	if !c["lock-qmi-operating-mode"].skip || !c["lock-qmi-card-status"].skip {
		t.Errorf("the T99W175 has no QMI port, yet the QMI checks ran: %+v", c)
	}
	if c = run(fcc, "RADIO=off", "PIN=locked", "MODE=low-power"); !c["lock-mbim-radio"].pass {
		t.Errorf("FCC-locked, radio off: %q", c["lock-mbim-radio"].detail)
	}
	if c = run(lockRun{profile: "qcom-sdx55m", fcc: true}, "RADIO=off", "PIN=locked", "MODE=online"); c["lock-qmi-operating-mode"].pass {
		t.Errorf("an FCC-locked QMI modem passed mode online: %q", c["lock-qmi-operating-mode"].detail)
	}
	if c = run(pin, "RADIO=on", "PIN=unlocked", "MODE=online"); c["lock-mbim-pin"].pass {
		t.Errorf("an unlocked PIN passed: %q", c["lock-mbim-pin"].detail)
	}
}
