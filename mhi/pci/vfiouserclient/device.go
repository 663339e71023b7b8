//go:build linux

// Package vfiouserclient drives a PCI function that another process serves
// over vfio-user (qemu docs/interop/vfio-user.rst), such as the emulated
// modem of `mhictl sim serve`: it is a pci.Device like mhi/pci/vfio's, so
// the MHI engine (mhi.New) runs on it unchanged, and stack.Open reaches it
// as Device "vfio-user:/path/to/socket".
//
//	dev, err := vfiouserclient.Open("/run/modem.sock", nil)
//	c, err := mhi.New(dev, mhi.Options{})
//
// What crosses the socket:
//
//   - DMA memory is one memfd-backed arena, shared with the server by a
//     single DMA_MAP carrying the memfd, and sub-allocated like the VFIO
//     arena (pci.Arena). The device reaches nothing else: the server
//     refuses and counts an access outside its DMA maps.
//   - MSIs arrive on eventfds installed with DEVICE_SET_IRQS; a vector
//     waits on its eventfd in the Go netpoller (pci.EventVector).
//   - BAR writes are posted (REGION_WRITE with NO_REPLY: one sendmsg, no
//     wait), as a CPU's MMIO writes are; BAR reads and config accesses are
//     round trips. The server handles messages in order, so a read
//     returns after every earlier write took effect.
//   - Reset is DEVICE_RESET.
//
// When the server goes away (its process exits, the socket breaks), every
// call waiting for a reply returns an error wrapping pci.ErrRemoved, BAR
// reads return all-ones, and RemovalRequested (pci.Removable) is closed, so
// the engine fails its channels with mhi.ErrRemoved.
//
// A server that stays connected but stops answering (hung, or stopped
// with SIGSTOP) is declared gone the same way once a request has waited
// Options.Timeout (default DefaultTimeout) for its reply, or a write as
// long for room on the socket; the error then also wraps
// os.ErrDeadlineExceeded and says which request was not answered. A hung
// server is noticed only while the client waits for it (the MHI engine's
// liveness check reads a register every second). One watchdog goroutine
// per connection does it, with no timer per call (docs/VFIO.md §9).
package vfiouserclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
)

// Prefix is how a vfio-user device is named where a device string is
// expected (stack.Options.Device, -device): "vfio-user:" and the socket
// path.
const Prefix = "vfio-user:"

// Options configure Open.
type Options struct {
	// DMASize is the size of the DMA arena (default 16 MiB). The arena
	// does not grow: size it from what will be allocated, as for
	// mhi/pci/vfio (stack.DMASize).
	DMASize int
	// DMASizeFor, when set, is called once the function's IDs are read
	// and before the arena is created; a positive result replaces
	// DMASize.
	DMASizeFor func(pci.Info) int
	// IOVABase is the device address of the arena (default 1 MiB). The
	// arena must end at or below 4 GiB.
	IOVABase uint64
	// Timeout bounds how long the server may leave a request
	// unanswered, or a message unread on a full socket, before the
	// connection is declared dead as if the server had closed it
	// (default DefaultTimeout; negative: wait forever). It covers every
	// round trip, Open's included: a BAR read, a config access,
	// DMA_MAP, DEVICE_RESET.
	Timeout time.Duration
}

// DefaultTimeout is Options.Timeout's default: a server that has not
// answered in 5 s is taken as hung. Every request the server handles
// takes microseconds (docs/VFIO.md §9).
const DefaultTimeout = 5 * time.Second

const (
	defaultDMASize  = 16 << 20
	defaultIOVABase = 1 << 20
)

// Device is a PCI function served over vfio-user. It implements
// pci.Device and pci.Removable.
type Device struct {
	path  string
	k     *conn
	flags uint32
	regs  [vuwire.NumRegions]vuwire.RegionInfo
	info  pci.Info

	mu     sync.Mutex // guards bars and closing
	bars   [6]*bar
	closed atomic.Bool

	memfd int
	mem   []byte
	dma   *pci.Arena
	intr  *interrupts
}

var (
	_ pci.Device    = (*Device)(nil)
	_ pci.Removable = (*Device)(nil)
)

// Open connects to the vfio-user server listening on the UNIX socket at
// path, negotiates the protocol, reads the function's regions, interrupts
// and IDs, and shares its DMA arena with the server. o may be nil.
func Open(path string, o *Options) (*Device, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vfio-user: %w", err)
	}
	return New(c, path, o)
}

