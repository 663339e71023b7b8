package simnet

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// ctrlQueueLen bounds UL transfers waiting for a control function's
// goroutine; a host that floods control messages loses the excess
// (counted), as a real function's buffer would overflow.
const ctrlQueueLen = 64

// ctrlQueue is the goroutine side of a control function (MBIM, QMI):
// Receive queues UL transfers without ever blocking the device
// goroutine, one goroutine per run (Start..Stop) takes them, and Serve
// feeds it from a byte stream instead of an MHI channel pair.
type ctrlQueue struct {
	mu      sync.Mutex
	in      chan []byte
	quit    chan struct{}
	wg      sync.WaitGroup
	dropped *atomic.Uint64 // the function's counter of lost transfers
}

// start begins a run: run is the run's goroutine, reading in until quit
// is closed.
func (q *ctrlQueue) start(run func(in <-chan []byte, quit <-chan struct{})) {
	in, quit := make(chan []byte, ctrlQueueLen), make(chan struct{})
	q.mu.Lock()
	q.in, q.quit = in, quit
	q.mu.Unlock()
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		run(in, quit)
	}()
}

// deliver queues a copy of td; block waits for room (Serve, which owns
// its reader), otherwise a full queue drops it (counted). Nothing is
// queued while stopped.
func (q *ctrlQueue) deliver(td []byte, block bool) {
	q.mu.Lock()
	in, quit := q.in, q.quit
	q.mu.Unlock()
	if in == nil {
		return
	}
	b := append([]byte(nil), td...)
	if block {
		select {
		case in <- b:
		case <-quit:
		}
		return
	}
	select {
	case in <- b:
	default:
		q.dropped.Add(1)
	}
}

// stop ends the run and waits for its goroutine; false if none was
// running.
func (q *ctrlQueue) stop() bool {
	q.mu.Lock()
	quit := q.quit
	q.in, q.quit = nil, nil
	q.mu.Unlock()
	if quit == nil {
		return false
	}
	close(quit)
	q.wg.Wait()
	return true
}

// serveStream runs a control function over a byte stream: start begins
// a run whose output goes to rw (one Write per message, serialised),
// everything read from rw is delivered (waiting for room), and the run
// stops when reading fails (rw closed, EOF). rw is closed on return.
func serveStream(rw io.ReadWriteCloser, bufSize int, start func(send func([]byte) error), deliver func([]byte), stop func()) error {
	var wmu sync.Mutex
	start(func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := rw.Write(b)
		return err
	})
	defer func() {
		rw.Close()
		stop()
	}()
	buf := make([]byte, bufSize)
	for {
		n, err := rw.Read(buf)
		if n > 0 {
			deliver(buf[:n])
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
	}
}
