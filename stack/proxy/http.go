package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"time"
)

// maxHeaderBytes bounds an HTTP request head (and a SOCKS handshake, which
// is far shorter). net/http's server allows 1 MiB; a proxy request has no
// business being more than a few KiB.
const maxHeaderBytes = 64 << 10

// proxyRequest is an HTTP request to the proxy, classified.
type proxyRequest struct {
	req     *http.Request
	connect bool // CONNECT host:port; otherwise an absolute-URI forward
	target  Addr
}

// httpError is a request the proxy answers with an error status.
type httpError struct {
	status int
	err    error
}

func (e *httpError) Error() string {
	return fmt.Sprintf("%d %s: %v", e.status, http.StatusText(e.status), e.err)
}
func (e *httpError) Unwrap() error { return e.err }

// readProxyRequest reads one request head from br and checks that it is
// something a proxy serves: CONNECT to host:port, or an absolute http://
// URI. Errors from the connection come back as they are; requests that
// are read but refused come back as *httpError.
func readProxyRequest(br *bufio.Reader) (*proxyRequest, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		// The connection's own failures go back as they are; anything
		// else is a request that was read and is wrong.
		var oe *net.OpError
		switch {
		case errors.Is(err, errHeaderTooLong):
			return nil, &httpError{http.StatusRequestHeaderFieldsTooLarge, err}
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
			errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, net.ErrClosed), errors.As(err, &oe):
			return nil, err
		}
		return nil, &httpError{http.StatusBadRequest, err}
	}
	pr := &proxyRequest{req: req}
	var hostport string
	switch {
	case req.Method == http.MethodConnect:
		pr.connect = true
		hostport = req.URL.Host
		if hostport == "" {
			hostport = req.RequestURI
		}
		if _, _, err := net.SplitHostPort(hostport); err != nil {
			return pr, &httpError{http.StatusBadRequest, fmt.Errorf("CONNECT target %q: %w", hostport, err)}
		}
	case req.URL.IsAbs() && strings.EqualFold(req.URL.Scheme, "http"):
		hostport = req.URL.Host
		if req.URL.Port() == "" {
			hostport = net.JoinHostPort(req.URL.Hostname(), "80")
		}
	case req.URL.IsAbs():
		return pr, &httpError{http.StatusBadRequest, fmt.Errorf("scheme %q: only http:// is forwarded; use CONNECT for TLS", req.URL.Scheme)}
	default:
		return pr, &httpError{http.StatusBadRequest, errors.New("not a proxy request (want CONNECT or an absolute http:// URI)")}
	}
	a, err := parseHostPort(hostport)
	if err != nil {
		return pr, &httpError{http.StatusBadRequest, err}
	}
	pr.target = a
	return pr, nil
}

// parseHostPort parses a request target into an Addr, as strictly as the
// SOCKS5 side: a numeric port, and a name that fits ATYP 3.
func parseHostPort(hostport string) (Addr, error) {
	a, err := ParseAddr(hostport)
	if err != nil || a.IP.IsValid() {
		a.IP = a.IP.Unmap()
		return a, err
	}
	if len(a.Name) > 255 {
		return Addr{}, errors.New("host name longer than 255 bytes")
	}
	if a.Name, err = checkName([]byte(a.Name)); err != nil {
		return Addr{}, err
	}
	return a, nil
}

