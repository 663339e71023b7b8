package stack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	glog "gvisor.dev/gvisor/pkg/log"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// side is one implementation of the net-shaped API: package net on the
// host's loopback, or the stack on the emulated modem.
type side struct {
	name         string
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	listen       func(network, addr string) (net.Listener, error)
	listenPacket func(network, addr string) (net.PacketConn, error)
	// listenPing is an unconnected ICMP echo socket of IPv4 (host: a
	// raw "ip4:icmp" socket, which needs CAP_NET_RAW).
	listenPing func() (net.PacketConn, error)
	// dialPing dials address ("ping" on the stack, "ip4:icmp" or
	// "ip6:ipv6-icmp" on the host).
	dialPing func(ctx context.Context, v6 bool, addr string) (net.Conn, error)
	dialTCP  func(ctx context.Context) (net.Conn, error) // DialTCP with zero addresses
	lookup   func(ctx context.Context, host string) ([]string, error)
	// peer4 is the host's greeting server (writes "ab", then echoes) as
	// this side reaches it; own4 an IPv4 address of this side; foreign4
	// an address that is not.
	peer4, own4, foreign4 string
	// closeAll is what ends every socket of the side at once (the
	// Stack's Close; nil on the host).
	closeAll func() error
}

// errTypedNil is returned by a case when a call returned a non-nil
// interface holding a nil pointer along with its error.
var errTypedNil = errors.New("typed nil interface returned with the error")

// errBlocked is returned by a case when a call that must return at once
// waited.
var errBlocked = errors.New("call blocked")

// errNoHost marks a case the host cannot run (no privilege); its want
// field holds package net's documented answer.
var errNoHost = errors.New("host cannot run this case")

// class is what the comparison looks at: nil-ness, net.ErrClosed,
// os.ErrDeadlineExceeded with Timeout(), the errno, io.EOF, DNS not
// found, or "error" for anything else.
func class(err error) string {
	var (
		errno syscall.Errno
		dns   *net.DNSError
		ne    net.Error
	)
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, errTypedNil), errors.Is(err, errBlocked):
		return err.Error()
	case errors.Is(err, net.ErrClosed):
		return "net.ErrClosed"
	case errors.Is(err, os.ErrDeadlineExceeded):
		if !errors.As(err, &ne) || !ne.Timeout() {
			return "os.ErrDeadlineExceeded without Timeout()"
		}
		return "os.ErrDeadlineExceeded"
	case errors.As(err, &dns):
		return fmt.Sprintf("DNSError(notfound=%v, timeout=%v)", dns.IsNotFound, dns.IsTimeout)
	case errors.As(err, &errno):
		return "errno " + unix(errno)
	case err == io.EOF:
		return "io.EOF"
	}
	return "error"
}

func unix(e syscall.Errno) string {
	for _, n := range []struct {
		e syscall.Errno
		s string
	}{{syscall.ECONNREFUSED, "ECONNREFUSED"}, {syscall.ENETUNREACH, "ENETUNREACH"}, {syscall.EINVAL, "EINVAL"},
		{syscall.EADDRINUSE, "EADDRINUSE"}, {syscall.EADDRNOTAVAIL, "EADDRNOTAVAIL"}, {syscall.EACCES, "EACCES"},
		{syscall.ENOTCONN, "ENOTCONN"}, {syscall.EPIPE, "EPIPE"}, {syscall.EHOSTUNREACH, "EHOSTUNREACH"},
		{syscall.ETIMEDOUT, "ETIMEDOUT"}, {syscall.EAFNOSUPPORT, "EAFNOSUPPORT"}} {
		if n.e == e {
			return n.s
		}
	}
	return fmt.Sprintf("%d (%v)", int(e), e)
}

// nilIface checks that a failed call returned a nil interface.
func nilIface(v any, err error) error {
	if err != nil && v != nil {
		return fmt.Errorf("%w: %T", errTypedNil, v)
	}
	if err == nil {
		if c, ok := v.(io.Closer); ok {
			c.Close()
		}
	}
	return err
}

// quick runs f and reports errBlocked when it took longer than d (a
// call package net answers at once).
func quick(d time.Duration, f func() error) error {
	start := time.Now()
	err := f()
	if el := time.Since(start); el > d {
		return fmt.Errorf("%w for %v (%v)", errBlocked, el.Round(time.Millisecond), err)
	}
	return err
}

type compatCase struct {
	item int
	name string
	run  func(t *testing.T, sd *side) error
	// stack is the stack's class when it deliberately differs from
	// package net's ("" = same); why says why (docs/STACK.md).
	stack, why string
	// host is package net's documented class, used when the host cannot
	// run the case (errNoHost).
	host string
}

