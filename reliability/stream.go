package reliability

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
)

// A stream is n pseudo-random bytes (ChaCha8 from a seed) moved one way
// through the pipeline, hashed by both ends. The host server speaks a
// one-line protocol: the client sends mode ('D' download, 'U' upload), n
// and the seed; for 'D' the server sends the bytes, for 'U' it reads them
// and answers with their SHA-256.
type stream struct {
	n    int64
	seed uint64
	// received is the receiver's progress: what recovery is measured
	// against.
	received atomic.Int64
}

const chunk = 64 << 10

func newSource(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return rand.NewChaCha8(s)
}

// send writes s.n bytes of the stream to w, waiting at g (nil: no gate)
// before every chunk, and returns their SHA-256.
func (s *stream) send(w io.Writer, g *gate) ([32]byte, error) {
	src := newSource(s.seed)
	h := sha256.New()
	buf := make([]byte, chunk)
	for off := int64(0); off < s.n; {
		if g != nil {
			if err := g.wait(off); err != nil {
				return [32]byte{}, err
			}
		}
		b := buf[:min(int64(len(buf)), s.n-off)]
		src.Read(b)
		h.Write(b)
		if _, err := w.Write(b); err != nil {
			return [32]byte{}, fmt.Errorf("after %d of %d bytes: %w", off, s.n, err)
		}
		off += int64(len(b))
	}
	return sum(h), nil
}

// receive reads s.n bytes from r, publishing progress, and returns their
// SHA-256.
func (s *stream) receive(r io.Reader) ([32]byte, error) {
	h := sha256.New()
	buf := make([]byte, chunk)
	var got int64
	for got < s.n {
		k, err := r.Read(buf[:min(int64(len(buf)), s.n-got)])
		h.Write(buf[:k])
		got += int64(k)
		s.received.Store(got)
		if err != nil {
			return [32]byte{}, fmt.Errorf("after %d of %d bytes: %w", got, s.n, err)
		}
	}
	return sum(h), nil
}

func sum(h hash.Hash) (s [32]byte) {
	h.Sum(s[:0])
	return s
}

// streamServer serves streams on the host; uploads register themselves
// so that the test can watch their progress. downloadGate paces
// downloads.
type streamServer struct {
	*hostServer
	downloadGate *gate

	mu      sync.Mutex
	uploads map[uint64]*stream // by seed
}

func newStreamServer(t TB, g *gate) *streamServer {
	s := &streamServer{downloadGate: g, uploads: map[uint64]*stream{}}
	s.hostServer = newHostServer(t, s.serve)
	return s
}

func (s *streamServer) serve(c net.Conn) {
	var hdr [17]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	st := &stream{n: int64(binary.LittleEndian.Uint64(hdr[1:])), seed: binary.LittleEndian.Uint64(hdr[9:])}
	switch hdr[0] {
	case 'D':
		st.send(c, s.downloadGate)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		io.Copy(io.Discard, c) // until the client closes
	case 'U':
		s.mu.Lock()
		s.uploads[st.seed] = st
		s.mu.Unlock()
		h, err := st.receive(c)
		if err != nil {
			return
		}
		c.Write(h[:])
		io.Copy(io.Discard, c)
	}
}

// upload returns the server's side of the upload with seed, once it has
// started.
func (s *streamServer) upload(seed uint64) *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uploads[seed]
}

func header(mode byte, n int64, seed uint64) []byte {
	var hdr [17]byte
	hdr[0] = mode
	binary.LittleEndian.PutUint64(hdr[1:], uint64(n))
	binary.LittleEndian.PutUint64(hdr[9:], seed)
	return hdr[:]
}

// download asks for s over c and checks the bytes against the stream's
// hash, computed here from the seed.
func download(c net.Conn, s *stream) error {
	if _, err := c.Write(header('D', s.n, s.seed)); err != nil {
		return err
	}
	want := make(chan [32]byte, 1)
	go func() {
		w, _ := (&stream{n: s.n, seed: s.seed}).send(io.Discard, nil)
		want <- w
	}()
	got, err := s.receive(c)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if w := <-want; got != w {
		return fmt.Errorf("download of %d bytes: SHA-256 %x…, sent %x…", s.n, got[:6], w[:6])
	}
	return nil
}

// upload sends s over c, paced by g, and checks the server's hash.
func upload(c net.Conn, s *stream, g *gate) error {
	if _, err := c.Write(header('U', s.n, s.seed)); err != nil {
		return err
	}
	sent, err := s.send(c, g)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	var got [32]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return fmt.Errorf("upload: reading the server's hash: %w", err)
	}
	if got != sent {
		return fmt.Errorf("upload of %d bytes: the server hashed %x…, sent %x…", s.n, got[:6], sent[:6])
	}
	return nil
}

// gate holds senders at an offset until the test releases it: the fault
// storm releases each stretch of the transfer as a fault starts, so that
// every fault lands on a stream in flight however fast the path is.
type gate struct {
	mu       sync.Mutex
	released int64
	changed  chan struct{}
	ctx      context.Context
}

func newGate(ctx context.Context) *gate {
	return &gate{changed: make(chan struct{}), ctx: ctx}
}

var errGateClosed = errors.New("gate: test over")

func (g *gate) wait(off int64) error {
	for {
		g.mu.Lock()
		if off < g.released {
			g.mu.Unlock()
			return nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-g.ctx.Done():
			return errGateClosed
		}
	}
}

// releasedUpTo is how far senders may go now.
func (g *gate) releasedUpTo() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.released
}

func (g *gate) release(upTo int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if upTo > g.released {
		g.released = upTo
		close(g.changed)
		g.changed = make(chan struct{})
	}
}
