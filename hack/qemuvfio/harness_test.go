package main

import (
	"strings"
	"testing"
)

func TestResultVerdict(t *testing.T) {
	out := `[    1.9] Run /init as init process
MHISTACK-INIT uptime=1.96
=== RUN   TestGuestEdu
    guest_test.go:60: edu at 0000:00:01.0
=== RUN   TestGuestEdu/MMIO
    --- PASS: TestGuestEdu/MMIO (0.00s)
--- PASS: TestGuestEdu (0.31s)
--- SKIP: TestOther (0.00s)
--- PASS: TestGuestNVMeMSIX (0.10s)
PASS
MHISTACK-TEST-EXIT=0 uptime=3.19
`
	r := newResult()
	for _, l := range strings.Split(out, "\n") {
		r.line(l + "\r")
	}
	if err := r.verdict([]string{"TestGuestEdu", "TestGuestNVMeMSIX"}); err != nil {
		t.Fatalf("verdict: %v", err)
	}
	if r.initUptime != 1.96 || r.endUptime != 3.19 || len(r.pass) != 3 || len(r.skip) != 1 {
		t.Errorf("result %+v", r)
	}

	bad := newResult()
	bad.line("    --- FAIL: TestGuestEdu/DMARoundTrip (0.2s)")
	bad.line("--- SKIP: TestGuestNVMeMSIX (0.00s)")
	bad.line("MHISTACK-INSMOD-FAIL vfio-pci")
	err := bad.verdict([]string{"TestGuestNVMeMSIX"})
	for _, want := range []string{"never reported", "TestGuestEdu/DMARoundTrip", "TestGuestNVMeMSIX did not pass", "insmod failed: vfio-pci"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("verdict %v does not mention %q", err, want)
		}
	}
}
