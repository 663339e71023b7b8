package qemuharness

import (
	"strings"
	"testing"
	"time"
)

func TestMachineArgsPutTheIOMMUBeforeItsDevicesAndShareMemory(t *testing.T) {
	m := Machine{QEMU: "q", Mem: "1024M", SMP: 2, Kernel: "k", Initrd: "i", Append: "intel_iommu=on",
		Firmware: true, SharedMemory: true, IOMMU: true, CachingMode: true, QMP: "/q.sock",
		Devices: []string{"pcie-root-port,id=rp1", "vfio-user-pci"}}
	a := strings.Join(m.Args(), " ")
	for _, want := range []string{
		"-machine q35,memory-backend=mem -accel tcg",
		"-object memory-backend-memfd,id=mem,size=1024M,share=on",
		"-device intel-iommu,intremap=on,caching-mode=on -device pcie-root-port,id=rp1 -device vfio-user-pci",
		"-qmp unix:/q.sock,server=on,wait=off",
		"-append console=ttyS0 intel_iommu=on",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("args %q lack %q", a, want)
		}
	}
	if a := strings.Join(Machine{Mem: "512M"}.Args(), " "); strings.Contains(a, "iommu") || strings.Contains(a, "memfd") || strings.Contains(a, "-smp 0") {
		t.Errorf("plain machine %q", a)
	}
}

func TestParseCheckAndReport(t *testing.T) {
	name, st, detail, ok := ParseCheck("MHISTACK-CHECK download PASS 16 MiB, sha256 match")
	if !ok || name != "download" || st != Pass || detail != "16 MiB, sha256 match" {
		t.Errorf("ParseCheck = %q %q %q %v", name, st, detail, ok)
	}
	if _, _, _, ok := ParseCheck("MHISTACK-CHECK x MAYBE"); ok {
		t.Error("a verdict that is not PASS/FAIL/SKIP parsed")
	}
	var r Report
	r.Add(Row{Scope: "p", Name: "a", Status: Pass, Took: 1500 * time.Millisecond})
	r.Add(Row{Scope: "p", Name: "b", Status: Skip, Detail: "why"})
	r.Add(Row{Scope: "p", Name: "a", Status: Fail, Detail: "later"})
	if r.Failed() != 1 || len(r.Rows()) != 2 || r.Rows()[0].Status != Fail {
		t.Errorf("report %+v", r.Rows())
	}
	if s := r.Rows()[0].String(); !strings.HasPrefix(s, "FAIL  p  a") || !strings.Contains(s, "later") {
		t.Errorf("row %q", s)
	}
	if got := SplitList(" a, ,b,"); strings.Join(got, "|") != "a|b" {
		t.Errorf("SplitList = %q", got)
	}
}

func TestModemLogSysErrCycleAndTrail(t *testing.T) {
	log := `msg="modem state" state=READY ee=AMSS
msg="modem state" state=M0 ee=AMSS
msg="modem state" state=SYS_ERR ee=AMSS
msg="modem state" state=READY ee=AMSS
msg="modem state" state=M0 ee=AMSS
`
	if !SysErrCycle(log) || SysErrCycle(strings.Join(strings.Split(log, "\n")[:4], "\n")) {
		t.Error("SysErrCycle")
	}
	if got := StateTrail(log, 2); got != "READY/AMSS → M0/AMSS → (3 more)" {
		t.Errorf("StateTrail = %q", got)
	}
	if a, b := Firmware("x", 100), Firmware("x", 100); string(a) != string(b) || string(a) == string(Firmware("y", 100)) {
		t.Error("Firmware is not a function of the name")
	}
}