// serveHTTP serves HTTP proxy requests on c until the client or the
// target closes: CONNECT tunnels, or absolute-URI requests forwarded one
// by one (keep-alive toward the client, one target connection each).
func (s *Server) serveHTTP(c net.Conn, br *bufio.Reader, lr *headerLimit, release func()) {
	for first := true; ; first = false {
		if !first {
			// Between requests a keep-alive client may idle; once it
			// starts one, it has HandshakeTimeout to finish the head.
			if it := s.idleTimeout(); it > 0 {
				c.SetReadDeadline(time.Now().Add(it))
			}
			if _, err := br.Peek(1); err != nil {
				return
			}
			if ht := timeout(s.HandshakeTimeout, DefaultHandshakeTimeout); ht > 0 {
				c.SetReadDeadline(time.Now().Add(ht))
			}
		}
		lr.reset()
		pr, err := readProxyRequest(br)
		if err != nil {
			var he *httpError
			if errors.As(err, &he) && lr.err != nil {
				// The head was cut off (deadline, EOF, reset), not
				// malformed: what parsed wrong is a partial line.
				err = lr.err
			} else if errors.As(err, &he) {
				s.httpError(c, he.status, he.err)
				s.badRequest(c, "http request", he.err)
				return
			}
			s.handshakeError(c, "http request", err)
			return
		}
		lr.off()
		if s.Credentials != nil && !s.httpAuthOK(pr.req) {
			s.stats.AuthFailures.Add(1)
			s.logger().Info("proxy: http proxy authentication failed", "client", c.RemoteAddr())
			io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\n"+
				"Proxy-Authenticate: Basic realm=\"mhiproxy\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		c.SetDeadline(time.Time{})
		if pr.connect {
			s.httpConnect(c, br, release, pr)
			return
		}
		if !s.httpForward(c, pr) {
			return
		}
	}
}

// httpAuthOK checks Proxy-Authorization: Basic, RFC 7617.
func (s *Server) httpAuthOK(req *http.Request) bool {
	h := req.Header.Get("Proxy-Authorization")
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return false
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	return ok && s.Credentials(user, pass)
}

// httpError answers with status and closes the exchange.
func (s *Server) httpError(c net.Conn, status int, err error) {
	body := http.StatusText(status) + ": " + err.Error() + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// dialStatus is the HTTP status for a failed target: 504 for a timeout,
// 502 for everything else (RFC 9110 §15.6.3, §15.6.5).
func dialStatus(err error) int {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// httpConnect tunnels, RFC 9110 §9.3.6.
func (s *Server) httpConnect(c net.Conn, br *bufio.Reader, release func(), pr *proxyRequest) {
	target, err := s.dial(s.context(), pr.target)
	if err != nil {
		s.stats.DialErrors.Add(1)
		s.logger().Info("proxy: http connect failed", "client", c.RemoteAddr(), "target", pr.target.String(), "err", err)
		s.httpError(c, dialStatus(err), err)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		target.Close()
		return
	}
	s.stats.HTTPConnects.Add(1)
	pre := drain(br)
	release()
	s.relay(c, target, pre)
}

// hopHeaders are connection-specific and not forwarded, RFC 9110 §7.6.1.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// httpForward sends one absolute-URI request to its origin over the
// server's pool (pool.go) and the response back. It reports whether the
// client connection may carry another request.
//
// Persistence toward the client follows RFC 9112 §9.3: an HTTP/1.1
// client keeps the connection unless it or the response says "close"; an
// HTTP/1.0 client only when it asked with "Connection: keep-alive", and
// then the response says "Connection: keep-alive" back (a 1.0 client
// otherwise waits for the close). Either way the response must carry its
// own length: a body that ends only when the origin closes is delimited
// toward the client by closing too. An HTTP/1.0 client never gets
// Transfer-Encoding (RFC 9112 §6.1): a chunked body goes to it as is,
// ended by the close. Persistence toward the origin is the pool's: the
// client's "close" ends the client's connection, not the origin's.
func (s *Server) httpForward(c net.Conn, pr *proxyRequest) (keepAlive bool) {
	req := pr.req
	keepAlive = !req.Close // what net/http parsed: 1.1 unless "close", 1.0 only with "keep-alive"
	client10 := !req.ProtoAtLeast(1, 1)
	s.stats.HTTPForwards.Add(1)

	removeHopHeaders(req.Header)
	req.RequestURI = ""
	req.URL.Scheme = "http" // the Transport wants it in lower case
	req.Close = false
	// The Transport streams the body from the client on its own
	// goroutine and may still read it after the response is back (an
	// origin that answers early); body stops that before the client's
	// reader is reused or recycled.
	body := &clientBody{r: req.Body}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = body
	} else {
		body.eof = true
	}
	defer func() {
		if !body.stop(c) {
			// The next request would start inside this one's body.
			keepAlive = false
		}
	}()
	var origin net.Conn // the pooled connection the response comes on
	ctx := httptrace.WithClientTrace(s.context(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		origin = info.Conn
		s.gotConn(info)
	}})
	resp, err := s.transport().RoundTrip(req.WithContext(ctx))
	if err != nil {
		s.logger().Info("proxy: http forward failed", "client", c.RemoteAddr(), "target", pr.target.String(), "err", err)
		s.httpError(c, dialStatus(err), err)
		return false
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	bodyless := req.Method == http.MethodHead || resp.StatusCode < 200 ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if client10 && len(resp.TransferEncoding) > 0 {
		resp.TransferEncoding = nil
		resp.ContentLength = -1
	}
	if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 && (!bodyless || resp.ProtoAtLeast(1, 1)) {
		// The close delimits the body (and Response.Write says
		// "Connection: close" for any HTTP/1.1 response of unknown
		// length, a bodiless one included).
		keepAlive = false
	}
	resp.Close = !keepAlive
	if keepAlive && client10 {
		resp.Header.Set("Connection", "keep-alive")
	}
	// Response.Write writes the head in pieces (four per header field)
	// and the chunked framing apart from the data: written straight to
	// the client that was a system call each. respWriter gathers them
	// with the body and sends what it holds once the next read of the
	// origin would wait (nothing waits in it while the origin is waited
	// for: a streamed body streams on).
	down := &idleConn{Conn: c, idle: s.idleTimeout(), counter: &s.stats.BytesDown}
	rw := newRespWriter(down, origin, resp.ContentLength)
	defer rw.release()
	resp.Body = flushBeforeRead{resp.Body, rw}
	if err := resp.Write(rw); err != nil {
		return false
	}
	if err := rw.flush(); err != nil {
		return false
	}
	return keepAlive
}

// clientBody is a forwarded request's body, read from the client by the
// Transport's writer goroutine. stop ends that: once it returns, no read
// reaches the client's connection.
type clientBody struct {
	mu      sync.Mutex
	r       io.ReadCloser
	eof     bool // the body was read to its end
	stopped bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return 0, net.ErrClosed
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close is the Transport's: the body stays readable for stop's check.
func (b *clientBody) Close() error { return nil }

// stop forbids further reads and reports whether the body was read to
// its end, so that the client's next request starts where it should. A
// read in progress on c is cut short by an expired read deadline (the
// connection is not kept then).
func (b *clientBody) stop(c net.Conn) (complete bool) {
	if !b.mu.TryLock() {
		c.SetReadDeadline(time.Unix(1, 0))
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	b.stopped = true
	return b.eof
}

// respWriter gathers a forwarded response on its way to the client:
// the head, the chunk framing and the body, in one buffer that is sent
// when it is full or when the next read of the origin would wait. On a
// page of 50 objects (table 11 of docs/BENCHMARKS.md) a response had
// gone out in at least three writes, each a wake-up of the client: the
// head alone, the few KiB of body that net/http's reader held behind
// the head, then the rest; gathered, most objects go out in one or two.
//
// A body of known length is read straight into the buffer (ReadFrom);
// one of more than fits a small buffer takes a bulkBufSize one (as the
// relay does once a read fills its small one), so that a download
// crosses to the client in large pieces.
type respWriter struct {
	w      io.Writer
	origin net.Conn // the pooled connection the response comes on; nil: unknown
	buf    *[]byte
	bulk   bool
	n      int // bytes held in buf
	// copying is set while ReadFrom runs: it decides before each of its
	// reads itself, and a flush inside its read would move the buffer
	// under it.
	copying bool
}

func newRespWriter(w io.Writer, origin net.Conn, contentLength int64) *respWriter {
	rw := &respWriter{w: w, origin: origin}
	if contentLength > copyBufSize-maxGatheredHead {
		rw.buf, rw.bulk = bulkBufs.Get().(*[]byte), true
	} else {
		rw.buf = copyBufs.Get().(*[]byte)
	}
	return rw
}

// maxGatheredHead is the room for a response head that decides whether
// a body of known length fits the small buffer with it.
const maxGatheredHead = 4 << 10

func (rw *respWriter) release() {
	if rw.bulk {
		bulkBufs.Put(rw.buf)
	} else {
		copyBufs.Put(rw.buf)
	}
	rw.buf = nil
}

// Write holds p, sending what is held first when p does not fit; a p
// larger than the whole buffer goes through without being copied.
func (rw *respWriter) Write(p []byte) (int, error) {
	b := *rw.buf
	if rw.n+len(p) > len(b) {
		if err := rw.flush(); err != nil {
			return 0, err
		}
		if len(p) > len(b) {
			return rw.w.Write(p)
		}
	}
	rw.n += copy(b[rw.n:], p)
	return len(p), nil
}

// flush sends what is held.
func (rw *respWriter) flush() error {
	if rw.n == 0 {
		return nil
	}
	_, err := rw.w.Write((*rw.buf)[:rw.n])
	rw.n = 0
	return err
}

// beforeRead sends what is held unless the origin's bytes are already
// queued (readable), so that a read that waits never holds data back.
func (rw *respWriter) beforeRead() error {
	if rw.n > 0 && !readable(rw.origin) {
		return rw.flush()
	}
	return nil
}

// ReadFrom is how Response.Write copies a body of known or
// close-delimited length: into the buffer behind what it holds, so
// that the head and the first piece of the body go together.
func (rw *respWriter) ReadFrom(r io.Reader) (int64, error) {
	rw.copying = true
	defer func() { rw.copying = false }()
	var total int64
	for {
		b := *rw.buf
		if rw.n == len(b) {
			if err := rw.flush(); err != nil {
				return total, err
			}
		}
		if err := rw.beforeRead(); err != nil {
			return total, err
		}
		n, err := r.Read(b[rw.n:])
		rw.n += n
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// flushBeforeRead is the response body as Response.Write reads it: each
// read first lets rw send what it holds if the read may wait (see
// respWriter.beforeRead).
type flushBeforeRead struct {
	io.ReadCloser
	rw *respWriter
}

func (b flushBeforeRead) Read(p []byte) (int, error) {
	if !b.rw.copying {
		if err := b.rw.beforeRead(); err != nil {
			return 0, err
		}
	}
	return b.ReadCloser.Read(p)
}

// idleConn pushes its deadline forward as data moves, at most every
// idle/4, so that a forwarded request fails when it stalls for the idle
// timeout, however long it runs in all. It counts written bytes.
type idleConn struct {
	net.Conn
	idle    time.Duration
	armed   time.Time
	counter interface{ Add(uint64) uint64 }
}

func (c *idleConn) arm() {
	if c.idle <= 0 {
		return
	}
	if now := time.Now(); now.Sub(c.armed) > c.idle/4 {
		c.armed = now
		c.Conn.SetDeadline(now.Add(c.idle))
	}
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.arm()
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.arm()
	n, err := c.Conn.Write(b)
	if c.counter != nil {
		c.counter.Add(uint64(n))
	}
	return n, err
}

// headerLimit caps how much of a connection can be read while a request
// head is being parsed (bufio and net/http would otherwise buffer a
// never-ending header line), and is switched off for bodies and relays.
type headerLimit struct {
	r io.Reader
	n int64 // bytes still allowed; negative when off
	// err is the connection's first read error since reset: bufio's
	// ReadLine returns a partial line without its error, so a request
	// cut off by the handshake deadline would otherwise parse as a
	// malformed one.
	err error
}

var errHeaderTooLong = errors.New("request head longer than 64 KiB")

func (l *headerLimit) reset() { l.n, l.err = maxHeaderBytes, nil }
func (l *headerLimit) off()   { l.n = -1 }

func (l *headerLimit) Read(b []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(b)
	}
	if l.n == 0 {
		return 0, errHeaderTooLong
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	if err != nil && l.err == nil {
		l.err = err
	}
	return n, err
}
