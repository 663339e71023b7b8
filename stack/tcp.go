package stack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// TCPConn is a TCP connection over the modem: a net.Conn with the
// methods of *net.TCPConn that matter through a proxy (CloseRead,
// CloseWrite, keepalive, NoDelay, linger). Errors wrap syscall.Errno
// values as package net's do.
type TCPConn struct {
	*gonet.TCPConn
	ep      tcpip.Endpoint
	s       *Stack
	release sync.Once
}

func (s *Stack) newTCPConn(wq *waiter.Queue, ep tcpip.Endpoint) *TCPConn {
	c := &TCPConn{TCPConn: gonet.NewTCPConn(wq, ep), ep: ep, s: s}
	so := ep.SocketOptions()
	so.SetDelayOption(s.cfg.TCP.Delay)
	c.SetKeepAliveConfig(s.cfg.TCP.KeepAlive)
	return c
}

// Read implements net.Conn.
func (c *TCPConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	return n, fixOpError(err)
}

// Write implements net.Conn.
func (c *TCPConn) Write(b []byte) (int, error) {
	n, err := c.TCPConn.Write(b)
	return n, fixOpError(err)
}

// Close implements net.Conn.
func (c *TCPConn) Close() error {
	c.release.Do(func() { c.s.conns.Add(-1) })
	return c.TCPConn.Close()
}

// SetNoDelay turns Nagle's algorithm off (true, the default) or on.
func (c *TCPConn) SetNoDelay(noDelay bool) error {
	c.ep.SocketOptions().SetDelayOption(!noDelay)
	return nil
}

// SetKeepAlive turns keepalive probes on or off.
func (c *TCPConn) SetKeepAlive(on bool) error {
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
	c.ep.SocketOptions().SetLinger(tcpip.LingerOption{Enabled: sec >= 0, Timeout: time.Duration(sec) * time.Second})
	return nil
}

// SetReadBuffer and SetWriteBuffer size the connection's buffers.
func (c *TCPConn) SetReadBuffer(n int) error {
	c.ep.SocketOptions().SetReceiveBufferSize(int64(n), true)
	return nil
}

// SetWriteBuffer sizes the connection's send buffer.
func (c *TCPConn) SetWriteBuffer(n int) error {
	c.ep.SocketOptions().SetSendBufferSize(int64(n), true)
	return nil
}

// Info returns the connection's TCP state (RTT, congestion window…).
func (c *TCPConn) Info() tcpip.TCPInfoOption {
	var i tcpip.TCPInfoOption
	c.ep.GetSockOpt(&i)
	return i
}

func (c *TCPConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
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
		if terr := ep.Bind(fullAddr(laddr)); terr != nil {
			ep.Close()
			return nil, errnoOf(terr)
		}
	}
	d := s.dialing.add(ep)
	defer s.dialing.remove(d)
	terr = ep.Connect(fullAddr(raddr))
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
// both context.DeadlineExceeded and syscall.ETIMEDOUT.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string   { return "i/o timeout" }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }
func (e *timeoutError) Unwrap() []error { return []error{e.err, syscall.ETIMEDOUT} }

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	a := ap.Addr().Unmap()
	fa := tcpip.FullAddress{Port: ap.Port()}
	if a.IsValid() && !a.IsUnspecified() {
		fa.Addr = tcpip.AddrFromSlice(a.AsSlice())
		fa.NIC = nicID
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
	s      *Stack
	ep     tcpip.Endpoint
	wq     *waiter.Queue
	addr   *net.TCPAddr
	cancel chan struct{}
	once   sync.Once
}

// ListenTCP listens on laddr (an unspecified address: all of the
// stack's addresses, IPv4 and IPv6; port 0: any free port).
func (s *Stack) ListenTCP(laddr netip.AddrPort) (*TCPListener, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "listen", Net: "tcp", Addr: tcpAddr(laddr), Err: err}
	}
	if s.isClosed() {
		return nil, opErr(ErrClosed)
	}
	a := laddr.Addr()
	dual := !a.IsValid() || a.IsUnspecified() && a.Is6()
	proto := protoOf(a)
	if dual {
		// One IPv6 endpoint with V6Only off accepts IPv4 too (as v4-
		// mapped addresses), like a Linux socket on [::].
		proto = protoOf(netip.IPv6Unspecified())
	}
	var wq waiter.Queue
	ep, terr := s.gs.NewEndpoint(tcp.ProtocolNumber, proto, &wq)
	if terr != nil {
		return nil, opErr(errnoOf(terr))
	}
	if dual {
		ep.SocketOptions().SetV6Only(false)
	}
	ep.SocketOptions().SetReuseAddress(true)
	if terr := ep.Bind(fullAddr(laddr)); terr != nil {
		ep.Close()
		return nil, opErr(errnoOf(terr))
	}
	if terr := ep.Listen(s.cfg.Limits.MaxPendingAccept); terr != nil {
		ep.Close()
		return nil, opErr(errnoOf(terr))
	}
	la, _ := ep.GetLocalAddress()
	ap := addrPort(la)
	if dual {
		ap = netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())
	}
	return &TCPListener{s: s, ep: ep, wq: &wq, addr: net.TCPAddrFromAddrPort(ap), cancel: make(chan struct{})}, nil
}

func addrPort(fa tcpip.FullAddress) netip.AddrPort {
	a, _ := netip.AddrFromSlice(fa.Addr.AsSlice())
	if !a.IsValid() {
		a = netip.IPv4Unspecified()
	}
	return netip.AddrPortFrom(a.Unmap(), fa.Port)
}

// Accept implements net.Listener.
func (l *TCPListener) Accept() (net.Conn, error) { return l.AcceptTCP() }

// AcceptTCP waits for the next connection. A connection beyond
// Limits.MaxTCPConns is reset and not returned.
func (l *TCPListener) AcceptTCP() (*TCPConn, error) {
	we, notify := waiter.NewChannelEntry(waiter.ReadableEvents)
	l.wq.EventRegister(&we)
	defer l.wq.EventUnregister(&we)
	for {
		n, wq, terr := l.ep.Accept(nil)
		if _, ok := terr.(*tcpip.ErrWouldBlock); ok {
			select {
			case <-l.cancel:
				return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: net.ErrClosed}
			case <-notify:
			}
			continue
		}
		if terr != nil {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: errnoOf(terr)}
		}
		if !l.s.takeConn() {
			// RST rather than a silent close: the peer learns at once
			// (netstack.md §7 target 6).
			n.SocketOptions().SetLinger(tcpip.LingerOption{Enabled: true, Timeout: 0})
			n.Abort()
			continue
		}
		l.s.counters.accepted.Add(1)
		return l.s.newTCPConn(wq, n), nil
	}
}

// Close implements net.Listener.
func (l *TCPListener) Close() error {
	l.once.Do(func() {
		close(l.cancel)
		l.ep.Close()
	})
	return nil
}

// Addr implements net.Listener.
func (l *TCPListener) Addr() net.Addr { return l.addr }
