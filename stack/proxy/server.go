// Package proxy is a SOCKS5 (RFC 1928, RFC 1929) and HTTP proxy server
// that reaches its targets through any dialer, so that programs that know
// nothing of mhistack can use the modem. SOCKS5 and HTTP (CONNECT and
// absolute-URI forwarding) share one port: the first byte tells them apart.
//
// The server depends on three small interfaces, not on package stack, and
// is tested over the standard library's network:
//
//	srv := &proxy.Server{Dialer: st, PacketListener: st, Resolver: st}
//	ln, _ := net.Listen("tcp", "127.0.0.1:1080")
//	go srv.Serve(ln)
//	defer srv.Close()
//
// Domain names from clients are resolved only by the given Resolver (the
// modem's DNS): the Dialer is always handed an IP address, so a dialer that
// would fall back to the host's resolver never sees a name.
package proxy

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
)

// Dialer opens TCP connections to targets. *net.Dialer and *stack.Stack
// satisfy it. The server passes "tcp" and an IP:port, never a name.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// PacketListener opens the unconnected UDP sockets that UDP ASSOCIATE
// relays through: one per association and address family, with network
// "udp4" or "udp6" and address ":0". *net.ListenConfig satisfies it.
type PacketListener interface {
	ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error)
}

// Resolver looks up the domain names that clients send. *net.Resolver and
// *stack.Stack satisfy it; network is "ip", "ip4" or "ip6".
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialerFunc adapts a function to Dialer.
type DialerFunc func(ctx context.Context, network, address string) (net.Conn, error)

// DialContext calls f.
func (f DialerFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}

// PacketListenerFunc adapts a function to PacketListener.
type PacketListenerFunc func(ctx context.Context, network, address string) (net.PacketConn, error)

// ListenPacket calls f.
func (f PacketListenerFunc) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	return f(ctx, network, address)
}

// Defaults for the zero values of Server's limits and timeouts.
const (
	DefaultMaxConns               = 4096
	DefaultMaxAssociations        = 256
	DefaultMaxFlowsPerAssociation = 1024
	DefaultHandshakeTimeout       = 10 * time.Second
	DefaultDialTimeout            = 30 * time.Second
	DefaultIdleTimeout            = 5 * time.Minute
	DefaultUDPIdleTimeout         = 2 * time.Minute // tailscale's netstack forwarder uses the same
)

