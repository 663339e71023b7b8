package mhi

import (
	"fmt"

	"github.com/mhistack/mhistack/mhi/pci"
)

// ring is a host-allocated ring of 16-byte elements in DMA memory, aligned
// to its own (power-of-two) length as Linux's mhi_alloc_aligned_ring does
// (docs/PROTOCOL.md §2). Indices are element numbers; IOVAs are what the
// device sees.
type ring struct {
	buf  *pci.Buffer
	n    uint32 // elements
	base uint64 // IOVA of element 0
}

func newRing(dma pci.DMA, elements int) (ring, error) {
	if elements < 2 || elements&(elements-1) != 0 {
		return ring{}, fmt.Errorf("mhi: ring of %d elements is not a power of two", elements)
	}
	size := elements * ElementSize
	b, err := dma.Alloc(size, size)
	if err != nil {
		return ring{}, fmt.Errorf("mhi: allocate ring of %d elements: %w", elements, err)
	}
	return ring{buf: b, n: uint32(elements), base: b.IOVA}, nil
}

func (r *ring) free(dma pci.DMA) {
	if r.buf != nil {
		_ = dma.Free(r.buf)
		r.buf = nil
	}
}

// len returns the ring length in bytes (the context rlen).
func (r *ring) len() uint64 { return uint64(r.n) * ElementSize }

// iova returns the IOVA of element i.
func (r *ring) iova(i uint32) uint64 { return r.base + uint64(i)*ElementSize }

// index converts a device-provided pointer into an element index. It
// refuses pointers outside the ring or not 16-byte aligned: every pointer a
// device writes is untrusted (§10 pitfall 4).
func (r *ring) index(ptr uint64) (uint32, bool) {
	if ptr < r.base || ptr >= r.base+r.len() || (ptr-r.base)%ElementSize != 0 {
		return 0, false
	}
	return uint32((ptr - r.base) / ElementSize), true
}

func (r *ring) next(i uint32) uint32 { return (i + 1) & (r.n - 1) }

// element returns the 16 bytes of element i.
func (r *ring) element(i uint32) []byte {
	o := int(i) * ElementSize
	return r.buf.Mem[o : o+ElementSize : o+ElementSize]
}

// freeCount is the number of elements that may still be queued between
// wp and rp, keeping one slot empty (§5.7, get_nr_avail_ring_elements).
func (r *ring) freeCount(rp, wp uint32) int {
	if wp < rp {
		return int(rp - wp - 1)
	}
	return int(rp + (r.n - wp) - 1)
}

// pending is the number of queued, not yet completed elements.
func (r *ring) pending(rp, wp uint32) int { return int(wp-rp) & int(r.n-1) }

// full reports whether the slot after wp is rp (§5.7, mhi_is_ring_full).
func (r *ring) full(rp, wp uint32) bool { return r.next(wp) == rp }
