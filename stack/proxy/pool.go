package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of the origin connection pool that absolute-URI forwarding
// keeps (Server.MaxIdleConnsPerOrigin and the fields after it). Every
// connection a burst opened to an origin is kept for the next burst: a
// connection closed for being one over an idle limit is dialed again by
// the next burst, with a handshake through the stack and a teardown each.
// With an idle limit of 16 under 100 keep-alive clients (ab -k -c 100,
// docs/PERFORMANCE.md) 2.5 % of the requests dialed, and the dial alone
// cost more CPU (0.8 ms) than a whole pooled request; so the idle limit
// per origin is the connection limit. The idle timeout is net/http's
// (Transport.IdleConnTimeout in DefaultTransport): shorter than most
// servers' keep-alive, so that the proxy, not the origin, usually closes
// an idle connection and a request rarely meets one the origin has just
// closed.
const (
	DefaultMaxConnsPerOrigin     = 128
	DefaultMaxIdleConnsPerOrigin = DefaultMaxConnsPerOrigin
	DefaultMaxIdleConns          = 256
	DefaultPoolIdleTimeout       = 90 * time.Second
)

// newTransport is the pool: a net/http Transport that dials through the
// server's Dialer and Resolver (s.dial: never the host's resolver) and
// keeps connections to each origin (host:port as the client named it)
// for the next request. A request that finds its pooled connection
// closed by the origin is retried on a new one only when it is
// idempotent (Transport's rule, RFC 9110 §9.2.2). Compression is left to
// the client and the origin: the proxy passes Accept-Encoding and the
// body as they are. The Transport's reader and writer goroutines belong
// to its connections; Close closes the idle ones after the last request.
func (s *Server) newTransport() *http.Transport {
	idlePerOrigin := limit(s.MaxIdleConnsPerOrigin, DefaultMaxIdleConnsPerOrigin)
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			a, err := parseHostPort(addr)
			if err != nil {
				return nil, err
			}
			c, err := s.dial(ctx, a)
			if err != nil {
				s.stats.DialErrors.Add(1)
				return nil, err
			}
			return &poolConn{Conn: c, idle: s.idleTimeout(), up: &s.stats.BytesUp}, nil
		},
		DisableCompression:     true,
		MaxIdleConns:           max(limit(s.MaxIdleConns, DefaultMaxIdleConns), 0),
		MaxIdleConnsPerHost:    max(idlePerOrigin, 0),
		MaxConnsPerHost:        max(limit(s.MaxConnsPerOrigin, DefaultMaxConnsPerOrigin), 0),
		IdleConnTimeout:        timeout(s.PoolIdleTimeout, DefaultPoolIdleTimeout),
		ResponseHeaderTimeout:  s.idleTimeout(),
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	// A negative MaxIdleConnsPerOrigin turns the pool off: one
	// connection per request, "Connection: close" upstream.
	tr.DisableKeepAlives = idlePerOrigin < 0
	return tr
}

// transport is the server's pool, made on first use.
func (s *Server) transport() *http.Transport {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil {
		s.pool = s.newTransport()
	}
	return s.pool
}

// gotConn counts whether a forwarded request found an idle pooled
// connection (a hit) or had to dial (a miss); it is the request's
// httptrace.ClientTrace.GotConn.
func (s *Server) gotConn(info httptrace.GotConnInfo) {
	if info.Reused {
		s.stats.HTTPPoolHits.Add(1)
	} else {
		s.stats.HTTPPoolMisses.Add(1)
	}
}

// poolConn is an origin connection in the pool. Like idleConn it fails
// a read or write that stalls for the idle timeout, but the Transport
// reads it on one goroutine and writes it on another, so each direction
// keeps its own deadline. While the connection idles in the pool its
// reader waits under the last read deadline; the pool's idle timeout is
// shorter and closes it first. Writes count as BytesUp.
type poolConn struct {
	net.Conn
	idle            time.Duration
	readAt, writeAt time.Time // owned by the reader and the writer
	up              *atomic.Uint64
}

func (c *poolConn) Read(b []byte) (int, error) {
	if now := time.Now(); c.idle > 0 && now.Sub(c.readAt) > c.idle/4 {
		c.readAt = now
		c.Conn.SetReadDeadline(now.Add(c.idle))
	}
	return c.Conn.Read(b)
}

func (c *poolConn) Write(b []byte) (int, error) {
	if now := time.Now(); c.idle > 0 && now.Sub(c.writeAt) > c.idle/4 {
		c.writeAt = now
		c.Conn.SetWriteDeadline(now.Add(c.idle))
	}
	n, err := c.Conn.Write(b)
	c.up.Add(uint64(n))
	return n, err
}

// readable reports whether a Read of c returns without waiting: received
// bytes are queued on it. The stack's TCPConn tells (Buffered) and a host
// socket does (SIOCINQ, tcp(7)); any other conn reports false. A pooled
// connection asks its own conn: the bytes the Transport has buffered
// above it are not counted (a read of them returns at once anyway).
func readable(c net.Conn) bool {
	switch c := c.(type) {
	case *poolConn:
		return readable(c.Conn)
	case interface{ Buffered() int }:
		return c.Buffered() > 0
	case syscall.Conn:
		rc, err := c.SyscallConn()
		if err != nil {
			return false
		}
		n := 0
		if rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }) != nil {
			return false
		}
		return n > 0
	}
	return false
}
