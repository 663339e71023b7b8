package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// countingOrigin is an HTTP origin that counts the connections it
// accepted and closed; handler may be nil (it answers "ok").
type countingOrigin struct {
	*httptest.Server
	accepted, closed atomic.Int64
}

func newCountingOrigin(t testing.TB, handler http.HandlerFunc) *countingOrigin {
	t.Helper()
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	}
	o := &countingOrigin{}
	o.Server = httptest.NewUnstartedServer(handler)
	o.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			o.accepted.Add(1)
		case http.StateClosed, http.StateHijacked:
			o.closed.Add(1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	return o
}

func TestPoolSequentialKeepAliveRequestsUseOneOriginConnection(t *testing.T) {
	r := newRig(t, nil)
	o := newCountingOrigin(t, nil)
	c := proxiedClient(t, r.addr, nil)
	const n = 20
	for range n {
		if code, body := get(t, c, "GET", o.URL+"/", ""); code != 200 || body != "ok" {
			t.Fatalf("got %d %q", code, body)
		}
	}
	if got := o.accepted.Load(); got != 1 {
		t.Errorf("origin accepted %d connections for %d sequential requests, want 1", got, n)
	}
	s := r.srv.Stats()
	if s.HTTPPoolMisses != 1 || s.HTTPPoolHits != n-1 || s.ConnsAccepted != 1 {
		t.Errorf("want 1 pool miss, %d hits, 1 client connection: %+v", n-1, s)
	}
}

func TestPoolOffDialsPerRequest(t *testing.T) {
	r := newRig(t, func(s *Server) { s.MaxIdleConnsPerOrigin = -1 })
	o := newCountingOrigin(t, nil)
	c := proxiedClient(t, r.addr, nil)
	for range 3 {
		get(t, c, "GET", o.URL+"/", "")
	}
	if got := o.accepted.Load(); got != 3 {
		t.Errorf("without a pool the origin accepted %d connections for 3 requests, want 3", got)
	}
}

