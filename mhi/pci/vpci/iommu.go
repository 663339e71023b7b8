package vpci

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mhistack/mhistack/mhi/pci"
)

// ErrDMAFault matches (errors.Is) every DMA refused by the fake IOMMU; the
// error is a Fault.
var ErrDMAFault = errors.New("vpci: DMA fault")

// Fault describes one refused DMA transaction. Reason is one of "unmapped"
// (not entirely inside one live buffer), "unaligned" (a 32-bit access off a
// 4-byte boundary), "bus master disabled" or "device removed".
type Fault struct {
	IOVA   uint64
	Len    int
	Write  bool
	Reason string
}

// Error describes the fault; a refused DMA returns the Fault itself.
func (f Fault) Error() string {
	dir := "read"
	if f.Write {
		dir = "write"
	}
	return fmt.Sprintf("vpci: DMA fault: %s of %d bytes at IOVA %#x: %s", dir, f.Len, f.IOVA, f.Reason)
}

// Unwrap makes errors.Is(err, ErrDMAFault) hold for a Fault.
func (f Fault) Unwrap() error { return ErrDMAFault }

// faultHistory is how many faults Faults keeps.
const faultHistory = 64

// Faults returns the latest refused DMAs (at most 64), oldest first;
// Stats().DMAFaults counts them all.
func (d *Device) Faults() []Fault {
	m := &d.iommu
	m.faultMu.Lock()
	defer m.faultMu.Unlock()
	n := min(m.nFaults, faultHistory)
	out := make([]Fault, 0, n)
	for i := m.nFaults - n; i < m.nFaults; i++ {
		out = append(out, m.faults[i%faultHistory])
	}
	return out
}

// mapping is one live buffer in the fake IOMMU.
type mapping struct {
	iova uint64
	mem  []byte
}

// iommuTable is an immutable snapshot of the mappings sorted by IOVA. The
// DMA path searches it without a lock; Alloc and Free publish a modified
// copy, so the device never contends with host allocations.
type iommuTable struct{ maps []mapping }

// find returns the bytes [iova, iova+n) if they lie inside one mapping.
func (t *iommuTable) find(iova uint64, n int) ([]byte, bool) {
	// Index of the first mapping starting above iova.
	lo, hi := 0, len(t.maps)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.maps[mid].iova <= iova {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return nil, false
	}
	m := &t.maps[lo-1]
	off := iova - m.iova
	if off > uint64(len(m.mem)) || uint64(n) > uint64(len(m.mem))-off {
		return nil, false
	}
	return m.mem[off : off+uint64(n)], true
}

// iommu is the fake IOMMU: the IOVA allocator, the mapping table and the
// fault log.
type iommu struct {
	table atomic.Pointer[iommuTable]

	mu     sync.Mutex // serialises table updates
	space  *pci.IOVASpace
	closed bool

	faultMu sync.Mutex
	faults  [faultHistory]Fault
	nFaults int
}

func (m *iommu) init(base, limit uint64) {
	m.space = pci.NewIOVASpace(base, limit)
	m.table.Store(&iommuTable{})
}

// insert maps mem at iova unless the IOMMU is closed.
func (m *iommu) insert(iova uint64, mem []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	old := m.table.Load().maps
	i, _ := search(old, iova)
	if i == len(old) && len(old) < cap(old) {
		// Appended in place: a DMA that loaded an earlier table
		// reads only up to its end, and no published table sharing
		// this array ends past old's (remove always copies), so
		// nothing reads maps[i] yet. The IOVA space hands out rising
		// addresses, so a pool of n buffers costs O(n), not the O(n²)
		// of a copy per insert (qcom-sa8775p's 2048-slot IP_SW0
		// pools took seconds).
		maps := old[:i+1]
		maps[i] = mapping{iova: iova, mem: mem}
		m.table.Store(&iommuTable{maps: maps})
		return true
	}
	maps := make([]mapping, len(old)+1, 2*len(old)+1)
	copy(maps, old[:i])
	maps[i] = mapping{iova: iova, mem: mem}
	copy(maps[i+1:], old[i:])
	m.table.Store(&iommuTable{maps: maps})
	return true
}

// remove unmaps b if it is a live buffer of this IOMMU.
func (m *iommu) remove(b *pci.Buffer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return pci.ErrClosed
	}
	old := m.table.Load().maps
	i, ok := search(old, b.IOVA)
	// Compare the memory too: a buffer of another device (or a copy
	// with a different slice) may carry the same IOVA.
	if !ok || len(b.Mem) != len(old[i].mem) || len(b.Mem) == 0 || &b.Mem[0] != &old[i].mem[0] {
		return fmt.Errorf("vpci: free of a buffer at IOVA %#x that is not mapped (double free, or another device's)", b.IOVA)
	}
	maps := make([]mapping, len(old)-1)
	copy(maps, old[:i])
	copy(maps[i:], old[i+1:])
	m.table.Store(&iommuTable{maps: maps})
	return m.space.Free(b.IOVA)
}

// close unmaps everything; later inserts fail.
func (m *iommu) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for _, mp := range m.table.Load().maps {
		_ = m.space.Free(mp.iova)
	}
	m.table.Store(&iommuTable{})
}

