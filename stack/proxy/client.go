package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Client is a small SOCKS5 client: CONNECT, and UDP ASSOCIATE, which few
// clients implement. The e2e script and the tests use it; so can programs
// that want UDP through mhiproxy.
type Client struct {
	Proxy          string // host:port of the SOCKS5 server
	User, Password string // RFC 1929 credentials; empty for none
	Dialer         Dialer // reaches the proxy; nil means a net.Dialer
}

func (c *Client) dialer() Dialer {
	if c.Dialer != nil {
		return c.Dialer
	}
	return &net.Dialer{}
}

// handshake dials the proxy, authenticates and sends a request, and
// returns the connection and BND from the reply.
func (c *Client) handshake(ctx context.Context, cmd byte, dst Addr) (net.Conn, Addr, error) {
	conn, err := c.dialer().DialContext(ctx, "tcp", c.Proxy)
	if err != nil {
		return nil, Addr{}, err
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	bnd, err := c.negotiate(conn, cmd, dst)
	if err != nil {
		conn.Close()
		return nil, Addr{}, err
	}
	conn.SetDeadline(time.Time{})
	return conn, bnd, nil
}

func (c *Client) negotiate(conn net.Conn, cmd byte, dst Addr) (Addr, error) {
	method := byte(methodNoAuth)
	if c.User != "" || c.Password != "" {
		method = methodUserPass
	}
	b := make([]byte, 0, 3+2+255+255)
	if _, err := conn.Write(append(b, socks5Version, 1, method)); err != nil {
		return Addr{}, err
	}
	// Unbuffered reads: a CONNECT target may speak first, and its bytes
	// right behind the reply belong to the caller.
	br := conn
	var buf [257]byte
	if _, err := io.ReadFull(br, buf[:2]); err != nil {
		return Addr{}, err
	}
	if buf[0] != socks5Version || buf[1] != method {
		return Addr{}, fmt.Errorf("socks5: server chose method %#x", buf[1])
	}
	if method == methodUserPass {
		if len(c.User) > 255 || len(c.Password) > 255 {
			return Addr{}, errors.New("socks5: user or password longer than 255 bytes")
		}
		b = append(b[:0], userPassVersion, byte(len(c.User)))
		b = append(b, c.User...)
		b = append(b, byte(len(c.Password)))
		b = append(b, c.Password...)
		if _, err := conn.Write(b); err != nil {
			return Addr{}, err
		}
		if _, err := io.ReadFull(br, buf[:2]); err != nil {
			return Addr{}, err
		}
		if buf[1] != userPassOK {
			return Addr{}, errors.New("socks5: authentication failed")
		}
	}
	if len(dst.Name) > 255 {
		return Addr{}, errors.New("socks5: host name longer than 255 bytes")
	}
	b = appendAddr(append(b[:0], socks5Version, cmd, 0), dst)
	if _, err := conn.Write(b); err != nil {
		return Addr{}, err
	}
	if _, err := io.ReadFull(br, buf[:3]); err != nil {
		return Addr{}, err
	}
	if rep := Reply(buf[1]); rep != ReplySucceeded {
		return Addr{}, &ReplyError{Reply: rep}
	}
	bnd, err := readAddr(br, buf[:])
	if err != nil {
		return Addr{}, err
	}
	return bnd, nil
}

// ReplyError is a SOCKS5 request the server refused.
type ReplyError struct{ Reply Reply }

func (e *ReplyError) Error() string { return "socks5: " + e.Reply.String() }

// ParseAddr parses host:port into an Addr (a name if host is not an IP).
func ParseAddr(hostport string) (Addr, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return Addr{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return Addr{}, fmt.Errorf("port %q: %w", port, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return Addr{IP: ip, Port: uint16(p)}, nil
	}
	return Addr{Name: host, Port: uint16(p)}, nil
}

// DialContext connects to address (host:port; names are resolved by the
// proxy) through a SOCKS5 CONNECT. network must be "tcp".
func (c *Client) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if network != "tcp" {
		return nil, fmt.Errorf("socks5: network %q: only tcp", network)
	}
	dst, err := ParseAddr(address)
	if err != nil {
		return nil, err
	}
	conn, _, err := c.handshake(ctx, cmdConnect, dst)
	return conn, err
}

// ListenUDP opens a UDP association, RFC 1928 §7.
func (c *Client) ListenUDP(ctx context.Context) (*UDPConn, error) {
	ctrl, bnd, err := c.handshake(ctx, cmdUDPAssociate, Addr{IP: netip.IPv4Unspecified()})
	if err != nil {
		return nil, err
	}
	relay := netip.AddrPortFrom(bnd.IP, bnd.Port)
	if bnd.IP.IsUnspecified() {
		// BND.ADDR 0.0.0.0 means "the address you reached me at".
		host, _, _ := net.SplitHostPort(ctrl.RemoteAddr().String())
		ip, _ := netip.ParseAddr(host)
		relay = netip.AddrPortFrom(ip, bnd.Port)
	}
	pc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(relay))
	if err != nil {
		ctrl.Close()
		return nil, err
	}
	u := &UDPConn{ctrl: ctrl, pc: pc}
	return u, nil
}

