package link

import (
	"fmt"
	"sync"

	"github.com/mhistack/mhistack/mhi/pci"
)

// pool is a fixed set of equal-sized DMA buffers allocated once. Buffers
// are handed out and taken back in batches under one lock, so the RX path
// takes the lock once per poll pass and once per refill, not per packet.
// Nothing is allocated after newPool: exhaustion is reported, never papered
// over with a fresh allocation (the point of a fixed pool is bounded DMA
// memory, and rx_alloc_fail must mean something).
type pool struct {
	size int
	all  []*pci.Buffer

	mu   sync.Mutex
	free []*pci.Buffer
	// holding diverts returned buffers into held: a test starving the
	// pool (Endpoint.StarveRX).
	holding bool
	held    []*pci.Buffer
}

func newPool(dma pci.DMA, n, size int) (*pool, error) {
	p := &pool{size: size, all: make([]*pci.Buffer, 0, n), free: make([]*pci.Buffer, 0, n)}
	for range n {
		b, err := dma.Alloc(size, 64)
		if err != nil {
			// Count before destroy empties p.all.
			i := len(p.all) + 1
			p.destroy(dma)
			return nil, fmt.Errorf("%d-byte DMA buffer %d of %d: %w", size, i, n, err)
		}
		p.all = append(p.all, b)
		p.free = append(p.free, b)
	}
	return p, nil
}

// get moves up to len(dst) buffers into dst and returns how many.
func (p *pool) get(dst []*pci.Buffer) int {
	p.mu.Lock()
	n := min(len(dst), len(p.free))
	copy(dst, p.free[len(p.free)-n:])
	clear(p.free[len(p.free)-n:])
	p.free = p.free[:len(p.free)-n]
	p.mu.Unlock()
	return n
}

// put returns buffers to the pool.
func (p *pool) put(bufs ...*pci.Buffer) {
	if len(bufs) == 0 {
		return
	}
	p.mu.Lock()
	// free has capacity for every buffer, so append never allocates;
	// more than that means a buffer came back twice.
	if len(p.free)+len(p.held)+len(bufs) > cap(p.free) {
		p.mu.Unlock()
		panic("link: DMA buffer returned to its pool twice")
	}
	if p.holding {
		p.held = append(p.held, bufs...)
	} else {
		p.free = append(p.free, bufs...)
	}
	p.mu.Unlock()
}

// available returns how many buffers are in the pool.
func (p *pool) available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// destroy frees the DMA memory of every buffer. Call it only when every
// buffer is back (or the device is gone).
func (p *pool) destroy(dma pci.DMA) {
	for _, b := range p.all {
		_ = dma.Free(b)
	}
	p.all, p.free, p.held = nil, nil, nil
}