// search returns the index of the mapping at iova, or where it would go.
func search(maps []mapping, iova uint64) (int, bool) {
	lo, hi := 0, len(maps)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if maps[mid].iova < iova {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(maps) && maps[lo].iova == iova
}

// record logs a fault, calls the handler and returns the fault as an error.
func (d *Device) record(f Fault) error {
	m := &d.iommu
	m.faultMu.Lock()
	m.faults[m.nFaults%faultHistory] = f
	m.nFaults++
	m.faultMu.Unlock()
	d.stats.dmaFaults.Add(1)
	if h := d.opts.onFault; h != nil {
		h(f)
	}
	return f
}

// translate checks a device access of n bytes at iova and returns the host
// memory it reaches.
func (d *Device) translate(iova uint64, n int, write, word bool) ([]byte, error) {
	if d.closed.Load() {
		// The model is being detached; its last accesses are not
		// the host's fault.
		return nil, pci.ErrClosed
	}
	reason := ""
	switch {
	case d.removed.Load():
		reason = "device removed"
	case d.cmd.Load()&pci.CmdBusMaster == 0:
		reason = "bus master disabled"
	case word && iova%4 != 0:
		reason = "unaligned"
	default:
		if mem, ok := d.iommu.table.Load().find(iova, n); ok {
			return mem, nil
		}
		reason = "unmapped"
	}
	return nil, d.record(Fault{IOVA: iova, Len: n, Write: write, Reason: reason})
}

// dmaAllocator allocates Go-heap buffers and maps them in the fake IOMMU.
type dmaAllocator struct{ d *Device }

// dmaGranule is the smallest IOVA alignment and size unit. Keeping IOVA and
// Mem congruent modulo 8 (Go heap blocks of ≥ 8 bytes are 8-aligned) makes
// a 4-aligned IOVA a 4-aligned address, which the atomic 32-bit accesses of
// both sides need.
const dmaGranule = 8

// Alloc returns a zeroed buffer of size bytes whose IOVA is a multiple of
// align (at least 8) below the IOVA limit.
func (a *dmaAllocator) Alloc(size, align int) (*pci.Buffer, error) {
	d := a.d
	if d.closed.Load() {
		return nil, pci.ErrClosed
	}
	if size <= 0 {
		return nil, fmt.Errorf("vpci: DMA allocation of %d bytes", size)
	}
	if align < 0 || align&(align-1) != 0 {
		return nil, fmt.Errorf("vpci: DMA alignment %d is not a power of two", align)
	}
	padded := (size + dmaGranule - 1) &^ (dmaGranule - 1)
	iova, err := d.iommu.space.Alloc(uint64(padded), uint64(max(align, dmaGranule)))
	if err != nil {
		return nil, fmt.Errorf("vpci: %s: %w", d.info.Address, err)
	}
	// Padding the heap block to a multiple of 8 keeps the tiny
	// allocator from placing a small buffer at an odd address.
	mem := make([]byte, padded)[:size:size]
	if uintptr(unsafe.Pointer(&mem[0]))%dmaGranule != 0 {
		_ = d.iommu.space.Free(iova)
		return nil, errors.New("vpci: Go heap returned a misaligned block") // never on gc
	}
	if !d.iommu.insert(iova, mem) {
		_ = d.iommu.space.Free(iova)
		return nil, pci.ErrClosed
	}
	return &pci.Buffer{Mem: mem, IOVA: iova}, nil
}

// MappedBuffers returns how many DMA buffers the host has allocated and
// not yet freed. Tests use it as a leak check: once the host has released
// a device (link.Endpoint.Close, mhi.Controller.Close) it must be 0. Close
// unmaps everything, so read it before closing the device.
func (d *Device) MappedBuffers() int { return len(d.iommu.table.Load().maps) }

// Free unmaps b; a device access to it faults from now on.
func (a *dmaAllocator) Free(b *pci.Buffer) error {
	if a.d.closed.Load() {
		return pci.ErrClosed
	}
	if b == nil {
		return errors.New("vpci: free of a nil buffer")
	}
	return a.d.iommu.remove(b)
}

// hostPort is the Host the model sees: the device's side of the link.
type hostPort struct{ d *Device }

func (h *hostPort) DMARead(iova uint64, p []byte) error {
	mem, err := h.d.translate(iova, len(p), false, false)
	if err != nil {
		return err
	}
	copy(p, mem)
	h.d.stats.dmaRead.Add(uint64(len(p)))
	return nil
}

func (h *hostPort) DMAWrite(iova uint64, p []byte) error {
	mem, err := h.d.translate(iova, len(p), true, false)
	if err != nil {
		return err
	}
	copy(mem, p)
	h.d.stats.dmaWritten.Add(uint64(len(p)))
	return nil
}

// DMARead32 and DMAWrite32 use sync/atomic because the host reads and writes
// the same words with pci.Buffer.Load32/Store32: mixing atomic and plain
// accesses would be reported by the race detector, and the device would
// lose the ordering Store32 promises.
func (h *hostPort) DMARead32(iova uint64) (uint32, error) {
	mem, err := h.d.translate(iova, 4, false, true)
	if err != nil {
		return 0, err
	}
	h.d.stats.dmaRead.Add(4)
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&mem[0]))), nil
}

func (h *hostPort) DMAWrite32(iova uint64, v uint32) error {
	mem, err := h.d.translate(iova, 4, true, true)
	if err != nil {
		return err
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&mem[0])), v)
	h.d.stats.dmaWritten.Add(4)
	return nil
}

func (h *hostPort) RaiseMSI(n int) { h.d.raiseMSI(n) }

func (h *hostPort) ResetConfig() { h.d.resetConfig() }

func (h *hostPort) BusMaster() bool {
	return !h.d.removed.Load() && h.d.cmd.Load()&pci.CmdBusMaster != 0
}
