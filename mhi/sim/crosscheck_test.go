package sim

import (
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// Regression tests for what the kernel cross-check (hack/kernelcheck,
// docs/KERNEL-CROSSCHECK.md) found when Linux's MHI drivers drove the
// modem.

// Linux's mhi_pci_generic runtime-suspends an idle modem: MHI M3, then the
// function goes to D3hot with bus mastering off (pci_disable_device). A
// crash then must not write to host memory: the host finds SYS_ERR in
// MHISTATUS when it resumes. The modem used to post STATE_CHANGE(SYS_ERR)
// on event ring 0 from M3, which the bus refused and the modem reported as
// a host protocol violation.
func TestSysErrInM3WritesNothingToHostMemory(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	h.startChannel(0)
	h.startChannel(1)
	h.setState(mhi.StateM3)
	h.expectState(mhi.StateM3)
	if err := h.dev.SetBusMaster(false); err != nil {
		t.Fatal(err)
	}
	if err := h.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	if st := h.r32(mhi.RegMHISTATUS); mhi.State(st>>8) != mhi.StateSysErr || st&mhi.StatusSysErr == 0 {
		t.Fatalf("MHISTATUS %#x, want SYS_ERR", st)
	}
	if f := h.dev.Stats().DMAFaults; f != 0 {
		t.Errorf("%d DMA attempts with bus mastering off: %v", f, h.dev.Faults())
	}
	// Resume (D0, bus mastering) and recover as the host does.
	if err := h.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	h.noEvent(0, 0)
	h.w32(mhi.RegMHICTRL, h.r32(mhi.RegMHICTRL)|mhi.CtrlReset)
	h.waitFor("RESET clear", func() bool { return h.r32(mhi.RegMHICTRL)&mhi.CtrlReset == 0 })
	h.w32(h.bhi+mhi.BHIIntVec, 0)
	h.waitReady()
	h.programMMIO()
	h.toMissionMode()
}
