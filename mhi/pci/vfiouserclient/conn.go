//go:build linux

package vfiouserclient

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

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
type conn struct {
	name string
	c    *net.UnixConn

	wmu  sync.Mutex // serialises writes; guards id and wbuf
	id   uint16
	wbuf []byte

	pmu     sync.Mutex // guards pending and err
	pending []*call
	err     error // set once, when the connection died

	dead    atomic.Bool
	gone    chan struct{} // closed when the connection died
	stopped chan struct{} // closed when readLoop returned
}

// call is one request waiting for its reply. Calls are pooled: the hot
// path (a BAR read) allocates nothing.
type call struct {
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

func newConn(name string, c *net.UnixConn) *conn {
	k := &conn{name: name, c: c, wbuf: make([]byte, 0, 256), gone: make(chan struct{}), stopped: make(chan struct{})}
	go k.readLoop()
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
	k.err = fmt.Errorf("vfio-user: %s: %w (%v)", k.name, pci.ErrRemoved, cause)
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

// close shuts the connection down and waits for the reader.
func (k *conn) close() {
	k.fail(errors.New("closed by the client"))
	<-k.stopped
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
	k.id++
	size := vuwire.HeaderSize + len(head) + len(data)
	if cap(k.wbuf) < size {
		k.wbuf = make([]byte, size)
	}
	b := k.wbuf[:size]
	vuwire.Header{ID: k.id, Cmd: cmd, Size: uint32(size), Flags: flags}.Put(b)
	copy(b[vuwire.HeaderSize:], head)
	copy(b[vuwire.HeaderSize+len(head):], data)
	if c != nil {
		c.id, c.cmd = k.id, cmd
		k.pmu.Lock()
		if k.err != nil {
			k.pmu.Unlock()
			k.wmu.Unlock()
			return k.errGone()
		}
		k.pending = append(k.pending, c)
		k.pmu.Unlock()
	}
	var err error
	if len(fds) > 0 {
		_, _, err = k.c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	} else {
		_, err = k.c.Write(b)
	}
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
