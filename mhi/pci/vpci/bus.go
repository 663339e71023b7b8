// Package vpci is an in-process virtual PCI bus: it hosts a device model
// (such as the emulated modem in mhi/sim) behind pci.Device, so the MHI
// engine drives the model exactly as it drives hardware through VFIO. DMA
// goes through a fake IOMMU that refuses and records accesses outside live
// buffers, and buffers are Go heap so that `go test -race` sees races
// between host and device.
//
//	dev, err := vpci.New(model, vpci.WithFaultHandler(func(f vpci.Fault) { t.Error(f) }))
//	defer dev.Close()
//	dev.SetBusMaster(true)                 // memory decoding + DMA, as a driver's probe does
//	bar, _ := dev.BAR(0)                   // Read32/Write32 call model.MMIORead/MMIOWrite
//	vecs, _ := dev.Interrupts().Enable(2)  // eventfds the model's RaiseMSI signals
//
// For tests of the host engine, *Device also injects faults (Remove,
// SetDead, SetMSIFilter) and reports what the device did (Stats, Faults).
package vpci

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi/pci"
)

// iovaBase is where the DMA window starts: IOVA 0 stays unmapped so that a
// device following a zeroed pointer faults instead of hitting a buffer.
const iovaBase = 0x1000

// nextAddr numbers devices process-wide for their "vpci:N" addresses.
var nextAddr atomic.Uint64

// Option configures New.
type Option func(*options)

type options struct {
	onFault   func(Fault)
	iovaLimit uint64
}

// WithFaultHandler calls f, on the faulting model goroutine, for every
// refused DMA. A test typically reports it with t.Error (not t.Fatal, which
// must run on the test goroutine).
func WithFaultHandler(f func(Fault)) Option {
	return func(o *options) { o.onFault = f }
}

// WithIOVALimit ends the DMA window at limit instead of 4 GiB, so that a test
// can exhaust it (pci.ErrNoIOVASpace) with a few allocations.
func WithIOVALimit(limit uint64) Option {
	return func(o *options) { o.iovaLimit = limit }
}

// WithIOVAWindow makes the DMA window size bytes long (it ends at the
// window's base plus size), the IOVA space a VFIO DMA arena of that size
// gives a real device: a pipeline that fits here fits in the arena.
func WithIOVAWindow(size uint64) Option {
	return func(o *options) { o.iovaLimit = iovaBase + min(size, pci.Limit4G-iovaBase) }
}

// Device is a virtual PCI function hosting one Model. It implements
// pci.Device; its other methods are test hooks.
type Device struct {
	model Model
	info  pci.Info
	opts  options
	cfg   *pci.ConfigSpace
	bars  [6]*bar // nil where the model has no BAR
	host  *hostPort
	dma   *dmaAllocator
	irqs  *interrupts

	// life orders Close after in-flight MMIO and Reset, so that the model
	// sees no register access after Detach. DMA and MSIs need no such
	// guard: buffers are Go heap, and eventfds are written through
	// os.File, which tolerates a concurrent Close.
	life    sync.RWMutex
	closed  atomic.Bool
	closing sync.Once
	removed atomic.Bool
	dead    atomic.Uint32 // Death flags (SetDead, dead.go)

	// cfgMu serialises config writes with the mirrors below, which the
	// data paths read without taking it. Lock order: cfgMu, then msi.mu.
	cfgMu sync.Mutex
	cmd   atomic.Uint32 // Command register mirror

	iommu iommu
	msi   msiState
	stats counters
}

// counters are the atomics behind Stats.
type counters struct {
	mmioReads, mmioWrites, mmioUnclaimed           atomic.Uint64
	dmaRead, dmaWritten, dmaFaults                 atomic.Uint64
	msiRaised, msiDelivered, msiDropped, msiMasked atomic.Uint64
}

// Stats counts what crossed the bus since New.
type Stats struct {
	MMIOReads  uint64 // register reads that reached the model
	MMIOWrites uint64 // register writes that reached the model
	// MMIOUnclaimed counts accesses the bus answered itself (all-ones
	// reads, dropped writes): misaligned or outside the BAR, memory
	// decoding off, removed or closed.
	MMIOUnclaimed   uint64
	DMABytesRead    uint64 // host memory read by the device
	DMABytesWritten uint64 // host memory written by the device
	DMAFaults       uint64 // refused DMA transactions (the latest are in Faults)
	MSIRaised       uint64 // RaiseMSI calls by the model
	MSIDelivered    uint64 // eventfd signals, including pending ones released by an unmask
	// MSIDropped counts MSIs lost to the filter, to MSI or bus mastering
	// being disabled, to removal or to Close.
	MSIDropped uint64
	MSIMasked  uint64 // MSIs raised on a masked vector (left pending)
}

