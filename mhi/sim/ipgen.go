package sim

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Generator is a DL traffic source for benchmarks and storm tests: while
// its channel pair runs, it sends Frames (cycling through them) as fast as
// the host posts buffers, for as many frames as Add has asked for. UL
// transfers are consumed and counted, like a sink. The frames are opaque
// bytes: raw IP packets, or QMAP / MBIM NTB aggregates built by the test.
//
// A frame the modem cannot place (no host buffer within SendTimeout) is
// retried, not lost, so that a benchmark measures the host, not drops.
type Generator struct {
	// Frames are sent in order, round robin. Set it before the pair
	// starts; SetFrames changes it while running.
	Frames [][]byte

	sent, retries atomic.Uint64
	ulTDs, ulByte atomic.Uint64

	mu     sync.Mutex
	credit int           // frames still to send
	wake   chan struct{} // a token when credit grows
	stop   chan struct{} // closed by Stop
	done   chan struct{} // closed when the sender goroutine exits
	next   int
}

// SetFrames replaces the frames to send, starting with the first.
func (g *Generator) SetFrames(frames [][]byte) {
	g.mu.Lock()
	g.Frames, g.next = frames, 0
	g.mu.Unlock()
}

// Add asks for n more frames.
func (g *Generator) Add(n int) {
	g.mu.Lock()
	g.credit += n
	w := g.wake
	g.mu.Unlock()
	if w != nil {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Sent returns how many frames the host has been given (placed or queued
// in the modem).
func (g *Generator) Sent() uint64 { return g.sent.Load() }

// Retries counts sends the modem refused for lack of host buffers.
func (g *Generator) Retries() uint64 { return g.retries.Load() }

// Received returns the UL transfers and bytes consumed.
func (g *Generator) Received() (tds, bytes uint64) { return g.ulTDs.Load(), g.ulByte.Load() }

// Start implements Function: it starts the sender goroutine for this run.
func (g *Generator) Start(p *Port) {
	g.mu.Lock()
	g.wake = make(chan struct{}, 1)
	g.stop = make(chan struct{})
	g.done = make(chan struct{})
	wake, stop, done := g.wake, g.stop, g.done
	g.mu.Unlock()
	go g.run(p, wake, stop, done)
}

// Receive implements Function: UL data is consumed.
func (g *Generator) Receive(td []byte) {
	g.ulTDs.Add(1)
	g.ulByte.Add(uint64(len(td)))
}

// Stop implements Function: it stops the sender and waits for it.
func (g *Generator) Stop() {
	g.mu.Lock()
	stop, done := g.stop, g.done
	g.stop, g.done, g.wake = nil, nil, nil
	g.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

func (g *Generator) run(p *Port, wake, stop, done chan struct{}) {
	defer close(done)
	for {
		g.mu.Lock()
		if g.credit == 0 || len(g.Frames) == 0 {
			g.mu.Unlock()
			select {
			case <-wake:
				continue
			case <-stop:
				return
			case <-p.Done():
				return
			}
		}
		f := g.Frames[g.next%len(g.Frames)]
		g.mu.Unlock()
		err := p.Send(f)
		switch {
		case err == nil:
			g.mu.Lock()
			g.credit--
			if len(g.Frames) > 0 {
				g.next = (g.next + 1) % len(g.Frames)
			}
			g.mu.Unlock()
			g.sent.Add(1)
		case errors.Is(err, ErrNoBuffer):
			g.retries.Add(1)
			select {
			case <-stop:
				return
			default:
			}
		default:
			return // ErrStopped: the pair went down
		}
	}
}
