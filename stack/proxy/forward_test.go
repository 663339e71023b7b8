package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scriptedOrigin is a hand-written HTTP/1.1 origin: it reads each
// request with http.ReadRequest and lets answer write the response bytes
// itself (and read the body, or not). answer reports whether to go on
// reading requests on the connection; conn counts connections from 0.
type scriptedOrigin struct {
	*target
	accepted, done atomic.Int64
	mu             sync.Mutex
	seen           []seenRequest
	conns          map[net.Conn]bool
}

type seenRequest struct {
	conn   int
	line   string // method, request-target and version as received
	host   string
	header http.Header
}

type answerFunc func(conn int, req *http.Request, c net.Conn) (more bool)

func newScriptedOrigin(t *testing.T, answer answerFunc) *scriptedOrigin {
	o := &scriptedOrigin{conns: make(map[net.Conn]bool)}
	o.target = newTarget(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		o.mu.Lock()
		o.conns[c] = true
		o.mu.Unlock()
		defer func() {
			c.Close()
			o.done.Add(1)
		}()
		conn := int(o.accepted.Add(1) - 1)
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			o.mu.Lock()
			o.seen = append(o.seen, seenRequest{conn, req.Method + " " + req.RequestURI + " " + req.Proto, req.Host, req.Header})
			o.mu.Unlock()
			if !answer(conn, req, c) {
				return
			}
		}
	})
	// Before the target's cleanup waits for the handlers: the proxy
	// may keep their connections open.
	t.Cleanup(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		for c := range o.conns {
			c.Close()
		}
	})
	return o
}

func (o *scriptedOrigin) requests() []seenRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]seenRequest(nil), o.seen...)
}

func (o *scriptedOrigin) url(path string) string { return "http://" + o.addr().String() + path }

// respond reads the request's body and writes resp.
func respond(req *http.Request, c net.Conn, resp string) {
	io.Copy(io.Discard, req.Body)
	io.WriteString(c, resp)
}

// proxyConn is a raw client connection to r's proxy.
type proxyConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (r *rig) httpClient(t *testing.T) *proxyConn {
	c := r.raw()
	return &proxyConn{t, c, bufio.NewReader(c)}
}

// do sends a raw request and reads the response to it (a 1xx one too)
// with its body.
func (pc *proxyConn) do(method, raw string) (*http.Response, string) {
	pc.t.Helper()
	if raw != "" {
		if _, err := io.WriteString(pc.c, raw); err != nil {
			pc.t.Fatal(err)
		}
	}
	return pc.read(method)
}

func (pc *proxyConn) read(method string) (*http.Response, string) {
	pc.t.Helper()
	resp, err := http.ReadResponse(pc.br, &http.Request{Method: method})
	if err != nil {
		pc.t.Fatalf("reading the response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		pc.t.Fatalf("reading the body: %v", err)
	}
	return resp, string(body)
}

func TestForwardWritesOriginFormWithTheURIsHost(t *testing.T) {
	r := newRig(t, nil)
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		respond(req, c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	pc := r.httpClient(t)
	pc.do("GET", "GET "+o.url("/p/a%20th?q=1&r")+" HTTP/1.1\r\nHost: elsewhere.example\r\nX-A: 1\r\n\r\n")
	pc.do("GET", "GET "+o.url("")+" HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n")
	seen := o.requests()
	if len(seen) != 2 {
		t.Fatalf("origin saw %d requests, want 2", len(seen))
	}
	if seen[0].line != "GET /p/a%20th?q=1&r HTTP/1.1" || seen[1].line != "GET / HTTP/1.1" {
		t.Errorf("request lines %q, %q: want origin-form", seen[0].line, seen[1].line)
	}
	if seen[0].host != o.addr().String() || seen[0].header.Get("X-A") != "1" {
		t.Errorf("Host %q (want the URI's %s), fields %v", seen[0].host, o.addr(), seen[0].header)
	}
	if ua := seen[0].header.Values("User-Agent"); len(ua) != 0 {
		t.Errorf("the proxy added User-Agent %q", ua)
	}
}

// TestForwardKeepsTheOriginConnectionAfterAResponseOfKnownLength: every
// response whose end the proxy knows without the close lets the next
// request use the same origin connection, and reaches the client whole.
func TestForwardKeepsTheOriginConnectionAfterAResponseOfKnownLength(t *testing.T) {
	for _, tc := range []struct {
		name, method, resp string
		wantBody           string
		wantTrailer        string // X-T's value
	}{
		{"content-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", ""},
		{"chunked with trailers", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n" +
			"3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: tv\r\n\r\n", "abcde", "tv"},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", "", ""},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", "", ""},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", "", ""},
		{"HTTP/1.0 keep-alive", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nten", "ten", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
				respond(req, c, tc.resp)
				return true
			})
			pc := r.httpClient(t)
			for i := range 3 {
				resp, body := pc.do(tc.method, tc.method+" "+o.url("/")+" HTTP/1.1\r\nHost: x\r\n\r\n")
				if body != tc.wantBody || resp.Trailer.Get("X-T") != tc.wantTrailer {
					t.Errorf("request %d: %d %q trailer %v, want %q and X-T %q", i, resp.StatusCode, body, resp.Trailer, tc.wantBody, tc.wantTrailer)
				}
				if resp.Close {
					t.Errorf("request %d: the proxy closes the client's connection", i)
				}
			}
			if n := o.accepted.Load(); n != 1 {
				t.Errorf("the origin accepted %d connections for 3 requests, want 1", n)
			}
			if s := r.srv.Stats(); s.HTTPPoolHits != 2 || s.HTTPPoolMisses != 1 {
				t.Errorf("want 1 miss and 2 hits: %+v", s)
			}
		})
	}
}