// New attaches m to a new virtual bus slot and returns the function. The
// function starts as after power-up: memory decoding, bus mastering and MSI
// are off until the host enables them.
func New(m Model, opts ...Option) (*Device, error) {
	if m == nil {
		return nil, errors.New("vpci: nil model")
	}
	o := options{iovaLimit: pci.Limit4G}
	for _, opt := range opts {
		opt(&o)
	}
	if o.iovaLimit <= iovaBase || o.iovaLimit > pci.Limit4G {
		return nil, fmt.Errorf("vpci: IOVA limit %#x outside (%#x, 4 GiB]", o.iovaLimit, iovaBase)
	}
	id := m.Identity()
	cfg, err := pci.NewConfigSpace(id)
	if err != nil {
		return nil, fmt.Errorf("vpci: %w", err)
	}
	d := &Device{
		model: m,
		opts:  o,
		cfg:   cfg,
		info: pci.Info{
			Address:   fmt.Sprintf("vpci:%d", nextAddr.Add(1)-1),
			Vendor:    id.Vendor,
			Device:    id.Device,
			SubVendor: id.SubVendor,
			SubDev:    id.SubDev,
			Class:     id.Class,
			Revision:  id.Revision,
		},
	}
	for i, size := range id.BARSize {
		if size != 0 {
			d.bars[i] = &bar{d: d, index: i, size: uint64(size)}
		}
	}
	d.host = &hostPort{d: d}
	d.dma = &dmaAllocator{d: d}
	d.irqs = &interrupts{d: d}
	d.iommu.init(iovaBase, o.iovaLimit)
	m.Attach(d.host)
	return d, nil
}

// Info returns the address and IDs. It keeps working after Close.
func (d *Device) Info() pci.Info { return d.info }

// checkConfigAccess enforces the pci.Device contract: inside config space,
// 2- and 4-byte accesses naturally aligned.
func checkConfigAccess(off, n int) error {
	if off < 0 || n < 0 || off+n > pci.ConfigSize {
		return fmt.Errorf("vpci: config access of %d bytes at %#x outside config space", n, off)
	}
	if (n == 2 || n == 4) && off%n != 0 {
		return fmt.Errorf("vpci: misaligned %d-byte config access at %#x", n, off)
	}
	return nil
}

// ConfigRead reads config space. A removed function reads all-ones, as a
// config read that no device completes does.
func (d *Device) ConfigRead(off int, p []byte) error {
	if d.closed.Load() {
		return pci.ErrClosed
	}
	if err := checkConfigAccess(off, len(p)); err != nil {
		return err
	}
	if fill, dead := d.configDead(); dead {
		for i := range p {
			p[i] = fill
		}
		return nil
	}
	d.cfg.Read(off, p)
	// pci.ConfigSpace keeps the MSI Pending bits read-only (they are the
	// function's to set), so the bus owns them and overlays them here.
	const pend = pci.MSICapOffset + pci.MSIPending
	if off < pend+4 && off+len(p) > pend {
		pending := d.msiPending()
		for i := range p {
			if o := off + i; o >= pend && o < pend+4 {
				p[i] = byte(pending >> (8 * (o - pend)))
			}
		}
	}
	return nil
}

// ConfigWrite writes config space. Writes to a removed function are lost.
// Clearing a mask bit releases a pending MSI, as on real hardware.
func (d *Device) ConfigWrite(off int, p []byte) error {
	if d.closed.Load() {
		return pci.ErrClosed
	}
	if err := checkConfigAccess(off, len(p)); err != nil {
		return err
	}
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	d.writeConfigLocked(off, p)
	return nil
}

// writeConfigLocked applies a config write and refreshes the mirrors the
// data paths read. The caller holds cfgMu.
func (d *Device) writeConfigLocked(off int, p []byte) {
	if _, dead := d.configDead(); dead {
		return
	}
	d.cfg.Write(off, p)
	d.syncConfigLocked()
}

// syncConfigLocked copies the Command register and MSI state out of config
// space after it changed. The caller holds cfgMu.
func (d *Device) syncConfigLocked() {
	d.cmd.Store(uint32(d.cfg.Command()))
	enabled, vectors, mask := d.cfg.MSIState()
	d.msiConfigChanged(enabled, vectors, mask)
}

// SetBusMaster enables memory decoding and bus mastering, or disables bus
// mastering (memory decoding stays on so that registers remain readable).
func (d *Device) SetBusMaster(on bool) error {
	if d.closed.Load() {
		return pci.ErrClosed
	}
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	cmd := d.cfg.Command()
	if on {
		cmd |= pci.CmdMemory | pci.CmdBusMaster
	} else {
		cmd &^= pci.CmdBusMaster
	}
	d.writeConfigLocked(pci.CfgCommand, []byte{byte(cmd), byte(cmd >> 8)})
	return nil
}

// BAR returns memory BAR i. The same value is returned on every call.
func (d *Device) BAR(i int) (pci.BAR, error) {
	if d.closed.Load() {
		return nil, pci.ErrClosed
	}
	if i < 0 || i >= len(d.bars) || d.bars[i] == nil {
		return nil, fmt.Errorf("vpci: %s has no BAR%d", d.info.Address, i)
	}
	return d.bars[i], nil
}

