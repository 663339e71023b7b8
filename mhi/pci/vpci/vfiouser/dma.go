package vfiouser

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// mapping is one DMA_MAP window: [iova, iova+size) of client memory.
type mapping struct {
	iova, size uint64
	writable   bool
	mem        []byte // the window, inside region; nil without a descriptor
	region     []byte // what mmap returned (page-aligned), for munmap
}

// dmaTable is the device's view of client memory: the DMA maps, sorted by
// IOVA and disjoint. Model goroutines read it under the read lock for the
// whole of each access, so DMA_UNMAP (write lock, then munmap) waits out
// accesses in flight, as vfio-user.rst requires before the reply.
type dmaTable struct {
	mu   sync.RWMutex
	maps []mapping
}

// find returns the mapping containing [iova, iova+n). The caller holds mu.
func (t *dmaTable) find(iova uint64, n int) (*mapping, bool) {
	i := sort.Search(len(t.maps), func(i int) bool { return t.maps[i].iova > iova })
	if i == 0 {
		return nil, false
	}
	m := &t.maps[i-1]
	off := iova - m.iova
	if off >= m.size || uint64(n) > m.size-off {
		return nil, false
	}
	return m, true
}

// clear unmaps everything.
func (t *dmaTable) clear() {
	t.mu.Lock()
	maps := t.maps
	t.maps = nil
	t.mu.Unlock()
	for _, m := range maps {
		if m.region != nil {
			_ = unix.Munmap(m.region)
		}
	}
}

// dmaMap handles DMA_MAP: record the window and, when it came with a
// descriptor, map it shared so the device's DMA is a memory access.
func (s *Server) dmaMap(m *message) ([]byte, syscall.Errno) {
	r, err := decodeDMAMap(m.body)
	if err != nil {
		return nil, syscall.EINVAL
	}
	if len(m.fds) > 1 || r.Size == 0 || r.Addr+r.Size < r.Addr || r.Flags&^(dmaFlagRead|dmaFlagWrite) != 0 {
		return nil, syscall.EINVAL
	}
	mp := mapping{iova: r.Addr, size: r.Size, writable: r.Flags&dmaFlagWrite != 0}
	if fd := m.takeFD(0); fd >= 0 {
		region, mem, err := mmapWindow(fd, r.Offset, r.Size, mp.writable)
		unix.Close(fd) // the mapping keeps the memory alive
		if err != nil {
			s.log.Warn("DMA_MAP: cannot map the client's memory", "iova", fmt.Sprintf("%#x", r.Addr), "size", r.Size, "err", err)
			return nil, errnoOf(err)
		}
		mp.region, mp.mem = region, mem
	}
	t := &s.dma
	t.mu.Lock()
	errno := t.insert(mp)
	t.mu.Unlock()
	if errno != 0 {
		if mp.region != nil {
			_ = unix.Munmap(mp.region)
		}
		return nil, errno
	}
	s.stats.dmaMaps.Add(1)
	s.log.Debug("DMA_MAP", "iova", fmt.Sprintf("%#x", r.Addr), "size", r.Size, "fd", mp.mem != nil, "writable", mp.writable)
	return nil, 0
}

// insert adds mp; overlapping an existing map is EEXIST (vfio-user.rst
// DMA_MAP). The caller holds mu.
func (t *dmaTable) insert(mp mapping) syscall.Errno {
	if len(t.maps) >= maxDMAMaps {
		return syscall.ENOSPC
	}
	i := sort.Search(len(t.maps), func(i int) bool { return t.maps[i].iova >= mp.iova })
	if i < len(t.maps) && t.maps[i].iova < mp.iova+mp.size {
		return syscall.EEXIST
	}
	if i > 0 && t.maps[i-1].iova+t.maps[i-1].size > mp.iova {
		return syscall.EEXIST
	}
	t.maps = append(t.maps, mapping{})
	copy(t.maps[i+1:], t.maps[i:])
	t.maps[i] = mp
	return 0
}

