package stack

import (
	"context"
	"net"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// UDPConn is a UDP socket over the modem: connected (DialUDP), it is a
// net.Conn; unconnected (ListenUDP), a net.PacketConn that may send to
// any destination.
type UDPConn struct {
	*gonet.UDPConn
}

// ReadFromUDPAddrPort reads one datagram and its source.
func (c *UDPConn) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	n, a, err := c.UDPConn.ReadFrom(b)
	if err != nil {
		return n, netip.AddrPort{}, fixOpError(err)
	}
	ua, _ := a.(*net.UDPAddr)
	if ua == nil {
		return n, netip.AddrPort{}, nil
	}
	ap := ua.AddrPort()
	return n, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// WriteToUDPAddrPort sends one datagram to addr.
func (c *UDPConn) WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	n, err := c.UDPConn.WriteTo(b, net.UDPAddrFromAddrPort(addr))
	return n, fixOpError(err)
}

// Read implements net.Conn.
func (c *UDPConn) Read(b []byte) (int, error) {
	n, err := c.UDPConn.Read(b)
	return n, fixOpError(err)
}

// Write implements net.Conn.
func (c *UDPConn) Write(b []byte) (int, error) {
	n, err := c.UDPConn.Write(b)
	return n, fixOpError(err)
}

// DialUDP returns a UDP socket bound to laddr (zero: chosen by the
// stack) and connected to raddr.
func (s *Stack) DialUDP(ctx context.Context, laddr, raddr netip.AddrPort) (*UDPConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "dial", Net: "udp", Addr: net.UDPAddrFromAddrPort(raddr), Err: err}
	}
	ep, wq, err := s.datagram(udp.ProtocolNumber, "udp", laddr, raddr)
	if err != nil {
		return nil, err
	}
	return &UDPConn{gonet.NewUDPConn(wq, ep)}, nil
}

// ListenUDP returns an unconnected UDP socket on laddr (an unspecified
// address: all of the stack's addresses, IPv4 and IPv6; port 0: any free
// port).
func (s *Stack) ListenUDP(laddr netip.AddrPort) (*UDPConn, error) {
	ep, wq, err := s.datagram(udp.ProtocolNumber, "udp", laddr, netip.AddrPort{})
	if err != nil {
		return nil, err
	}
	return &UDPConn{gonet.NewUDPConn(wq, ep)}, nil
}

// datagram makes a UDP or ICMP endpoint bound to laddr and, when raddr
// is valid, connected to it.
func (s *Stack) datagram(tp tcpip.TransportProtocolNumber, netw string, laddr, raddr netip.AddrPort) (tcpip.Endpoint, *waiter.Queue, error) {
	opErr := func(op string, err error) error {
		var a net.Addr
		if raddr.IsValid() {
			a = net.UDPAddrFromAddrPort(raddr)
		} else if laddr.IsValid() {
			a = net.UDPAddrFromAddrPort(laddr)
		}
		return &net.OpError{Op: op, Net: netw, Addr: a, Err: err}
	}
	if s.isClosed() {
		return nil, nil, opErr("dial", ErrClosed)
	}
	fam := laddr.Addr()
	if raddr.IsValid() {
		fam = raddr.Addr().Unmap()
	}
	dual := !fam.IsValid() || fam.Is6() && fam.IsUnspecified()
	proto := protoOf(fam)
	if dual {
		proto = protoOf(netip.IPv6Unspecified())
	}
	if tp == icmp.ProtocolNumber4 && proto != protoOf(netip.IPv4Unspecified()) {
		tp = icmp.ProtocolNumber6
	}
	wq := new(waiter.Queue)
	ep, terr := s.gs.NewEndpoint(tp, proto, wq)
	if terr != nil {
		return nil, nil, opErr("dial", errnoOf(terr))
	}
	if dual && tp == udp.ProtocolNumber {
		ep.SocketOptions().SetV6Only(false)
	}
	if laddr.IsValid() {
		if terr := ep.Bind(fullAddr(laddr)); terr != nil {
			ep.Close()
			return nil, nil, opErr("listen", errnoOf(terr))
		}
	}
	if raddr.IsValid() {
		if terr := ep.Connect(fullAddr(raddr)); terr != nil {
			ep.Close()
			return nil, nil, opErr("dial", errnoOf(terr))
		}
	}
	return ep, wq, nil
}

// PingConn is an ICMP echo socket (like Linux's unprivileged ping
// sockets): Write sends an ICMP echo request (type, code, checksum,
// identifier, sequence and data; the stack sets the identifier and the
// checksum) and Read returns ICMP echo replies. Read and write deadlines
// both work.
type PingConn struct {
	*gonet.UDPConn
	laddr, raddr netip.Addr
}

// DialPing returns an ICMP echo socket connected to raddr (IPv4 or
// IPv6), from laddr (zero: chosen by the stack).
func (s *Stack) DialPing(ctx context.Context, laddr, raddr netip.Addr) (*PingConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var la netip.AddrPort
	if laddr.IsValid() {
		la = netip.AddrPortFrom(laddr, 0)
	}
	ep, wq, err := s.datagram(icmp.ProtocolNumber4, "ip:icmp", la, netip.AddrPortFrom(raddr, 0))
	if err != nil {
		return nil, err
	}
	return &PingConn{UDPConn: gonet.NewUDPConn(wq, ep), laddr: laddr, raddr: raddr.Unmap()}, nil
}

// ListenPing returns an unconnected ICMP echo socket of laddr's family.
func (s *Stack) ListenPing(laddr netip.Addr) (*PingConn, error) {
	ep, wq, err := s.datagram(icmp.ProtocolNumber4, "ip:icmp", netip.AddrPortFrom(laddr, 0), netip.AddrPort{})
	if err != nil {
		return nil, err
	}
	return &PingConn{UDPConn: gonet.NewUDPConn(wq, ep), laddr: laddr}, nil
}

// LocalAddr implements net.Conn.
func (c *PingConn) LocalAddr() net.Addr { return &net.IPAddr{IP: c.laddr.AsSlice()} }

// RemoteAddr implements net.Conn.
func (c *PingConn) RemoteAddr() net.Addr {
	if !c.raddr.IsValid() {
		return nil
	}
	return &net.IPAddr{IP: c.raddr.AsSlice()}
}

// ReadFrom implements net.PacketConn; the address is a *net.IPAddr.
func (c *PingConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, a, err := c.UDPConn.ReadFrom(b)
	if ua, ok := a.(*net.UDPAddr); ok {
		a = &net.IPAddr{IP: ua.IP}
	}
	return n, a, err
}

// WriteTo implements net.PacketConn; addr is a *net.IPAddr or
// *net.UDPAddr.
func (c *PingConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if ia, ok := addr.(*net.IPAddr); ok {
		addr = &net.UDPAddr{IP: ia.IP}
	}
	return c.UDPConn.WriteTo(b, addr)
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
