package stack_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// acceptOne accepts one connection from l in the background.
func acceptOne(l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	return ch
}

// pipeVia dials with dial and pairs the result with what l accepts.
func pipeVia(l net.Listener, dial func(ctx context.Context) (net.Conn, error)) (net.Conn, net.Conn, func(), error) {
	acc := acceptOne(l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c1, err := dial(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var c2 net.Conn
	select {
	case c2 = <-acc:
	case <-ctx.Done():
	}
	if c2 == nil {
		c1.Close()
		return nil, nil, nil, io.ErrUnexpectedEOF
	}
	return c1, c2, func() { c1.Close(); c2.Close() }, nil
}

// acceptedFirst puts pipeVia's accepted end first: nettest.TestConn
// exercises its first conn (deadlines, racy reads, writes and closes, the
// close of a blocked read) and uses the second as the peer.
func acceptedFirst(dialed, accepted net.Conn, stop func(), err error) (net.Conn, net.Conn, func(), error) {
	return accepted, dialed, stop, err
}

// hostRelay is a host TCP listener on 127.0.0.1 whose connections are
// relayed through the carrier network to to (the host's way into the
// stack: the carrier's network is where the modem's peers live). A
// side's close or half-close is passed on.
func hostRelay(t *testing.T, cn *simnet.CarrierNetwork, to netip.AddrPort) netip.AddrPort {
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
			hc, err := l.Accept()
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			mc, err := cn.Dial(ctx, "tcp", to)
			cancel()
			if err != nil {
				hc.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				relayBoth(hc, mc)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// relayBoth copies a to b and b to a, passing each end of stream on as
// a half-close, and closes both when both directions are done.
func relayBoth(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// TestNettestConn runs golang.org/x/net/nettest.TestConn over every pipe
// the stack makes: stack → host over IPv4 and IPv6, host → stack, the
// stack to its own listener, and one stack to another (through the host).
// TestConn puts its first conn through the tests and uses the second as
// the peer, so a conn the stack accepted is first where the stack
// accepts: host-to-stack (the host's conn would test only the kernel),
// stack-local in both orders, and stack-to-stack.
func TestNettestConn(t *testing.T) {
	t.Run("stack-to-host-v4", func(t *testing.T) {
		r := newRig(t, stack.Config{})
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		to := netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)).String()
		nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
			return pipeVia(l, func(ctx context.Context) (net.Conn, error) { return r.s.DialContext(ctx, "tcp", to) })
		})
	})
	t.Run("stack-to-host-v6", func(t *testing.T) {
		r := newRig(t, stack.Config{})
		l, err := net.Listen("tcp6", "[::1]:0")
		if err != nil {
			t.Skipf("no IPv6 loopback on the host: %v", err)
		}
		defer l.Close()
		to := netip.AddrPortFrom(simnet.TestAddr6, uint16(l.Addr().(*net.TCPAddr).Port)).String()
		nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
			return pipeVia(l, func(ctx context.Context) (net.Conn, error) { return r.s.DialContext(ctx, "tcp6", to) })
		})
	})
	t.Run("host-to-stack", func(t *testing.T) {
		r := newRig(t, stack.Config{})
		l, err := r.s.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := uint16(l.Addr().(*net.TCPAddr).Port)
		relay := hostRelay(t, r.cn, netip.AddrPortFrom(simnet.DefaultCarrier().IPv4.Addr(), port))
		var d net.Dialer
		nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
			return acceptedFirst(pipeVia(l, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", relay.String()) }))
		})
	})
	t.Run("stack-local", func(t *testing.T) {
		r := newRig(t, stack.Config{})
		l, err := r.s.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		to := netip.AddrPortFrom(simnet.DefaultCarrier().IPv4.Addr(), uint16(l.Addr().(*net.TCPAddr).Port)).String()
		dial := func(ctx context.Context) (net.Conn, error) { return r.s.DialContext(ctx, "tcp", to) }
		t.Run("dialed-first", func(t *testing.T) {
			nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) { return pipeVia(l, dial) })
		})
		t.Run("accepted-first", func(t *testing.T) {
			nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) { return acceptedFirst(pipeVia(l, dial)) })
		})
	})
	t.Run("stack-to-stack", func(t *testing.T) {
		// Two modems, each with its carrier network; B reaches A's
		// listener through the host (a relay on 127.0.0.1 into A's
		// carrier).
		a := newRig(t, stack.Config{})
		b := newRig(t, stack.Config{})
		l, err := a.s.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		relay := hostRelay(t, a.cn, netip.AddrPortFrom(simnet.DefaultCarrier().IPv4.Addr(), uint16(l.Addr().(*net.TCPAddr).Port)))
		to := netip.AddrPortFrom(simnet.TestAddr4, relay.Port()).String()
		nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
			return acceptedFirst(pipeVia(l, func(ctx context.Context) (net.Conn, error) { return b.s.DialContext(ctx, "tcp", to) }))
		})
	})
}
