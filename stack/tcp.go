package stack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// TCPConn is a TCP connection over the modem: a net.Conn with the
// methods of *net.TCPConn that matter through a proxy (CloseRead,
// CloseWrite, keepalive, NoDelay, linger). Errors are package net's:
// *net.OpError wrapping a syscall.Errno, net.ErrClosed after Close or
// the Stack's Close, os.ErrDeadlineExceeded past a deadline.
type TCPConn struct {
	sock
	readMu       sync.Mutex // serialises reads (one reader at a time, as gVisor wants)
	laddr, raddr net.Addr   // fixed at connect time, as package net's
	release      sync.Once
}

func (s *Stack) newTCPConn(wq *waiter.Queue, ep tcpip.Endpoint) *TCPConn {
	c := &TCPConn{}
	c.init(s, ep, wq)
	if a, err := ep.GetLocalAddress(); err == nil {
		c.laddr = net.TCPAddrFromAddrPort(addrPort(a))
	}
	if a, err := ep.GetRemoteAddress(); err == nil {
		c.raddr = net.TCPAddrFromAddrPort(addrPort(a))
	}
	so := ep.SocketOptions()
	so.SetDelayOption(s.cfg.TCP.Delay)
	c.SetKeepAliveConfig(s.cfg.TCP.KeepAlive)
	return c
}