// greeter is the host's peer: it writes "ab" on accept, then echoes.
func greeter(t *testing.T) uint16 {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.Write([]byte("ab"))
				io.Copy(c, c)
			}()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// connTo dials the greeter and reads its first byte, so that one more
// byte is pending.
func connTo(t *testing.T, sd *side) net.Conn {
	c, err := sd.dial(ctxT(t, 10*time.Second), "tcp4", sd.peer4)
	if err != nil {
		t.Fatalf("%s: dial the greeter: %v", sd.name, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil || b[0] != 'a' {
		t.Fatalf("%s: greeting %q, %v", sd.name, b, err)
	}
	c.SetReadDeadline(time.Time{})
	return c
}

func udpSock(t *testing.T, sd *side) net.PacketConn {
	pc, err := sd.listenPacket("udp4", net.JoinHostPort(sd.own4, "0"))
	if err != nil {
		t.Fatalf("%s: %v", sd.name, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

func pingSock(t *testing.T, sd *side) (net.PacketConn, error) {
	pc, err := sd.listenPing()
	if err != nil {
		if errors.Is(err, syscall.EPERM) {
			return nil, errNoHost
		}
		t.Fatalf("%s: ping socket: %v", sd.name, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc, nil
}

var compatCases = []compatCase{
	// 1: a failed call returns a nil interface.
	{item: 1, name: "Accept on a closed listener returns a nil net.Conn", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return nilIface(l.Accept())
	}},
	{item: 1, name: "Listen on a foreign address returns a nil net.Listener", run: func(t *testing.T, sd *side) error {
		return nilIface(sd.listen("tcp4", net.JoinHostPort(sd.foreign4, "0")))
	}},
	{item: 1, name: "ListenPacket on a foreign address returns a nil net.PacketConn", run: func(t *testing.T, sd *side) error {
		return nilIface(sd.listenPacket("udp4", net.JoinHostPort(sd.foreign4, "0")))
	}},
	{item: 1, name: "Dial udp4 to an IPv6 address returns a nil net.Conn", run: func(t *testing.T, sd *side) error {
		return nilIface(sd.dial(ctxT(t, 5*time.Second), "udp4", "[2001:db8::1]:53"))
	}},
	{item: 1, name: "Dial ping to a loopback address returns a nil net.Conn", run: func(t *testing.T, sd *side) error {
		return nilIface(sd.dialPing(ctxT(t, 5*time.Second), false, "127.0.0.1"))
	}, stack: "errno ENETUNREACH", why: "no loopback interface on the stack; the host's ping to 127.0.0.1 succeeds"},

	// 2: a wrong address type is EINVAL, not a panic.
	{item: 2, name: "UDP WriteTo a *net.TCPAddr", run: func(t *testing.T, sd *side) error {
		_, err := udpSock(t, sd).WriteTo([]byte("x"), &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 9})
		return err
	}},
	{item: 2, name: "UDP WriteTo a *net.IPAddr", run: func(t *testing.T, sd *side) error {
		_, err := udpSock(t, sd).WriteTo([]byte("x"), &net.IPAddr{IP: net.IPv4(192, 0, 2, 1)})
		return err
	}},
	{item: 2, name: "UDP WriteTo a *net.UnixAddr", run: func(t *testing.T, sd *side) error {
		_, err := udpSock(t, sd).WriteTo([]byte("x"), &net.UnixAddr{Name: "/x", Net: "unix"})
		return err
	}},
	{item: 2, name: "UDP WriteTo a nil address", run: func(t *testing.T, sd *side) error {
		_, err := udpSock(t, sd).WriteTo([]byte("x"), nil)
		return err
	}},
	{item: 2, name: "ping WriteTo a *net.TCPAddr", host: "errno EINVAL", run: func(t *testing.T, sd *side) error {
		pc, err := pingSock(t, sd)
		if err != nil {
			return err
		}
		_, err = pc.WriteTo(echoRequest(), &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)})
		return err
	}},

	// 3: zero-length TCP reads return at once.
	{item: 3, name: "zero-length TCP Read with data pending", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		err := quick(time.Second, func() error { n, err := c.Read(nil); return nonZero(n, err) })
		b := make([]byte, 1)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil || b[0] != 'b' {
			t.Errorf("%s: the pending byte after a zero-length read: %q, %v", sd.name, b, err)
		}
		return err
	}},
	{item: 3, name: "zero-length TCP Read with nothing pending", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		b := make([]byte, 1)
		io.ReadFull(c, b)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		return quick(time.Second, func() error { n, err := c.Read([]byte{}); return nonZero(n, err) })
	}},

	// 4: deadlines are os.ErrDeadlineExceeded with Timeout().
	{item: 4, name: "TCP Read past its deadline", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		io.ReadFull(c, make([]byte, 1))
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 10))
		return err
	}},
	{item: 4, name: "TCP Write past its deadline", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		c.SetWriteDeadline(time.Now().Add(-time.Second))
		_, err := c.Write([]byte("x"))
		return err
	}},
	{item: 4, name: "UDP ReadFrom past its deadline", run: func(t *testing.T, sd *side) error {
		pc := udpSock(t, sd)
		pc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, _, err := pc.ReadFrom(make([]byte, 10))
		return err
	}},
	{item: 4, name: "UDP WriteTo past its deadline", run: func(t *testing.T, sd *side) error {
		pc := udpSock(t, sd)
		pc.SetWriteDeadline(time.Now().Add(-time.Second))
		_, err := pc.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 9})
		return err
	}},
	{item: 4, name: "ping ReadFrom past its deadline", host: "os.ErrDeadlineExceeded", run: func(t *testing.T, sd *side) error {
		pc, err := pingSock(t, sd)
		if err != nil {
			return err
		}
		pc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, _, err = pc.ReadFrom(make([]byte, 100))
		return err
	}},

	// 5: invalid names fail at once, not found.
	{item: 5, name: "lookup of a 70-byte label", run: func(t *testing.T, sd *side) error {
		return quick(time.Second, func() error {
			_, err := sd.lookup(ctxT(t, 20*time.Second), strings.Repeat("a", 70)+".example")
			return err
		})
	}},
	{item: 5, name: `lookup of "a..b"`, run: func(t *testing.T, sd *side) error {
		return quick(time.Second, func() error { _, err := sd.lookup(ctxT(t, 20*time.Second), "a..b"); return err })
	}},
	{item: 5, name: `lookup of ".."`, run: func(t *testing.T, sd *side) error {
		return quick(time.Second, func() error { _, err := sd.lookup(ctxT(t, 20*time.Second), ".."); return err })
	}},

	// 6: dials Linux answers at once.
	{item: 6, name: "dial 0.0.0.0:1 (Linux: itself, closed port)", run: dialQuick("tcp", "0.0.0.0:1")},
	{item: 6, name: "dial [::]:1 (Linux: itself, closed port)", run: dialQuick("tcp", "[::]:1")},
	{item: 6, name: "dial 127.0.0.1:1", run: dialQuick("tcp", "127.0.0.1:1")},
	{item: 6, name: "dial [::1]:1", run: dialQuick("tcp", "[::1]:1")},
	{item: 6, name: "dial 255.255.255.255:80", run: dialQuick("tcp", "255.255.255.255:80")},
	{item: 6, name: "dial 224.0.0.1:80", run: dialQuick("tcp", "224.0.0.1:80")},
	{item: 6, name: "dial [ff02::1]:80", run: dialQuick("tcp", "[ff02::1]:80")},
	{item: 6, name: "DialTCP with zero addresses", run: func(t *testing.T, sd *side) error {
		return quick(time.Second, func() error { return nilIface(sd.dialTCP(ctxT(t, 5*time.Second))) })
	}},

	// 7: wrong input is an error.
	{item: 7, name: `ping dial "[::1" (bracket not closed)`, run: func(t *testing.T, sd *side) error {
		return quick(time.Second, func() error { return nilIface(sd.dialPing(ctxT(t, 5*time.Second), true, "[::1")) })
	}},
	{item: 7, name: `Listen("tcp4", "[2001:db8:64::2]:0")`, run: func(t *testing.T, sd *side) error {
		return nilIface(sd.listen("tcp4", "[2001:db8:64::2]:0"))
	}},
	{item: 7, name: "Listen on an address that is not the side's", run: func(t *testing.T, sd *side) error {
		return nilIface(sd.listen("tcp", net.JoinHostPort(sd.foreign4, "0")))
	}},
	{item: 7, name: "UDP WriteTo a 3-byte IP", run: func(t *testing.T, sd *side) error {
		_, err := udpSock(t, sd).WriteTo([]byte("x"), &net.UDPAddr{IP: net.IP{192, 0, 2}, Port: 9})
		return err
	}},
	{item: 7, name: "UDP WriteTo a 20-byte IP", run: func(t *testing.T, sd *side) error {
		_, err := udpSock(t, sd).WriteTo([]byte("x"), &net.UDPAddr{IP: make(net.IP, 20), Port: 9})
		return err
	}},
	{item: 7, name: "ping4 WriteTo an IPv6 address", host: "error", run: func(t *testing.T, sd *side) error {
		pc, err := pingSock(t, sd)
		if err != nil {
			return err
		}
		_, err = pc.WriteTo(echoRequest(), &net.IPAddr{IP: net.ParseIP("2001:db8::1")})
		return err
	}},

	// 8: listeners and Close.
	{item: 8, name: "Accept on a closed listener", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		_, err = l.Accept()
		return err
	}},
	{item: 8, name: "Accept blocked when the listener closes", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		return closeWhileBlocked(func() { l.Close() }, func() error { _, err := l.Accept(); return err })
	}},
	{item: 8, name: "a wildcard and a specific listener on one port", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, port, _ := net.SplitHostPort(l.Addr().String())
		return nilIface(sd.listen("tcp", ":"+port))
	}},
	{item: 8, name: "a specific listener on a wildcard's port", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, port, _ := net.SplitHostPort(l.Addr().String())
		return nilIface(sd.listen("tcp4", net.JoinHostPort(sd.own4, port)))
	}},
	{item: 8, name: "listener deadline", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		dl, ok := l.(interface{ SetDeadline(time.Time) error })
		if !ok {
			return fmt.Errorf("%T has no SetDeadline", l)
		}
		dl.SetDeadline(time.Now().Add(50 * time.Millisecond))
		_, err = l.Accept()
		return err
	}},
	{item: 8, name: "listener Close twice", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return l.Close()
	}},
	{item: 8, name: "TCP conn Close twice", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		c.Close()
		return c.Close()
	}},
	{item: 8, name: "UDP Close twice", run: func(t *testing.T, sd *side) error {
		pc := udpSock(t, sd)
		pc.Close()
		return pc.Close()
	}},
	{item: 8, name: "ping Close twice", host: "net.ErrClosed", run: func(t *testing.T, sd *side) error {
		pc, err := pingSock(t, sd)
		if err != nil {
			return err
		}
		pc.Close()
		return pc.Close()
	}},
	{item: 8, name: "TCP Read after Close", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		c.Close()
		_, err := c.Read(make([]byte, 10))
		return err
	}},
	{item: 8, name: "TCP Write after Close", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		c.Close()
		_, err := c.Write([]byte("x"))
		return err
	}},
	{item: 8, name: "TCP Read blocked when the conn closes", run: func(t *testing.T, sd *side) error {
		c := connTo(t, sd)
		io.ReadFull(c, make([]byte, 1))
		return closeWhileBlocked(func() { c.Close() }, func() error { _, err := c.Read(make([]byte, 10)); return err })
	}},
	{item: 8, name: "UDP ReadFrom blocked when the socket closes", run: func(t *testing.T, sd *side) error {
		pc := udpSock(t, sd)
		return closeWhileBlocked(func() { pc.Close() }, func() error { _, _, err := pc.ReadFrom(make([]byte, 10)); return err })
	}},
	{item: 8, name: "UDP ReadFrom blocked when everything closes (stack: its Close)", run: func(t *testing.T, sd *side) error {
		pc := udpSock(t, sd)
		return closeWhileBlocked(func() { closeAll(sd, pc) }, func() error { _, _, err := pc.ReadFrom(make([]byte, 10)); return err })
	}},
	{item: 8, name: "Accept blocked when everything closes (stack: its Close)", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return closeWhileBlocked(func() { closeAll(sd, l) }, func() error { _, err := l.Accept(); return err })
	}},
	{item: 8, name: "Accept after everything closed (stack: its Close)", run: func(t *testing.T, sd *side) error {
		l, err := sd.listen("tcp4", net.JoinHostPort(sd.own4, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		closeAll(sd, l)
		return nilIface(l.Accept())
	}},
}

// closeAll ends c's side: the Stack's Close on the stack, c's Close on
// the host (which has no equivalent).
func closeAll(sd *side, c io.Closer) {
	if sd.closeAll != nil {
		sd.closeAll()
		return
	}
	c.Close()
}

// closeWhileBlocked runs call, and close once call is blocked (it is
// given time to block: close runs when call has not returned 50 ms
// later, which only lengthens the test on a loaded machine).
func closeWhileBlocked(close func(), call func() error) error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return fmt.Errorf("returned before the close: %w", err)
	case <-time.After(50 * time.Millisecond):
	}
	close()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%w: still blocked 10 s after the close", errBlocked)
	}
}