// Model returns the device model behind d (a *sim.Modem for the emulated
// modem), for tests that reach the device through a host object that only
// hands out its pci.Device: an mhi.Controller from stack.Open, say.
func (d *Device) Model() Model { return d.model }

// DMA returns the allocator of device-visible memory.
func (d *Device) DMA() pci.DMA { return d.dma }

// Interrupts returns the MSI controller.
func (d *Device) Interrupts() pci.Interrupts { return d.irqs }

// Reset is a function-level reset: the model is reset, config space returns
// to power-on values (memory decoding, bus mastering and MSI off), and the
// MSI vectors are closed (blocked Waits return pci.ErrClosed) until the host
// enables them again. DMA buffers stay mapped: an FLR resets the function,
// not the IOMMU.
func (d *Device) Reset() error {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed.Load() {
		return pci.ErrClosed
	}
	// The model first, so that its goroutines are quiet before bus
	// mastering goes off; otherwise their last DMAs would be recorded as
	// faults the host did not cause.
	d.model.Reset()
	if how := d.death(); how&DeadUntilReset != 0 {
		d.dead.CompareAndSwap(uint32(how), 0)
	}
	d.cfgMu.Lock()
	if !d.removed.Load() {
		d.cfg.Reset()
		d.syncConfigLocked()
	}
	vecs := d.takeVectors()
	d.cfgMu.Unlock()
	return closeVectors(vecs)
}

// resetConfig is Host.ResetConfig: config space to power-on values, the
// mirrors refreshed (MSI off, so raised MSIs are dropped); the vectors the
// host enabled stay open.
func (d *Device) resetConfig() {
	if d.closed.Load() {
		return
	}
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	if d.removed.Load() {
		return
	}
	d.cfg.Reset()
	d.syncConfigLocked()
}

// Remove simulates surprise removal (the modem falls off the bus): from now
// on BAR and config reads return all-ones, writes are lost, DMA is refused
// and MSIs are dropped. The model keeps running, unaware. It cannot be undone.
func (d *Device) Remove() { d.removed.Store(true) }

// Stats returns the counters. It keeps working after Close.
func (d *Device) Stats() Stats {
	s := &d.stats
	return Stats{
		MMIOReads:       s.mmioReads.Load(),
		MMIOWrites:      s.mmioWrites.Load(),
		MMIOUnclaimed:   s.mmioUnclaimed.Load(),
		DMABytesRead:    s.dmaRead.Load(),
		DMABytesWritten: s.dmaWritten.Load(),
		DMAFaults:       s.dmaFaults.Load(),
		MSIRaised:       s.msiRaised.Load(),
		MSIDelivered:    s.msiDelivered.Load(),
		MSIDropped:      s.msiDropped.Load(),
		MSIMasked:       s.msiMasked.Load(),
	}
}

// Close detaches the model, closes the MSI vectors, stops delayed MSIs and
// unmaps every DMA buffer. It is idempotent; afterwards every pci.Device
// method returns pci.ErrClosed, while Info, Stats and Faults keep working.
func (d *Device) Close() error {
	var err error
	d.closing.Do(func() {
		// Taking life exclusively waits out MMIO already inside the
		// model; later accesses see closed and never reach it.
		d.life.Lock()
		d.closed.Store(true)
		d.life.Unlock()
		d.model.Detach()
		d.cfgMu.Lock()
		vecs := d.takeVectors()
		d.cfgMu.Unlock()
		err = closeVectors(vecs)
		d.stopDelayedMSIs()
		d.iommu.close()
	})
	return err
}

// bar is one memory BAR; every access is a synchronous call into the model,
// like an MMIO transaction.
type bar struct {
	d     *Device
	index int
	size  uint64
}

func (b *bar) Len() uint64 { return b.size }

// claims reports whether the function decodes a 32-bit access at off. The
// caller holds d.life.
func (b *bar) claims(off uint64) bool {
	d := b.d
	return off%4 == 0 && off <= b.size-4 &&
		!d.closed.Load() && !d.removed.Load() && d.death()&DeadBAR == 0 && d.cmd.Load()&pci.CmdMemory != 0
}

func (b *bar) Read32(off uint64) uint32 {
	d := b.d
	d.life.RLock()
	defer d.life.RUnlock()
	if !b.claims(off) {
		d.stats.mmioUnclaimed.Add(1)
		return ^uint32(0)
	}
	d.stats.mmioReads.Add(1)
	return d.model.MMIORead(b.index, off)
}

func (b *bar) Write32(off uint64, v uint32) {
	d := b.d
	d.life.RLock()
	defer d.life.RUnlock()
	if !b.claims(off) {
		d.stats.mmioUnclaimed.Add(1)
		return
	}
	d.stats.mmioWrites.Add(1)
	d.model.MMIOWrite(b.index, off, v)
}
