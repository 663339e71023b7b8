package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestSOCKS5ConnectRelaysToIPv4IPv6AndNames(t *testing.T) {
	r := newRig(t, nil)
	t4 := newTarget(t, "tcp4", "127.0.0.1:0", echo)
	t6 := newTarget(t, "tcp6", "[::1]:0", echo)
	for _, dst := range []string{
		t4.addr().String(),
		t6.addr().String(),
		"localhost.test:" + fmtPort(t4.port()),
		"v6only.test:" + fmtPort(t6.port()),
		"twoaddrs.test:" + fmtPort(t4.port()),
		"127.0.0.1:" + fmtPort(t4.port()), // a literal sent as ATYP 3
	} {
		t.Run(dst, func(t *testing.T) {
			c := r.client()
			if strings.HasPrefix(dst, "127.0.0.1:") {
				// The client would send an IP as ATYP 1; force ATYP 3.
				conn, _, err := c.handshake(context.Background(), cmdConnect, Addr{Name: "127.0.0.1", Port: t4.port()})
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				roundTrip(t, conn, []byte("literal"))
				return
			}
			conn, err := c.DialContext(context.Background(), "tcp", dst)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			roundTrip(t, conn, bytes.Repeat([]byte("x"), 100000))
		})
	}
	// Counters are added after each write returns, which the client may
	// see before the proxy goroutine does.
	waitFor(t, "byte counters", func() bool {
		s := r.srv.Stats()
		return s.SOCKSConnects == 6 && s.BytesUp >= 400014 && s.BytesDown >= 400014
	})
	asked := r.res.lookups()
	if asked != "localhost.test,v6only.test,twoaddrs.test" {
		t.Errorf("resolver asked %q", asked)
	}
}

func roundTrip(t testing.TB, c net.Conn, msg []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	expectBytes(t, c, msg)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestSOCKS5ConnectReportsWhyTheTargetFailed(t *testing.T) {
	r := newRig(t, nil)
	// A port that was just free refuses.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		dst  string
		want Reply
	}{
		{closed, ReplyConnectionRefused},
		{"nosuch.test:80", ReplyHostUnreachable},
	} {
		_, err := r.client().DialContext(context.Background(), "tcp", tc.dst)
		var re *ReplyError
		if !errors.As(err, &re) || re.Reply != tc.want {
			t.Errorf("CONNECT %s: %v, want reply %v", tc.dst, err, tc.want)
		}
	}
	if got := r.srv.Stats().DialErrors; got != 2 {
		t.Errorf("DialErrors = %d, want 2", got)
	}
}

func TestSOCKS5UsernamePasswordIsRequiredWhenConfigured(t *testing.T) {
	r := newRig(t, func(s *Server) { s.Credentials = CheckPassword("alice", "s3cret") })
	tg := newTarget(t, "tcp", "127.0.0.1:0", echo)

	c := &Client{Proxy: r.addr, User: "alice", Password: "s3cret"}
	conn, err := c.DialContext(context.Background(), "tcp", tg.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn, []byte("hi"))
	conn.Close()

	c.Password = "wrong"
	if _, err := c.DialContext(context.Background(), "tcp", tg.addr().String()); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("wrong password: %v", err)
	}
	// A client offering only "no authentication" is told no method fits.
	raw := r.raw()
	raw.Write([]byte{5, 1, 0})
	expectBytes(t, raw, []byte{5, 0xff})
	expectClosed(t, raw)
	if got := r.srv.Stats().AuthFailures; got != 2 {
		t.Errorf("AuthFailures = %d, want 2", got)
	}
}

