package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeResolver answers from a table and records what it was asked: the
// proxy's only source of names, standing in for the modem's DNS.
type fakeResolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
	asked []string
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if ips, ok := r.names[host]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// lookups returns the names asked so far, comma-separated.
func (r *fakeResolver) lookups() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.asked, ",")
}

// ipOnlyDialer is the standard library's dialer, refusing names: a name
// reaching it would be resolved by the host, which the proxy must never
// cause.
type ipOnlyDialer struct {
	t testing.TB
	d net.Dialer
}

func (d *ipOnlyDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(address); err != nil {
		d.t.Errorf("dialer got %q, not an IP:port: the proxy let a name through to the host", address)
		return nil, err
	}
	return d.d.DialContext(ctx, network, address)
}

// rig is a proxy on 127.0.0.1 over the standard library's network.
type rig struct {
	t    testing.TB
	srv  *Server
	addr string
	res  *fakeResolver
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newRig(t testing.TB, configure func(*Server)) *rig {
	t.Helper()
	r := &rig{t: t, res: &fakeResolver{names: map[string][]netip.Addr{
		"localhost.test": {netip.MustParseAddr("127.0.0.1")},
		"v6only.test":    {netip.MustParseAddr("::1")},
		// The first address refuses; the proxy must go on to the next.
		"twoaddrs.test": {netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")},
	}}, logs: &syncBuffer{}}
	r.srv = &Server{
		Dialer:         &ipOnlyDialer{t: t},
		Resolver:       r.res,
		PacketListener: &net.ListenConfig{},
		Logger:         slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if configure != nil {
		configure(r.srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- r.srv.Serve(ln) }()
	t.Cleanup(func() {
		r.srv.Close()
		if err := <-done; err != ErrServerClosed {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		if t.Failed() {
			t.Logf("proxy log:\n%s", r.logs.String())
		}
	})
	return r
}

func (r *rig) client() *Client { return &Client{Proxy: r.addr} }

// raw opens a plain TCP connection to the proxy for wire-level tests.
func (r *rig) raw() net.Conn {
	r.t.Helper()
	c, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r.t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds or a few seconds pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// target is a TCP server for the proxy to reach, with a handler per
// connection; Close waits for the handlers.
type target struct {
	ln net.Listener
	wg sync.WaitGroup
}

func newTarget(t testing.TB, network, addr string, handle func(net.Conn)) *target {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln}
	tg.wg.Add(1)
	go func() {
		defer tg.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.wg.Add(1)
			go func() {
				defer tg.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); tg.wg.Wait() })
	return tg
}

func (tg *target) addr() netip.AddrPort { return tg.ln.Addr().(*net.TCPAddr).AddrPort() }
func (tg *target) port() uint16         { return tg.addr().Port() }

func echo(c net.Conn) { io.Copy(c, c) }

// answerEach is an origin's handler that reads the requests on its
// connection one after another, drops their bodies and answers each with
// resp in one write.
func answerEach(resp string) func(net.Conn) {
	return func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	}
}

// udpEcho answers each datagram with "echo:" and the payload.
func udpEcho(t testing.TB, network, addr string) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc
}

func mustRead(t testing.TB, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return b
}

func expectBytes(t testing.TB, r io.Reader, want []byte) {
	t.Helper()
	got := mustRead(t, r, len(want))
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x", got, want)
	}
}

func expectClosed(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("want the proxy to close, got %v after %q", err, b)
	}
}

func hostPort(ap netip.AddrPort) string { return ap.String() }

func fmtPort(p uint16) string { return fmt.Sprint(p) }
