//go:build linux

package vfiouserclient

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
)

// conn is the message layer: requests go out under wmu, in the order
// their calls join the pending queue; one reader goroutine (readLoop)
// takes the replies off the socket and hands each to the oldest pending
// call. A vfio-user server answers in order (vfio-user.rst: a client may
// pipeline requests; mhi/pci/vpci/vfiouser handles one at a time), and the
// reply's id is checked against the call's.
//
// Posted messages (FlagNoReply) join no queue: a doorbell write is one
// sendmsg and no wait.
//
// A server that stays connected but stops answering is caught by one
// watchdog goroutine (watch), not by a timer per call: while a message is
// outstanding (a call waits for its reply, or a write waits for room on
// the socket) it checks every timeout/4 whether the oldest outstanding
// message is still the one it saw before, and declares the connection
// dead once the same message has been outstanding for timeout. The hot
// path adds a counter and an atomic store, and wakes the watchdog only
// when it was idle.
type conn struct {
	name    string
	c       *net.UnixConn
	timeout time.Duration // <= 0: no watchdog

	wmu  sync.Mutex // serialises writes; guards seq and wbuf
	seq  uint64     // messages sent; a message's id is its seq's low 16 bits
	wbuf []byte
	// wmsg is the message being written (its seq<<16 | cmd), 0 when
	// none: a write blocks when the server stops reading.
	wmsg atomic.Uint64

	pmu     sync.Mutex // guards pending and err
	pending []*call
	err     error // set once, when the connection died

	dead    atomic.Bool
	gone    chan struct{} // closed when the connection died
	stopped chan struct{} // closed when readLoop returned

	watching atomic.Bool   // the watchdog's timer runs
	kick     chan struct{} // wakes an idle watchdog
	watched  chan struct{} // closed when watch returned
	overdue  atomic.Int64  // checks that found the oldest message of the check before still outstanding
}

