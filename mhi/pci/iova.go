package pci

import (
	"fmt"
	"sort"
	"sync"
)

// Limit4G is the end of the 32-bit DMA window every MHI modem is limited to.
const Limit4G = 1 << 32

// IOVASpace hands out IOVA ranges inside [base, limit) with first-fit
// allocation and coalescing frees. Backends use it to keep every device
// address below 4 GiB. It is safe for concurrent use.
type IOVASpace struct {
	mu   sync.Mutex
	free []span // sorted by start, non-adjacent
	used map[uint64]uint64
}

type span struct{ start, end uint64 }

// NewIOVASpace returns an allocator over [base, limit).
func NewIOVASpace(base, limit uint64) *IOVASpace {
	return &IOVASpace{free: []span{{base, limit}}, used: make(map[uint64]uint64)}
}

// Alloc reserves size bytes aligned to align (a power of two).
func (s *IOVASpace) Alloc(size, align uint64) (uint64, error) {
	if size == 0 {
		return 0, fmt.Errorf("pci: zero-sized IOVA allocation")
	}
	if align == 0 {
		align = 1
	}
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("pci: IOVA alignment %d is not a power of two", align)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.free {
		start := (f.start + align - 1) &^ (align - 1)
		if start < f.start || start >= f.end || f.end-start < size {
			continue
		}
		end := start + size
		var repl []span
		if start > f.start {
			repl = append(repl, span{f.start, start})
		}
		if end < f.end {
			repl = append(repl, span{end, f.end})
		}
		s.free = append(s.free[:i], append(repl, s.free[i+1:]...)...)
		s.used[start] = size
		return start, nil
	}
	return 0, fmt.Errorf("%w: %d bytes aligned to %d", ErrNoIOVASpace, size, align)
}

// Free returns a range obtained from Alloc.
func (s *IOVASpace) Free(iova uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	size, ok := s.used[iova]
	if !ok {
		return fmt.Errorf("pci: free of unallocated IOVA %#x", iova)
	}
	delete(s.used, iova)
	n := span{iova, iova + size}
	i := sort.Search(len(s.free), func(i int) bool { return s.free[i].start >= n.end })
	// Merge with the neighbour after and the one before.
	if i < len(s.free) && s.free[i].start == n.end {
		n.end = s.free[i].end
		s.free = append(s.free[:i], s.free[i+1:]...)
	}
	if i > 0 && s.free[i-1].end == n.start {
		s.free[i-1].end = n.end
		return nil
	}
	s.free = append(s.free, span{})
	copy(s.free[i+1:], s.free[i:])
	s.free[i] = n
	return nil
}

// InUse returns the number of live allocations (for leak checks).
func (s *IOVASpace) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.used)
}
