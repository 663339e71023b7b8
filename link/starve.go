package link

// StarveRX is fault injection for tests outside this package: it holds
// back every free RX buffer, and every buffer returned from now on, so
// that the endpoint has nothing to post on DL until release is called.
// release returns how many buffers were held. The endpoint keeps running
// meanwhile (the modem queues and then drops DL data, as a real one does
// when the host stops posting buffers).
func (e *Endpoint) StarveRX() (release func() int) {
	p := e.rxPool
	p.mu.Lock()
	p.holding = true
	p.held = append(p.held, p.free...)
	clear(p.free)
	p.free = p.free[:0]
	p.mu.Unlock()
	return func() int {
		p.mu.Lock()
		held := p.held
		p.held, p.holding = nil, false
		p.mu.Unlock()
		p.put(held...)
		return len(held)
	}
}
