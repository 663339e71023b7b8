//go:build linux

package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
)

// Device is a PCI function opened through VFIO. It implements pci.Device;
// the extra methods expose what VFIO reports, for diagnostics and tests.
type Device struct {
	addr    string
	fd      int
	mmu     iommu
	flags   uint32
	regions []Region // by index; Size 0 when absent
	irqs    []IRQInfo
	info    pci.Info

	mu     sync.Mutex // guards bars and closing
	bars   [6]*BAR
	dma    *arena
	intr   *interrupts
	closed atomic.Bool

	// The request interrupt (request.go): requested is closed when the
	// kernel asks for the function; gone is set and removed closed when
	// it is released.
	gone       atomic.Bool
	requested  chan struct{}
	releaseNow chan struct{}
	relOnce    sync.Once
	removed    chan struct{}
	req        *pci.EventVector
	reqDone    chan struct{}
	reqStop    sync.Once
}

var _ pci.Device = (*Device)(nil)

// IRQInfo describes one VFIO interrupt index (INTx, MSI, MSI-X, ...).
type IRQInfo struct {
	Index int
	Flags uint32 // VFIO_IRQ_INFO_*
	Count int
}

func newDevice(addr string, fd int, mmu iommu, o Options) (*Device, error) {
	d := &Device{addr: addr, fd: fd, mmu: mmu}
	di := &deviceInfo{Argsz: uint32(unsafe.Sizeof(deviceInfo{}))}
	if _, err := ioctl(fd, ioctlDeviceGetInfo, unsafe.Pointer(di)); err != nil {
		return nil, fmt.Errorf("vfio: %s: VFIO_DEVICE_GET_INFO: %w", addr, err)
	}
	if di.Flags&devFlagPCI == 0 || di.NumRegions <= RegionConfig {
		return nil, fmt.Errorf("vfio: %s: not a vfio-pci device (flags %#x, %d regions)", addr, di.Flags, di.NumRegions)
	}
	d.flags = di.Flags
	d.regions = make([]Region, di.NumRegions)
	for i := range d.regions {
		r, err := regionInfoOf(fd, i)
		if err != nil {
			// Absent regions (VGA on a non-VGA device) answer EINVAL.
			r = Region{Index: i}
		}
		d.regions[i] = r
	}
	if !d.regions[RegionConfig].Readable() {
		return nil, fmt.Errorf("vfio: %s: config space region not readable", addr)
	}
	d.irqs = make([]IRQInfo, di.NumIRQs)
	for i := range d.irqs {
		q := &irqInfo{Argsz: uint32(unsafe.Sizeof(irqInfo{})), Index: uint32(i)}
		if _, err := ioctl(fd, ioctlDeviceGetIRQInfo, unsafe.Pointer(q)); err != nil {
			q.Count = 0
		}
		d.irqs[i] = IRQInfo{Index: i, Flags: q.Flags, Count: int(q.Count)}
	}
	info, err := pci.ReadInfo(d, addr)
	if err != nil {
		return nil, err
	}
	d.info = info
	d.intr = newInterrupts(d)
	if o.DMASizeFor != nil {
		if n := o.DMASizeFor(d.info); n > 0 {
			o.DMASize = n
		}
	}
	if d.dma, err = newArena(mmu, o); err != nil {
		return nil, fmt.Errorf("vfio: %s: %w", addr, err)
	}
	if err := d.setupRequest(); err != nil {
		return nil, errors.Join(err, d.dma.close())
	}
	return d, nil
}

// regionInfoOf queries VFIO_DEVICE_GET_REGION_INFO, growing the buffer
// once if the kernel asks for room for capabilities.
func regionInfoOf(fd, index int) (Region, error) {
	size := uint32(unsafe.Sizeof(regionInfo{}))
	for range 2 {
		buf := make([]byte, size)
		binary.LittleEndian.PutUint32(buf, size)
		binary.LittleEndian.PutUint32(buf[8:], uint32(index))
		if _, err := ioctl(fd, ioctlDeviceGetRegion, unsafe.Pointer(&buf[0])); err != nil {
			return Region{}, fmt.Errorf("vfio: VFIO_DEVICE_GET_REGION_INFO(%d): %w", index, err)
		}
		if need := binary.LittleEndian.Uint32(buf); need > size {
			size = need
			continue
		}
		return parseRegionInfo(buf)
	}
	return Region{}, fmt.Errorf("vfio: VFIO_DEVICE_GET_REGION_INFO(%d) keeps growing", index)
}

// Info returns the function's address and IDs, read at Open.
func (d *Device) Info() pci.Info { return d.info }

// Address returns the PCI address, e.g. "0000:01:00.0".
func (d *Device) Address() string { return d.addr }

// Backend names the kernel interface in use and its group or IOAS.
func (d *Device) Backend() string { return d.mmu.name() }

// IOMMU returns the IOMMU page sizes and IOVA ranges the kernel reported.
func (d *Device) IOMMU() IOMMUInfo { return d.mmu.info() }

