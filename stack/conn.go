package stack

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// The stack's sockets (TCPConn, TCPListener, UDPConn, PingConn) share
// what package net's sockets get from internal/poll: deadlines whose
// expiry is os.ErrDeadlineExceeded, a Close that wakes blocked calls
// and makes every later call fail with net.ErrClosed (Close included),
// and calls that also fail with net.ErrClosed once the Stack is closed.

// deadline is one direction's deadline: expired is closed when it
// passes.
type deadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	expired chan struct{}
}

// wait returns the channel that is closed when the deadline passes.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expired == nil {
		d.expired = make(chan struct{})
	}
	return d.expired
}

// set moves the deadline to t (zero: none).
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expired == nil {
		d.expired = make(chan struct{})
	}
	if d.timer != nil {
		// A timer that already fired (or is firing) closes the channel
		// it was made for: the new deadline needs a fresh one.
		if !d.timer.Stop() {
			d.expired = make(chan struct{})
		}
		d.timer = nil
	}
	select {
	case <-d.expired:
		d.expired = make(chan struct{})
	default:
	}
	if t.IsZero() {
		return
	}
	left := time.Until(t)
	if left <= 0 {
		close(d.expired)
		return
	}
	ch := d.expired
	d.timer = time.AfterFunc(left, func() { close(ch) })
}

// stop releases the timer.
func (d *deadline) stop() {
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
}

// sock is the state every socket of the stack has.
type sock struct {
	s      *Stack
	ep     tcpip.Endpoint
	wq     *waiter.Queue
	rd, wd deadline
	closed atomic.Bool
	done   chan struct{} // closed by Close
}

func (k *sock) init(s *Stack, ep tcpip.Endpoint, wq *waiter.Queue) {
	k.s, k.ep, k.wq, k.done = s, ep, wq, make(chan struct{})
}

// isClosed reports whether the socket or its stack is closed.
func (k *sock) isClosed() bool { return k.closed.Load() || k.s.isClosed() }

// close marks the socket closed and wakes its blocked calls; false if it
// already was.
func (k *sock) close() bool {
	if !k.closed.CompareAndSwap(false, true) {
		return false
	}
	close(k.done)
	k.rd.stop()
	k.wd.stop()
	return true
}

// block waits for events on the socket's queue (registered by the
// caller as notify) or the deadline dl; it returns why the call must
// give up (os.ErrDeadlineExceeded, net.ErrClosed), or nil to try again.
func (k *sock) block(notify <-chan struct{}, dl <-chan struct{}) error {
	select {
	case <-notify:
		return nil
	case <-dl:
		return os.ErrDeadlineExceeded
	case <-k.done:
		return net.ErrClosed
	case <-k.s.done:
		return net.ErrClosed
	}
}

// pre is the check before an operation: the socket's or the stack's
// closing, then an expired deadline.
func (k *sock) pre(dl <-chan struct{}) error {
	if k.isClosed() {
		return net.ErrClosed
	}
	select {
	case <-dl:
		return os.ErrDeadlineExceeded
	default:
	}
	return nil
}

// SetDeadline sets the read and write deadlines (net.Conn).
func (k *sock) setDeadline(t time.Time, read, write bool) error {
	if k.isClosed() {
		return net.ErrClosed
	}
	if read {
		k.rd.set(t)
	}
	if write {
		k.wd.set(t)
	}
	return nil
}

// mapErr is the error a failed endpoint operation returns: net.ErrClosed
// once the socket or the stack is closed (gVisor reports a closed
// endpoint in several ways), else the errno.
func (k *sock) mapErr(e tcpip.Error) error {
	if k.isClosed() {
		return net.ErrClosed
	}
	return errnoOf(e)
}
