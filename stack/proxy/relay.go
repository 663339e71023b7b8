package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// copyBufSize is the relay buffer per direction. 32 KiB is io.Copy's
// size; an idle or interactive connection never needs more, and a relay
// holds its buffers for as long as the connection lives.
const copyBufSize = 32 << 10

// bulkBufSize is the buffer a direction moves to once a read fills the
// small one: a download through the stack then crosses to the client in
// a quarter of the writes (and of the client's wake-ups). On a page of
// 50 objects through SOCKS5 (table 11 of docs/BENCHMARKS.md) that took
// about a fifth off the process's CPU per page; 32 KiB reads had come
// back 24 KiB on average, most of them full.
const bulkBufSize = 128 << 10

// copyBufs and bulkBufs recycle relay buffers so that a connection costs
// no large allocation: a busy proxy would otherwise allocate 64 KiB per
// CONNECT. A forwarded response is gathered in one of them too
// (respWriter).
var (
	copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}
	bulkBufs = sync.Pool{New: func() any { b := make([]byte, bulkBufSize); return &b }}
)

// copyBuf is one direction's buffer: copyBufSize from copyBufs until a
// read fills it, then bulkBufSize from bulkBufs. The relay copies
// through it.
type copyBuf struct {
	p    *[]byte
	bulk bool
}

func getCopyBuf() copyBuf { return copyBuf{p: copyBufs.Get().(*[]byte)} }

// read is the buffer for the next read.
func (b *copyBuf) read() []byte { return *b.p }

// got takes note of a read of n bytes, whose data the caller has
// finished with: a full small buffer is swapped for a bulk one.
func (b *copyBuf) got(n int) {
	if !b.bulk && n == len(*b.p) {
		copyBufs.Put(b.p)
		b.p, b.bulk = bulkBufs.Get().(*[]byte), true
	}
}

func (b *copyBuf) release() {
	if b.bulk {
		bulkBufs.Put(b.p)
	} else {
		copyBufs.Put(b.p)
	}
}

// closeWriter is a connection that can send FIN while still reading:
// *net.TCPConn, gVisor's gonet.TCPConn and the stack's TCPConn all are.
type closeWriter interface{ CloseWrite() error }

// lingerer is a connection that can be closed with a reset (RST) rather
// than a FIN, by SetLinger(0): *net.TCPConn is.
type lingerer interface{ SetLinger(sec int) error }

// relay copies between a client and a target until both directions are
// done, then closes both. Returns the bytes sent up (client → target)
// and down. pre is data the client already sent that was buffered while
// reading its request, and goes to the target first.
func (s *Server) relay(client, target net.Conn, pre []byte) (up, down int64) {
	r := relayState{idle: s.idleTimeout(), client: client}
	r.touch()
	if len(pre) > 0 {
		n, err := target.Write(pre)
		up += int64(n)
		s.stats.BytesUp.Add(uint64(n))
		if err != nil {
			r.fail(client, target, err)
			return up, 0
		}
	}
	done := make(chan int64, 1)
	go func() {
		done <- r.copy(target, client, &s.stats.BytesUp)
	}()
	down = r.copy(client, target, &s.stats.BytesDown)
	up += <-done
	client.Close()
	target.Close()
	return up, down
}

// relayState is shared by the two directions of one relay.
type relayState struct {
	idle   time.Duration
	client net.Conn
	last   atomic.Int64 // unix nanos of the last byte moved either way
	// failed is set when a direction stops on an error rather than EOF; the
	// other direction must then be torn down, not half-closed.
	failed atomic.Bool
}

func (r *relayState) touch() { r.last.Store(time.Now().UnixNano()) }

// copy moves src to dst until EOF or an error, in copyBufSize pieces
// until a read fills one, then in bulkBufSize pieces. On EOF it half-closes dst
// (FIN toward that peer) so that the other direction keeps flowing: a
// client that shuts down its sending side still gets the whole answer.
// On an error both conns are closed so that the other direction stops.
//
// The idle timeout is a read deadline refreshed at most every idle/4, so
// a busy stream does not re-arm a timer per read; a deadline that fires
// while the other direction moved data is extended, not fatal.
func (r *relayState) copy(dst, src net.Conn, counter *atomic.Uint64) int64 {
	buf := getCopyBuf()
	defer buf.release()
	var total int64
	var armed time.Time
	for {
		if r.idle > 0 {
			if now := time.Now(); now.Sub(armed) > r.idle/4 {
				armed = now
				src.SetReadDeadline(now.Add(r.idle))
			}
		}
		b := buf.read()
		n, err := src.Read(b)
		if n > 0 {
			r.touch()
			w, werr := dst.Write(b[:n])
			total += int64(w)
			counter.Add(uint64(w))
			if werr != nil {
				var targetErr error
				if dst != r.client {
					targetErr = werr
				}
				r.fail(dst, src, targetErr)
				return total
			}
			buf.got(n)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && r.idle > 0 && !r.failed.Load() {
			since := time.Since(time.Unix(0, r.last.Load()))
			if since < r.idle {
				armed = time.Time{} // the other direction is alive: re-arm
				continue
			}
		}
		if errors.Is(err, io.EOF) && !r.failed.Load() {
			if cw, ok := dst.(closeWriter); ok {
				if cw.CloseWrite() == nil {
					return total
				}
			}
		}
		var targetErr error
		if src != r.client && !errors.Is(err, os.ErrDeadlineExceeded) {
			targetErr = err
		}
		r.fail(dst, src, targetErr)
		return total
	}
}

// fail ends both directions: closing both conns unblocks the other
// goroutine's Read or Write. targetErr, non-nil when the target's side
// failed (the stack aborted the connection because the session's address
// went away, say; not the idle timeout), resets the client's connection,
// so that the client sees an error instead of an end of stream it could
// take for a complete answer.
func (r *relayState) fail(a, b net.Conn, targetErr error) {
	r.failed.Store(true)
	if l, ok := r.client.(lingerer); ok && targetErr != nil {
		l.SetLinger(0)
	}
	a.Close()
	b.Close()
}
