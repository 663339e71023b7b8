package link

// HoldRXBuffersForTest starves the RX pool: every free buffer, and every
// buffer returned from now on, is held back until ReleaseRXBuffersForTest.
func HoldRXBuffersForTest(e *Endpoint) {
	p := e.rxPool
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = true
	p.held = append(p.held, p.free...)
	clear(p.free)
	p.free = p.free[:0]
}

// ReleaseRXBuffersForTest ends the starvation and returns how many buffers
// were held.
func ReleaseRXBuffersForTest(e *Endpoint) int {
	p := e.rxPool
	p.mu.Lock()
	held := p.held
	p.held, p.holding = nil, false
	p.mu.Unlock()
	p.put(held...)
	return len(held)
}

// BuffersHomeForTest counts buffers in the pools (while running) or, after
// Close, as counted just before the DMA memory was freed.
func BuffersHomeForTest(e *Endpoint) (rx, rxAll, tx, txAll int) {
	if e.closed.Load() {
		return e.atClose[0], e.atClose[1], e.atClose[2], e.atClose[3]
	}
	return e.buffersHome()
}
