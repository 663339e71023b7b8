package stack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// dgram is a datagram socket (UDP or ICMP echo) of the stack.
type dgram struct {
	sock
	net          string   // "udp", "udp4", "udp6", "ip4:icmp", "ip6:ipv6-icmp"
	laddr, raddr net.Addr // fixed when the socket is made, as package net's
	connected    bool
	fam          int // 4 or 6: the only family the socket sends to; 0: both
}

// readFrom reads one datagram and its source.
func (c *dgram) readFrom(b []byte) (int, netip.AddrPort, error) {
	dl := c.rd.wait()
	if err := c.pre(dl); err != nil {
		return 0, netip.AddrPort{}, c.opError("read", nil, err)
	}
	w := tcpip.SliceWriter(b)
	opts := tcpip.ReadOptions{NeedRemoteAddr: true}
	res, terr := c.ep.Read(&w, opts)
	if isWouldBlock(terr) {
		we, notify := waiter.NewChannelEntry(waiter.ReadableEvents)
		c.wq.EventRegister(&we)
		defer c.wq.EventUnregister(&we)
		for {
			if res, terr = c.ep.Read(&w, opts); !isWouldBlock(terr) {
				break
			}
			if err := c.block(notify, dl); err != nil {
				return 0, netip.AddrPort{}, c.opError("read", nil, err)
			}
		}
	}
	switch terr.(type) {
	case nil:
		return res.Count, addrPort(res.RemoteAddr), nil
	case *tcpip.ErrClosedForReceive:
		if c.isClosed() {
			return 0, netip.AddrPort{}, c.opError("read", nil, net.ErrClosed)
		}
		return 0, netip.AddrPort{}, io.EOF
	}
	return 0, netip.AddrPort{}, c.opError("read", nil, c.mapErr(terr))
}

// writeTo sends b to dst (invalid: the connected peer); addr is what
// errors report.
func (c *dgram) writeTo(b []byte, dst netip.AddrPort, addr net.Addr) (int, error) {
	dl := c.wd.wait()
	if err := c.pre(dl); err != nil {
		return 0, c.opError("write", addr, err)
	}
	var opts tcpip.WriteOptions
	var to tcpip.FullAddress
	if dst.IsValid() {
		a := dst.Addr().Unmap()
		if err := c.s.datagramTarget(a); err != nil {
			return 0, c.opError("write", addr, err)
		}
		to = tcpip.FullAddress{Addr: tcpip.AddrFromSlice(a.AsSlice()), Port: dst.Port()}
		opts.To = &to
	}
	var r bytes.Reader
	r.Reset(b)
	n, terr := c.ep.Write(&r, opts)
	if isWouldBlock(terr) {
		we, notify := waiter.NewChannelEntry(waiter.WritableEvents)
		c.wq.EventRegister(&we)
		defer c.wq.EventUnregister(&we)
		for {
			if n, terr = c.ep.Write(&r, opts); !isWouldBlock(terr) {
				break
			}
			if err := c.block(notify, dl); err != nil {
				return 0, c.opError("write", addr, err)
			}
		}
	}
	if terr != nil {
		return int(n), c.opError("write", addr, c.mapErr(terr))
	}
	return int(n), nil
}

// checkFamily rejects a destination the socket cannot send to: a slice
// that is no IP address, or one of the other family on a one-family
// socket (as package net's "non-IPv4 address").
func (c *dgram) checkFamily(ip net.IP) (netip.Addr, error) {
	a, ok := netip.AddrFromSlice(ip)
	a = a.Unmap()
	switch {
	case !ok && c.fam == 4:
		return netip.Addr{}, &net.AddrError{Err: "non-IPv4 address", Addr: ip.String()}
	case !ok:
		return netip.Addr{}, &net.AddrError{Err: "non-IPv6 address", Addr: ip.String()}
	case c.fam == 4 && !a.Is4():
		return netip.Addr{}, &net.AddrError{Err: "non-IPv4 address", Addr: a.String()}
	case c.fam == 6 && !a.Is6():
		return netip.Addr{}, &net.AddrError{Err: "non-IPv6 address", Addr: a.String()}
	}
	return a, nil
}