// call is one request waiting for its reply. Calls are pooled: the hot
// path (a BAR read) allocates nothing.
type call struct {
	seq   uint64
	id    uint16
	cmd   uint16
	reply []byte // where the reply payload goes
	n     int    // payload length
	errno syscall.Errno
	err   error
	done  chan struct{}
	small [64]byte
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// newConn starts the reader and, with a positive timeout, the watchdog.
func newConn(name string, c *net.UnixConn, timeout time.Duration) *conn {
	k := &conn{
		name: name, c: c, timeout: timeout, wbuf: make([]byte, 0, 256),
		gone: make(chan struct{}), stopped: make(chan struct{}),
		kick: make(chan struct{}, 1), watched: make(chan struct{}),
	}
	go k.readLoop()
	if timeout > 0 {
		go k.watch()
	} else {
		close(k.watched)
	}
	return k
}

// errGone is what every call returns once the server is gone.
func (k *conn) errGone() error {
	k.pmu.Lock()
	defer k.pmu.Unlock()
	return k.err
}

// fail marks the connection dead (once) and fails every pending call.
func (k *conn) fail(cause error) {
	k.pmu.Lock()
	if k.err != nil {
		k.pmu.Unlock()
		return
	}
	k.err = fmt.Errorf("vfio-user: %s: %w (%w)", k.name, pci.ErrRemoved, cause)
	k.dead.Store(true)
	pending := k.pending
	k.pending = nil
	k.pmu.Unlock()
	close(k.gone)
	_ = k.c.Close()
	for _, c := range pending {
		c.err = k.err
		c.done <- struct{}{}
	}
}

// close shuts the connection down and waits for the reader and the
// watchdog.
func (k *conn) close() {
	k.fail(errors.New("closed by the client"))
	<-k.stopped
	<-k.watched
}

// outstanding is the oldest message the server owes something: the
// oldest call's request, which it has not answered, or else the message
// being written, which it has not taken off the socket (a write blocks
// once the server stops reading and the socket is full). msg is its
// seq<<16 | cmd (0: none); reply says which.
func (k *conn) outstanding() (msg uint64, reply bool) {
	k.pmu.Lock()
	if len(k.pending) > 0 {
		c := k.pending[0]
		msg, reply = c.seq<<16|uint64(c.cmd), true
	}
	k.pmu.Unlock()
	if w := k.wmsg.Load(); msg == 0 || w == msg {
		msg, reply = w, false
	}
	return msg, reply
}

// watch is the watchdog: it runs until the connection dies, its timer
// armed only while a message is outstanding.
func (k *conn) watch() {
	defer close(k.watched)
	every := max(k.timeout/4, time.Millisecond)
	t := time.NewTimer(every)
	t.Stop()
	var (
		seen  uint64    // the oldest outstanding message at the last check
		since time.Time // when this watchdog first saw it
	)
	for {
		select {
		case <-k.gone:
			t.Stop()
			return
		case <-k.kick:
		case <-t.C:
		}
		msg, reply := k.outstanding()
		if msg == 0 {
			// Idle: stop the timer. A sender that finds
			// watching false kicks; one that saw it true
			// published its message before, so the second look
			// sees it.
			k.watching.Store(false)
			if msg, reply = k.outstanding(); msg == 0 || !k.watching.CompareAndSwap(false, true) {
				seen = 0
				continue
			}
		}
		now := time.Now()
		switch {
		case msg != seen:
			seen, since = msg, now
		case now.Sub(since) >= k.timeout:
			cmd, id := vuwire.CmdName(uint16(msg)), uint16(msg>>16)
			if reply {
				k.fail(fmt.Errorf("the server did not answer %s (id %d) within %v: %w", cmd, id, k.timeout, os.ErrDeadlineExceeded))
			} else {
				k.fail(fmt.Errorf("the server did not read %s (id %d) off the socket within %v: %w", cmd, id, k.timeout, os.ErrDeadlineExceeded))
			}
			return
		default:
			k.overdue.Add(1)
		}
		t.Reset(every)
	}
}

// readLoop receives replies until the connection fails.
func (k *conn) readLoop() {
	defer close(k.stopped)
	var hb [vuwire.HeaderSize]byte
	body := make([]byte, 0, 4096)
	for {
		if _, err := io.ReadFull(k.c, hb[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errors.New("the server closed the connection")
			}
			k.fail(err)
			return
		}
		h, err := vuwire.ParseHeader(hb[:])
		if err != nil {
			k.fail(fmt.Errorf("framing: %w", err))
			return
		}
		n := int(h.Size) - vuwire.HeaderSize
		if cap(body) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(k.c, body); err != nil {
			k.fail(fmt.Errorf("reading a %s body of %d bytes: %w", vuwire.CmdName(h.Cmd), n, err))
			return
		}
		if h.Flags&vuwire.FlagTypeMask != vuwire.TypeReply {
			// Servers send requests (DMA_READ/WRITE) only for DMA
			// maps without a descriptor, which this client never
			// makes.
			k.fail(fmt.Errorf("unexpected %s request from the server", vuwire.CmdName(h.Cmd)))
			return
		}
		k.pmu.Lock()
		var c *call
		if len(k.pending) > 0 {
			// Shifted down, not resliced: the queue keeps its
			// backing array and appends do not allocate.
			c = k.pending[0]
			rest := copy(k.pending, k.pending[1:])
			k.pending[rest] = nil
			k.pending = k.pending[:rest]
		}
		k.pmu.Unlock()
		switch {
		case c == nil:
			k.fail(fmt.Errorf("%s reply (id %d) to no request", vuwire.CmdName(h.Cmd), h.ID))
			return
		case c.id != h.ID || c.cmd != h.Cmd:
			err := fmt.Errorf("%s reply (id %d) where the %s reply (id %d) was due", vuwire.CmdName(h.Cmd), h.ID, vuwire.CmdName(c.cmd), c.id)
			c.err = err
			c.done <- struct{}{}
			k.fail(err)
			return
		case h.Flags&vuwire.FlagError != 0:
			c.errno = syscall.Errno(h.Error)
			if c.errno == 0 {
				c.errno = syscall.EIO
			}
		case n > len(c.reply):
			c.err = fmt.Errorf("vfio-user: %s: %s reply of %d bytes, at most %d expected", k.name, vuwire.CmdName(h.Cmd), n, len(c.reply))
		default:
			c.n = copy(c.reply, body)
		}
		c.done <- struct{}{}
	}
}

// send writes one message: the header, head and data, with fds as
// SCM_RIGHTS. With c it expects a reply, which c receives.
func (k *conn) send(cmd uint16, flags uint32, head, data []byte, fds []int, c *call) error {
	k.wmu.Lock()
	if k.dead.Load() {
		k.wmu.Unlock()
		return k.errGone()
	}
	k.seq++
	id := uint16(k.seq)
	size := vuwire.HeaderSize + len(head) + len(data)
	if cap(k.wbuf) < size {
		k.wbuf = make([]byte, size)
	}
	b := k.wbuf[:size]
	vuwire.Header{ID: id, Cmd: cmd, Size: uint32(size), Flags: flags}.Put(b)
	copy(b[vuwire.HeaderSize:], head)
	copy(b[vuwire.HeaderSize+len(head):], data)
	if c != nil {
		c.seq, c.id, c.cmd = k.seq, id, cmd
		k.pmu.Lock()
		if k.err != nil {
			k.pmu.Unlock()
			k.wmu.Unlock()
			return k.errGone()
		}
		k.pending = append(k.pending, c)
		k.pmu.Unlock()
	}
	k.wmsg.Store(k.seq<<16 | uint64(cmd))
	if k.timeout > 0 && !k.watching.Load() && k.watching.CompareAndSwap(false, true) {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	var err error
	if len(fds) > 0 {
		_, _, err = k.c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	} else {
		_, err = k.c.Write(b)
	}
	k.wmsg.Store(0)
	k.wmu.Unlock()
	if err != nil {
		k.fail(fmt.Errorf("sending %s: %w", vuwire.CmdName(cmd), err))
		if c != nil {
			return nil // failed through c
		}
		return k.errGone()
	}
	return nil
}

// post sends a message that asks for no reply.
func (k *conn) post(cmd uint16, head, data []byte) error {
	return k.send(cmd, vuwire.FlagNoReply, head, data, nil, nil)
}

// roundTrip sends a request and waits for its reply, whose payload (at
// most 64 bytes) it copies into out; it returns the payload's length. An
// error reply is returned as its errno. out does not escape: a BAR read
// allocates nothing.
func (k *conn) roundTrip(cmd uint16, head, data []byte, fds []int, out []byte) (int, error) {
	c := calls.Get().(*call)
	c.reply = c.small[:]
	n, err := k.wait(cmd, head, data, fds, c)
	n = copy(out, c.small[:n])
	c.reply = nil
	calls.Put(c)
	return n, err
}

// roundTripLarge is roundTrip for a reply of up to len(reply) bytes, which
// go straight into reply.
func (k *conn) roundTripLarge(cmd uint16, head []byte, fds []int, reply []byte) (int, error) {
	c := &call{done: make(chan struct{}, 1), reply: reply}
	return k.wait(cmd, head, nil, fds, c)
}

func (k *conn) wait(cmd uint16, head, data []byte, fds []int, c *call) (int, error) {
	c.n, c.errno, c.err = 0, 0, nil
	if err := k.send(cmd, 0, head, data, fds, c); err != nil {
		return 0, err
	}
	<-c.done
	switch {
	case c.err != nil:
		return 0, c.err
	case c.errno != 0:
		return 0, fmt.Errorf("vfio-user: %s: %s: %w", k.name, vuwire.CmdName(cmd), c.errno)
	}
	return c.n, nil
}