// Read implements net.Conn. A zero-length read returns 0, nil at once,
// as package net's does.
func (c *TCPConn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	dl := c.rd.wait()
	if c.isClosed() {
		return 0, c.opError("read", net.ErrClosed)
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := c.pre(dl); err != nil {
		return 0, c.opError("read", err)
	}
	w := tcpip.SliceWriter(b)
	res, terr := c.ep.Read(&w, tcpip.ReadOptions{})
	if _, ok := terr.(*tcpip.ErrWouldBlock); ok {
		we, notify := waiter.NewChannelEntry(waiter.ReadableEvents)
		c.wq.EventRegister(&we)
		defer c.wq.EventUnregister(&we)
		for {
			if res, terr = c.ep.Read(&w, tcpip.ReadOptions{}); !isWouldBlock(terr) {
				break
			}
			if err := c.block(notify, dl); err != nil {
				return 0, c.opError("read", err)
			}
		}
	}
	switch terr.(type) {
	case nil:
		if res.Count > 0 {
			c.ep.ModerateRecvBuf(res.Count)
		}
		return res.Count, nil
	case *tcpip.ErrClosedForReceive:
		if c.isClosed() {
			return 0, c.opError("read", net.ErrClosed)
		}
		return 0, io.EOF
	}
	return 0, c.opError("read", c.mapErr(terr))
}

func isWouldBlock(e tcpip.Error) bool {
	_, ok := e.(*tcpip.ErrWouldBlock)
	return ok
}

// Write implements net.Conn. After CloseWrite it fails with EPIPE.
func (c *TCPConn) Write(b []byte) (int, error) {
	dl := c.wd.wait()
	if err := c.pre(dl); err != nil {
		return 0, c.opError("write", err)
	}
	var (
		r      bytes.Reader
		n      int
		notify <-chan struct{}
	)
	for n < len(b) {
		r.Reset(b[n:])
		m, terr := c.ep.Write(&r, tcpip.WriteOptions{})
		n += int(m)
		switch terr.(type) {
		case nil:
			continue
		case *tcpip.ErrWouldBlock:
			if notify == nil {
				// Register, then try again before waiting: the
				// buffer may have drained in between.
				var we waiter.Entry
				we, notify = waiter.NewChannelEntry(waiter.WritableEvents)
				c.wq.EventRegister(&we)
				defer c.wq.EventUnregister(&we)
				continue
			}
			if err := c.block(notify, dl); err != nil {
				return n, c.opError("write", err)
			}
		default:
			return n, c.opError("write", c.mapErr(terr))
		}
	}
	return n, nil
}

// Close implements net.Conn; closing twice fails with net.ErrClosed.
func (c *TCPConn) Close() error {
	if !c.close() {
		return c.opError("close", net.ErrClosed)
	}
	c.release.Do(func() { c.s.conns.Add(-1) })
	c.ep.Close()
	return nil
}

// CloseRead shuts the reading side down (see net.TCPConn.CloseRead).
func (c *TCPConn) CloseRead() error { return c.shutdown(tcpip.ShutdownRead) }

// CloseWrite shuts the writing side down: the peer reads EOF (see
// net.TCPConn.CloseWrite).
func (c *TCPConn) CloseWrite() error { return c.shutdown(tcpip.ShutdownWrite) }

func (c *TCPConn) shutdown(f tcpip.ShutdownFlags) error {
	if c.isClosed() {
		return c.opError("close", net.ErrClosed)
	}
	if terr := c.ep.Shutdown(f); terr != nil {
		return c.opError("close", c.mapErr(terr))
	}
	return nil
}

// LocalAddr implements net.Conn.
func (c *TCPConn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr implements net.Conn.
func (c *TCPConn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline implements net.Conn.
func (c *TCPConn) SetDeadline(t time.Time) error { return c.setErr(c.setDeadline(t, true, true)) }

// SetReadDeadline implements net.Conn.
func (c *TCPConn) SetReadDeadline(t time.Time) error { return c.setErr(c.setDeadline(t, true, false)) }

// SetWriteDeadline implements net.Conn.
func (c *TCPConn) SetWriteDeadline(t time.Time) error {
	return c.setErr(c.setDeadline(t, false, true))
}

func (c *TCPConn) setErr(err error) error {
	if err != nil {
		return c.opError("set", err)
	}
	return nil
}

// SetNoDelay turns Nagle's algorithm off (true, the default) or on.
func (c *TCPConn) SetNoDelay(noDelay bool) error {
	if c.isClosed() {
		return c.opError("set", net.ErrClosed)
	}
	c.ep.SocketOptions().SetDelayOption(!noDelay)
	return nil
}

// SetKeepAlive turns keepalive probes on or off.
func (c *TCPConn) SetKeepAlive(on bool) error {
	if c.isClosed() {
		return c.opError("set", net.ErrClosed)
	}
	c.ep.SocketOptions().SetKeepAlive(on)
	return nil
}

// SetKeepAlivePeriod sets the idle time and the probe interval.
func (c *TCPConn) SetKeepAlivePeriod(d time.Duration) error {
	return c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: d, Interval: d})
}

// SetKeepAliveConfig applies cfg with net.TCPConn's semantics: zero
// fields leave the current value, negative ones are ignored.
func (c *TCPConn) SetKeepAliveConfig(cfg net.KeepAliveConfig) error {
	if c.isClosed() {
		return c.opError("set", net.ErrClosed)
	}
	c.ep.SocketOptions().SetKeepAlive(cfg.Enable)
	if cfg.Idle > 0 {
		o := tcpip.KeepaliveIdleOption(cfg.Idle)
		if err := c.ep.SetSockOpt(&o); err != nil {
			return c.opError("set", errnoOf(err))
		}
	}
	if cfg.Interval > 0 {
		o := tcpip.KeepaliveIntervalOption(cfg.Interval)
		if err := c.ep.SetSockOpt(&o); err != nil {
			return c.opError("set", errnoOf(err))
		}
	}
	if cfg.Count > 0 {
		if err := c.ep.SetSockOptInt(tcpip.KeepaliveCountOption, cfg.Count); err != nil {
			return c.opError("set", errnoOf(err))
		}
	}
	return nil
}

// SetLinger sets the behaviour of Close with unsent data (see
// net.TCPConn.SetLinger; 0 resets the connection on Close).
func (c *TCPConn) SetLinger(sec int) error {
	if c.isClosed() {
		return c.opError("set", net.ErrClosed)
	}
	c.ep.SocketOptions().SetLinger(tcpip.LingerOption{Enabled: sec >= 0, Timeout: time.Duration(sec) * time.Second})
	return nil
}

// SetReadBuffer and SetWriteBuffer size the connection's buffers.
func (c *TCPConn) SetReadBuffer(n int) error {
	if c.isClosed() {
		return c.opError("set", net.ErrClosed)
	}
	c.ep.SocketOptions().SetReceiveBufferSize(int64(n), true)
	return nil
}

// SetWriteBuffer sizes the connection's send buffer.
func (c *TCPConn) SetWriteBuffer(n int) error {
	if c.isClosed() {
		return c.opError("set", net.ErrClosed)
	}
	c.ep.SocketOptions().SetSendBufferSize(int64(n), true)
	return nil
}

// Buffered returns how many received bytes wait to be read: a Read
// returns at once when it is above zero. It is the SIOCINQ (FIONREAD) of a host
// socket; a proxy asks it to tell whether it may hold data back for one
// write. 0 after Close.
func (c *TCPConn) Buffered() int {
	if c.isClosed() {
		return 0
	}
	n, err := c.ep.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
	if err != nil {
		return 0
	}
	return n
}

// Info returns the connection's TCP state (RTT, congestion window…).
func (c *TCPConn) Info() tcpip.TCPInfoOption {
	var i tcpip.TCPInfoOption
	c.ep.GetSockOpt(&i)
	return i
}

func (c *TCPConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.laddr, Addr: c.raddr, Err: err}
}

// takeConn reserves a connection slot.
func (s *Stack) takeConn() bool {
	if s.conns.Add(1) > int64(s.cfg.Limits.MaxTCPConns) {
		s.conns.Add(-1)
		s.counters.connLimit.Add(1)
		return false
	}
	return true
}

