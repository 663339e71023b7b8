package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"sync"
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

// originPool keeps persistent connections to origins (host:port as the
// client named it) for the next forwarded request. It runs no goroutine
// of its own: the goroutine serving a request takes a connection (get),
// writes the request and reads the response on it itself (forward.go),
// and gives it back (put) or closes it (drop). An idle connection's
// timer closes it after the idle timeout. Connections dial through the
// server's Dialer and Resolver (s.dial: never the host's resolver).
//
// Limits: MaxConnsPerOrigin connections per origin, busy or idle (a
// request beyond it waits for one to be put back or closed);
// MaxIdleConnsPerOrigin idle per origin and MaxIdleConns idle in all (a
// connection put back beyond either is closed); a negative
// MaxIdleConnsPerOrigin keeps none (one connection per request). A zero
// or negative MaxIdleConns or MaxConnsPerOrigin is no limit.
type originPool struct {
	s                 *Server
	maxIdlePerOrigin  int
	maxIdle           int
	maxConnsPerOrigin int
	idleTimeout       time.Duration

	mu     sync.Mutex
	closed bool
	idle   map[string][]*originConn // per origin, the most recently used last
	nidle  int
	open   map[string]int           // connections per origin, busy or idle
	freed  map[string]chan struct{} // closed when a connection to the origin is put back or closed
}

func (s *Server) newPool() *originPool {
	return &originPool{
		s:                 s,
		maxIdlePerOrigin:  limit(s.MaxIdleConnsPerOrigin, DefaultMaxIdleConnsPerOrigin),
		maxIdle:           limit(s.MaxIdleConns, DefaultMaxIdleConns),
		maxConnsPerOrigin: limit(s.MaxConnsPerOrigin, DefaultMaxConnsPerOrigin),
		idleTimeout:       timeout(s.PoolIdleTimeout, DefaultPoolIdleTimeout),
		idle:              make(map[string][]*originConn),
		open:              make(map[string]int),
		freed:             make(map[string]chan struct{}),
	}
}

// originPool is the server's pool, made on first use.
func (s *Server) originPool() *originPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil {
		s.pool = s.newPool()
	}
	return s.pool
}

// keepAlive reports whether connections are kept at all.
func (p *originPool) keepAlive() bool { return p.maxIdlePerOrigin >= 0 }

// originConn is a connection to an origin, owned by the pool while it
// idles and by one request's goroutine while it is used.
type originConn struct {
	*poolConn
	key   string
	limit *headerLimit // bounds a response head
	br    *bufio.Reader
	bw    *bufio.Writer
	// reused: the connection has carried a request before (a pool hit).
	reused bool
	timer  *time.Timer // the idle timeout while in the pool
}

// readable reports whether a read of the response returns without
// waiting: bytes are buffered above the connection or queued on it.
func (oc *originConn) readable() bool { return oc.br.Buffered() > 0 || readable(oc.Conn) }

// closedByOrigin reports whether the origin has closed an idle
// connection (or sent on it unasked). A host socket is asked without
// waiting (recv MSG_PEEK|MSG_DONTWAIT, recv(2)); any other conn (the
// stack's) by a read that waits at most closeProbe, as a read whose
// deadline has passed does not look at the connection at all.
func (oc *originConn) closedByOrigin() bool {
	if oc.br.Buffered() > 0 {
		return true
	}
	if sc, ok := oc.Conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			var b [1]byte
			var rerr error
			if rc.Control(func(fd uintptr) {
				_, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			}) == nil {
				return !errors.Is(rerr, unix.EAGAIN) // bytes, EOF or an error
			}
		}
	}
	var b [1]byte
	oc.Conn.SetReadDeadline(time.Now().Add(closeProbe))
	n, err := oc.Conn.Read(b[:])
	oc.Conn.SetReadDeadline(time.Time{})
	oc.readAt = time.Time{} // the next read sets the idle deadline again
	return n > 0 || !errors.Is(err, os.ErrDeadlineExceeded)
}

// closeProbe is how long closedByOrigin waits on a conn it cannot ask
// without waiting: an origin's FIN that has arrived is seen at once.
const closeProbe = 100 * time.Microsecond