func nonZero(n int, err error) error {
	if n != 0 {
		return fmt.Errorf("zero-length read returned %d", n)
	}
	return err
}

func echoRequest() []byte { return []byte{8, 0, 0, 0, 0, 1, 0, 1, 'x'} }

func dialQuick(network, addr string) func(t *testing.T, sd *side) error {
	return func(t *testing.T, sd *side) error {
		return quick(time.Second, func() error { return nilIface(sd.dial(ctxT(t, 5*time.Second), network, addr)) })
	}
}

func hostSide(t *testing.T, greeterPort uint16) *side {
	var d net.Dialer
	return &side{
		name:         "net",
		dial:         d.DialContext,
		listen:       net.Listen,
		listenPacket: net.ListenPacket,
		listenPing:   func() (net.PacketConn, error) { return net.ListenPacket("ip4:icmp", "0.0.0.0") },
		dialPing: func(ctx context.Context, v6 bool, addr string) (net.Conn, error) {
			if v6 {
				return d.DialContext(ctx, "ip6:ipv6-icmp", addr)
			}
			return d.DialContext(ctx, "ip4:icmp", addr)
		},
		dialTCP: func(context.Context) (net.Conn, error) {
			c, err := net.DialTCP("tcp", nil, nil)
			if c == nil {
				return nil, err // *net.TCPConn, not the interface
			}
			return c, err
		},
		lookup: (&net.Resolver{PreferGo: true}).LookupHost,
		peer4:  netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), greeterPort).String(),
		own4:   "127.0.0.1", foreign4: "192.0.2.1",
	}
}