// mmapWindow maps size bytes at offset of fd. mmap wants a page-aligned
// offset, so the region starts at the page below and the window is sliced
// out of it. The file must hold the whole window: touching a mapping past
// the end of a file is SIGBUS, which a client must not be able to cause.
func mmapWindow(fd int, offset, size uint64, writable bool) (region, mem []byte, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, err
	}
	if offset+size < offset || st.Size < 0 || offset+size > uint64(st.Size) {
		return nil, nil, fmt.Errorf("window [%#x,+%#x) beyond the end of the %d-byte file: %w", offset, size, st.Size, syscall.EINVAL)
	}
	pg := uint64(unix.Getpagesize())
	start := offset &^ (pg - 1)
	length := offset - start + size
	if length > 1<<46 || length != uint64(int(length)) {
		return nil, nil, syscall.ENOMEM
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	region, err = unix.Mmap(fd, int64(start), int(length), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return region, region[offset-start:], nil
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

// dmaUnmap handles DMA_UNMAP: the range must match an earlier map exactly
// (vfio-user.rst), or flags say "all". The reply echoes the request.
func (s *Server) dmaUnmap(m *message) ([]byte, syscall.Errno) {
	r, err := decodeDMAUnmap(m.body)
	if err != nil || r.Flags&^dmaUnmapKnown != 0 {
		return nil, syscall.EINVAL
	}
	if r.Flags&dmaUnmapDirty != 0 {
		// Dirty-page tracking is for migration, which is not offered.
		return nil, syscall.ENOTSUP
	}
	t := &s.dma
	if r.Flags&dmaUnmapAll != 0 {
		t.clear()
		return r.encode(), 0
	}
	t.mu.Lock()
	i := sort.Search(len(t.maps), func(i int) bool { return t.maps[i].iova >= r.Addr })
	if i == len(t.maps) || t.maps[i].iova != r.Addr || t.maps[i].size != r.Size {
		t.mu.Unlock()
		return nil, syscall.ENOENT
	}
	region := t.maps[i].region
	t.maps = append(t.maps[:i], t.maps[i+1:]...)
	// Unmapped under the lock: no access can be inside the memory now,
	// and none can start until the window is gone from the table.
	if region != nil {
		_ = unix.Munmap(region)
	}
	t.mu.Unlock()
	return r.encode(), 0
}

// Fault reasons beyond vpci's (which this server also uses: "unmapped",
// "unaligned", "bus master disabled", "device removed").
const (
	reasonNoFD     = "mapped without a file descriptor (use memory-backend-memfd,share=on for guest RAM)"
	reasonReadOnly = "write to a read-only DMA map"
)

// lockRange checks a device access of n bytes at iova and returns the
// client memory it reaches with the table read-locked; the caller copies
// and then calls s.dma.mu.RUnlock. On error nothing is locked.
func (s *Server) lockRange(iova uint64, n int, write, word bool) ([]byte, error) {
	if s.closed.Load() {
		return nil, pci.ErrClosed
	}
	reason := ""
	switch {
	case s.offline.Load():
		// The client is gone; the model's last accesses are nobody's
		// fault (the model treats this reason as quiet).
		return nil, vpci.Fault{IOVA: iova, Len: n, Write: write, Reason: "device removed"}
	case s.cmd.Load()&pci.CmdBusMaster == 0:
		reason = "bus master disabled"
	case word && iova%4 != 0:
		reason = "unaligned"
	default:
		s.dma.mu.RLock()
		mp, ok := s.dma.find(iova, n)
		switch {
		case !ok:
			reason = "unmapped"
		case mp.mem == nil:
			reason = reasonNoFD
		case write && !mp.writable:
			reason = reasonReadOnly
		default:
			off := iova - mp.iova
			mem := mp.mem[off : off+uint64(n)]
			if word && uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%4 != 0 {
				// A window at an odd file offset: no atomic access.
				reason = "unaligned"
				break
			}
			return mem, nil
		}
		s.dma.mu.RUnlock()
	}
	return nil, s.record(vpci.Fault{IOVA: iova, Len: n, Write: write, Reason: reason})
}

// hostPort is the Host the model sees.
type hostPort struct{ s *Server }

func (h *hostPort) DMARead(iova uint64, p []byte) error {
	mem, err := h.s.lockRange(iova, len(p), false, false)
	if err != nil {
		return err
	}
	copy(p, mem)
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaRead.Add(uint64(len(p)))
	return nil
}

func (h *hostPort) DMAWrite(iova uint64, p []byte) error {
	mem, err := h.s.lockRange(iova, len(p), true, false)
	if err != nil {
		return err
	}
	copy(mem, p)
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaWritten.Add(uint64(len(p)))
	return nil
}

// DMARead32 and DMAWrite32 are single 32-bit accesses, atomic with respect
// to the guest CPUs (an aligned 4-byte load or store; the guest reads ring
// pointers with READ_ONCE-style loads): a ring pointer is never seen torn.
func (h *hostPort) DMARead32(iova uint64) (uint32, error) {
	mem, err := h.s.lockRange(iova, 4, false, true)
	if err != nil {
		return 0, err
	}
	v := atomic.LoadUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(mem))))
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaRead.Add(4)
	return v, nil
}

func (h *hostPort) DMAWrite32(iova uint64, v uint32) error {
	mem, err := h.s.lockRange(iova, 4, true, true)
	if err != nil {
		return err
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(mem))), v)
	h.s.dma.mu.RUnlock()
	h.s.stats.dmaWritten.Add(4)
	return nil
}

func (h *hostPort) RaiseMSI(n int) { h.s.raiseMSI(n) }