func (c *dgram) opError(op string, addr net.Addr, err error) error {
	if addr == nil && c.raddr != nil {
		addr = c.raddr
	}
	return &net.OpError{Op: op, Net: c.net, Source: c.laddr, Addr: addr, Err: err}
}

// Close implements net.Conn and net.PacketConn; closing twice fails with
// net.ErrClosed.
func (c *dgram) Close() error {
	if !c.close() {
		return c.opError("close", nil, net.ErrClosed)
	}
	c.ep.Close()
	return nil
}

// Read implements net.Conn. A zero-length read returns 0, nil at once,
// as package net's does.
func (c *dgram) Read(b []byte) (int, error) {
	if len(b) == 0 {
		if c.isClosed() {
			return 0, c.opError("read", nil, net.ErrClosed)
		}
		return 0, nil
	}
	n, _, err := c.readFrom(b)
	return n, err
}

// Write implements net.Conn (connected sockets; EDESTADDRREQ otherwise).
func (c *dgram) Write(b []byte) (int, error) { return c.writeTo(b, netip.AddrPort{}, nil) }

// LocalAddr implements net.Conn.
func (c *dgram) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr implements net.Conn (nil when not connected).
func (c *dgram) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline implements net.Conn.
func (c *dgram) SetDeadline(t time.Time) error { return c.setErr(c.setDeadline(t, true, true)) }

// SetReadDeadline implements net.Conn.
func (c *dgram) SetReadDeadline(t time.Time) error { return c.setErr(c.setDeadline(t, true, false)) }

// SetWriteDeadline implements net.Conn.
func (c *dgram) SetWriteDeadline(t time.Time) error { return c.setErr(c.setDeadline(t, false, true)) }

func (c *dgram) setErr(err error) error {
	if err != nil {
		return c.opError("set", nil, err)
	}
	return nil
}

// UDPConn is a UDP socket over the modem: connected (DialUDP), it is a
// net.Conn; unconnected (ListenUDP), a net.PacketConn that may send to
// any destination. Errors are those of *net.UDPConn.
//
// A write waits (bounded by the write deadline) while the socket's
// datagrams not yet handed to the modem (in the stack's transmit queue)
// fill its send buffer (212 KiB unless SetWriteBuffer), as a Linux UDP
// socket waits for its SO_SNDBUF; the transmit queue drops only what
// many sockets together send beyond its length.
type UDPConn struct{ dgram }

// SetReadBuffer sizes the socket's receive buffer (SO_RCVBUF).
func (c *UDPConn) SetReadBuffer(n int) error {
	if c.isClosed() {
		return c.opError("set", nil, net.ErrClosed)
	}
	c.ep.SocketOptions().SetReceiveBufferSize(int64(n), true)
	return nil
}

// SetWriteBuffer sizes the socket's send buffer (SO_SNDBUF): how many
// bytes of its datagrams may wait for the modem before a write waits.
func (c *UDPConn) SetWriteBuffer(n int) error {
	if c.isClosed() {
		return c.opError("set", nil, net.ErrClosed)
	}
	c.ep.SocketOptions().SetSendBufferSize(int64(n), true)
	return nil
}

// ReadFromUDPAddrPort reads one datagram and its source.
func (c *UDPConn) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	return c.readFrom(b)
}

// ReadFromUDP reads one datagram and its source.
func (c *UDPConn) ReadFromUDP(b []byte) (int, *net.UDPAddr, error) {
	n, ap, err := c.readFrom(b)
	if err != nil {
		return n, nil, err
	}
	return n, net.UDPAddrFromAddrPort(ap), nil
}

// ReadFrom implements net.PacketConn; the address is a *net.UDPAddr.
func (c *UDPConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, ap, err := c.readFrom(b)
	if err != nil {
		return n, nil, err
	}
	return n, net.UDPAddrFromAddrPort(ap), nil
}

