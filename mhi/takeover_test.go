package mhi_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestPowerUpOverADeviceLeftRunningResetsItFirst: a host process brings
// the modem to M0 with channels running and data moved, then dies without
// PowerDown (mhi.AbandonForTest: its goroutines stop, no register is
// written). A second controller on the same function must reset the
// device — bus mastering off, MHICTRL.RESET, READY — before it hands it new
// rings, then move data through the loopback. The strict modem must see no
// violation, and the dead process's memory (contexts, rings, DL buffers
// the device held) must not be written after the new controller took
// over; once it is unmapped any device access to it would fault. Before,
// mhi.New turned bus mastering on and PowerUp reset only a device in
// SYS_ERR: the new host programmed new context bases into a device that
// ignored them (M0 is not READY) and kept using the dead host's rings.
func TestPowerUpOverADeviceLeftRunningResetsItFirst(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	old := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(31, 32))
	old.exchange(t, rng, 20, 4096)
	if st, _ := r.m.State(); st != mhi.StateM0 {
		t.Fatalf("device in %s before the host dies, want M0", st)
	}

	// The process dies: its controller stops, its memory stays as it was.
	dead := append(mhi.AbandonForTest(r.c), old.bufs...)
	snap := make([][]byte, len(dead))
	for i, b := range dead {
		snap[i] = bytes.Clone(b.Mem)
	}

	c2, err := mhi.New(r.dev, mhi.Options{Profile: r.p, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c2.Close(); err != nil {
			t.Errorf("second controller Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c2.PowerUp(ctx); err != nil {
		t.Fatalf("PowerUp over a running device: %v", err)
	}
	for i, b := range dead {
		if !bytes.Equal(b.Mem, snap[i]) {
			t.Errorf("dead host's buffer %d (IOVA %#x, %d bytes) written after the new controller took over (first change at byte %d)",
				i, b.IOVA, len(b.Mem), firstDiff(b.Mem, snap[i]))
		}
	}
	// The dead process's mappings go: any device access to them faults.
	freeAll(t, r, dead)

	r.c = c2
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rng, 50, 4096)
	if n := r.m.Stats().Violations; n != 0 {
		t.Errorf("the modem saw %d protocol violations: %v", n, r.m.Violations())
	}
	if f := r.dev.Faults(); len(f) != 0 {
		t.Errorf("DMA faults: %v", f)
	}
}

func freeAll(t testing.TB, r *rig, bufs []*pci.Buffer) {
	t.Helper()
	for _, b := range bufs {
		if err := r.dev.DMA().Free(b); err != nil {
			t.Errorf("free IOVA %#x: %v", b.IOVA, err)
		}
	}
}
