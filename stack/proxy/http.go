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
	"os"
	"strings"
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
		if !s.httpForward(c, br, pr) {
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

var errHeaderTooLong = errors.New("head longer than 64 KiB")

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
