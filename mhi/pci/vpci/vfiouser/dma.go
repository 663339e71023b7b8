package vfiouser

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// fileKey names one client file (the same memfd arrives as a new
// descriptor with every DMA_MAP) and how it is mapped.
type fileKey struct {
	dev, ino uint64
	rw       bool
}

// fileMap is one shared mapping of a whole client file, used by every DMA
// window into it. A client behind a vIOMMU (QEMU intel-iommu with
// caching-mode=on) forwards each guest IOMMU page as its own DMA_MAP: tens
// of thousands of 4 KiB windows into the same guest-RAM memfd. Mapping the
// file once keeps that to one mmap (one VMA) instead of one per page, which
// would also run into vm.max_map_count.
type fileMap struct {
	key  fileKey
	mem  []byte // the file from offset 0, as mmap returned it
	refs int    // windows using mem
}

// mapping is one DMA window: [iova, iova+size) of client memory, at off in
// file. Adjacent windows into contiguous file ranges with the same access
// are merged.
type mapping struct {
	iova, size uint64
	writable   bool
	file       *fileMap // nil: mapped without a descriptor
	off        uint64
}

func (m *mapping) end() uint64 { return m.iova + m.size }

// mem is the window's memory; nil without a descriptor.
func (m *mapping) mem() []byte {
	if m.file == nil {
		return nil
	}
	return m.file.mem[m.off : m.off+m.size]
}

// dmaTable is the device's view of client memory: the DMA windows, sorted
// by IOVA and disjoint, with the files they map. Model goroutines read it
// under the read lock for the whole of each access, so DMA_UNMAP (write
// lock, then munmap) waits out accesses in flight, as vfio-user.rst
// requires before the reply.
//
// Lookups are binary searches (windows.go); DMA_MAP merges a window that
// continues its neighbour; DMA_UNMAP of a range removes every window
// inside it.
type dmaTable struct {
	mu    sync.RWMutex
	maps  windows
	files map[fileKey]*fileMap
}

// release drops one window's reference on its file and unmaps the file
// when it was the last. The caller holds mu for writing: no access can be
// inside the memory.
func (t *dmaTable) release(f *fileMap) {
	if f == nil {
		return
	}
	f.refs--
	if f.refs > 0 {
		return
	}
	if t.files[f.key] == f {
		delete(t.files, f.key)
	}
	_ = unix.Munmap(f.mem)
}

// clear unmaps everything.
func (t *dmaTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maps.each(func(m *mapping) { t.release(m.file) })
	t.maps = windows{}
}

// windows returns how many windows the table holds.
func (t *dmaTable) windows() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.maps.len()
}

// dmaMap handles DMA_MAP: record the window and, when it came with a
// descriptor, map its file shared so the device's DMA is a memory access.
func (s *Server) dmaMap(m *message) ([]byte, syscall.Errno) {
	r, err := vuwire.DecodeDMAMap(m.body)
	if err != nil {
		return nil, syscall.EINVAL
	}
	if len(m.fds) > 1 || r.Size == 0 || r.Addr+r.Size < r.Addr || r.Offset+r.Size < r.Offset || r.Flags&^(vuwire.DMAFlagRead|vuwire.DMAFlagWrite) != 0 {
		return nil, syscall.EINVAL
	}
	mp := mapping{iova: r.Addr, size: r.Size, writable: r.Flags&vuwire.DMAFlagWrite != 0, off: r.Offset}
	fd := m.takeFD(0)
	t := &s.dma
	t.mu.Lock()
	errno := t.mapWindow(mp, fd)
	t.mu.Unlock()
	if fd >= 0 {
		unix.Close(fd) // the file mapping keeps the memory alive
	}
	if errno != 0 {
		if errno != syscall.EEXIST && errno != syscall.ENOSPC {
			s.log.Warn("DMA_MAP: cannot map the client's memory", "iova", fmt.Sprintf("%#x", r.Addr), "size", r.Size, "err", errno)
		}
		return nil, errno
	}
	s.stats.dmaMaps.Add(1)
	s.log.Debug("DMA_MAP", "iova", fmt.Sprintf("%#x", r.Addr), "size", r.Size, "fd", fd >= 0, "writable", mp.writable)
	return nil, 0
}