// DialTCP connects to raddr from laddr (zero: chosen by the stack).
func (s *Stack) DialTCP(ctx context.Context, laddr, raddr netip.AddrPort) (*TCPConn, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Source: tcpAddr(laddr), Addr: tcpAddr(raddr), Err: err}
	}
	if s.isClosed() {
		return nil, opErr(ErrClosed)
	}
	if !raddr.IsValid() {
		return nil, opErr(errMissingAddress)
	}
	if err := s.checkLocal(laddr.Addr().Unmap()); err != nil {
		return nil, opErr(err)
	}
	to, err := s.dialTarget(raddr.Addr(), true)
	if err != nil {
		return nil, opErr(err)
	}
	raddr = netip.AddrPortFrom(to, raddr.Port())
	if !s.LinkUp() {
		return nil, opErr(syscall.ENETUNREACH)
	}
	select {
	case s.dials <- struct{}{}:
		defer func() { <-s.dials }()
	default:
		s.counters.dialLimit.Add(1)
		return nil, opErr(ErrTooManyDials)
	}
	if !s.takeConn() {
		return nil, opErr(ErrTooManyConns)
	}
	c, err := s.dialTCP(ctx, laddr, raddr)
	if err != nil {
		s.conns.Add(-1)
		s.counters.dialFailed.Add(1)
		return nil, opErr(err)
	}
	s.counters.dialed.Add(1)
	return c, nil
}

func (s *Stack) dialTCP(ctx context.Context, laddr, raddr netip.AddrPort) (*TCPConn, error) {
	raddr = netip.AddrPortFrom(raddr.Addr().Unmap(), raddr.Port())
	var wq waiter.Queue
	ep, terr := s.gs.NewEndpoint(tcp.ProtocolNumber, protoOf(raddr.Addr()), &wq)
	if terr != nil {
		return nil, errnoOf(terr)
	}
	we, notify := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&we)
	defer wq.EventUnregister(&we)
	ep.SocketOptions().SetDelayOption(s.cfg.TCP.Delay)
	if laddr.IsValid() {
		if terr := ep.Bind(s.fullAddr(laddr)); terr != nil {
			ep.Close()
			return nil, errnoOf(terr)
		}
	}
	d := s.dialing.add(ep)
	defer s.dialing.remove(d)
	terr = ep.Connect(s.fullAddr(raddr))
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-d.abort:
			ep.Close()
			return nil, errAddressRemoved
		case <-ctx.Done():
			ep.Close()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// As package net: a dial deadline is an i/o timeout
				// that also matches ETIMEDOUT.
				return nil, &timeoutError{ctx.Err()}
			}
			return nil, ctx.Err()
		case <-notify:
		}
		terr = ep.LastError()
	}
	if terr != nil {
		ep.Close()
		return nil, errnoOf(terr)
	}
	return s.newTCPConn(&wq, ep), nil
}

// timeoutError is a dial deadline: Timeout() is true and it matches
// os.ErrDeadlineExceeded (as package net's), context.DeadlineExceeded
// and syscall.ETIMEDOUT.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string   { return "i/o timeout" }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }
func (e *timeoutError) Unwrap() []error {
	return []error{e.err, os.ErrDeadlineExceeded, syscall.ETIMEDOUT}
}

// fullAddr is ap on the NIC its family goes over: the modem's, or for
// IPv4 the CLAT's while it runs.
func (s *Stack) fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	a := ap.Addr().Unmap()
	fa := tcpip.FullAddress{Port: ap.Port()}
	if a.IsValid() && !a.IsUnspecified() {
		fa.Addr = tcpip.AddrFromSlice(a.AsSlice())
		fa.NIC = nicID
		if a.Is4() && s.tap.clat.Load() != nil {
			fa.NIC = clatNIC
		}
	}
	return fa
}

