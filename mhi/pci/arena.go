package pci

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Arena sub-allocates one block of device-visible memory: mem, which the
// device reaches at IOVAs [iova, iova+len(mem)). A backend maps the block
// for the device once (an IOMMU mapping, a vfio-user DMA_MAP) and hands
// out buffers with an IOVASpace, so the number of device mappings stays at
// one however many buffers the engine uses. It implements DMA; the owner
// unmaps the block after Close.
type Arena struct {
	name   string
	mem    []byte
	iova   uint64
	space  *IOVASpace
	closed atomic.Bool
}

var _ DMA = (*Arena)(nil)

// NewArena returns an allocator over mem at iova; name prefixes its
// errors ("vfio").
func NewArena(name string, mem []byte, iova uint64) *Arena {
	return &Arena{name: name, mem: mem, iova: iova, space: NewIOVASpace(iova, iova+uint64(len(mem)))}
}

// Alloc returns a zeroed buffer of size bytes whose IOVA is a multiple of
// align (a power of two).
func (a *Arena) Alloc(size, align int) (*Buffer, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	if size <= 0 {
		return nil, fmt.Errorf("%s: DMA allocation of %d bytes", a.name, size)
	}
	if align < 1 {
		align = 1
	}
	iova, err := a.space.Alloc(uint64(size), uint64(align))
	if err != nil {
		return nil, fmt.Errorf("%s: DMA arena of %d KiB: %w", a.name, len(a.mem)>>10, err)
	}
	off := iova - a.iova
	mem := a.mem[off : off+uint64(size) : off+uint64(size)]
	clear(mem)
	return &Buffer{Mem: mem, IOVA: iova}, nil
}

// Free returns a buffer to the arena. The device must be done with it.
func (a *Arena) Free(b *Buffer) error {
	if a.closed.Load() {
		return ErrClosed
	}
	if b == nil || len(b.Mem) == 0 || b.IOVA < a.iova || b.IOVA-a.iova >= uint64(len(a.mem)) ||
		unsafe.Pointer(&b.Mem[0]) != unsafe.Pointer(&a.mem[b.IOVA-a.iova]) {
		return fmt.Errorf("%s: Free of a buffer not from this arena", a.name)
	}
	return a.space.Free(b.IOVA)
}

// IOVA returns the first device address of the arena.
func (a *Arena) IOVA() uint64 { return a.iova }

// Size returns the arena's size in bytes.
func (a *Arena) Size() uint64 { return uint64(len(a.mem)) }

// InUse returns the number of live buffers.
func (a *Arena) InUse() int { return a.space.InUse() }

// Close makes later Alloc and Free fail with ErrClosed and reports
// whether it was the first call. The memory stays the owner's to unmap.
func (a *Arena) Close() bool { return !a.closed.Swap(true) }