// mapWindow adds mp, backed by fd (-1: none). Overlapping an existing
// window is EEXIST (vfio-user.rst DMA_MAP, as VFIO type1). The caller
// holds mu for writing.
func (t *dmaTable) mapWindow(mp mapping, fd int) syscall.Errno {
	w := &t.maps
	p := w.seek(mp.iova)
	if w.valid(p) && w.at(p).iova < mp.end() {
		return syscall.EEXIST
	}
	if fd >= 0 {
		f, err := t.file(fd, mp.off, mp.size, mp.writable)
		if err != nil {
			return errnoOf(err)
		}
		mp.file = f
	}
	// Continue the window before (ascending pages of contiguous RAM) or
	// the one after.
	if pp, ok := w.prev(p); ok && mergeable(w.at(pp), &mp) {
		prev := w.at(pp)
		prev.size += mp.size
		t.release(mp.file)
		if w.valid(p) && mergeable(prev, w.at(p)) {
			prev.size += w.at(p).size
			t.release(w.at(p).file)
			w.remove(p, 1)
		}
		return 0
	}
	if w.valid(p) && mergeable(&mp, w.at(p)) {
		next := w.at(p)
		next.iova, next.off, next.size = mp.iova, mp.off, next.size+mp.size
		t.release(mp.file)
		return 0
	}
	if w.len() >= maxDMAMaps {
		t.release(mp.file)
		return syscall.ENOSPC
	}
	w.insert(p, mp)
	return 0
}

// mergeable reports whether b continues a: adjacent in IOVA, contiguous in
// the same file (or both without one), same access.
func mergeable(a, b *mapping) bool {
	if a.end() != b.iova || a.writable != b.writable || a.file != b.file {
		return false
	}
	return a.file == nil || a.off+a.size == b.off
}

// file returns the shared mapping of fd's file holding [off, off+size),
// with one more reference. The file must hold the whole window: touching
// a mapping past the end of a file is SIGBUS, which a client must not be
// able to cause. The caller holds mu for writing.
func (t *dmaTable) file(fd int, off, size uint64, writable bool) (*fileMap, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size < 0 || off+size > uint64(st.Size) {
		return nil, fmt.Errorf("window [%#x,+%#x) beyond the end of the %d-byte file: %w", off, size, st.Size, syscall.EINVAL)
	}
	key := fileKey{dev: uint64(st.Dev), ino: st.Ino, rw: writable}
	if f := t.files[key]; f != nil && uint64(len(f.mem)) >= off+size {
		f.refs++
		return f, nil
	}
	// A new file, or one that grew since it was mapped: map all of it
	// (the older mapping stays until its windows are gone).
	if uint64(st.Size) > 1<<46 || uint64(st.Size) != uint64(int(st.Size)) {
		return nil, syscall.ENOMEM
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	f := &fileMap{key: key, mem: mem, refs: 1}
	if t.files == nil {
		t.files = make(map[fileKey]*fileMap)
	}
	if old := t.files[key]; old != nil {
		delete(t.files, key) // lives on through its windows
	}
	t.files[key] = f
	return f, nil
}

// errnoOf returns the errno inside err for the error reply (EINVAL when
// there is none).
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EINVAL
}

