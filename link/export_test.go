package link

// BuffersHomeForTest counts buffers in the pools (while running) or, after
// Close, as counted just before the DMA memory was freed.
func BuffersHomeForTest(e *Endpoint) (rx, rxAll, tx, txAll int) {
	if e.closed.Load() {
		return e.atClose[0], e.atClose[1], e.atClose[2], e.atClose[3]
	}
	return e.buffersHome()
}

// HoldPollerForTest takes the NAPI SCHED bit as an interrupt would, so that
// no pass runs (interrupts and idle checks find the poller scheduled)
// until ReleasePollerForTest; it reports false while a pass owns it.
func HoldPollerForTest(e *Endpoint) bool { return e.scheduled.CompareAndSwap(false, true) }

// PassForTest runs one poll pass on the caller, which holds the poller
// (HoldPollerForTest), and returns the work it did.
func PassForTest(e *Endpoint) int {
	work, _ := e.poll()
	return work
}

// ReleasePollerForTest gives the SCHED bit back and schedules a pass for
// whatever arrived meanwhile.
func ReleasePollerForTest(e *Endpoint) {
	e.scheduled.Store(false)
	e.notify()
}

// HoldingTXForTest reports whether the endpoint holds the UL frames
// written now (a SYS_ERR being recovered, or PauseTX).
func HoldingTXForTest(e *Endpoint) bool { return e.tx.hold.active.Load() }

// ScribbleRXBuffersForTest writes b over every byte of every RX DMA buffer
// of the endpoint, queued or free, as a device that keeps writing into
// buffers it once had would.
func ScribbleRXBuffersForTest(e *Endpoint, b byte) {
	for _, buf := range e.rxPool.all {
		for i := range buf.Mem {
			buf.Mem[i] = b
		}
	}
}

// TapWriteForTest writes p to t as the data path does.
func TapWriteForTest(t *Tap, p []byte) { t.write(p) }