// WriteToUDPAddrPort sends one datagram to addr.
func (c *UDPConn) WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	if c.connected {
		return 0, c.opError("write", net.UDPAddrFromAddrPort(addr), net.ErrWriteToConnected)
	}
	a, err := c.checkFamily(addr.Addr().AsSlice())
	if err != nil || !addr.IsValid() {
		if err == nil {
			err = syscall.EINVAL
		}
		return 0, c.opError("write", net.UDPAddrFromAddrPort(addr), err)
	}
	return c.writeTo(b, netip.AddrPortFrom(a, addr.Port()), nil)
}

// WriteToUDP sends one datagram to addr.
func (c *UDPConn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) {
	if addr == nil {
		return 0, c.opError("write", nil, syscall.EINVAL)
	}
	if c.connected {
		return 0, c.opError("write", addr, net.ErrWriteToConnected)
	}
	a, err := c.checkFamily(addr.IP)
	if err != nil {
		return 0, c.opError("write", addr, err)
	}
	return c.writeTo(b, netip.AddrPortFrom(a, uint16(addr.Port)), addr)
}

// WriteTo implements net.PacketConn: addr must be a *net.UDPAddr (any
// other type fails with EINVAL, as with package net).
func (c *UDPConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, c.opError("write", addr, syscall.EINVAL)
	}
	return c.WriteToUDP(b, ua)
}

// DialUDP returns a UDP socket bound to laddr (zero: chosen by the
// stack) and connected to raddr.
func (s *Stack) DialUDP(ctx context.Context, laddr, raddr netip.AddrPort) (*UDPConn, error) {
	return s.dialUDP(ctx, "udp", laddr, raddr)
}

func (s *Stack) dialUDP(ctx context.Context, network string, laddr, raddr netip.AddrPort) (*UDPConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: net.UDPAddrFromAddrPort(raddr), Err: err}
	}
	if !raddr.IsValid() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errMissingAddress}
	}
	c := &UDPConn{}
	if err := s.datagram(&c.dgram, udp.ProtocolNumber, network, laddr, raddr); err != nil {
		return nil, err
	}
	return c, nil
}

// ListenUDP returns an unconnected UDP socket on laddr (an unspecified
// address: all of the stack's addresses, IPv4 and IPv6; port 0: any free
// port).
func (s *Stack) ListenUDP(laddr netip.AddrPort) (*UDPConn, error) {
	return s.listenUDP("udp", laddr)
}

func (s *Stack) listenUDP(network string, laddr netip.AddrPort) (*UDPConn, error) {
	if !laddr.IsValid() {
		laddr = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
	}
	c := &UDPConn{}
	if err := s.datagram(&c.dgram, udp.ProtocolNumber, network, laddr, netip.AddrPort{}); err != nil {
		return nil, err
	}
	return c, nil
}

var errMissingAddress = errors.New("missing address")