func stackSide(s *stack.Stack, greeterPort uint16) *side {
	return &side{
		name:         "stack",
		dial:         s.DialContext,
		listen:       s.Listen,
		listenPacket: s.ListenPacket,
		listenPing:   func() (net.PacketConn, error) { return s.ListenPacket("ping4", "") },
		dialPing: func(ctx context.Context, v6 bool, addr string) (net.Conn, error) {
			if v6 {
				return s.DialContext(ctx, "ping6", addr)
			}
			return s.DialContext(ctx, "ping4", addr)
		},
		dialTCP: func(ctx context.Context) (net.Conn, error) {
			c, err := s.DialTCP(ctx, netip.AddrPort{}, netip.AddrPort{})
			if c == nil {
				return nil, err
			}
			return c, err
		},
		lookup:   s.LookupHost,
		peer4:    netip.AddrPortFrom(simnet.TestAddr4, greeterPort).String(),
		own4:     simnet.DefaultCarrier().IPv4.Addr().String(),
		foreign4: "192.0.2.1",
		closeAll: s.Close,
	}
}

// gvisorLog collects what gVisor logs (the "Martian packet" warnings).
type gvisorLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (g *gvisorLog) Emit(depth int, level glog.Level, timestamp time.Time, format string, v ...any) {
	g.mu.Lock()
	fmt.Fprintf(&g.buf, format+"\n", v...)
	g.mu.Unlock()
}