// TestForwardClosesTheOriginConnectionWhenTheResponseSaysSo: "close",
// HTTP/1.0 without keep-alive and a body that ends at the close leave
// nothing to reuse; the last also ends the client's connection.
func TestForwardClosesTheOriginConnectionWhenTheResponseSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name, resp  string
		closeClient bool
	}{
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
		{"ends at the close", "HTTP/1.1 200 OK\r\n\r\nok", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
				respond(req, c, tc.resp)
				return false
			})
			pc := r.httpClient(t)
			for i := range 2 {
				resp, body := pc.do("GET", "GET "+o.url("/")+" HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
				if tc.closeClient {
					if !resp.Close {
						t.Errorf("a body delimited by the close reached the client without Connection: close")
					}
					expectClosed(t, pc.c)
					pc = r.httpClient(t)
				} else if resp.Close {
					t.Errorf("request %d: the origin's close ended the client's connection", i)
				}
			}
			if n := o.accepted.Load(); n != 2 {
				t.Errorf("the origin accepted %d connections for 2 requests, want 2", n)
			}
			if s := r.srv.Stats(); s.HTTPPoolHits != 0 || s.HTTPPoolMisses != 2 {
				t.Errorf("want 2 misses: %+v", s)
			}
		})
	}
}

// TestForwardRelaysInterimResponses: a 1xx before the final response
// reaches an HTTP/1.1 client, never an HTTP/1.0 one (RFC 9110 §15.2).
func TestForwardRelaysInterimResponses(t *testing.T) {
	r := newRig(t, nil)
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		respond(req, c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	pc := r.httpClient(t)
	resp, _ := pc.do("GET", "GET "+o.url("/")+" HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 103 || resp.Header.Get("Link") != "</s.css>; rel=preload" {
		t.Errorf("HTTP/1.1 client: first %d %v, want 103 with Link", resp.StatusCode, resp.Header)
	}
	if resp, body := pc.read("GET"); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("HTTP/1.1 client: then %d %q, want 200 ok", resp.StatusCode, body)
	}
	pc = r.httpClient(t)
	if resp, body := pc.do("GET", "GET "+o.url("/")+" HTTP/1.0\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("HTTP/1.0 client: %d %q, want 200 ok and no 1xx", resp.StatusCode, body)
	}
}