// parallelGets sends n requests at once, each on its own client
// connection to the proxy, and waits for their answers.
func parallelGets(t *testing.T, proxyAddr, u string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := proxiedClient(t, proxyAddr, nil)
			c.Transport.(*http.Transport).DisableKeepAlives = true
			req, _ := http.NewRequest("GET", u, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("GET %s: %v", u, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
}

func TestPoolHonoursMaxConnsPerOrigin(t *testing.T) {
	r := newRig(t, func(s *Server) { s.MaxConnsPerOrigin = 2 })
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	o := newCountingOrigin(t, func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
	})
	done := make(chan struct{})
	go func() { defer close(done); parallelGets(t, r.addr, o.URL+"/", 5) }()
	waitFor(t, "two requests at the origin", func() bool { return inFlight.Load() == 2 })
	for range 5 {
		release <- struct{}{}
	}
	<-done
	if m, a := most.Load(), o.accepted.Load(); m != 2 || a > 2 {
		t.Errorf("MaxConnsPerOrigin 2: %d requests at the origin at once, %d connections accepted", m, a)
	}
}

func TestPoolHonoursMaxIdleConnsPerOrigin(t *testing.T) {
	r := newRig(t, func(s *Server) { s.MaxIdleConnsPerOrigin = 1 })
	var arrived sync.WaitGroup
	arrived.Add(3)
	gate := make(chan struct{})
	first := atomic.Int64{}
	o := newCountingOrigin(t, func(w http.ResponseWriter, _ *http.Request) {
		if first.Add(1) <= 3 {
			arrived.Done()
			<-gate
		}
		io.WriteString(w, "ok")
	})
	done := make(chan struct{})
	go func() { defer close(done); parallelGets(t, r.addr, o.URL+"/", 3) }()
	arrived.Wait() // three origin connections at once
	close(gate)
	<-done
	waitFor(t, "the pool to close the idle connections beyond one", func() bool { return o.closed.Load() == 2 })
	parallelGets(t, r.addr, o.URL+"/", 1)
	if a, c := o.accepted.Load(), o.closed.Load(); a != 3 || c != 2 {
		t.Errorf("MaxIdleConnsPerOrigin 1: %d accepted, %d closed; want the kept one reused (3, 2)", a, c)
	}
	if s := r.srv.Stats(); s.HTTPPoolHits != 1 || s.HTTPPoolMisses != 3 {
		t.Errorf("want 3 misses and 1 hit: %+v", s)
	}
}

// TestPoolKeepsEveryConnectionOfABurst: by default the connections that
// one burst of parallel requests opened all serve the next burst; none is
// closed for being over an idle limit and dialed again.
func TestPoolKeepsEveryConnectionOfABurst(t *testing.T) {
	const burst = 32 // more than net/http's and the old default idle limits
	r := newRig(t, nil)
	var gate atomic.Pointer[sync.WaitGroup]
	o := newCountingOrigin(t, func(w http.ResponseWriter, _ *http.Request) {
		if g := gate.Load(); g != nil {
			g.Done()
			g.Wait() // every request of the burst is at the origin at once
		}
		io.WriteString(w, "ok")
	})
	for range 2 {
		var g sync.WaitGroup
		g.Add(burst)
		gate.Store(&g)
		parallelGets(t, r.addr, o.URL+"/", burst)
	}
	if a, c := o.accepted.Load(), o.closed.Load(); a != burst || c != 0 {
		t.Errorf("two bursts of %d: the origin accepted %d connections and saw %d closed; want %d and 0", burst, a, c, burst)
	}
	if s := r.srv.Stats(); s.HTTPPoolMisses != burst || s.HTTPPoolHits != burst {
		t.Errorf("want %d misses (the first burst) and %d hits (the second): %+v", burst, burst, s)
	}
}

func TestForwardStripsHopByHopHeaders(t *testing.T) {
	r := newRig(t, nil)
	o := newCountingOrigin(t, func(w http.ResponseWriter, req *http.Request) {
		var names []string
		for k := range req.Header {
			names = append(names, k)
		}
		w.Header().Set("Connection", "X-Origin-Hop")
		w.Header().Set("X-Origin-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-End", "kept")
		fmt.Fprintf(w, "%d %s", len(names), strings.Join(names, ","))
	})
	c := r.raw()
	fmt.Fprintf(c, "GET %s/ HTTP/1.1\r\nHost: %s\r\nConnection: X-Client-Hop, keep-alive\r\nX-Client-Hop: 1\r\n"+
		"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nTrailer: X-T\r\nUpgrade: websocket\r\n"+
		"X-End-To-End: 1\r\n\r\n", o.URL, o.Listener.Addr())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, h := range []string{"X-Client-Hop", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade", "Connection"} {
		if strings.Contains(string(body), h) {
			t.Errorf("origin got hop-by-hop %s: %s", h, body)
		}
	}
	if !strings.Contains(string(body), "X-End-To-End") {
		t.Errorf("origin did not get X-End-To-End: %s", body)
	}
	if resp.Header.Get("X-Origin-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-End") != "kept" {
		t.Errorf("response headers: %v", resp.Header)
	}
}

func TestForwardToDeadOriginGets502(t *testing.T) {
	r := newRig(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := proxiedClient(t, r.addr, nil)
	code, body := get(t, c, "GET", "http://"+dead+"/", "")
	if code != http.StatusBadGateway || !strings.Contains(body, "refused") {
		t.Errorf("dead origin: %d %q, want 502 naming the refusal", code, body)
	}
	if s := r.srv.Stats(); s.DialErrors != 1 {
		t.Errorf("DialErrors %d, want 1", s.DialErrors)
	}
}

// TestPoolClosedWithServer: the pool's connections and their
// goroutines end with Server.Close.
func TestPoolClosedWithServer(t *testing.T) {
	before := goleak.IgnoreCurrent()
	o := newCountingOrigin(t, nil)
	r := newRig(t, nil)
	c := proxiedClient(t, r.addr, nil)
	get(t, c, "GET", o.URL+"/", "")
	c.Transport.(*http.Transport).CloseIdleConnections()
	r.srv.Close()
	waitFor(t, "the origin to see the pooled connection closed", func() bool { return o.closed.Load() == 1 })
	o.Close()
	goleak.VerifyNone(t, before)
}

// TestForwardEndsTheClientConnectionWhenTheOriginAnswersBeforeTheBody:
// the rest of an unread body must not be taken for the client's next
// request, nor may the proxy wait for it.
func TestForwardEndsTheClientConnectionWhenTheOriginAnswersBeforeTheBody(t *testing.T) {
	r := newRig(t, nil)
	o := newCountingOrigin(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	})
	c := r.raw()
	fmt.Fprintf(c, "POST %s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000000\r\n\r\nthe start", o.URL, o.Listener.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
	if rest, err := io.ReadAll(br); err != nil && !strings.Contains(err.Error(), "reset") || len(rest) > 0 {
		t.Errorf("want the proxy to close the client connection; got %q, %v", rest, err)
	}
}

// writeCounter is a listener whose connections count their writes (a
// write is counted before it is made: once the peer has read everything,
// every write has been counted).
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{c, &l.writes}, nil
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestForwardSendsAResponseThatHasArrivedInOneWrite: a response whose
// head and body are already queued on the origin connection goes to the
// client in one write, not one per read of the origin.
func TestForwardSendsAResponseThatHasArrivedInOneWrite(t *testing.T) {
	r := newRig(t, nil)
	const size = 16 << 10
	resp := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("b", size))
	origin := newTarget(t, "tcp", "127.0.0.1:0", answerEach(resp)) // the whole response in one write
	wc, c := serveCountingWrites(t, r)
	br := bufio.NewReader(c)
	for i := range 3 {
		before := wc.writes.Load()
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %[1]s\r\n\r\n", origin.addr())
		got, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, got.Body)
		got.Body.Close()
		if err != nil || n != size {
			t.Fatalf("response %d: %d bytes, %v; want %d", i, n, err, size)
		}
		if w := wc.writes.Load() - before; w != 1 {
			t.Errorf("response %d (head and %d bytes, all queued at the proxy): %d writes to the client, want 1", i, size, w)
		}
	}
}