// get returns an idle connection to the origin key (at a), the most
// recently used first, or dials a new one; fresh skips the idle ones.
// At MaxConnsPerOrigin it waits for a connection to come free or for ctx.
func (p *originPool) get(ctx context.Context, key string, a Addr, fresh bool) (*originConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrServerClosed
		}
		if l := p.idle[key]; len(l) > 0 && !fresh {
			oc := l[len(l)-1]
			l[len(l)-1] = nil
			p.idle[key] = l[:len(l)-1]
			if len(l) == 1 {
				delete(p.idle, key)
			}
			p.nidle--
			oc.timer.Stop() // if it fired, its func finds oc gone from the list
			p.mu.Unlock()
			oc.reused = true
			return oc, nil
		}
		if p.maxConnsPerOrigin <= 0 || p.open[key] < p.maxConnsPerOrigin {
			p.open[key]++
			p.mu.Unlock()
			c, err := p.s.dial(ctx, a)
			if err != nil {
				p.s.stats.DialErrors.Add(1)
				p.mu.Lock()
				p.releaseLocked(key)
				p.mu.Unlock()
				return nil, err
			}
			pc := &poolConn{Conn: c, idle: p.s.idleTimeout(), up: &p.s.stats.BytesUp}
			lim := &headerLimit{r: pc, n: -1}
			return &originConn{poolConn: pc, key: key, limit: lim,
				br: bufio.NewReaderSize(lim, 4<<10), bw: bufio.NewWriterSize(pc, 4<<10)}, nil
		}
		ch := p.freed[key]
		if ch == nil {
			ch = make(chan struct{})
			p.freed[key] = ch
		}
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// releaseLocked forgets one of key's connections and wakes the requests
// waiting for one.
func (p *originPool) releaseLocked(key string) {
	if p.open[key]--; p.open[key] <= 0 {
		delete(p.open, key)
	}
	p.wakeLocked(key)
}

func (p *originPool) wakeLocked(key string) {
	if ch := p.freed[key]; ch != nil {
		close(ch)
		delete(p.freed, key)
	}
}

// put gives back a connection whose last response was read whole and
// that both ends allow to persist; beyond the idle limits it is closed.
func (p *originPool) put(oc *originConn) {
	p.mu.Lock()
	if p.closed || !p.keepAlive() || len(p.idle[oc.key]) >= p.maxIdlePerOrigin ||
		p.maxIdle > 0 && p.nidle >= p.maxIdle {
		p.releaseLocked(oc.key)
		p.mu.Unlock()
		oc.Close()
		return
	}
	p.idle[oc.key] = append(p.idle[oc.key], oc)
	p.nidle++
	if oc.timer == nil {
		oc.timer = time.AfterFunc(p.idleTimeout, func() { p.expire(oc) })
	} else {
		oc.timer.Reset(p.idleTimeout)
	}
	p.wakeLocked(oc.key)
	p.mu.Unlock()
}

// expire closes oc if it is still idle: its idle timeout passed.
func (p *originPool) expire(oc *originConn) {
	p.mu.Lock()
	l := p.idle[oc.key]
	for i, c := range l {
		if c == oc {
			p.idle[oc.key] = append(l[:i], l[i+1:]...)
			if len(p.idle[oc.key]) == 0 {
				delete(p.idle, oc.key)
			}
			p.nidle--
			p.releaseLocked(oc.key)
			p.mu.Unlock()
			oc.Close()
			return
		}
	}
	p.mu.Unlock()
}

// drop closes a connection that cannot carry another request.
func (p *originPool) drop(oc *originConn) {
	p.mu.Lock()
	p.releaseLocked(oc.key)
	p.mu.Unlock()
	oc.Close()
}

// close closes the idle connections; connections put back later are
// closed too. The server calls it once no request runs.
func (p *originPool) close() {
	p.mu.Lock()
	p.closed = true
	var idle []*originConn
	for key, l := range p.idle {
		idle = append(idle, l...)
		delete(p.idle, key)
	}
	p.nidle = 0
	for _, oc := range idle {
		p.releaseLocked(oc.key)
	}
	p.mu.Unlock()
	for _, oc := range idle {
		oc.timer.Stop()
		oc.Close()
	}
}

// poolConn is an origin connection in the pool. Like idleConn it fails
// a read or write that stalls for the idle timeout; each direction keeps
// its own deadline, as a request's body may be written on another
// goroutine than the one reading the response. Writes count as BytesUp;
// nread counts the bytes read since the request was written (whether an
// origin that failed a reused connection had answered anything).
type poolConn struct {
	net.Conn
	idle            time.Duration
	readAt, writeAt time.Time // owned by the reader and the writer
	nread           int64     // owned by the reader
	up              *atomic.Uint64
}

func (c *poolConn) Read(b []byte) (int, error) {
	if now := time.Now(); c.idle > 0 && now.Sub(c.readAt) > c.idle/4 {
		c.readAt = now
		c.Conn.SetReadDeadline(now.Add(c.idle))
	}
	n, err := c.Conn.Read(b)
	c.nread += int64(n)
	return n, err
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
// socket does (SIOCINQ, tcp(7)); any other conn reports false.
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
