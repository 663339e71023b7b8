package sim

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// One BHIE_RXVECDB write is one upload, with the sequence written. The
// device goroutine takes the host's clearing write (sequence 0) as queued
// work, then the host programs the table and rings with its sequence
// before that work is done: the modem must not take the clear for a
// request because the register holds a sequence by then, which would
// upload twice, the second time into memory the host already reads (a
// host that frees the table at once sees the device write it afterwards).
func TestRDDMOneUploadPerDoorbell(t *testing.T) {
	dump := bytes.Repeat([]byte("crash!"), 1000)
	h := newHost(t, testProfile(), Options{CrashedRDDM: dump})
	bhie := uint64(h.r32(mhi.RegBHIEOFF))
	seg := h.alloc(8192, 4096)
	table := h.alloc(16, 16)
	table.Store64(0, seg.IOVA)
	table.Store64(8, uint64(seg.Len()))
	const seq = 0x1234567

	// Hold the device goroutine before it handles queued work: it can
	// take the work from the register file but not act on it.
	h.m.mu.Lock()
	h.w32(bhie+mhi.BHIERxVecDB, 0) // the clear (Linux, prepare time)
	h.waitFor("the device to take the queued register work", func() bool {
		h.m.regs.mu.Lock()
		defer h.m.regs.mu.Unlock()
		return !h.m.regs.pend.rddm
	})
	h.w64(bhie+mhi.BHIERxVecAddrLow, table.IOVA)
	h.w32(bhie+mhi.BHIERxVecSize, uint32(table.Len()))
	h.w32(bhie+mhi.BHIERxVecDB, seq)
	h.m.mu.Unlock()

	want := uint32(mhi.BHIEStatusXferDone<<mhi.BHIEStatusShift | seq)
	h.waitFor("RXVECSTATUS = transfer complete", func() bool { return h.r32(bhie+mhi.BHIERxVecStatus) == want })
	// Let the device goroutine finish all work queued so far: a request
	// is handled only between passes over it. M1 is refused in SYS_ERR.
	h.waitFor("the device to take the doorbell", func() bool {
		h.m.regs.mu.Lock()
		defer h.m.regs.mu.Unlock()
		return !h.m.regs.pend.rddm
	})
	if err := h.m.call(reqM1); !errors.Is(err, ErrState) {
		t.Fatalf("M1 request in SYS_ERR: %v, want %v", err, ErrState)
	}
	if n := h.m.RDDMUploads(); n != 1 {
		t.Fatalf("modem uploaded %d dumps for one doorbell, want 1", n)
	}
	if !bytes.Equal(seg.Mem[:len(dump)], dump) {
		t.Errorf("segment does not hold the dump")
	}
}