// bulkOrigin is an origin connection that answers the first request it
// is sent with a head and a body whose every read fills the buffer it is
// given (a download always ahead of the proxy); then it waits for Close.
type bulkOrigin struct {
	bulkSource
	head               string
	asked, closed      chan struct{}
	askOnce, closeOnce sync.Once
}

func newBulkOrigin(size int) *bulkOrigin {
	return &bulkOrigin{bulkSource: bulkSource{size: size}, asked: make(chan struct{}), closed: make(chan struct{}),
		head: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)}
}

func (o *bulkOrigin) Read(p []byte) (int, error) {
	select {
	case <-o.asked:
	case <-o.closed:
		return 0, io.EOF
	}
	if o.head != "" {
		n := copy(p, o.head)
		o.head = o.head[n:]
		return n, nil
	}
	if o.size > 0 {
		return o.bulkSource.Read(p)
	}
	<-o.closed
	return 0, io.EOF
}

func (o *bulkOrigin) Write(p []byte) (int, error) {
	o.askOnce.Do(func() { close(o.asked) })
	return len(p), nil
}

func (o *bulkOrigin) Close() error {
	o.closeOnce.Do(func() { close(o.closed) })
	return nil
}

// aheadOrigin is a bulkOrigin that says its bytes are queued (Buffered,
// as the stack's TCPConn does): a download always ahead of the proxy.
type aheadOrigin struct{ *bulkOrigin }

func (aheadOrigin) Buffered() int { return 1 }

// TestForwardMovesALargeBodyInLargePieces: a large response body is
// copied in bulkBufSize pieces, not in net/http's 32 KiB ones; when the
// origin's bytes are queued (readable) the head goes out with the first
// piece of the body, else alone before the proxy waits for the body.
func TestForwardMovesALargeBodyInLargePieces(t *testing.T) {
	const size = 1<<20 - 64<<10 // 7.5 bulk buffers
	for _, ahead := range []bool{true, false} {
		o := newBulkOrigin(size)
		head := len(o.head)
		var origin net.Conn = o
		// The head with the body: ceil((size+head)/bulkBufSize)
		// writes; the head alone, then ceil(size/bulkBufSize).
		want := (size + head + bulkBufSize - 1) / bulkBufSize
		if ahead {
			origin = aheadOrigin{o}
		} else {
			want = 1 + (size+bulkBufSize-1)/bulkBufSize
		}
		r := newRig(t, func(s *Server) {
			s.Dialer = DialerFunc(func(context.Context, string, string) (net.Conn, error) { return origin, nil })
		})
		wc, c := serveCountingWrites(t, r)
		fmt.Fprintf(c, "GET http://192.0.2.1/big HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != size {
			t.Fatalf("ahead %v: body: %d bytes, %v; want %d", ahead, n, err, size)
		}
		if w := wc.writes.Load(); w != int64(want) {
			t.Errorf("ahead %v: a %d-byte body with a %d-byte head reached the client in %d writes, want %d; the origin's reads: %v",
				ahead, size, head, w, want, o.reads)
		}
	}
}

// serveCountingWrites serves r's proxy on a loopback listener whose
// connections count their writes, and returns the counter and a client
// connection to it (10 s deadline). The test's cleanup stops the server.
func serveCountingWrites(t *testing.T, r *rig) (*writeCounter, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wc := &writeCounter{Listener: ln}
	served := make(chan error, 1)
	go func() { served <- r.srv.Serve(wc) }()
	t.Cleanup(func() { r.srv.Close(); <-served })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return wc, c
}