// datagram makes c a UDP or ICMP endpoint bound to laddr and, when raddr
// is valid, connected to it.
func (s *Stack) datagram(c *dgram, tp tcpip.TransportProtocolNumber, network string, laddr, raddr netip.AddrPort) error {
	op := "listen"
	if raddr.IsValid() {
		op = "dial"
	}
	opErr := func(err error) error {
		var a, src net.Addr
		if raddr.IsValid() {
			a, src = net.UDPAddrFromAddrPort(raddr), udpAddr(laddr)
		} else {
			a = udpAddr(laddr)
		}
		if tp != udp.ProtocolNumber {
			a, src = ipAddr(a), ipAddr(src)
		}
		return &net.OpError{Op: op, Net: network, Source: src, Addr: a, Err: err}
	}
	if s.isClosed() {
		return opErr(ErrClosed)
	}
	laddr = netip.AddrPortFrom(laddr.Addr().Unmap(), laddr.Port())
	if err := s.checkLocal(laddr.Addr()); err != nil {
		return opErr(err)
	}
	fam := laddr.Addr()
	if raddr.IsValid() {
		raddr = netip.AddrPortFrom(raddr.Addr().Unmap(), raddr.Port())
		a, err := s.dialTarget(raddr.Addr(), false)
		if err != nil {
			return opErr(err)
		}
		raddr = netip.AddrPortFrom(a, raddr.Port())
		if fam.IsValid() && !fam.IsUnspecified() && fam.Is4() != a.Is4() {
			return opErr(&net.AddrError{Err: "mismatched local address type", Addr: laddr.Addr().String()})
		}
		fam = a
	}
	switch {
	case strings.HasSuffix(network, "4") || network == "ip4:icmp":
		c.fam = 4
	case strings.HasSuffix(network, "6") || network == "ip6:ipv6-icmp":
		c.fam = 6
	}
	if c.fam == 4 && fam.IsValid() && !fam.Is4() || c.fam == 6 && fam.IsValid() && !fam.Is6() {
		return opErr(&net.AddrError{Err: "address of the wrong family", Addr: fam.String()})
	}
	dual := c.fam == 0 && (!fam.IsValid() || fam.Is6() && fam.IsUnspecified())
	proto := protoOf(fam)
	if dual {
		proto = protoOf(netip.IPv6Unspecified())
	}
	if c.fam == 4 {
		proto = protoOf(netip.IPv4Unspecified())
	}
	if tp == icmp.ProtocolNumber4 && proto != protoOf(netip.IPv4Unspecified()) {
		tp = icmp.ProtocolNumber6
	}
	if tp != udp.ProtocolNumber && c.fam == 0 {
		// An ICMP socket speaks one family.
		c.fam = 4
		if tp == icmp.ProtocolNumber6 {
			c.fam = 6
		}
	}
	if !dual && c.fam == 0 {
		c.fam = 4
		if proto == protoOf(netip.IPv6Unspecified()) {
			c.fam = 6
		}
	}
	wq := new(waiter.Queue)
	ep, terr := s.gs.NewEndpoint(tp, proto, wq)
	if terr != nil {
		return opErr(errnoOf(terr))
	}
	if dual && tp == udp.ProtocolNumber {
		ep.SocketOptions().SetV6Only(false)
	}
	if laddr.IsValid() {
		if terr := ep.Bind(s.fullAddr(laddr)); terr != nil {
			ep.Close()
			return opErr(errnoOf(terr))
		}
	}
	if raddr.IsValid() {
		if terr := ep.Connect(s.fullAddr(raddr)); terr != nil {
			ep.Close()
			return opErr(errnoOf(terr))
		}
	}
	c.init(s, ep, wq)
	c.net, c.connected = network, raddr.IsValid()
	la, _ := ep.GetLocalAddress()
	lap := addrPort(la)
	if la.Addr.BitLen() == 0 && laddr.IsValid() {
		lap = netip.AddrPortFrom(laddr.Addr(), lap.Port())
	}
	if tp == udp.ProtocolNumber {
		c.laddr = net.UDPAddrFromAddrPort(lap)
		if raddr.IsValid() {
			c.raddr = net.UDPAddrFromAddrPort(raddr)
		}
	} else {
		c.laddr = &net.IPAddr{IP: lap.Addr().AsSlice()}
		if raddr.IsValid() {
			c.raddr = &net.IPAddr{IP: raddr.Addr().AsSlice()}
		}
	}
	return nil
}

func udpAddr(ap netip.AddrPort) net.Addr {
	if !ap.IsValid() {
		return nil
	}
	return net.UDPAddrFromAddrPort(ap)
}

// ipAddr turns a *net.UDPAddr into the *net.IPAddr an ICMP socket's
// errors report.
func ipAddr(a net.Addr) net.Addr {
	if ua, ok := a.(*net.UDPAddr); ok {
		return &net.IPAddr{IP: ua.IP}
	}
	return a
}

// PingConn is an ICMP echo socket (like Linux's unprivileged ping
// sockets): Write sends an ICMP echo request (type, code, checksum,
// identifier, sequence and data; the stack sets the identifier and the
// checksum) and Read returns ICMP echo replies. Read and write deadlines
// both work. It speaks one family, that of its address.
type PingConn struct{ dgram }