// CanReset reports whether the kernel can reset the function
// (VFIO_DEVICE_FLAGS_RESET: FLR, PM reset or a slot/bus reset).
func (d *Device) CanReset() bool { return d.flags&devFlagReset != 0 }

// Regions returns the vfio-pci regions by index (BAR0-5, ROM, config, VGA
// and device-specific ones); absent ones have Size 0.
func (d *Device) Regions() []Region { return append([]Region(nil), d.regions...) }

// IRQs returns the interrupt indexes (INTx, MSI, MSI-X, ERR, REQ).
func (d *Device) IRQs() []IRQInfo { return append([]IRQInfo(nil), d.irqs...) }

// ConfigRead reads config space with pread on the config region, in
// naturally aligned accesses of up to 4 bytes.
func (d *Device) ConfigRead(off int, p []byte) error {
	return d.configRW(off, p, false)
}

// ConfigWrite writes config space with pwrite. vfio-pci virtualizes parts
// of it (BARs, MSI/MSI-X capabilities) and drops writes it does not allow.
func (d *Device) ConfigWrite(off int, p []byte) error {
	return d.configRW(off, p, true)
}

func (d *Device) configRW(off int, p []byte, write bool) error {
	if d.closed.Load() {
		return pci.ErrClosed
	}
	if d.gone.Load() {
		return fmt.Errorf("vfio: %s: %w", d.addr, pci.ErrRemoved)
	}
	cfg := d.regions[RegionConfig]
	if off < 0 || uint64(off)+uint64(len(p)) > cfg.Size {
		return fmt.Errorf("vfio: %s: config access %#x+%d outside %#x bytes", d.addr, off, len(p), cfg.Size)
	}
	for len(p) > 0 {
		n := 1
		switch {
		case off%4 == 0 && len(p) >= 4:
			n = 4
		case off%2 == 0 && len(p) >= 2:
			n = 2
		}
		var (
			got int
			err error
		)
		if write {
			got, err = unix.Pwrite(d.fd, p[:n], int64(cfg.Offset)+int64(off))
		} else {
			got, err = unix.Pread(d.fd, p[:n], int64(cfg.Offset)+int64(off))
		}
		if err == nil && got != n {
			err = fmt.Errorf("short transfer (%d of %d bytes)", got, n)
		}
		if err != nil {
			return fmt.Errorf("vfio: %s: config %#x: %w", d.addr, off, err)
		}
		p, off = p[n:], off+n
	}
	return nil
}

// SetBusMaster sets or clears the Memory Space and Bus Master bits of the
// Command register. vfio-pci leaves bus mastering off after open (and
// turns it off again on release), so DMA needs this first.
func (d *Device) SetBusMaster(on bool) error { return pci.SetBusMaster(d, on) }

// Reset resets the function with VFIO_DEVICE_RESET, which saves and
// restores config space around it. It returns pci.ErrNotSupported when the
// kernel knows no reset method for the device (CanReset is false).
func (d *Device) Reset() error {
	if d.closed.Load() {
		return pci.ErrClosed
	}
	if d.gone.Load() {
		return fmt.Errorf("vfio: %s: %w", d.addr, pci.ErrRemoved)
	}
	if !d.CanReset() {
		return fmt.Errorf("vfio: %s: no reset method (no FLR, PM or bus reset): %w", d.addr, pci.ErrNotSupported)
	}
	if _, err := ioctlValue(d.fd, ioctlDeviceReset, 0); err != nil {
		return fmt.Errorf("vfio: %s: VFIO_DEVICE_RESET: %w", d.addr, err)
	}
	return nil
}

// DMA returns the allocator over the device's DMA arena.
func (d *Device) DMA() pci.DMA { return d.dma }

// Arena describes the DMA arena: its IOVA range and page kind.
func (d *Device) Arena() ArenaInfo { return d.dma.describe() }

// Interrupts returns the MSI-X vectors when the function has MSI-X, else
// its MSI vectors.
func (d *Device) Interrupts() pci.Interrupts { return d.intr }

// Close disables interrupts, unmaps the BARs, unmaps and frees the DMA
// arena, then closes the device and its group/container or IOAS: the
// reverse of Open. Memory from BAR and DMA must no longer be used.
func (d *Device) Close() error {
	d.stopRequest()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Swap(true) {
		return pci.ErrClosed
	}
	var errs []error
	errs = append(errs, d.intr.close())
	for i, b := range d.bars {
		if b != nil {
			errs = append(errs, b.unmap())
			d.bars[i] = nil
		}
	}
	errs = append(errs, d.dma.close())
	errs = append(errs, closeFD(d.fd))
	errs = append(errs, d.mmu.close())
	return errors.Join(errs...)
}

// InterruptKind returns "MSI-X", "MSI" or "none": what Interrupts drives.
func (d *Device) InterruptKind() string { return d.intr.Kind() }