// TestForwardExpectContinue: a body that expects 100-continue goes to
// the origin once the origin says 100 (and the client got the 100); an
// origin that answers finally instead never gets the body, and neither
// connection is kept, as the body would come next on both.
func TestForwardExpectContinue(t *testing.T) {
	r := newRig(t, nil)
	var bodies sync.Map // conn -> what the origin read after the head
	o := newScriptedOrigin(t, func(conn int, req *http.Request, c net.Conn) bool {
		if req.URL.Path == "/refuse" {
			io.WriteString(c, "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n")
			rest, _ := io.ReadAll(c) // until the proxy closes
			bodies.Store(conn, string(rest))
			return false
		}
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		body, _ := io.ReadAll(req.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true
	})
	pc := r.httpClient(t)
	for i := range 2 {
		resp, _ := pc.do("POST", "POST "+o.url("/")+" HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
		if resp.StatusCode != 100 {
			t.Fatalf("request %d: %d, want 100 before the body", i, resp.StatusCode)
		}
		io.WriteString(pc.c, "body")
		if resp, body := pc.read("POST"); resp.StatusCode != 200 || body != "body" {
			t.Errorf("request %d: %d %q, want the body echoed", i, resp.StatusCode, body)
		}
	}
	if n := o.accepted.Load(); n != 1 {
		t.Errorf("origin connections %d, want 1 for both requests", n)
	}
	resp, _ := pc.do("POST", "POST "+o.url("/refuse")+" HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	if resp.StatusCode != 417 {
		t.Fatalf("refused: %d, want 417", resp.StatusCode)
	}
	expectClosed(t, pc.c)
	waitFor(t, "the proxy to close the refusing origin connection", func() bool { return o.done.Load() == 1 })
	if rest, _ := bodies.Load(0); rest != "" {
		t.Errorf("the origin got %q after answering 417, want nothing", rest)
	}
}

// TestForwardRetriesAnIdempotentRequestOnAPooledConnectionTheOriginClosed:
// a pooled connection the origin closes instead of answering gets a
// GET once more on a new connection; a POST with a body is never sent
// twice (502 instead).
func TestForwardRetriesAnIdempotentRequestOnAPooledConnectionTheOriginClosed(t *testing.T) {
	r := newRig(t, nil)
	var n atomic.Int64
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		if n.Add(1)%2 == 0 {
			return false // every second request: read, then close unanswered
		}
		respond(req, c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	pc := r.httpClient(t)
	pc.do("GET", "GET "+o.url("/1")+" HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := pc.do("GET", "GET "+o.url("/2")+" HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("GET on a connection the origin closed: %d %q, want it retried (200 ok)", resp.StatusCode, body)
	}
	resp, body := pc.do("POST", "POST "+o.url("/3")+" HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("POST on a connection the origin closed: %d %q, want 502", resp.StatusCode, body)
	}
	var lines []string
	for _, s := range o.requests() {
		lines = append(lines, fmt.Sprintf("conn %d: %s", s.conn, s.line))
	}
	want := []string{"conn 0: GET /1 HTTP/1.1", "conn 0: GET /2 HTTP/1.1", "conn 1: GET /2 HTTP/1.1", "conn 1: POST /3 HTTP/1.1"}
	if strings.Join(lines, "; ") != strings.Join(want, "; ") {
		t.Errorf("the origin saw %q, want %q", lines, want)
	}
}

// TestForwardSkipsAPooledConnectionTheOriginClosedWhileIdle: a request
// that could not be sent again does not go out on a connection the
// origin has already closed.
// Both ways of looking are tried: a host socket's, and a conn that is
// no syscall.Conn (as the stack's TCPConn).
func TestForwardSkipsAPooledConnectionTheOriginClosedWhileIdle(t *testing.T) {
	for _, opaque := range []bool{false, true} {
		r := newRig(t, func(s *Server) {
			if opaque {
				s.Dialer = DialerFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := new(net.Dialer).DialContext(ctx, network, addr)
					return struct{ net.Conn }{c}, err
				})
			}
		})
		o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
			respond(req, c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return false // close right after, without saying so
		})
		pc := r.httpClient(t)
		pc.do("GET", "GET "+o.url("/")+" HTTP/1.1\r\nHost: x\r\n\r\n")
		waitFor(t, "the origin to close", func() bool { return o.done.Load() == 1 })
		if resp, body := pc.do("POST", "POST "+o.url("/")+" HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("opaque conn %v: POST after the origin closed the pooled connection: %d %q, want 200 ok on a new one", opaque, resp.StatusCode, body)
		}
		if s := r.srv.Stats(); s.HTTPPoolMisses != 2 || s.HTTPPoolHits != 0 {
			t.Errorf("opaque conn %v: want 2 misses and no hit: %+v", opaque, s)
		}
	}
}