// New is Open over an established connection (a socketpair with an
// in-process server, in tests); name identifies the device in errors and
// in Info().Address ("vfio-user:"+name). The Device owns c.
func New(c *net.UnixConn, name string, o *Options) (*Device, error) {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.DMASize <= 0 {
		opts.DMASize = defaultDMASize
	}
	if opts.IOVABase == 0 {
		opts.IOVABase = defaultIOVABase
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	d := &Device{path: name, k: newConn(name, c, opts.Timeout), memfd: -1}
	if err := d.setup(opts); err != nil {
		d.k.close()
		d.freeArena()
		return nil, err
	}
	return d, nil
}

// clientVersion is the VERSION proposal: what this client uses.
var clientVersion = fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d,"max_data_xfer_size":%d,"pgsizes":%d}}`,
	vuwire.MaxMsgFDs, vuwire.MaxDataXfer, vuwire.PageSize)

func (d *Device) setup(o Options) error {
	reply := make([]byte, 4096)
	n, err := d.k.roundTripLarge(vuwire.CmdVersion, vuwire.EncodeVersion(clientVersion), nil, reply)
	if err != nil {
		return fmt.Errorf("vfio-user: %s: VERSION: %w", d.path, err)
	}
	v, err := vuwire.DecodeVersion(reply[:n])
	if err != nil {
		return fmt.Errorf("vfio-user: %s: VERSION reply: %w", d.path, err)
	}
	if v.Major != 0 {
		return fmt.Errorf("vfio-user: %s: server speaks version %d.%d, want 0.x", d.path, v.Major, v.Minor)
	}
	if v.Caps.PgSizes != nil && *v.Caps.PgSizes&vuwire.PageSize == 0 {
		return fmt.Errorf("vfio-user: %s: server lacks 4 KiB DMA pages (pgsizes %#x)", d.path, *v.Caps.PgSizes)
	}
	if n, err = d.k.roundTripLarge(vuwire.CmdDeviceGetInfo, vuwire.ArgSz(vuwire.DeviceInfoSize), nil, reply); err != nil {
		return fmt.Errorf("vfio-user: %s: DEVICE_GET_INFO: %w", d.path, err)
	}
	di, err := vuwire.DecodeDeviceInfo(reply[:n])
	if err != nil {
		return fmt.Errorf("vfio-user: %s: DEVICE_GET_INFO reply: %w", d.path, err)
	}
	if di.Flags&vuwire.DeviceFlagPCI == 0 || di.NumRegions <= vuwire.RegionConfig || di.NumIRQs <= vuwire.IRQMSI {
		return fmt.Errorf("vfio-user: %s: not a PCI device (flags %#x, %d regions, %d IRQ indexes)", d.path, di.Flags, di.NumRegions, di.NumIRQs)
	}
	d.flags = di.Flags
	for i := range d.regs {
		if uint32(i) >= di.NumRegions {
			break
		}
		req := vuwire.RegionInfo{Index: uint32(i)}.Encode()
		if n, err = d.k.roundTripLarge(vuwire.CmdRegionInfo, req, nil, reply); err != nil {
			return fmt.Errorf("vfio-user: %s: DEVICE_GET_REGION_INFO(%d): %w", d.path, i, err)
		}
		r, err := vuwire.DecodeRegionInfo(reply[:n])
		if err != nil || r.Index != uint32(i) {
			return fmt.Errorf("vfio-user: %s: DEVICE_GET_REGION_INFO(%d) reply: %v", d.path, i, err)
		}
		d.regs[i] = r
	}
	if cfg := d.regs[vuwire.RegionConfig]; cfg.Flags&vuwire.RegionFlagRead == 0 || cfg.Size < pci.ConfigSize {
		return fmt.Errorf("vfio-user: %s: config space region of %d bytes, flags %#x", d.path, cfg.Size, cfg.Flags)
	}
	req := vuwire.IRQInfo{Index: vuwire.IRQMSI}.Encode()
	if n, err = d.k.roundTripLarge(vuwire.CmdIRQInfo, req, nil, reply); err != nil {
		return fmt.Errorf("vfio-user: %s: DEVICE_GET_IRQ_INFO(MSI): %w", d.path, err)
	}
	msi, err := vuwire.DecodeIRQInfo(reply[:n])
	if err != nil {
		return fmt.Errorf("vfio-user: %s: DEVICE_GET_IRQ_INFO reply: %w", d.path, err)
	}
	d.intr = &interrupts{d: d}
	if msi.Flags&vuwire.IRQInfoEventfd != 0 {
		d.intr.max = int(min(msi.Count, 32))
	}

	info, err := pci.ReadInfo(d, Prefix+d.path)
	if err != nil {
		return err
	}
	d.info = info
	if o.DMASizeFor != nil {
		if n := o.DMASizeFor(d.info); n > 0 {
			o.DMASize = n
		}
	}
	return d.mapArena(o)
}

// mapArena creates the DMA arena in a memfd and maps it for the server
// with one DMA_MAP that carries the memfd.
func (d *Device) mapArena(o Options) error {
	size := (uint64(o.DMASize) + vuwire.PageSize - 1) &^ (vuwire.PageSize - 1)
	base := (o.IOVABase + vuwire.PageSize - 1) &^ (vuwire.PageSize - 1)
	if base+size < base || base+size > pci.Limit4G {
		return fmt.Errorf("vfio-user: %s: %w: a %d-byte arena at IOVA %#x ends above 4 GiB", d.path, pci.ErrNoIOVASpace, size, base)
	}
	fd, err := unix.MemfdCreate("mhistack-dma", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("vfio-user: %s: memfd for the DMA arena: %w", d.path, err)
	}
	d.memfd = fd
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fmt.Errorf("vfio-user: %s: DMA arena of %d bytes: %w", d.path, size, err)
	}
	if d.mem, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("vfio-user: %s: mmap of the DMA arena: %w", d.path, err)
	}
	req := vuwire.DMAMap{Flags: vuwire.DMAFlagRead | vuwire.DMAFlagWrite, Offset: 0, Addr: base, Size: size}.Encode()
	if _, err := d.k.roundTrip(vuwire.CmdDMAMap, req, nil, []int{fd}, nil); err != nil {
		unix.Munmap(d.mem)
		d.mem = nil
		return fmt.Errorf("vfio-user: %s: DMA_MAP of the arena: %w", d.path, err)
	}
	d.dma = pci.NewArena("vfio-user", d.mem, base)
	return nil
}

// freeArena unmaps the arena from this process and closes the memfd (the
// server keeps its own mapping until DMA_UNMAP or disconnect).
func (d *Device) freeArena() {
	if d.mem != nil {
		unix.Munmap(d.mem)
		d.mem = nil
	}
	if d.memfd >= 0 {
		unix.Close(d.memfd)
		d.memfd = -1
	}
}

// Info returns the function's address ("vfio-user:PATH") and IDs.
func (d *Device) Info() pci.Info { return d.info }

// Arena returns the DMA arena's first IOVA and size.
func (d *Device) Arena() (iova, size uint64) { return d.dma.IOVA(), d.dma.Size() }

// check returns the error of a call on a closed or removed device.
func (d *Device) check() error {
	if d.closed.Load() {
		return pci.ErrClosed
	}
	if d.k.dead.Load() {
		return d.k.errGone()
	}
	return nil
}

// ConfigRead reads config space with one REGION_READ.
func (d *Device) ConfigRead(off int, p []byte) error { return d.configRW(off, p, false) }

// ConfigWrite writes config space with one REGION_WRITE and waits for the
// server to apply it.
func (d *Device) ConfigWrite(off int, p []byte) error { return d.configRW(off, p, true) }

func (d *Device) configRW(off int, p []byte, write bool) error {
	if err := d.check(); err != nil {
		return err
	}
	size := d.regs[vuwire.RegionConfig].Size
	if off < 0 || uint64(off)+uint64(len(p)) > size || len(p) > 48 {
		return fmt.Errorf("vfio-user: %s: config access %#x+%d outside %#x bytes (or longer than 48)", d.path, off, len(p), size)
	}
	var head [vuwire.RegionAccessSize]byte
	vuwire.RegionAccess{Offset: uint64(off), Region: vuwire.RegionConfig, Count: uint32(len(p))}.Put(head[:])
	if write {
		if _, err := d.k.roundTrip(vuwire.CmdRegionWrite, head[:], p, nil, nil); err != nil {
			return fmt.Errorf("vfio-user: %s: config write %#x: %w", d.path, off, err)
		}
		return nil
	}
	var out [vuwire.RegionAccessSize + 48]byte
	n, err := d.k.roundTrip(vuwire.CmdRegionRead, head[:], nil, nil, out[:])
	if err != nil {
		return fmt.Errorf("vfio-user: %s: config read %#x: %w", d.path, off, err)
	}
	a, err := vuwire.DecodeRegionAccess(out[:n], true)
	if err != nil || a.Count != uint32(len(p)) {
		return fmt.Errorf("vfio-user: %s: config read %#x: bad reply (%d bytes, %v)", d.path, off, n, err)
	}
	copy(p, a.Data)
	return nil
}

// SetBusMaster sets or clears the Memory Space and Bus Master bits of the
// Command register.
func (d *Device) SetBusMaster(on bool) error { return pci.SetBusMaster(d, on) }

// BAR returns memory BAR i.
func (d *Device) BAR(i int) (pci.BAR, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if i < 0 || i >= len(d.bars) || d.regs[i].Size == 0 {
		return nil, fmt.Errorf("vfio-user: %s: no BAR %d", d.path, i)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bars[i] == nil {
		d.bars[i] = &bar{d: d, index: uint32(i), size: d.regs[i].Size}
	}
	return d.bars[i], nil
}

// DMA returns the allocator over the memfd arena.
func (d *Device) DMA() pci.DMA { return d.dma }

// Interrupts returns the MSI vectors.
func (d *Device) Interrupts() pci.Interrupts { return d.intr }

// Reset resets the function with DEVICE_RESET. The server resets the
// model and config space and drops the MSI eventfds; DMA maps stay.
func (d *Device) Reset() error {
	if err := d.check(); err != nil {
		return err
	}
	if d.flags&vuwire.DeviceFlagReset == 0 {
		return fmt.Errorf("vfio-user: %s: the server offers no reset: %w", d.path, pci.ErrNotSupported)
	}
	if _, err := d.k.roundTrip(vuwire.CmdDeviceReset, nil, nil, nil, nil); err != nil {
		return fmt.Errorf("vfio-user: %s: DEVICE_RESET: %w", d.path, err)
	}
	return nil
}

// Err returns why the connection to the server ended, an error wrapping
// pci.ErrRemoved (the server closed it, or did not answer within
// Options.Timeout, which also wraps os.ErrDeadlineExceeded), or nil while
// it is up. The engine above reports a device that reads all-ones as
// mhi.ErrRemoved without knowing why; this says why.
func (d *Device) Err() error {
	if !d.k.dead.Load() {
		return nil
	}
	return d.k.errGone()
}

// RemovalRequested is closed when the connection to the server is lost.
func (d *Device) RemovalRequested() <-chan struct{} { return d.k.gone }

// Release is a no-op beyond what the lost connection did: the server has
// already let the function go.
func (d *Device) Release() {}

// Close disables interrupts, unmaps the arena from the server (which waits
// out the device's accesses in flight), closes the connection and frees
// the arena. Memory from DMA must no longer be used.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Swap(true) {
		return pci.ErrClosed
	}
	var errs []error
	errs = append(errs, d.intr.close())
	d.dma.Close()
	if !d.k.dead.Load() {
		req := vuwire.DMAUnmap{Addr: d.dma.IOVA(), Size: d.dma.Size()}.Encode()
		var out [vuwire.DMAUnmapSize]byte
		if _, err := d.k.roundTrip(vuwire.CmdDMAUnmap, req, nil, nil, out[:]); err != nil && !errors.Is(err, pci.ErrRemoved) {
			errs = append(errs, err)
		}
	}
	d.k.close()
	d.freeArena()
	return errors.Join(errs...)
}

// bar is a BAR accessed with REGION_READ (a round trip) and posted
// REGION_WRITEs.
type bar struct {
	d     *Device
	index uint32
	size  uint64
}

func (b *bar) Len() uint64 { return b.size }

// Read32 reads a register; a gone or closed device, or an offset outside
// the BAR, reads all-ones.
func (b *bar) Read32(off uint64) uint32 {
	if off%4 != 0 || off >= b.size || b.size-off < 4 || b.d.closed.Load() {
		return 0xFFFFFFFF
	}
	var head [vuwire.RegionAccessSize]byte
	vuwire.RegionAccess{Offset: off, Region: b.index, Count: 4}.Put(head[:])
	var out [vuwire.RegionAccessSize + 4]byte
	n, err := b.d.k.roundTrip(vuwire.CmdRegionRead, head[:], nil, nil, out[:])
	if err != nil || n != len(out) {
		return 0xFFFFFFFF
	}
	return binary.LittleEndian.Uint32(out[vuwire.RegionAccessSize:])
}

// Write32 posts a register write: it returns once the message is on the
// socket, without waiting for the server.
func (b *bar) Write32(off uint64, v uint32) {
	if off%4 != 0 || off >= b.size || b.size-off < 4 || b.d.closed.Load() {
		return
	}
	var msg [vuwire.RegionAccessSize + 4]byte
	vuwire.RegionAccess{Offset: off, Region: b.index, Count: 4}.Put(msg[:])
	binary.LittleEndian.PutUint32(msg[vuwire.RegionAccessSize:], v)
	_ = b.d.k.post(vuwire.CmdRegionWrite, msg[:], nil)
}

// interrupts installs MSI eventfds with DEVICE_SET_IRQS.
type interrupts struct {
	d   *Device
	max int

	mu   sync.Mutex
	vecs []*pci.EventVector
}

// Max returns the MSI vectors the server offers.
func (in *interrupts) Max() int { return in.max }

// Enable grants the smallest power of two ≥ n vectors (MSI's Multiple
// Message Enable; the server aliases an MSI number modulo the installed
// count), installs an eventfd for each and returns the first n, replacing
// vectors enabled before.
func (in *interrupts) Enable(n int) ([]pci.Vector, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	d := in.d
	if err := d.check(); err != nil {
		return nil, err
	}
	if in.max == 0 {
		return nil, fmt.Errorf("vfio-user: %s: no MSI: %w", d.path, pci.ErrNotSupported)
	}
	if n < 1 || n > in.max {
		return nil, fmt.Errorf("vfio-user: %s: enable %d MSI vectors, want 1..%d", d.path, n, in.max)
	}
	if err := in.disableLocked(); err != nil {
		return nil, err
	}
	vecs := make([]*pci.EventVector, min(1<<bits.Len(uint(n-1)), in.max))
	for i := range vecs {
		v, err := pci.NewEventVector(i)
		if err != nil {
			closeVectors(vecs[:i])
			return nil, err
		}
		vecs[i] = v
	}
	for start := 0; start < len(vecs); start += vuwire.MaxMsgFDs {
		chunk := vecs[start:min(start+vuwire.MaxMsgFDs, len(vecs))]
		fds := make([]int, len(chunk))
		for i, v := range chunk {
			fds[i] = v.Fd()
		}
		if err := in.setIRQs(vuwire.IRQSetDataEventfd, start, len(chunk), fds); err != nil {
			_ = in.setIRQs(vuwire.IRQSetDataNone, 0, 0, nil)
			closeVectors(vecs)
			return nil, fmt.Errorf("vfio-user: %s: enable %d MSI vectors: %w", d.path, n, err)
		}
	}
	in.vecs = vecs
	out := make([]pci.Vector, n)
	for i := range out {
		out[i] = vecs[i]
	}
	return out, nil
}

func (in *interrupts) setIRQs(data uint32, start, count int, fds []int) error {
	req := vuwire.IRQSet{Flags: data | vuwire.IRQSetActionTrig, Index: vuwire.IRQMSI, Start: uint32(start), Count: uint32(count)}.Encode()
	_, err := in.d.k.roundTrip(vuwire.CmdSetIRQs, req, nil, fds, nil)
	return err
}

// Disable removes the eventfds from the server and closes them: blocked
// Waits return pci.ErrClosed.
func (in *interrupts) Disable() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.d.closed.Load() {
		return pci.ErrClosed
	}
	return in.disableLocked()
}

func (in *interrupts) disableLocked() error {
	if in.vecs == nil {
		return nil
	}
	var err error
	if !in.d.k.dead.Load() {
		err = in.setIRQs(vuwire.IRQSetDataNone, 0, 0, nil)
		if errors.Is(err, pci.ErrRemoved) {
			err = nil // nothing left to disable
		}
	}
	closeVectors(in.vecs)
	in.vecs = nil
	return err
}

func (in *interrupts) close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.disableLocked()
}

func closeVectors(vs []*pci.EventVector) {
	for _, v := range vs {
		if v != nil {
			_ = v.Close()
		}
	}
}
