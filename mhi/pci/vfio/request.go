//go:build linux

package vfio

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
)

// The request interrupt (VFIO_PCI_REQ_IRQ_INDEX). When the kernel removes
// a function user space holds open (hot-unplug, unbind from vfio-pci),
// vfio-pci cannot finish until the device is released, and asks for it by
// signalling the eventfd installed on this index (again every 10 s;
// drivers/vfio/vfio_main.c vfio_unregister_group_dev). The Device waits
// for it on the netpoller, like the MSI vectors, closes RemovalRequested
// so that the owner can quiesce the function (the MHI engine resets it, so
// that it stops DMA before the kernel turns bus mastering off), and
// releases it when the owner calls Release or releaseGrace after the
// request, whichever comes first:
//
//   - Removed is closed and every later call on the device fails with
//     pci.ErrRemoved (config space, reset, interrupts) or reads all-ones
//     (the BARs), so the MHI engine fails its waits with its ErrRemoved;
//   - each BAR mapping is replaced, in place and atomically (mremap), by
//     private memory filled with all-ones: an MMIO access already past the
//     check lands there instead of faulting;
//   - the device descriptor is replaced, atomically (dup3), by /dev/null,
//     which drops the last reference to the VFIO device file, so the
//     kernel completes the removal; the descriptor number stays owned, so
//     a late pread or ioctl cannot reach another file.
//
// The DMA arena and the IOMMU container or IOAS stay until Close: they
// belong to the process, not to the function.

// releaseGrace bounds how long the owner may quiesce the function after
// the kernel's request.
const releaseGrace = 2 * time.Second

// setupRequest installs the request eventfd when the function has the
// index (vfio-pci ≥ 4.0 does), and starts its watcher.
func (d *Device) setupRequest() error {
	d.removed = make(chan struct{})
	d.requested = make(chan struct{})
	d.releaseNow = make(chan struct{})
	d.reqDone = make(chan struct{})
	if IRQReq >= len(d.irqs) || d.irqs[IRQReq].Count < 1 || d.irqs[IRQReq].Flags&irqEventfd == 0 {
		close(d.reqDone)
		return nil
	}
	ev, err := pci.NewEventVector(0)
	if err != nil {
		return err
	}
	if _, err := setIRQs(d.fd, IRQReq, irqSetDataEventfd|irqSetActionTrigger, 0, 1, []int32{int32(ev.Fd())}); err != nil {
		ev.Close()
		return fmt.Errorf("vfio: %s: request interrupt: %w", d.addr, err)
	}
	d.req = ev
	go d.watchRequest()
	return nil
}

// watchRequest waits for the kernel's request and releases the device. It
// returns when the request came or the eventfd is closed (Close).
func (d *Device) watchRequest() {
	defer close(d.reqDone)
	if _, err := d.req.Wait(); err != nil {
		return
	}
	close(d.requested)
	t := time.NewTimer(releaseGrace)
	defer t.Stop()
	select {
	case <-d.releaseNow:
	case <-t.C:
	}
	d.release()
}

// RemovalRequested is closed when the kernel asks for the function back
// (pci.Removable).
func (d *Device) RemovalRequested() <-chan struct{} { return d.requested }

// Release releases the function now if the kernel asked for it, or as
// soon as it does (pci.Removable).
func (d *Device) Release() { d.relOnce.Do(func() { close(d.releaseNow) }) }

// stopRequest stops the watcher and waits for it; it must be called
// without d.mu (the watcher's release takes it).
func (d *Device) stopRequest() {
	d.reqStop.Do(func() {
		if d.req != nil {
			_ = d.req.Close()
		}
	})
	d.Release() // a watcher in its grace period releases at once
	<-d.reqDone
}

// Removed is closed once the kernel asked for the function and the Device
// released it.
func (d *Device) Removed() <-chan struct{} { return d.removed }

// release gives the function back to the kernel (see the top of the file).
func (d *Device) release() {
	d.gone.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return
	}
	for _, b := range d.bars {
		if b != nil {
			b.retire()
		}
	}
	d.intr.release()
	if null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Dup3(null, d.fd, unix.O_CLOEXEC)
		unix.Close(null)
	}
	close(d.removed)
}

// retire replaces the BAR's mappings by private all-ones memory, each in
// one mremap, so that no access ever faults.
func (b *BAR) retire() {
	for i := range b.maps {
		m := &b.maps[i]
		ones, err := unix.Mmap(-1, 0, len(m.mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			continue // the old mapping stays: the device file lingers until Close
		}
		for j := range ones {
			ones[j] = 0xff
		}
		_, _, e := unix.Syscall6(unix.SYS_MREMAP, uintptr(unsafe.Pointer(&ones[0])), uintptr(len(ones)), uintptr(len(m.mem)),
			unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, m.base, 0)
		if e != 0 {
			_ = unix.Munmap(ones)
		}
	}
}