// TestForwardSendsAChunkedBodyWithItsTrailers: a chunked request body
// and its trailer fields reach the origin.
func TestForwardSendsAChunkedBodyWithItsTrailers(t *testing.T) {
	r := newRig(t, nil)
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		body, _ := io.ReadAll(req.Body)
		msg := fmt.Sprintf("%v %s %s", req.TransferEncoding, body, req.Trailer.Get("X-Sum"))
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		return true
	})
	pc := r.httpClient(t)
	_, body := pc.do("POST", "POST "+o.url("/")+" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"+
		"4\r\nabcd\r\n3\r\nefg\r\n0\r\nX-Sum: 7\r\n\r\n")
	if body != "[chunked] abcdefg 7" {
		t.Errorf("the origin got %q, want the chunked body and its trailer", body)
	}
}

func TestForwardRefusesAnOversizedResponseHead(t *testing.T) {
	r := newRig(t, nil)
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		respond(req, c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", maxHeaderBytes+1)+"\r\nContent-Length: 0\r\n\r\n")
		return false
	})
	pc := r.httpClient(t)
	if resp, body := pc.do("GET", "GET "+o.url("/")+" HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a response head over %d bytes: %d %q, want 502", maxHeaderBytes, resp.StatusCode, body)
	}
}

func TestForwardAnswers504WhenTheOriginDoesNotAnswer(t *testing.T) {
	r := newRig(t, func(s *Server) { s.IdleTimeout = 100 * time.Millisecond })
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		io.ReadAll(c) // never answers; until the proxy closes
		return false
	})
	pc := r.httpClient(t)
	if resp, body := pc.do("GET", "GET "+o.url("/")+" HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("an origin silent for the idle timeout: %d %q, want 504", resp.StatusCode, body)
	}
}

func TestPoolClosesAConnectionIdleForPoolIdleTimeout(t *testing.T) {
	r := newRig(t, func(s *Server) { s.PoolIdleTimeout = 10 * time.Millisecond })
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		respond(req, c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	r.httpClient(t).do("GET", "GET "+o.url("/")+" HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, "the pool to close the idle connection", func() bool { return o.done.Load() == 1 })
}

// TestForwardEndsARequestWhoseBodyBreaksOff: a client that stops
// sending part way through its body does not leave the proxy waiting for
// the origin, which waits for the rest.
func TestForwardEndsARequestWhoseBodyBreaksOff(t *testing.T) {
	r := newRig(t, nil)
	o := newScriptedOrigin(t, func(_ int, req *http.Request, c net.Conn) bool {
		respond(req, c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") // never: the body does not end
		return false
	})
	pc := r.httpClient(t)
	io.WriteString(pc.c, "POST "+o.url("/")+" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b")
	pc.c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(pc.br)
	if !strings.HasPrefix(string(got), "HTTP/1.1 502") || !strings.Contains(string(got), "request body") {
		t.Errorf("a body cut off after 10 of 100 bytes: got %q, want 502 saying so", got)
	}
	waitFor(t, "the origin connection to be closed", func() bool { return o.done.Load() == 1 })
}

// The head of a forwarded response is written without allocating
// (Response.Write took about 10 allocations for it), and with the
// framing Response.Write gave it.
func TestWriteResponseHeadDoesNotAllocate(t *testing.T) {
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 304 Not Modified\r\n"+
		"Date: Wed, 02 Dec 2026 20:00:00 GMT\r\nEtag: \"x\"\r\nTransfer-Encoding: chunked\r\n\r\n")), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rw := newRespWriter(&out, nil, 0)
	defer rw.release()
	allocs := testing.AllocsPerRun(100, func() {
		rw.n = 0
		if err := writeResponse(rw, resp, http.MethodGet, true, http.NoBody); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per head", allocs)
	}
	// A 304 has no body: no chunked coding, no last chunk.
	want := "HTTP/1.1 304 Not Modified\r\nConnection: close\r\nDate: Wed, 02 Dec 2026 20:00:00 GMT\r\nEtag: \"x\"\r\n\r\n"
	if got := string((*rw.buf)[:rw.n]); got != want {
		t.Errorf("head\n%q\nwant\n%q", got, want)
	}
}