func tcpAddr(ap netip.AddrPort) net.Addr {
	if !ap.IsValid() {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}

// TCPListener accepts TCP connections on the modem's addresses.
type TCPListener struct {
	sock
	net  string // "tcp", "tcp4", "tcp6"
	addr *net.TCPAddr
	reg  listenReg // this listener's entry in the stack's listener table
}

// ListenTCP listens on laddr (an unspecified address: all of the
// stack's addresses, IPv4 and IPv6; port 0: any free port). An address
// the stack does not have fails with EADDRNOTAVAIL; a port another
// listener holds on an overlapping address (a wildcard and a specific
// one included) with EADDRINUSE, as on Linux.
func (s *Stack) ListenTCP(laddr netip.AddrPort) (*TCPListener, error) {
	return s.listenTCP("tcp", laddr)
}

func (s *Stack) listenTCP(network string, laddr netip.AddrPort) (*TCPListener, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "listen", Net: network, Addr: tcpAddr(laddr), Err: err}
	}
	if s.isClosed() {
		return nil, opErr(ErrClosed)
	}
	laddr = netip.AddrPortFrom(laddr.Addr().Unmap(), laddr.Port())
	a := laddr.Addr()
	if err := s.checkLocal(a); err != nil {
		return nil, opErr(err)
	}
	// One IPv6 endpoint with V6Only off accepts IPv4 too (as v4-mapped
	// addresses), like a Linux socket on [::]; "tcp6" is IPv6 only, as
	// package net sets IPV6_V6ONLY for it.
	dual := (!a.IsValid() || a.IsUnspecified() && a.Is6()) && network != "tcp6"
	if !a.IsValid() {
		a = netip.IPv6Unspecified()
		laddr = netip.AddrPortFrom(a, laddr.Port())
	}
	proto := protoOf(a)
	var wq waiter.Queue
	ep, terr := s.gs.NewEndpoint(tcp.ProtocolNumber, proto, &wq)
	if terr != nil {
		return nil, opErr(errnoOf(terr))
	}
	if a.Is6() {
		ep.SocketOptions().SetV6Only(!dual)
	}
	// Reuse lets a new listener take a port whose old connections are in
	// TIME-WAIT (as Go's SO_REUSEADDR on Linux); conflicts between
	// listeners are refused by the stack's own table (listenReg).
	ep.SocketOptions().SetReuseAddress(true)
	if terr := ep.Bind(s.fullAddr(laddr)); terr != nil {
		ep.Close()
		return nil, opErr(errnoOf(terr))
	}
	la, _ := ep.GetLocalAddress()
	ap := addrPort(la)
	if dual {
		ap = netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())
	} else if a.IsUnspecified() {
		ap = netip.AddrPortFrom(a, ap.Port())
	}
	reg, err := s.listeners.add(ap, dual)
	if err != nil {
		ep.Close()
		return nil, opErr(err)
	}
	if terr := ep.Listen(s.cfg.Limits.MaxPendingAccept); terr != nil {
		s.listeners.remove(reg)
		ep.Close()
		return nil, opErr(errnoOf(terr))
	}
	l := &TCPListener{net: network, addr: net.TCPAddrFromAddrPort(ap), reg: reg}
	l.init(s, ep, &wq)
	return l, nil
}

func addrPort(fa tcpip.FullAddress) netip.AddrPort {
	a, _ := netip.AddrFromSlice(fa.Addr.AsSlice())
	if !a.IsValid() {
		a = netip.IPv4Unspecified()
	}
	return netip.AddrPortFrom(a.Unmap(), fa.Port)
}

// Accept implements net.Listener.
func (l *TCPListener) Accept() (net.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err // not a typed nil
	}
	return c, nil
}

// AcceptTCP waits for the next connection. A connection beyond
// Limits.MaxTCPConns is reset and not returned. After Close (or the
// Stack's Close) it fails with net.ErrClosed; past the deadline with
// os.ErrDeadlineExceeded.
func (l *TCPListener) AcceptTCP() (*TCPConn, error) {
	opErr := func(err error) error { return &net.OpError{Op: "accept", Net: l.net, Addr: l.addr, Err: err} }
	dl := l.rd.wait()
	if err := l.pre(dl); err != nil {
		return nil, opErr(err)
	}
	we, notify := waiter.NewChannelEntry(waiter.ReadableEvents)
	l.wq.EventRegister(&we)
	defer l.wq.EventUnregister(&we)
	for {
		n, wq, terr := l.ep.Accept(nil)
		if isWouldBlock(terr) {
			if err := l.block(notify, dl); err != nil {
				return nil, opErr(err)
			}
			continue
		}
		if terr != nil {
			return nil, opErr(l.mapErr(terr))
		}
		if !l.s.takeConn() {
			// RST rather than a silent close: the peer learns at once.
			n.SocketOptions().SetLinger(tcpip.LingerOption{Enabled: true, Timeout: 0})
			n.Abort()
			continue
		}
		l.s.counters.accepted.Add(1)
		return l.s.newTCPConn(wq, n), nil
	}
}

// SetDeadline sets the deadline of Accept (zero: none), as
// net.TCPListener.SetDeadline.
func (l *TCPListener) SetDeadline(t time.Time) error {
	if err := l.setDeadline(t, true, false); err != nil {
		return &net.OpError{Op: "set", Net: l.net, Addr: l.addr, Err: err}
	}
	return nil
}

// Close implements net.Listener: pending Accepts fail with
// net.ErrClosed, and so does a second Close.
func (l *TCPListener) Close() error {
	if !l.close() {
		return &net.OpError{Op: "close", Net: l.net, Addr: l.addr, Err: net.ErrClosed}
	}
	l.s.listeners.remove(l.reg)
	l.ep.Close()
	return nil
}

// Addr implements net.Listener.
func (l *TCPListener) Addr() net.Addr { return l.addr }
