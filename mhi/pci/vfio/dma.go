//go:build linux

package vfio

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
)

// arena is the device's DMA memory: one anonymous mapping outside the Go
// heap (the garbage collector never moves or frees it), locked, kept out of
// forked children, and mapped once into the IOMMU at an IOVA window below
// 4 GiB. Alloc carves buffers out of it with a pci.IOVASpace, so the
// number of IOMMU mappings stays at one however many buffers the engine
// uses (type1 limits a container to dma_entry_limit mappings).
type arena struct {
	*pci.Arena
	mmu  iommu
	mem  []byte
	iova uint64
	huge bool
}

var _ pci.DMA = (*arena)(nil)

// ArenaInfo describes a device's DMA arena.
type ArenaInfo struct {
	IOVA      uint64 // first device address
	Size      uint64
	HugePages bool // backed by 2 MiB hugetlb pages
	InUse     int  // live buffers
}

const hugePageSize = 2 << 20

func newArena(mmu iommu, o Options) (*arena, error) {
	inf := mmu.info()
	page := uint64(os.Getpagesize())
	granule := page
	if inf.PageSizes != 0 {
		if g := inf.PageSizes & -inf.PageSizes; g > granule {
			granule = g
		}
	}
	a := &arena{mmu: mmu}
	size := alignUp(uint64(o.DMASize), granule)
	var err error
	if o.HugePages != HugePagesOff {
		hsize := alignUp(size, hugePageSize)
		a.mem, err = unix.Mmap(-1, 0, int(hsize), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|unix.MAP_HUGE_2MB)
		switch {
		case err == nil:
			a.huge, size = true, hsize
		case o.HugePages == HugePagesRequire:
			return nil, fmt.Errorf("DMA arena: %d MiB of 2 MiB hugepages: %w (reserve them: echo %d > /proc/sys/vm/nr_hugepages)", hsize>>20, err, hsize/hugePageSize)
		}
	}
	if a.mem == nil {
		if a.mem, err = unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
			return nil, fmt.Errorf("DMA arena: mmap %d bytes: %w", size, err)
		}
	}
	fail := func(err error) (*arena, error) { return nil, errors.Join(err, unix.Munmap(a.mem)) }
	// A forked child must not get a copy-on-write view of pinned pages:
	// the parent's next write would land on a fresh copy the device
	// never sees.
	if err := unix.Madvise(a.mem, unix.MADV_DONTFORK); err != nil {
		return fail(fmt.Errorf("DMA arena: madvise(DONTFORK): %w", err))
	}
	if err := unix.Mlock(a.mem); err != nil {
		return fail(memlockError("mlock of the DMA arena", size, err))
	}
	align := granule
	if a.huge {
		align = max(align, hugePageSize)
	}
	a.iova, err = pickIOVA(inf.Ranges, size, align, o.IOVABase, o.IOVALimit)
	if err != nil {
		return fail(err)
	}
	if err := mmu.mapDMA(uintptr(unsafe.Pointer(&a.mem[0])), a.iova, size); err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return fail(memlockError("pinning the DMA arena for the IOMMU", size, err))
		}
		return fail(fmt.Errorf("DMA arena: map %#x bytes at IOVA %#x: %w", size, a.iova, err))
	}
	a.Arena = pci.NewArena("vfio", a.mem, a.iova)
	return a, nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// pickIOVA returns the lowest address ≥ base, aligned to align, where size
// bytes fit inside one IOMMU range and end at or below limit. nil ranges
// mean the whole space is usable.
func pickIOVA(ranges []IOVARange, size, align, base, limit uint64) (uint64, error) {
	if ranges == nil {
		ranges = []IOVARange{{0, ^uint64(0)}}
	}
	best, found := uint64(0), false
	for _, r := range ranges {
		start := alignUp(max(r.Start, base), align)
		if start < r.Start || start < base { // wrapped
			continue
		}
		end := start + size // exclusive
		if end < start || end-1 > r.End || end > limit {
			continue
		}
		if !found || start < best {
			best, found = start, true
		}
	}
	if !found {
		return 0, fmt.Errorf("%w: no IOVA window of %#x bytes between %#x and %#x in the IOMMU ranges %v", pci.ErrNoIOVASpace, size, base, limit, ranges)
	}
	return best, nil
}

// memlockError explains a pinning failure caused by RLIMIT_MEMLOCK.
func memlockError(what string, size uint64, err error) error {
	if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("%s: %w", what, err)
	}
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
	cur := "unlimited"
	if lim.Cur != unix.RLIM_INFINITY {
		cur = fmt.Sprintf("%d KiB", lim.Cur>>10)
	}
	kib := 2 * size >> 10
	return fmt.Errorf("%w: %s needs %d KiB locked (RLIMIT_MEMLOCK is %s; the kernel may count it twice, for mlock and for the IOMMU pin): %v; raise the limit to at least %d KiB ('ulimit -l %d', LimitMEMLOCK=%dK in a systemd unit, or /etc/security/limits.conf), or grant CAP_IPC_LOCK; the size follows from the modem profile and the link options (RX pool, MRU), see docs/VFIO.md",
		ErrMemlock, what, size>>10, cur, err, kib, kib, kib)
}

func (a *arena) describe() ArenaInfo {
	return ArenaInfo{IOVA: a.iova, Size: uint64(len(a.mem)), HugePages: a.huge, InUse: a.InUse()}
}

// close unmaps the arena from the IOMMU before unmapping it from the
// process: the reverse order would leave the device a window onto pages
// the kernel may hand to someone else.
func (a *arena) close() error {
	if !a.Arena.Close() {
		return nil
	}
	err := a.mmu.unmapDMA(a.iova, uint64(len(a.mem)))
	if err != nil {
		// Keep the pages: freeing memory the device may still reach
		// is worse than leaking it.
		return err
	}
	return unix.Munmap(a.mem)
}
