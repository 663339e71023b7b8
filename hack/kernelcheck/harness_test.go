package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	"github.com/mhistack/mhistack/mhi"
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

func TestDmesgComplaintsKnownMessagesAndTheSysErrCycle(t *testing.T) {
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
	log := `msg="modem state" state=READY ee=AMSS
msg="modem state" state=M0 ee=AMSS
msg="modem state" state=SYS_ERR ee=AMSS
msg="modem state" state=READY ee=AMSS
msg="modem state" state=M0 ee=AMSS
`
	if !sysErrCycle(log) || stateTrail(log) != "READY/AMSS → M0/AMSS → SYS_ERR/AMSS → READY/AMSS → M0/AMSS" {
		t.Errorf("cycle %v trail %q", sysErrCycle(log), stateTrail(log))
	}
	if sysErrCycle(strings.Join(strings.Split(log, "\n")[:4], "\n")) {
		t.Error("a SYS_ERR never followed by M0 counted as a cycle")
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

// TestPingBurstFailsCleanlyWhenAPingPrintsNoStatistics runs the guest's
// ping_burst in the host's busybox sh with a fake ping: a stream whose
// ping dies on a sendto error (no statistics line) must give a FAIL
// verdict naming what it printed, and the script must go on, where the
// shell arithmetic on the missing count used to end /init (exit status 2,
// "Attempted to kill init").
func TestPingBurstFailsCleanlyWhenAPingPrintsNoStatistics(t *testing.T) {
	bb := "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		if os.Getenv("MHISTACK_REQUIRE_BUSYBOX") == "1" {
			t.Fatalf("busybox: %v", err)
		}
		t.Skip("no /bin/busybox (apt-get install busybox-static); CI sets MHISTACK_REQUIRE_BUSYBOX=1")
	}
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
