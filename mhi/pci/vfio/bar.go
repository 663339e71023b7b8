//go:build linux

package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/mmio"
)

// BAR is a memory BAR of a VFIO device. The parts the kernel lets us mmap
// are accessed with mmio loads and stores; the rest (or all of it, when the
// region is not mappable) with pread/pwrite on the device fd, which
// vfio-pci turns into ioread/iowrite. Offsets outside the BAR or not
// naturally aligned read as all-ones and drop writes, like an unclaimed
// transaction. BAR is safe for concurrent use; it must not be used once the
// Device is closed.
type BAR struct {
	fd     int
	region Region
	maps   []barMap
	closed atomic.Bool
	gone   *atomic.Bool // the device's: released at the kernel's request
}

var _ pci.BAR = (*BAR)(nil)

type barMap struct {
	off, size uint64 // within the BAR
	base      uintptr
	mem       []byte // for munmap
}

// BAR maps memory BAR i (0-5). The mapping is made once and shared by
// later calls.
func (d *Device) BAR(i int) (pci.BAR, error) {
	if i < 0 || i > 5 {
		return nil, fmt.Errorf("vfio: %s: no BAR %d", d.addr, i)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, pci.ErrClosed
	}
	if b := d.bars[i]; b != nil {
		return b, nil
	}
	r := d.regions[i]
	if r.Size == 0 || !r.Readable() {
		return nil, fmt.Errorf("vfio: %s: BAR %d is not implemented (or is an I/O BAR vfio does not expose)", d.addr, i)
	}
	if d.gone.Load() {
		return nil, fmt.Errorf("vfio: %s: %w", d.addr, pci.ErrRemoved)
	}
	b, err := mapBAR(d.fd, r)
	if err != nil {
		return nil, fmt.Errorf("vfio: %s: %w", d.addr, err)
	}
	b.gone = &d.gone
	d.bars[i] = b
	return b, nil
}

// mapBAR mmaps the mappable parts of region r of device fd.
func mapBAR(fd int, r Region) (*BAR, error) {
	b := &BAR{fd: fd, region: r}
	if !r.Mappable() {
		return b, nil
	}
	areas := r.Sparse
	if areas == nil {
		areas = []SparseArea{{0, r.Size}}
	}
	page := uint64(os.Getpagesize())
	for _, a := range areas {
		if a.Size == 0 || a.Offset%page != 0 || a.Offset+a.Size > r.Size {
			continue // not mappable as given: pread/pwrite covers it
		}
		length := (a.Size + page - 1) &^ (page - 1)
		mem, err := unix.Mmap(fd, int64(r.Offset+a.Offset), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("mmap BAR %d [%#x+%#x]: %w", r.Index, a.Offset, a.Size, err), b.unmap())
		}
		// Keep a child of fork/exec from inheriting device mappings. The
		// kernel may refuse it for VM_PFNMAP areas on some versions;
		// that only loses the protection, so the error is ignored.
		_ = unix.Madvise(mem, unix.MADV_DONTFORK)
		b.maps = append(b.maps, barMap{off: a.Offset, size: a.Size, base: uintptr(unsafe.Pointer(&mem[0])), mem: mem})
	}
	return b, nil
}

// Len returns the BAR size in bytes.
func (b *BAR) Len() uint64 { return b.region.Size }

// Mapped reports whether every byte of the BAR is reached through mmap
// (false means some or all accesses go through pread/pwrite).
func (b *BAR) Mapped() bool {
	var n uint64
	for _, m := range b.maps {
		n += m.size
	}
	return n == b.region.Size
}

// addr returns the mapped address of [off, off+n), or 0 when it is outside
// the mmap'ed areas. ok is false when the access is outside the BAR or
// misaligned.
func (b *BAR) addr(off, n uint64) (a uintptr, ok bool) {
	if off%n != 0 || off >= b.region.Size || b.region.Size-off < n || b.closed.Load() || (b.gone != nil && b.gone.Load()) {
		return 0, false
	}
	for i := range b.maps {
		m := &b.maps[i]
		if off >= m.off && off-m.off <= m.size-n {
			return m.base + uintptr(off-m.off), true
		}
	}
	return 0, true
}

// Read32 reads the 32-bit register at off.
func (b *BAR) Read32(off uint64) uint32 {
	a, ok := b.addr(off, 4)
	switch {
	case !ok:
		return ^uint32(0)
	case a != 0:
		return mmio.Read32(a)
	}
	var buf [4]byte
	if !b.pread(buf[:], off) {
		return ^uint32(0)
	}
	return binary.LittleEndian.Uint32(buf[:])
}

// Write32 writes the 32-bit register at off.
func (b *BAR) Write32(off uint64, v uint32) {
	a, ok := b.addr(off, 4)
	switch {
	case !ok:
	case a != 0:
		mmio.Write32(a, v)
	default:
		var buf [4]byte
		binary.LittleEndian.PutUint32(buf[:], v)
		b.pwrite(buf[:], off)
	}
}

// Read64 reads a 64-bit register as one access; only for devices that
// accept 8-byte accesses at off.
func (b *BAR) Read64(off uint64) uint64 {
	a, ok := b.addr(off, 8)
	switch {
	case !ok:
		return ^uint64(0)
	case a != 0:
		return mmio.Read64(a)
	}
	var buf [8]byte
	if !b.pread(buf[:], off) {
		return ^uint64(0)
	}
	return binary.LittleEndian.Uint64(buf[:])
}

// Write64 writes a 64-bit register as one access (see Read64).
func (b *BAR) Write64(off uint64, v uint64) {
	a, ok := b.addr(off, 8)
	switch {
	case !ok:
	case a != 0:
		mmio.Write64(a, v)
	default:
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], v)
		b.pwrite(buf[:], off)
	}
}

// pread and pwrite are the slow path for registers outside any mmap;
// failures read as all-ones and drop writes, as a dead link would. They
// call the system call directly because unix.Pread makes its buffer
// escape, an allocation per register access; a stack buffer is safe here
// since a goroutine's stack cannot move while it is in a system call.
func (b *BAR) pread(p []byte, off uint64) bool {
	if is32bit {
		n, err := unix.Pread(b.fd, p, int64(b.region.Offset+off))
		return err == nil && n == len(p)
	}
	n, _, e := unix.Syscall6(unix.SYS_PREAD64, uintptr(b.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(b.region.Offset+off), 0, 0)
	return e == 0 && int(n) == len(p)
}

func (b *BAR) pwrite(p []byte, off uint64) {
	if is32bit {
		_, _ = unix.Pwrite(b.fd, p, int64(b.region.Offset+off))
		return
	}
	_, _, _ = unix.Syscall6(unix.SYS_PWRITE64, uintptr(b.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(b.region.Offset+off), 0, 0)
}

// is32bit: there the 64-bit file offset of pread64 takes two registers, so
// the direct system call above does not apply.
const is32bit = unsafe.Sizeof(uintptr(0)) < 8

func (b *BAR) unmap() error {
	b.closed.Store(true)
	var errs []error
	for _, m := range b.maps {
		errs = append(errs, unix.Munmap(m.mem))
	}
	return errors.Join(errs...)
}