func (g *gvisorLog) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

// TestNetCompat runs each call on package net (host loopback) and on the
// stack (emulated modem) and compares the error classes. Where the stack
// differs on purpose, the case says so (and docs/STACK.md lists it).
func TestNetCompat(t *testing.T) {
	port := greeter(t)
	host := hostSide(t, port)
	logged := &gvisorLog{}
	glog.SetTarget(logged)
	defer glog.SetTarget(glog.GoogleEmitter{Writer: &glog.Writer{Next: os.Stderr}})
	for _, tc := range compatCases {
		t.Run(fmt.Sprintf("%d/%s", tc.item, tc.name), func(t *testing.T) {
			hostErr := tc.run(t, host)
			want := class(hostErr)
			if errors.Is(hostErr, errNoHost) {
				want = tc.host
			}
			// A fresh rig per case: some close the stack.
			r := newRig(t, stack.Config{})
			stackErr := tc.run(t, stackSide(r.s, port))
			got := class(stackErr)
			expect := want
			if tc.stack != "" {
				expect = tc.stack
			}
			if got != expect {
				t.Errorf("net: %s (%v)\nstack: %s (%v), want %s", want, hostErr, got, stackErr, expect)
				return
			}
			t.Logf("net: %v\nstack: %v", hostErr, stackErr)
		})
	}
	if s := logged.String(); strings.Contains(s, "artian") {
		t.Errorf("gVisor logged martian packets:\n%s", s)
	}
}