// dmaUnmap handles DMA_UNMAP with VFIO type1 semantics: every window
// inside [addr, addr+size) goes, however many there are; a range with
// nothing mapped in it succeeds. QEMU behind a vIOMMU with caching-mode
// sends each guest IOTLB invalidation as one large power-of-two range
// (0x0+0x80000000, …) over the page windows it mapped one by one. A window
// that straddles the range's edge keeps its part outside the range: windows
// are merged, so the table cannot tell an original DMA_MAP from a merged
// run, and type1's refusal to bisect one cannot be reproduced. The reply
// echoes the request.
func (s *Server) dmaUnmap(m *message) ([]byte, syscall.Errno) {
	r, err := vuwire.DecodeDMAUnmap(m.body)
	if err != nil || r.Flags&^vuwire.DMAUnmapKnown != 0 {
		return nil, syscall.EINVAL
	}
	if r.Flags&vuwire.DMAUnmapDirty != 0 {
		// Dirty-page tracking is for migration, which is not offered.
		return nil, syscall.ENOTSUP
	}
	t := &s.dma
	if r.Flags&vuwire.DMAUnmapAll != 0 {
		t.clear()
		return r.Encode(), 0
	}
	end := r.Addr + r.Size
	switch {
	case r.Size == 0 || (end < r.Addr && end != 0):
		s.log.Warn("DMA_UNMAP: bad range", "iova", fmt.Sprintf("%#x", r.Addr), "size", fmt.Sprintf("%#x", r.Size))
		return nil, syscall.EINVAL
	case end == 0:
		// A range up to the top of the 64-bit space (QEMU unmaps the
		// upper half of its IOMMU address space that way on unplug).
		end = ^uint64(0)
	}
	t.mu.Lock()
	// Unmapped under the lock: no access can be inside the memory now,
	// and none can start until the windows are gone from the table.
	n, errno := t.unmapRange(r.Addr, end)
	t.mu.Unlock()
	if errno != 0 {
		return nil, errno
	}
	s.stats.dmaUnmapped.Add(uint64(n))
	s.log.Debug("DMA_UNMAP", "iova", fmt.Sprintf("%#x", r.Addr), "size", r.Size, "windows", n)
	return r.Encode(), 0
}

// unmapRange removes [lo, hi) from the table and returns how many windows
// were touched. The caller holds mu for writing.
func (t *dmaTable) unmapRange(lo, hi uint64) (int, syscall.Errno) {
	w := &t.maps
	p := w.seek(lo)
	if !w.valid(p) || w.at(p).iova >= hi {
		return 0, 0
	}
	n := 0
	if m := w.at(p); m.iova < lo {
		if m.end() > hi {
			// The range is inside one window: keep both ends.
			if w.len() >= maxDMAMaps {
				return 0, syscall.ENOSPC
			}
			tail := *m
			cut := hi - m.iova
			tail.iova, tail.off, tail.size = hi, m.off+cut, m.size-cut
			if tail.file != nil {
				tail.file.refs++
			}
			m.size = lo - m.iova
			w.insert(w.next(p), tail)
			return 1, 0
		}
		m.size = lo - m.iova // keep the head
		n++
		p = w.next(p)
	}
	full, q := 0, p
	for w.valid(q) && w.at(q).end() <= hi {
		t.release(w.at(q).file)
		full++
		q = w.next(q)
	}
	if w.valid(q) && w.at(q).iova < hi {
		m := w.at(q) // keep the tail
		cut := hi - m.iova
		m.iova, m.off, m.size = hi, m.off+cut, m.size-cut
		n++
	}
	if full > 0 {
		w.remove(p, full)
	}
	return n + full, 0
}

// Fault reasons beyond vpci's (which this server also uses: "unmapped",
// "unaligned", "bus master disabled", "device removed").
const (
	reasonNoFD     = "mapped without a file descriptor (use memory-backend-memfd,share=on for guest RAM)"
	reasonReadOnly = "write to a read-only DMA map"
)

// lockRange checks a device access of n bytes at iova, which may run over
// several adjacent windows (a buffer the guest mapped page by page through
// its IOMMU), and returns the index of the window holding its first byte
// with the table read-locked; the caller copies (copyFrom, copyTo) and
// then calls s.dma.mu.RUnlock. On error nothing is locked.
func (s *Server) lockRange(iova uint64, n int, write, word bool) (pos, error) {
	if s.closed.Load() {
		return pos{}, pci.ErrClosed
	}
	reason := ""
	switch {
	case s.offline.Load():
		// The client is gone; the model's last accesses are nobody's
		// fault (the model treats this reason as quiet).
		return pos{}, vpci.Fault{IOVA: iova, Len: n, Write: write, Reason: "device removed"}
	case s.cmd.Load()&pci.CmdBusMaster == 0:
		reason = "bus master disabled"
	case word && iova%4 != 0:
		reason = "unaligned"
	case n < 0 || iova+uint64(n) < iova:
		reason = "unmapped"
	default:
		s.dma.mu.RLock()
		p, r := s.dma.check(iova, uint64(n), write, word)
		if r == "" {
			return p, nil
		}
		reason = r
		s.dma.mu.RUnlock()
	}
	return pos{}, s.record(vpci.Fault{IOVA: iova, Len: n, Write: write, Reason: reason})
}

