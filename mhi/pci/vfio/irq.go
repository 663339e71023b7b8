//go:build linux

package vfio

import (
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"

	"github.com/mhistack/mhistack/mhi/pci"
)

// interrupts wires MSI-X (preferred) or MSI vectors to eventfds with
// VFIO_DEVICE_SET_IRQS. The kernel's interrupt handler signals the eventfd;
// pci.EventVector waits on it in the netpoller, so no OS thread is held per
// vector.
type interrupts struct {
	d     *Device
	index int // IRQMSIX or IRQMSI; -1 when the function has neither
	max   int

	mu       sync.Mutex
	vecs     []*vector
	released bool // the device was released at the kernel's request
}

// release records that the device descriptor is about to be given back:
// no more SET_IRQS. Blocked Waits stay blocked until Disable or Close.
func (in *interrupts) release() {
	in.mu.Lock()
	in.released = true
	in.mu.Unlock()
}

var _ pci.Interrupts = (*interrupts)(nil)

func newInterrupts(d *Device) *interrupts {
	in := &interrupts{d: d, index: -1}
	for _, idx := range []int{IRQMSIX, IRQMSI} {
		if idx < len(d.irqs) && d.irqs[idx].Count > 0 && d.irqs[idx].Flags&irqEventfd != 0 {
			in.index, in.max = idx, d.irqs[idx].Count
			break
		}
	}
	return in
}

// Kind returns "MSI-X", "MSI" or "none".
func (in *interrupts) Kind() string {
	switch in.index {
	case IRQMSIX:
		return "MSI-X"
	case IRQMSI:
		return "MSI"
	}
	return "none"
}

// Max returns the vector count of MSI-X, or of MSI without MSI-X.
func (in *interrupts) Max() int { return in.max }

// Enable wires n vectors, replacing any enabled before (VFIO's vector set
// cannot be resized in place: NORESIZE). When the kernel can allocate
// fewer, it says how many and Enable retries with that count, so the
// result may be shorter than n.
func (in *interrupts) Enable(n int) ([]pci.Vector, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.d.closed.Load() {
		return nil, pci.ErrClosed
	}
	if in.d.gone.Load() {
		return nil, fmt.Errorf("vfio: %s: %w", in.d.addr, pci.ErrRemoved)
	}
	if in.index < 0 {
		return nil, fmt.Errorf("vfio: %s has neither MSI nor MSI-X: %w", in.d.addr, pci.ErrNotSupported)
	}
	if n < 1 || n > in.max {
		return nil, fmt.Errorf("vfio: %s: %d %s vectors requested, the function has %d", in.d.addr, n, in.Kind(), in.max)
	}
	if err := in.disableLocked(); err != nil {
		return nil, err
	}
	for {
		vecs := make([]*vector, n)
		fds := make([]int32, n)
		for i := range vecs {
			ev, err := pci.NewEventVector(i)
			if err != nil {
				closeVectors(vecs[:i])
				return nil, err
			}
			vecs[i] = &vector{ev: ev, in: in}
			fds[i] = int32(ev.Fd())
		}
		got, err := in.setIRQs(irqSetDataEventfd|irqSetActionTrigger, 0, fds)
		if err != nil {
			closeVectors(vecs)
			return nil, fmt.Errorf("vfio: %s: enable %d %s vectors: %w", in.d.addr, n, in.Kind(), err)
		}
		if got > 0 && got < n {
			// vfio_msi_enable returns the number it could allocate
			// instead of failing.
			closeVectors(vecs)
			n = got
			continue
		}
		in.vecs = vecs
		out := make([]pci.Vector, n)
		for i, v := range vecs {
			out[i] = v
		}
		return out, nil
	}
}

// Disable turns the vectors off and closes their eventfds; blocked Waits
// return pci.ErrClosed.
func (in *interrupts) Disable() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.disableLocked()
}

func (in *interrupts) disableLocked() error {
	if len(in.vecs) == 0 {
		return nil
	}
	if in.released {
		// The kernel tore the vectors down with the device; the
		// eventfds are ours to close.
		closeVectors(in.vecs)
		in.vecs = nil
		return nil
	}
	_, err := in.setIRQs(irqSetDataNone|irqSetActionTrigger, 0, nil)
	closeVectors(in.vecs)
	in.vecs = nil
	if err != nil {
		return fmt.Errorf("vfio: %s: disable %s: %w", in.d.addr, in.Kind(), err)
	}
	return nil
}

func (in *interrupts) close() error { return in.Disable() }

func closeVectors(vs []*vector) {
	for _, v := range vs {
		if v != nil {
			_ = v.ev.Close()
		}
	}
}

// setIRQs sends one vfio_irq_set for vectors [start, start+len(fds)) with
// eventfd data.
func (in *interrupts) setIRQs(flags uint32, start int, fds []int32) (int, error) {
	return in.setIRQsN(flags, start, len(fds), fds)
}

// setIRQsN sends a vfio_irq_set for count vectors from start, with fds as
// data (nil for DATA_NONE): DATA_NONE|TRIGGER with count 0 disables the
// index; with count 1 it fires vector start.
func (in *interrupts) setIRQsN(flags uint32, start, count int, fds []int32) (int, error) {
	return setIRQs(in.d.fd, in.index, flags, start, count, fds)
}

// setIRQs sends one vfio_irq_set for count vectors of index from start.
func setIRQs(fd, index int, flags uint32, start, count int, fds []int32) (int, error) {
	hdr := int(unsafe.Sizeof(irqSetHdr{}))
	buf := make([]byte, hdr+4*len(fds))
	le := binary.LittleEndian
	le.PutUint32(buf[0:], uint32(len(buf)))
	le.PutUint32(buf[4:], flags)
	le.PutUint32(buf[8:], uint32(index))
	le.PutUint32(buf[12:], uint32(start))
	le.PutUint32(buf[16:], uint32(count))
	for i, fd := range fds {
		le.PutUint32(buf[hdr+4*i:], uint32(fd))
	}
	return ioctl(fd, ioctlDeviceSetIRQs, unsafe.Pointer(&buf[0]))
}

// vector is one enabled MSI/MSI-X vector.
type vector struct {
	ev *pci.EventVector
	in *interrupts
}

// Wait blocks until the vector fires (see pci.Vector).
func (v *vector) Wait() (uint64, error) { return v.ev.Wait() }

// Index returns the vector number.
func (v *vector) Index() int { return v.ev.Index() }

// Fd returns the eventfd the kernel signals.
func (v *vector) Fd() int { return v.ev.Fd() }

// Trigger fires the vector through the kernel (SET_IRQS DATA_NONE|TRIGGER
// for this one vector), the same path as a device interrupt from the
// eventfd onward; the loopback VFIO offers for testing.
func (v *vector) Trigger() error {
	in := v.in
	in.mu.Lock()
	defer in.mu.Unlock()
	live := false
	for _, w := range in.vecs {
		live = live || w == v
	}
	if !live {
		return pci.ErrClosed
	}
	if in.released {
		return fmt.Errorf("vfio: %s: %w", in.d.addr, pci.ErrRemoved)
	}
	if _, err := in.setIRQsN(irqSetDataNone|irqSetActionTrigger, v.Index(), 1, nil); err != nil {
		return fmt.Errorf("vfio: %s: trigger vector %d: %w", in.d.addr, v.Index(), err)
	}
	return nil
}
