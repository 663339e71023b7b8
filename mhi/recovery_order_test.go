package mhi_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestRecoveryReleasesBuffersOnlyAfterTheMHIResetStoppedDMA: a modem whose
// DMA engine keeps writing the DL buffers it holds after a SYS_ERR, until
// the host's MHI reset completes (sim.Options.DrainDMAOnSysErr). Recovery
// must hand those buffers back to the client only after the reset, as
// Linux mhi_pm_sys_error_transition does: the client writes a canary into
// every buffer it gets back, and the device must never overwrite it.
// Before, recovery released the buffers first and reset the device after.
func TestRecoveryReleasesBuffersOnlyAfterTheMHIResetStoppedDMA(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{DrainDMAOnSysErr: true}, mhi.Options{})
	r.powerUp()
	const canary = 0xC5
	var mu sync.Mutex
	var released []*pci.Buffer
	release := func(b *pci.Buffer) {
		// The client owns the buffer again and reuses it at once.
		for i := range b.Mem {
			b.Mem[i] = canary
		}
		mu.Lock()
		released = append(released, b)
		mu.Unlock()
	}
	_, bufs := startWithDLQueued(t, r, release, 8)

	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(mhi.EventSysErr, 5*time.Second)
	r.waitEvent(mhi.EventRecovered, 10*time.Second)

	mu.Lock()
	defer mu.Unlock()
	if len(released) != len(bufs) {
		t.Fatalf("%d of %d DL buffers released by recovery", len(released), len(bufs))
	}
	want := bytes.Repeat([]byte{canary}, 4096)
	for i, b := range released {
		if !bytes.Equal(b.Mem, want) {
			j := 0
			for j < len(b.Mem) && b.Mem[j] == canary {
				j++
			}
			t.Errorf("released buffer %d (IOVA %#x) written after its release: byte %d is %#x", i, b.IOVA, j, b.Mem[j])
		}
	}
}
