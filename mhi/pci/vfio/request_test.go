//go:build linux

package vfio

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
)

// The kernel asks for the function (vfio-pci's request interrupt, as on
// hot-unplug): the owner is told, calls Release, and the Device releases
// it — the device file is no
// longer open in the process, the BAR reads all-ones without faulting,
// config space, reset and interrupts fail with pci.ErrRemoved, Removed is
// closed — and Close still tears the rest down.
func TestRequestInterruptReleasesTheDevice(t *testing.T) {
	k, opts := installFakeKernel(t)
	k.reqIRQ = true
	d, err := Open("0000:01:00.0", opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	var _ pci.Removable = d
	bar, err := d.BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	vecs, err := d.Interrupts().Enable(2)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := vecs[0].Wait(); waited <- err }()
	k.mu.Lock()
	reqFD := k.reqFD
	k.mu.Unlock()
	if reqFD < 0 {
		t.Fatal("no request eventfd installed")
	}
	select {
	case <-d.Removed():
		t.Fatal("Removed closed before any request")
	default:
	}
	// Reads of the BAR race the release below: they must never fault,
	// and see the register or all-ones, nothing else.
	stop := make(chan struct{})
	reads := make(chan uint32, 1)
	go func() {
		odd := uint32(0x12345678)
		for {
			select {
			case <-stop:
				reads <- odd
				return
			default:
			}
			if v := bar.Read32(0x10); v != 0x12345678 && v != 0xffffffff {
				odd = v
			}
		}
	}()

	// The kernel signals the request: the owner hears of it while the
	// device still answers, and releases it.
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(int(reqFD), one[:]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.RemovalRequested():
	case <-time.After(5 * time.Second):
		t.Fatal("RemovalRequested not closed within 5 s of the request")
	}
	if v := bar.Read32(0x10); v != 0x12345678 {
		t.Errorf("BAR read before the release = %#x: the owner must still reach the device to quiesce it", v)
	}
	d.Release()
	select {
	case <-d.Removed():
	case <-time.After(5 * time.Second):
		t.Fatal("the device was not released within 5 s of Release")
	}
	close(stop)
	if v := <-reads; v != 0x12345678 {
		t.Errorf("a BAR read racing the release returned %#x, neither the register nor all-ones", v)
	}
	if v := bar.Read32(0x10); v != 0xffffffff {
		t.Errorf("BAR read = %#x, want all-ones", v)
	}
	bar.Write32(0x10, 1) // dropped, must not fault
	// No descriptor of the process refers to the device node any more.
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if p, _ := os.Readlink("/proc/self/fd/" + e.Name()); p == k.deviceFD {
			t.Errorf("fd %s still refers to the device node", e.Name())
		}
	}
	var b [2]byte
	for name, err := range map[string]error{
		"ConfigRead":   d.ConfigRead(0, b[:]),
		"SetBusMaster": d.SetBusMaster(true),
		"Reset":        d.Reset(),
	} {
		if !errors.Is(err, pci.ErrRemoved) {
			t.Errorf("%s after the release = %v, want pci.ErrRemoved", name, err)
		}
	}
	if _, err := d.Interrupts().Enable(1); !errors.Is(err, pci.ErrRemoved) {
		t.Errorf("Enable after the release = %v", err)
	}
	if err := vecs[1].Trigger(); !errors.Is(err, pci.ErrRemoved) {
		t.Errorf("Trigger after the release = %v", err)
	}
	if _, err := d.BAR(2); err == nil {
		t.Error("BAR after the release succeeded")
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close after the release: %v", err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, pci.ErrClosed) {
			t.Errorf("blocked Wait ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a Wait blocked across the release did not end at Close")
	}
	if len(k.maps) != 0 {
		t.Errorf("DMA maps left after Close: %v", k.maps)
	}
	calls := strings.Join(k.calls, " ")
	if !strings.Contains(calls, "SET_IRQS(request eventfd)") || strings.Contains(calls, "SET_IRQS(disable)") {
		t.Errorf("ioctls %s: want the request eventfd, and no SET_IRQS after the release", calls)
	}
}

// Close without a request stops the watcher; a device without the index
// has none.
func TestCloseStopsTheRequestWatcher(t *testing.T) {
	for _, offered := range []bool{true, false} {
		t.Run(fmt.Sprint("offered=", offered), func(t *testing.T) {
			k, opts := installFakeKernel(t)
			k.reqIRQ = offered
			d, err := Open("0000:01:00.0", opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-d.Removed():
				t.Error("Removed closed by Close")
			default:
			}
			if got := strings.Contains(strings.Join(k.calls, " "), "request"); got != offered {
				t.Errorf("request eventfd installed = %v, want %v", got, offered)
			}
		})
	}
}

// An owner that never calls Release: the Device releases the function by
// itself after the grace period, well within 5 s of the request.
func TestRequestWithoutReleaseReleasesAfterTheGracePeriod(t *testing.T) {
	k, opts := installFakeKernel(t)
	k.reqIRQ = true
	d, err := Open("0000:01:00.0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var one [8]byte
	one[0] = 1
	t0 := time.Now()
	if _, err := unix.Write(int(k.reqFD), one[:]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Removed():
		if took := time.Since(t0); took < releaseGrace/2 {
			t.Errorf("released after %v, before the owner had its grace period", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not released within 5 s of the request")
	}
}