// check validates [iova, iova+n) against the windows and returns the
// position of the first, or why the access is refused. The caller holds
// mu.
func (t *dmaTable) check(iova, n uint64, write, word bool) (pos, string) {
	w := &t.maps
	first := w.seek(iova)
	at, end := iova, iova+n
	for p := first; ; p = w.next(p) {
		if !w.valid(p) || w.at(p).iova > at {
			return pos{}, "unmapped"
		}
		mp := w.at(p)
		switch {
		case mp.file == nil:
			return pos{}, reasonNoFD
		case write && !mp.writable:
			return pos{}, reasonReadOnly
		}
		if mp.end() >= end {
			break
		}
		if word {
			// A 32-bit access is one load or store: it cannot be
			// split between two windows.
			return pos{}, "unaligned"
		}
		at = mp.end()
	}
	if word && uintptr(unsafe.Pointer(t.word(first, iova)))%4 != 0 {
		// A window at an odd file offset: no atomic access.
		return pos{}, "unaligned"
	}
	return first, ""
}

// copyOut copies the client memory at iova, starting in window p, into
// buf; copyIn copies buf into it. lockRange has checked the range; the
// caller holds mu.
func (t *dmaTable) copyOut(p pos, iova uint64, buf []byte) {
	for len(buf) > 0 {
		mp := t.maps.at(p)
		n := copy(buf, mp.mem()[iova-mp.iova:])
		buf, iova, p = buf[n:], iova+uint64(n), t.maps.next(p)
	}
}

func (t *dmaTable) copyIn(p pos, iova uint64, buf []byte) {
	for len(buf) > 0 {
		mp := t.maps.at(p)
		n := copy(mp.mem()[iova-mp.iova:], buf)
		buf, iova, p = buf[n:], iova+uint64(n), t.maps.next(p)
	}
}

// word returns the 32-bit word at iova in window p.
func (t *dmaTable) word(p pos, iova uint64) *uint32 {
	mp := t.maps.at(p)
	return (*uint32)(unsafe.Pointer(&mp.file.mem[mp.off+(iova-mp.iova)]))
}

// hostPort is the Host the model sees.
type hostPort struct{ s *Server }

func (h *hostPort) DMARead(iova uint64, buf []byte) error {
	p, err := h.s.lockRange(iova, len(buf), false, false)
	if err != nil {
		return err
	}
	h.s.dma.copyOut(p, iova, buf)
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaRead.Add(uint64(len(buf)))
	return nil
}

func (h *hostPort) DMAWrite(iova uint64, buf []byte) error {
	p, err := h.s.lockRange(iova, len(buf), true, false)
	if err != nil {
		return err
	}
	h.s.dma.copyIn(p, iova, buf)
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaWritten.Add(uint64(len(buf)))
	return nil
}

// DMARead32 and DMAWrite32 are single 32-bit accesses, atomic with respect
// to the guest CPUs (an aligned 4-byte load or store; the guest reads ring
// pointers with READ_ONCE-style loads): a ring pointer is never seen torn.
func (h *hostPort) DMARead32(iova uint64) (uint32, error) {
	p, err := h.s.lockRange(iova, 4, false, true)
	if err != nil {
		return 0, err
	}
	v := atomic.LoadUint32(h.s.dma.word(p, iova))
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaRead.Add(4)
	return v, nil
}

func (h *hostPort) DMAWrite32(iova uint64, v uint32) error {
	p, err := h.s.lockRange(iova, 4, true, true)
	if err != nil {
		return err
	}
	atomic.StoreUint32(h.s.dma.word(p, iova), v)
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaWritten.Add(4)
	return nil
}

func (h *hostPort) RaiseMSI(n int) { h.s.raiseMSI(n) }

func (h *hostPort) BusMaster() bool {
	return !h.s.offline.Load() && h.s.cmd.Load()&pci.CmdBusMaster != 0
}

// ResetConfig is the model resetting its own PCIe core (vpci.Host): config
// space returns to power-on values, as resetFunction does for an FLR, but
// the model is not reset again and the client's eventfds stay.
func (h *hostPort) ResetConfig() {
	s := h.s
	if s.closed.Load() {
		return
	}
	s.cfgMu.Lock()
	s.cfg.Reset()
	s.cmd.Store(uint32(s.cfg.Command()))
	s.cfgMu.Unlock()
}
