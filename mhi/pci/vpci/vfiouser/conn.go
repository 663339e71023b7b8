package vfiouser

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
	"golang.org/x/sys/unix"
)

// conn is one client connection. Its goroutine (run) owns it: it reads a
// message, handles it to completion and replies, in order, so posted BAR
// writes reach the model in the order the guest issued them.
type conn struct {
	s   *Server
	c   *net.UnixConn
	buf []byte // message body, reused
	oob []byte // ancillary data, reused
	out []byte // reply, reused
	// warned records the failure kinds already logged at Warn, so that
	// a misbehaving client cannot flood the log.
	warned map[string]bool
}

func newConn(s *Server, c *net.UnixConn) *conn {
	return &conn{
		s:      s,
		c:      c,
		buf:    make([]byte, 0, 4096),
		oob:    make([]byte, unix.CmsgSpace(vuwire.MaxMsgFDs*4)),
		warned: map[string]bool{},
	}
}

// message is one received request: header, body and the descriptors that
// came with it. The handler takes the descriptors it keeps (setting them to
// -1); the rest are closed after it returns.
type message struct {
	hdr  vuwire.Header
	body []byte
	fds  []int
}

// takeFD removes and returns descriptor i, or -1.
func (m *message) takeFD(i int) int {
	if i >= len(m.fds) {
		return -1
	}
	fd := m.fds[i]
	m.fds[i] = -1
	return fd
}

func (m *message) closeFDs() {
	for i, fd := range m.fds {
		if fd >= 0 {
			unix.Close(fd)
			m.fds[i] = -1
		}
	}
}

// run serves the connection until EOF (nil) or an error.
func (c *conn) run() error {
	for {
		m, err := c.read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		c.s.stats.messages.Add(1)
		err = c.dispatch(&m)
		m.closeFDs()
		if err != nil {
			return err
		}
	}
}

// read reads one message. The descriptors of a message arrive with its
// first bytes (docs/KERNEL-CROSSCHECK.md §6), so the header is read with an
// ancillary buffer and the body without.
func (c *conn) read() (message, error) {
	var hb [vuwire.HeaderSize]byte
	var m message
	n, oobn, flags, _, err := c.c.ReadMsgUnix(hb[:], c.oob)
	if oobn > 0 {
		fds, perr := parseRights(c.oob[:oobn])
		m.fds = fds
		if perr != nil && err == nil {
			err = perr
		}
	}
	if err == nil && flags&unix.MSG_CTRUNC != 0 {
		err = fmt.Errorf("more than %d descriptors in one message", vuwire.MaxMsgFDs)
	}
	if err != nil || n == 0 {
		m.closeFDs()
		if err == nil || isClosedErr(err) {
			err = io.EOF
		}
		return message{}, err
	}
	if _, err := io.ReadFull(c.c, hb[n:]); err != nil {
		m.closeFDs()
		return message{}, fmt.Errorf("reading a message header: %w", err)
	}
	h, err := vuwire.ParseHeader(hb[:])
	if err != nil {
		// The size field cannot be trusted: the stream is lost.
		m.closeFDs()
		return message{}, fmt.Errorf("vfio-user framing: %w", err)
	}
	body := int(h.Size) - vuwire.HeaderSize
	if cap(c.buf) < body {
		c.buf = make([]byte, body)
	}
	c.buf = c.buf[:body]
	if _, err := io.ReadFull(c.c, c.buf); err != nil {
		m.closeFDs()
		return message{}, fmt.Errorf("reading a %s body of %d bytes: %w", vuwire.CmdName(h.Cmd), body, err)
	}
	m.hdr, m.body = h, c.buf
	return m, nil
}

// parseRights returns the descriptors of SCM_RIGHTS messages in oob, each
// marked close-on-exec, and closes nothing: the caller owns them all.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("ancillary data: %w", err)
	}
	var fds []int
	for _, cm := range msgs {
		if cm.Header.Level != unix.SOL_SOCKET || cm.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		r, err := unix.ParseUnixRights(&cm)
		if err != nil {
			continue
		}
		for _, fd := range r {
			unix.CloseOnExec(fd)
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
}

// dispatch handles one message and sends its reply. A returned error ends
// the connection; a request the server refuses is answered with an error
// reply instead.
func (c *conn) dispatch(m *message) error {
	h := m.hdr
	switch h.Flags & vuwire.FlagTypeMask {
	case vuwire.TypeCommand:
	case vuwire.TypeReply:
		// The server sends no requests, so no reply can be pending.
		c.warn("reply", "unexpected reply from the client: ignored", "id", h.ID, "cmd", vuwire.CmdName(h.Cmd))
		return nil
	default:
		c.warn("type", "message of unknown type: ignored", "flags", h.Flags, "cmd", vuwire.CmdName(h.Cmd))
		return nil
	}
	c.s.log.Debug("vfio-user request", "id", h.ID, "cmd", vuwire.CmdName(h.Cmd), "size", h.Size, "fds", len(m.fds))
	reply, errno := c.handle(m)
	if errno != 0 {
		c.s.stats.badMessages.Add(1)
		c.warn(vuwire.CmdName(h.Cmd)+errno.Error(), "request refused", "cmd", vuwire.CmdName(h.Cmd), "errno", errno.Error())
	}
	if h.Flags&vuwire.FlagNoReply != 0 {
		return nil
	}
	return c.reply(h, reply, errno)
}

// warn logs msg at Warn the first time key is seen, at Debug afterwards: a
// misbehaving client must not flood the log.
func (c *conn) warn(key, msg string, args ...any) {
	if c.warned[key] {
		c.s.log.Debug(msg, args...)
		return
	}
	if len(c.warned) < 256 {
		c.warned[key] = true
	}
	c.s.log.Warn(msg, args...)
}

// reply sends the reply to h: its payload, or only the header with the
// ERROR flag and errno (vfio-user.rst "Header").
func (c *conn) reply(h vuwire.Header, payload []byte, errno syscall.Errno) error {
	r := vuwire.Header{ID: h.ID, Cmd: h.Cmd, Flags: vuwire.TypeReply}
	if errno != 0 {
		r.Flags |= vuwire.FlagError
		r.Error = uint32(errno)
		payload = nil
	}
	r.Size = uint32(vuwire.HeaderSize + len(payload))
	if cap(c.out) < int(r.Size) {
		c.out = make([]byte, r.Size)
	}
	out := c.out[:r.Size]
	r.Put(out)
	copy(out[vuwire.HeaderSize:], payload)
	if _, err := c.c.Write(out); err != nil {
		if isClosedErr(err) {
			return io.EOF
		}
		return fmt.Errorf("sending the %s reply: %w", vuwire.CmdName(h.Cmd), err)
	}
	return nil
}