// DialPing returns an ICMP echo socket connected to raddr (IPv4 or
// IPv6), from laddr (zero: chosen by the stack).
func (s *Stack) DialPing(ctx context.Context, laddr, raddr netip.Addr) (*PingConn, error) {
	netw := "ip4:icmp"
	if raddr.Unmap().Is6() {
		netw = "ip6:ipv6-icmp"
	}
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "dial", Net: netw, Addr: &net.IPAddr{IP: raddr.AsSlice()}, Err: err}
	}
	if !raddr.IsValid() {
		return nil, &net.OpError{Op: "dial", Net: netw, Err: errMissingAddress}
	}
	var la netip.AddrPort
	if laddr.IsValid() {
		la = netip.AddrPortFrom(laddr, 0)
	}
	c := &PingConn{}
	if err := s.datagram(&c.dgram, icmp.ProtocolNumber4, netw, la, netip.AddrPortFrom(raddr, 0)); err != nil {
		return nil, err
	}
	return c, nil
}

// ListenPing returns an unconnected ICMP echo socket of laddr's family.
func (s *Stack) ListenPing(laddr netip.Addr) (*PingConn, error) {
	netw := "ip4:icmp"
	if laddr.Unmap().Is6() {
		netw = "ip6:ipv6-icmp"
	}
	if !laddr.IsValid() {
		return nil, &net.OpError{Op: "listen", Net: netw, Err: errMissingAddress}
	}
	c := &PingConn{}
	if err := s.datagram(&c.dgram, icmp.ProtocolNumber4, netw, netip.AddrPortFrom(laddr, 0), netip.AddrPort{}); err != nil {
		return nil, err
	}
	return c, nil
}

// ReadFrom implements net.PacketConn; the address is a *net.IPAddr.
func (c *PingConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, ap, err := c.readFrom(b)
	if err != nil {
		return n, nil, err
	}
	return n, &net.IPAddr{IP: ap.Addr().AsSlice()}, nil
}

// WriteTo implements net.PacketConn; addr is a *net.IPAddr or a
// *net.UDPAddr (as golang.org/x/net/icmp's ping sockets use), of the
// socket's family; another type fails with EINVAL.
func (c *PingConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	var ip net.IP
	switch a := addr.(type) {
	case *net.IPAddr:
		if a != nil {
			ip = a.IP
		}
	case *net.UDPAddr:
		if a != nil {
			ip = a.IP
		}
	default:
		return 0, c.opError("write", addr, syscall.EINVAL)
	}
	if ip == nil {
		return 0, c.opError("write", addr, syscall.EINVAL)
	}
	if c.connected {
		return 0, c.opError("write", addr, net.ErrWriteToConnected)
	}
	a, err := c.checkFamily(ip)
	if err != nil {
		return 0, c.opError("write", addr, err)
	}
	return c.writeTo(b, netip.AddrPortFrom(a, 0), addr)
}

// Ping sends one echo request to dst and waits for the reply (bounded
// by ctx), returning the round-trip time.
func (s *Stack) Ping(ctx context.Context, dst netip.Addr) (time.Duration, error) {
	c, err := s.DialPing(ctx, netip.Addr{}, dst)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := make([]byte, header.ICMPv4MinimumSize+8)
	typ, want := byte(header.ICMPv4Echo), byte(header.ICMPv4EchoReply)
	if dst.Is6() && !dst.Is4In6() {
		typ, want = byte(header.ICMPv6EchoRequest), byte(header.ICMPv6EchoReply)
	}
	req[0] = typ
	req[7] = 1 // sequence 1
	copy(req[8:], "mhistack")
	start := time.Now()
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	buf := make([]byte, 1500)
	for {
		n, err := c.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, err
		}
		if n >= len(req) && buf[0] == want && string(buf[8:n]) == "mhistack" {
			return time.Since(start), nil
		}
	}
}