// Server is a SOCKS5 and HTTP proxy. Set its fields before the first
// Serve; they must not change afterwards. The zero limits and timeouts
// mean the Default values; a negative value means none.
type Server struct {
	Dialer         Dialer         // required
	Resolver       Resolver       // required for domain names; without it they are refused
	PacketListener PacketListener // enables UDP ASSOCIATE; without it the command is refused

	// Credentials, when non-nil, makes username/password (RFC 1929) and
	// HTTP Basic proxy authentication mandatory. It reports whether a
	// user/password pair is valid; use CheckPassword for one fixed pair.
	Credentials func(user, password string) bool

	MaxConns               int // concurrent client connections, all protocols
	MaxAssociations        int // concurrent UDP associations
	MaxFlowsPerAssociation int // distinct destinations one association may send to

	HandshakeTimeout time.Duration // from accept until the request is read (slowloris)
	DialTimeout      time.Duration // resolving plus connecting to a target
	IdleTimeout      time.Duration // a relayed TCP connection with no data either way
	UDPIdleTimeout   time.Duration // an association or flow with no datagram either way

	// The pool of origin connections that absolute-URI HTTP requests
	// reuse (see originPool). A negative MaxIdleConnsPerOrigin turns
	// it off (one origin connection per request).
	MaxIdleConnsPerOrigin int           // idle connections kept per origin (host:port)
	MaxIdleConns          int           // idle connections kept in all
	MaxConnsPerOrigin     int           // connections per origin, busy or idle; more requests wait
	PoolIdleTimeout       time.Duration // an idle pooled connection is closed after this

	Logger *slog.Logger // nil: slog.Default()

	stats counters

	mu        sync.Mutex
	ctx       context.Context // canceled by Close: aborts dials and lookups
	cancel    context.CancelFunc
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	served    int // conns being served (not refusals being answered)
	assocs    int
	pool      *originPool    // made on the first forwarded request
	wg        sync.WaitGroup // every goroutine the server started
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("proxy: server closed")

// CheckPassword returns a Credentials func accepting exactly user and
// password. The comparison runs in constant time.
func CheckPassword(user, password string) func(string, string) bool {
	return func(u, p string) bool {
		return constantTimeEqual(u, user) && constantTimeEqual(p, password)
	}
}

func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func limit(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func timeout(v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func (s *Server) idleTimeout() time.Duration { return timeout(s.IdleTimeout, DefaultIdleTimeout) }
func (s *Server) udpIdleTimeout() time.Duration {
	return timeout(s.UDPIdleTimeout, DefaultUDPIdleTimeout)
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// Serve accepts connections on ln and serves SOCKS5 and HTTP on each until
// ln fails or Close is called; it then returns ErrServerClosed or the
// accept error. ln is closed when Serve returns.
func (s *Server) Serve(ln net.Listener) error {
	if s.Dialer == nil {
		return errors.New("proxy: Server.Dialer is nil")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.initLocked()
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			// Running out of file descriptors passes; back off as
			// net/http does instead of spinning or giving up.
			if temporaryAccept(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logger().Warn("proxy: accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.stats.ConnsAccepted.Add(1)
		if !s.track(c) {
			continue
		}
	}
}

// temporaryAccept reports the accept errors worth retrying.
func temporaryAccept(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// track registers c and starts its goroutine, or refuses it when MaxConns
// connections are being served. A refused client is still told why in its
// own protocol, by a goroutine that does nothing else and is itself
// bounded: past that, connections are simply closed.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return false
	}
	max := limit(s.MaxConns, DefaultMaxConns)
	over := max > 0 && s.served >= max
	// Refusals being answered are bounded too (an eighth of the limit,
	// at least 16): past that, connections are simply closed.
	if over && len(s.conns)-s.served >= maxRefusing(max) {
		s.mu.Unlock()
		s.stats.ConnsRejected.Add(1)
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	if !over {
		s.served++
	}
	s.mu.Unlock()
	if over {
		s.stats.ConnsRejected.Add(1)
		go s.serveRefusal(c)
		return true
	}
	s.stats.ConnsActive.Add(1)
	go s.serveConn(c)
	return true
}

func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

func (s *Server) initLocked() {
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[net.Conn]struct{})
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
}

// context is the parent of every dial and lookup; Close cancels it.
func (s *Server) context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	return s.ctx
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops the listeners, closes every client connection and
// association, and returns when all of the server's goroutines are gone.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.initLocked()
	s.cancel()
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	// No request runs any more: every pooled connection is idle.
	s.mu.Lock()
	pool := s.pool
	s.mu.Unlock()
	if pool != nil {
		pool.close()
	}
	return nil
}

// readers recycles the per-connection read buffer used for the first
// byte, the SOCKS handshake and HTTP request headers.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// serveConn serves one client connection: it sniffs the protocol and hands
// over. It owns c and closes it.
func (s *Server) serveConn(c net.Conn) {
	// Deferred in this order so that the gauge is down before Close,
	// waiting on untrack, can return.
	defer s.untrack(c)
	defer func() {
		s.mu.Lock()
		s.served--
		s.mu.Unlock()
		s.stats.ConnsActive.Add(^uint64(0))
	}()
	defer func() {
		// A bug in a handler must cost one connection, not the process.
		if p := recover(); p != nil {
			s.logger().Error("proxy: panic serving connection", "client", c.RemoteAddr(), "panic", p)
		}
	}()
	if ht := timeout(s.HandshakeTimeout, DefaultHandshakeTimeout); ht > 0 {
		c.SetDeadline(time.Now().Add(ht))
	}
	br := readers.Get().(*bufio.Reader)
	lr := &headerLimit{r: c}
	lr.reset()
	br.Reset(lr)
	putReader := func() {
		if br != nil {
			br.Reset(nil)
			readers.Put(br)
			br = nil
		}
	}
	defer putReader()

	first, err := br.Peek(1)
	if err != nil {
		s.handshakeError(c, "first byte", err)
		return
	}
	switch first[0] {
	case socks5Version:
		s.serveSOCKS(c, br, lr, putReader)
	case socks4Version:
		// SOCKS4 reply: VN 0, CD 91 (rejected or failed).
		c.Write([]byte{0, 91, 0, 0, 0, 0, 0, 0})
		s.badRequest(c, "socks4", errors.New("SOCKS4 is not supported; use SOCKS5"))
	default:
		s.serveHTTP(c, br, lr, putReader)
	}
}

func maxRefusing(max int) int { return 16 + max/8 }

// serveRefusal answers a connection over MaxConns in its protocol: SOCKS5
// "no acceptable methods" (clients report it at once, without retrying
// other methods), HTTP 503.
func (s *Server) serveRefusal(c net.Conn) {
	defer s.untrack(c)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		return
	}
	s.logger().Warn("proxy: connection limit reached, refusing", "client", c.RemoteAddr(), "max_conns", limit(s.MaxConns, DefaultMaxConns))
	if b[0] == socks5Version {
		c.Write([]byte{socks5Version, methodNoAcceptable})
		lingerClose(c)
		return
	}
	c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	lingerClose(c)
}

// lingerClose ends the write side and drains what the client still sends
// (bounded in bytes and time) before the caller closes: closing a socket
// with unread data makes the kernel send a reset, which can destroy the
// error reply before the client has read it.
func lingerClose(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.CopyN(io.Discard, c, 64<<10)
}

// handshakeError counts and logs a client that failed before its request
// was complete: a timeout (slowloris), a reset, or plain EOF.
func (s *Server) handshakeError(c net.Conn, stage string, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.stats.HandshakeTimeouts.Add(1)
		s.logger().Info("proxy: handshake timed out", "client", c.RemoteAddr(), "stage", stage)
		return
	}
	s.logger().Debug("proxy: client went away during handshake", "client", c.RemoteAddr(), "stage", stage, "err", err)
}

// badRequest counts and logs a request that was answered with an error.
func (s *Server) badRequest(c net.Conn, what string, err error) {
	s.stats.BadRequests.Add(1)
	s.logger().Info("proxy: bad request", "client", c.RemoteAddr(), "what", what, "err", err)
}

// resolve turns a request address into an IP:port through the Resolver,
// and never through the host. IP literals sent as names are accepted as
// they are. network is "ip", "ip4" or "ip6".
func (s *Server) resolve(ctx context.Context, network string, a Addr) (netip.AddrPort, error) {
	if a.Name == "" {
		return netip.AddrPortFrom(a.IP.Unmap(), a.Port), nil
	}
	if ip, err := netip.ParseAddr(a.Name); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), a.Port), nil
	}
	if s.Resolver == nil {
		return netip.AddrPort{}, errNoResolver
	}
	ips, err := s.Resolver.LookupNetIP(ctx, network, a.Name)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, &net.DNSError{Err: "no addresses", Name: a.Name, IsNotFound: true}
	}
	return netip.AddrPortFrom(ips[0].Unmap(), a.Port), nil
}

var errNoResolver = errors.New("proxy: no resolver configured for domain names")

// dial resolves and connects to a, within DialTimeout. Addresses are
// tried in the resolver's order until one connects, so an AAAA record on
// a network without IPv6 does not fail the request.
func (s *Server) dial(ctx context.Context, a Addr) (net.Conn, error) {
	if dt := timeout(s.DialTimeout, DefaultDialTimeout); dt > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dt)
		defer cancel()
	}
	if a.Name == "" {
		return s.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a.IP.Unmap(), a.Port).String())
	}
	if ip, err := netip.ParseAddr(a.Name); err == nil {
		return s.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(ip.Unmap(), a.Port).String())
	}
	if s.Resolver == nil {
		return nil, errNoResolver
	}
	ips, err := s.Resolver.LookupNetIP(ctx, "ip", a.Name)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: a.Name, IsNotFound: true}
	}
	var first error
	for _, ip := range ips {
		c, err := s.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(ip.Unmap(), a.Port).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s: %w", a.Name, first)
}