func TestSOCKS5ClientOfferingOnlyUserPassIsLetInWithoutCredentialsConfigured(t *testing.T) {
	r := newRig(t, nil)
	tg := newTarget(t, "tcp", "127.0.0.1:0", echo)
	c := &Client{Proxy: r.addr, User: "any", Password: "thing"}
	conn, err := c.DialContext(context.Background(), "tcp", tg.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	roundTrip(t, conn, []byte("ok"))
}

// Every malformed or unsupported request gets the reply RFC 1928 gives
// for it, then the connection closes, and a log line says why.
func TestSOCKS5MalformedRequestsGetTheProtocolsErrorReply(t *testing.T) {
	r := newRig(t, nil)
	hello := []byte{5, 1, 0}
	for _, tc := range []struct {
		name  string
		send  []byte
		reply []byte
	}{
		{"no methods", []byte{5, 0}, []byte{5, 0xff}},
		{"no acceptable method", []byte{5, 2, 0x80, 0x81}, []byte{5, 0xff}},
		{"socks4", []byte{4, 1, 0, 80, 127, 0, 0, 1, 0}, []byte{0, 91, 0, 0, 0, 0, 0, 0}},
		{"request version", cat(hello, []byte{4, 1, 0, 1, 127, 0, 0, 1, 0, 80}), []byte{5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"reserved byte", cat(hello, []byte{5, 1, 9, 1, 127, 0, 0, 1, 0, 80}), []byte{5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"address type", cat(hello, []byte{5, 1, 0, 7, 127, 0, 0, 1, 0, 80}), []byte{5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"empty name", cat(hello, []byte{5, 1, 0, 3, 0, 0, 80}), []byte{5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"name with NUL", cat(hello, []byte{5, 1, 0, 3, 3, 'a', 0, 'b', 0, 80}), []byte{5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"BIND", cat(hello, []byte{5, 2, 0, 1, 127, 0, 0, 1, 0, 80}), []byte{5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"unknown command", cat(hello, []byte{5, 9, 0, 1, 127, 0, 0, 1, 0, 80}), []byte{5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"auth version", []byte{5, 1, 2, 9, 1, 'u', 1, 'p'}, []byte{5, 2, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := r.srv.Stats().BadRequests
			c := r.raw()
			c.Write(tc.send)
			expectBytes(t, c, tc.reply)
			expectClosed(t, c)
			if tc.name == "no acceptable method" {
				return // an auth failure, not a malformed request
			}
			waitFor(t, "BadRequests to grow", func() bool { return r.srv.Stats().BadRequests == before+1 })
		})
	}
	if !strings.Contains(r.logs.String(), "bad request") {
		t.Error("no log line for bad requests")
	}
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

func TestSOCKS5DataSentBeforeTheReplyReachesTheTarget(t *testing.T) {
	r := newRig(t, nil)
	tg := newTarget(t, "tcp", "127.0.0.1:0", echo)
	c := r.raw()
	ip := tg.addr().Addr().As4()
	p := tg.port()
	// Greeting, request and payload in one write, as optimistic clients do.
	c.Write(cat([]byte{5, 1, 0, 5, 1, 0, 1}, ip[:], []byte{byte(p >> 8), byte(p)}, []byte("early")))
	mustRead(t, c, 2+10)
	expectBytes(t, c, []byte("early"))
}

func TestSOCKS5HalfCloseDeliversTheWholeAnswer(t *testing.T) {
	r := newRig(t, nil)
	// The target reads until the client's FIN, then answers and closes:
	// a proxy that closed both ways on the first EOF would lose it.
	tg := newTarget(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		b, _ := io.ReadAll(c)
		c.Write(bytes.ToUpper(b))
	})
	conn, err := r.client().DialContext(context.Background(), "tcp", tg.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("request then FIN"))
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "REQUEST THEN FIN" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestHandshakeTimesOutOnPartialRequests(t *testing.T) {
	r := newRig(t, func(s *Server) { s.HandshakeTimeout = 150 * time.Millisecond })
	for _, partial := range [][]byte{
		{},                       // nothing at all
		{5},                      // half a greeting
		{5, 1, 0, 5, 1, 0, 3, 9}, // a name shorter than announced
		[]byte("GET http://x/ HTTP/1.1\r\nHost: x\r\n"), // never-ending head
	} {
		c := r.raw()
		c.Write(partial)
		start := time.Now()
		io.ReadAll(c)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%q: closed after %v", partial, d)
		}
	}
	waitFor(t, "4 handshake timeouts", func() bool { return r.srv.Stats().HandshakeTimeouts == 4 })
}

func TestConnectionLimitRefusesInTheClientsProtocol(t *testing.T) {
	r := newRig(t, func(s *Server) { s.MaxConns = 2 })
	tg := newTarget(t, "tcp", "127.0.0.1:0", echo)
	var held []net.Conn
	for range 2 {
		c, err := r.client().DialContext(context.Background(), "tcp", tg.addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	_, err := r.client().DialContext(context.Background(), "tcp", tg.addr().String())
	if err == nil || !strings.Contains(err.Error(), "method 0xff") {
		t.Errorf("third SOCKS client: %v, want no acceptable method", err)
	}
	h := r.raw()
	h.Write([]byte("CONNECT " + tg.addr().String() + " HTTP/1.1\r\n\r\n"))
	b, _ := io.ReadAll(h)
	if !strings.HasPrefix(string(b), "HTTP/1.1 503") {
		t.Errorf("third HTTP client got %q", b)
	}
	if got := r.srv.Stats().ConnsRejected; got != 2 {
		t.Errorf("ConnsRejected = %d", got)
	}
	// Once one ends, a new client gets in.
	held[0].Close()
	waitFor(t, "a free slot", func() bool { return r.srv.Stats().ConnsActive == 1 })
	c, err := r.client().DialContext(context.Background(), "tcp", tg.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestIdleRelayIsClosedButABusyOneIsNot(t *testing.T) {
	// The target streams slowly one way only, for longer than the idle
	// timeout: the relay must count data in either direction as
	// activity, then close once the stream stops. The target's pauses
	// are a fifth of the timeout; on a machine so loaded that one of
	// them stretched past half of it, the attempt proves nothing and
	// runs again.
	const (
		idle  = 500 * time.Millisecond
		gap   = 100 * time.Millisecond
		ticks = 10
	)
	for attempt := 1; ; attempt++ {
		slow, ok := idleRelayAttempt(t, idle, gap, ticks)
		if ok {
			return
		}
		if !slow || attempt == 3 {
			t.Fatalf("attempt %d failed (largest pause between the target's writes > %v: %v)", attempt, idle/2, slow)
		}
		t.Logf("attempt %d: a pause between the target's writes exceeded %v on this loaded machine; again", attempt, idle/2)
	}
}

// idleRelayAttempt runs one stream of ticks through a relay with the
// given idle timeout. ok reports a pass; slow, that the target itself
// paused longer than half the timeout between two writes.
func idleRelayAttempt(t *testing.T, idle, gap time.Duration, ticks int) (slow, ok bool) {
	r := newRig(t, func(s *Server) { s.IdleTimeout = idle })
	var maxGap atomic.Int64
	tg := newTarget(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		last := time.Now()
		for range ticks {
			if d := time.Since(last); d > time.Duration(maxGap.Load()) {
				maxGap.Store(int64(d))
			}
			if _, err := c.Write([]byte("tick")); err != nil {
				return
			}
			last = time.Now()
			time.Sleep(gap)
		}
		io.Copy(io.Discard, c)
	})
	conn, err := r.client().DialContext(context.Background(), "tcp", tg.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, _ := io.ReadAll(conn)
	d := time.Since(start)
	slow = time.Duration(maxGap.Load()) > idle/2
	if string(got) != strings.Repeat("tick", ticks) {
		t.Logf("got %q", got)
		return slow, false
	}
	if stream := time.Duration(ticks-1) * gap; d < stream+idle/2 || d > 20*time.Second {
		t.Logf("closed after %v; want the stream (%v) plus about the idle timeout (%v)", d, stream, idle)
		return slow, false
	}
	return slow, true
}

func TestCloseEndsActiveRelaysAndAssociations(t *testing.T) {
	r := newRig(t, nil)
	tg := newTarget(t, "tcp", "127.0.0.1:0", echo)
	conn, err := r.client().DialContext(context.Background(), "tcp", tg.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	u, err := r.client().ListenUDP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	idle := r.raw()
	idle.Write([]byte{5}) // mid-handshake
	r.srv.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("relay still open after Close")
	}
	if s := r.srv.Stats(); s.ConnsActive != 0 || s.UDPAssociationsActive != 0 {
		t.Errorf("after Close: %+v", s)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := r.srv.Serve(ln); err != ErrServerClosed {
		t.Errorf("Serve after Close: %v", err)
	}
}

// A target connection that fails (here reset; through the stack, aborted
// because the session's address went away) resets the client's: the
// client sees an error, not an end of stream like a finished answer.
func TestSOCKS5TargetFailureResetsTheClient(t *testing.T) {
	r := newRig(t, nil)
	tg := newTarget(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		c.Read(make([]byte, 1))
		c.(*net.TCPConn).SetLinger(0)
	})
	conn, err := r.client().DialContext(context.Background(), "tcp", tg.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("x"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the target's reset: %d, %v; want ECONNRESET", n, err)
	}
}

func TestServerSurvivesAPanickingDialer(t *testing.T) {
	r := newRig(t, func(s *Server) {
		s.Dialer = DialerFunc(func(ctx context.Context, network, address string) (net.Conn, error) {
			panic("dialer bug")
		})
	})
	_, err := r.client().DialContext(context.Background(), "tcp", "127.0.0.1:9")
	if err == nil {
		t.Fatal("want an error")
	}
	if !strings.Contains(r.logs.String(), "panic") {
		t.Error("panic not logged")
	}
	_ = netip.Addr{}
}
