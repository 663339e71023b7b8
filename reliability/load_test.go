package reliability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/stack"
	"github.com/mhistack/mhistack/stack/proxy"
)

var (
	loadConns = flagInt("load.conns", 200, 50, "concurrent proxied connections in TestLoadConcurrentProxiedConnections (the full run: 1000)")
	loadBytes = sizeFlag("load.bytes", 1<<20, "bytes each connection of TestLoadConcurrentProxiedConnections moves")
	loadIdle  = flagInt("load.idle", 1000, 200, "idle proxied connections in TestLoadIdleConnectionsMemory (the full run: 10000)")
)

// TestLoadConcurrentProxiedConnections is the load test: many clients at
// once, each with its own proxied connection through the modem moving
// -load.bytes of its own pseudo-random stream (half of them download over
// SOCKS5, half upload over HTTP CONNECT), every stream checked by
// SHA-256. Counts are asserted, times reported.
func TestLoadConcurrentProxiedConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	n := *loadConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv := newStreamServer(t, nil)
	// The stack bounds handshakes in flight (default 256; beyond it a
	// dial fails at once and the proxy answers REP 1 / 502): all n
	// clients dial at the same moment here.
	p := openPipelineWith(t, stack.Config{Limits: stack.Limits{MaxInFlightDials: n}}, nil)

	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr sync.Once
	var slowest atomic.Int64
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			t0 := time.Now()
			err := func() error {
				s := &stream{n: int64(*loadBytes), seed: uint64(1000 + i)}
				if i%2 == 0 {
					c, err := p.dialSOCKS(ctx, srv.addr())
					if err != nil {
						return fmt.Errorf("SOCKS5 CONNECT: %w", err)
					}
					defer c.Close()
					return download(c, s)
				}
				c, err := p.dialHTTP(ctx, srv.addr())
				if err != nil {
					return fmt.Errorf("HTTP CONNECT: %w", err)
				}
				defer c.Close()
				return upload(c, s, nil)
			}()
			if err != nil {
				failed.Add(1)
				firstErr.Do(func() { t.Errorf("connection %d: %v", i, err) })
				return
			}
			if d := int64(time.Since(t0)); d > slowest.Load() {
				slowest.Store(d)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	ps, ss := p.srv.Stats(), p.st.Stats()
	t.Logf("%d connections × %d KiB (half SOCKS5 down, half HTTP CONNECT up): %d failed; %v in all (%.0f MB/s aggregate), slowest connection %v; proxy: %d accepted, %d rejected, %d dial errors; stack: %d TCP retransmits, %d timeouts",
		n, *loadBytes>>10, failed.Load(), el.Round(time.Millisecond), float64(int64(n)*int64(*loadBytes))/el.Seconds()/1e6,
		time.Duration(slowest.Load()).Round(time.Millisecond), ps.ConnsAccepted, ps.ConnsRejected, ps.DialErrors, ss.TCPRetransmits, ss.TCPTimeouts)
	if failed.Load() != 0 {
		t.Fatalf("%d of %d connections failed", failed.Load(), n)
	}
	if ps.ConnsAccepted != uint64(n) || ps.ConnsRejected != 0 {
		t.Errorf("proxy accepted %d and rejected %d, want %d and 0", ps.ConnsAccepted, ps.ConnsRejected, n)
	}
}

// TestLoadIdleConnectionsMemory holds -load.idle proxied connections
// open through the modem with nothing moving and reports the memory and
// goroutines each one costs the process: proxy, stack, link, and the
// emulated carrier network and host servers, which are in the same
// process. The clients reach the proxy over in-memory pipes, so that the
// process's file descriptors (2 per connection on the carrier's host
// side) are what bounds the count. Every connection is checked to work
// after the hold.
func TestLoadIdleConnectionsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	n := *loadIdle
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		if max := (int(rl.Cur) - 500) / 2; n > max {
			t.Logf("RLIMIT_NOFILE %d allows %d idle connections (2 descriptors each), not %d", rl.Cur, max, n)
			n = max
		}
	}
	// A plain copy loop: io.Copy between TCP sockets splices through a
	// pipe, two more descriptors per connection.
	echo := newHostServer(t, func(c net.Conn) {
		io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 512))
	})
	// Both the stack (8192 TCP connections) and the proxy (4096 clients)
	// bound what they hold by default; the full run needs more.
	p := openPipelineWith(t, stack.Config{Limits: stack.Limits{MaxTCPConns: n + 100}},
		func(s *proxy.Server) { s.MaxConns = n + 100 })
	pl := newPipeListener()
	go p.srv.Serve(pl)

	client := &proxy.Client{Proxy: "pipe", Dialer: proxy.DialerFunc(func(ctx context.Context, _, _ string) (net.Conn, error) {
		return pl.dial(ctx)
	})}
	// Warm up (pools, the stack's first connections), then measure.
	for range 16 {
		c, err := client.DialContext(context.Background(), "tcp", echo.addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	settle(5*time.Second, func() bool { return p.srv.Stats().ConnsActive == 0 })
	before := heapAndStacks()
	g0 := runtime.NumGoroutine()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	// Dial in waves: the stack bounds handshakes in flight (256).
	sem := make(chan struct{}, 128)
	var mu sync.Mutex
	var dialErr error
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, err := client.DialContext(ctx, "tcp", echo.addr().String())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if dialErr == nil {
					dialErr = err
				}
				return
			}
			conns = append(conns, c)
		})
	}
	wg.Wait()
	if dialErr != nil {
		t.Fatalf("%d of %d connections open (%d file descriptors in use); first error: %v; carrier log:\n%s", len(conns), n, openFDs(t), dialErr, p.carrierLog)
	}
	opened := time.Since(start)
	time.Sleep(time.Second) // handshakes and buffers settle
	after := heapAndStacks()
	g1 := runtime.NumGoroutine()
	per := float64(int64(after)-int64(before)) / float64(n)
	t.Logf("%d idle proxied connections opened in %v: %.1f KiB heap+stacks each (%.0f MiB in all), %.1f goroutines each",
		n, opened.Round(time.Millisecond), per/1024, per*float64(n)/(1<<20), float64(g1-g0)/float64(n))

	// Every connection still works: one byte there and back on each.
	var bad atomic.Int64
	for i := 0; i < len(conns); i += 64 {
		var wg sync.WaitGroup
		for _, c := range conns[i:min(i+64, len(conns))] {
			wg.Go(func() {
				c.SetDeadline(time.Now().Add(30 * time.Second))
				var b [1]byte
				if _, err := c.Write([]byte{'x'}); err != nil {
					bad.Add(1)
					return
				}
				if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'x' {
					bad.Add(1)
				}
			})
		}
		wg.Wait()
	}
	if bad.Load() != 0 {
		t.Errorf("%d of %d idle connections failed their echo after the hold", bad.Load(), n)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if !settle(30*time.Second, func() bool { return p.srv.Stats().ConnsActive == 0 }) {
		t.Errorf("%d proxy connections still active after the clients closed", p.srv.Stats().ConnsActive)
	}
}

// heapAndStacks is the live heap plus goroutine stacks after two GCs
// (sync.Pool keeps what it holds through one: the buffers of an earlier
// test would otherwise be freed during the measurement).
func heapAndStacks() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// pipeListener is a net.Listener of in-memory connections.
type pipeListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case l.ch <- b:
		return a, nil
	case <-l.closed:
		return nil, errors.New("pipe listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