// UDPConn is a client's UDP association: a net.PacketConn whose datagrams
// travel through the proxy. It ends when closed or when the proxy closes
// the control connection.
type UDPConn struct {
	ctrl net.Conn
	pc   *net.UDPConn

	wmu  sync.Mutex
	wbuf []byte
	rmu  sync.Mutex
	rbuf []byte
}

// WriteToAddr sends b to dst, which may be a name the proxy resolves.
func (u *UDPConn) WriteToAddr(b []byte, dst Addr) (int, error) {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	u.wbuf = append(AppendUDPHeader(u.wbuf[:0], dst), b...)
	if _, err := u.pc.Write(u.wbuf); err != nil {
		return 0, err
	}
	return len(b), nil
}

// WriteTo sends b to addr, a *net.UDPAddr.
func (u *UDPConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, fmt.Errorf("socks5: WriteTo %T: want *net.UDPAddr", addr)
	}
	ap := ua.AddrPort()
	return u.WriteToAddr(b, Addr{IP: ap.Addr().Unmap(), Port: ap.Port()})
}

// ReadFrom reads one datagram and its source.
func (u *UDPConn) ReadFrom(b []byte) (int, net.Addr, error) {
	u.rmu.Lock()
	defer u.rmu.Unlock()
	if cap(u.rbuf) < len(b)+udpHeaderMax {
		u.rbuf = make([]byte, len(b)+udpHeaderMax)
	}
	buf := u.rbuf[:len(b)+udpHeaderMax]
	for {
		n, err := u.pc.Read(buf)
		if err != nil {
			return 0, nil, err
		}
		src, payload, err := ParseUDPHeader(buf[:n])
		if err != nil || src.Name != "" {
			continue // not from the relay's rules; a real stack drops it too
		}
		return copy(b, payload), net.UDPAddrFromAddrPort(netip.AddrPortFrom(src.IP, src.Port)), nil
	}
}

// Close ends the association.
func (u *UDPConn) Close() error {
	u.ctrl.Close()
	return u.pc.Close()
}

// LocalAddr is the client's UDP socket address.
func (u *UDPConn) LocalAddr() net.Addr { return u.pc.LocalAddr() }

// SetDeadline sets both deadlines on the UDP socket.
func (u *UDPConn) SetDeadline(t time.Time) error { return u.pc.SetDeadline(t) }

// SetReadDeadline sets the read deadline on the UDP socket.
func (u *UDPConn) SetReadDeadline(t time.Time) error { return u.pc.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline on the UDP socket.
func (u *UDPConn) SetWriteDeadline(t time.Time) error { return u.pc.SetWriteDeadline(t) }
