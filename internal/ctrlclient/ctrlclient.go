// Package ctrlclient is the part of a modem control client (link/mbim,
// link/qmi) that does not depend on the protocol: the reader goroutine
// that decodes the modem's output from its transport, the table of
// requests waiting for their answer, the client's closed and dead
// (transport failed) states, its indication subscribers and reset
// listeners, and Close.
package ctrlclient

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/internal/callbacks"
	"github.com/mhistack/mhistack/internal/ctrlstream"
)

// Result is the answer to a request, or why there is none.
type Result[M any] struct {
	M   M
	Err error
}

// Config configures a Conn. K keys a waiting request; W is what the
// protocol keeps with it (MBIM: the answer type it waits for); M is a
// decoded message.
type Config[K comparable, W any, M comparable] struct {
	// Proto names the protocol ("mbim") in errors and logs.
	Proto string
	// Logger receives diagnostics; it must not be nil.
	Logger *slog.Logger
	// ErrClosed is what requests fail with after Close.
	ErrClosed error
	// Decoder reassembles the modem's output.
	Decoder ctrlstream.Decoder[M]
	// Chunk, if not nil, runs with Mu held before each chunk of output
	// is decoded (MBIM drops its partial input after a reset there).
	Chunk func()
	// Dispatch handles each message; Malformed each decode error. They
	// run on the reader goroutine.
	Dispatch  func(M)
	Malformed func(error)
	// Lost, if not nil, runs with Mu held when the transport failed for
	// good, before the waiting requests fail and the reset listeners
	// are told.
	Lost func()
}

type waiter[W, M any] struct {
	want W
	ch   chan Result[M]
}

// Conn is a control client's transport side. It owns one goroutine, the
// reader, which Close stops; indication subscribers run on it.
type Conn[K comparable, W any, M comparable] struct {
	// Mu guards the table of waiting requests and the closed and dead
	// states, and the protocol keeps its own client state under it
	// too.
	Mu sync.Mutex
	// T is the transport; the Conn owns it and closes it in Close.
	T ctrlstream.Transport

	cfg  Config[K, W, M]
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}

	pending map[K]*waiter[W, M] // guarded by Mu
	closed  bool                // guarded by Mu
	dead    error               // guarded by Mu: the transport failed; every request fails with it

	subs   callbacks.Set[func(M)]
	subMu  sync.Mutex // one indication at a time
	resets callbacks.Set[func()]
}

// New returns a Conn over t. Start it once the protocol's client, which
// its callbacks use, holds it.
func New[K comparable, W any, M comparable](t ctrlstream.Transport, cfg Config[K, W, M]) *Conn[K, W, M] {
	ctx, cancel := context.WithCancel(context.Background())
	return &Conn[K, W, M]{T: t, cfg: cfg, ctx: ctx, stop: cancel, done: make(chan struct{}), pending: map[K]*waiter[W, M]{}}
}

// Start starts the reader: it runs until Close or until the transport
// fails. Call it once.
func (c *Conn[K, W, M]) Start() { go c.read() }

// UsableLocked returns why a request cannot be sent (ErrClosed, or the
// transport's failure), or nil. The caller holds Mu.
func (c *Conn[K, W, M]) UsableLocked() error {
	if c.closed {
		return c.cfg.ErrClosed
	}
	return c.dead
}

// DeadLocked reports whether the transport failed. The caller holds Mu.
func (c *Conn[K, W, M]) DeadLocked() bool { return c.dead != nil }

// WaitingLocked reports whether request k waits for its answer. The
// caller holds Mu.
func (c *Conn[K, W, M]) WaitingLocked(k K) bool { return c.pending[k] != nil }

// AddLocked records that request k waits for an answer (want says
// which, for Complete) and returns the channel the answer comes on. The
// caller holds Mu.
func (c *Conn[K, W, M]) AddLocked(k K, want W) <-chan Result[M] {
	w := &waiter[W, M]{want: want, ch: make(chan Result[M], 1)}
	c.pending[k] = w
	return w.ch
}

// Forget drops request k: an answer that comes now is not waited for.
func (c *Conn[K, W, M]) Forget(k K) {
	c.Mu.Lock()
	delete(c.pending, k)
	c.Mu.Unlock()
}

// Wait waits for the answer to request k on ch (from AddLocked); if ctx
// ends first, k is forgotten and ctx's error returned.
func (c *Conn[K, W, M]) Wait(ctx context.Context, k K, ch <-chan Result[M]) (Result[M], error) {
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		c.Forget(k)
		return Result[M]{}, ctx.Err()
	}
}

// Complete hands r to request k if it waits and match (nil: any)
// accepts what it waits for; it reports whether it did.
func (c *Conn[K, W, M]) Complete(k K, r Result[M], match func(want W) bool) bool {
	c.Mu.Lock()
	w := c.pending[k]
	if w == nil || (match != nil && !match(w.want)) {
		c.Mu.Unlock()
		return false
	}
	delete(c.pending, k)
	c.Mu.Unlock()
	w.ch <- r
	return true
}

// FailAll fails every waiting request with err.
func (c *Conn[K, W, M]) FailAll(err error) {
	c.Mu.Lock()
	pend := c.pending
	c.pending = map[K]*waiter[W, M]{}
	c.Mu.Unlock()
	for _, w := range pend {
		w.ch <- Result[M]{Err: err}
	}
}

// NotifyReset handles a reset of the modem: reset runs with Mu held (the
// protocol forgets its state), then the waiting requests fail with err
// and the reset listeners are told.
func (c *Conn[K, W, M]) NotifyReset(err error, reset func()) {
	c.Mu.Lock()
	pend := c.pending
	c.pending = map[K]*waiter[W, M]{}
	reset()
	c.Mu.Unlock()
	for _, w := range pend {
		w.ch <- Result[M]{Err: err}
	}
	c.Reset()
}

// Subscribe registers fn for every indication (Indicate).
func (c *Conn[K, W, M]) Subscribe(fn func(M)) (cancel func()) { return c.subs.Add(fn) }

// Indicate hands m to every subscriber, one indication at a time.
func (c *Conn[K, W, M]) Indicate(m M) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	for _, fn := range c.subs.All() {
		fn(m)
	}
}

// OnReset registers fn, which Reset calls.
func (c *Conn[K, W, M]) OnReset(fn func()) (cancel func()) { return c.resets.Add(fn) }

// Reset tells the reset listeners that the modem lost its state under
// the client. Call it without holding Mu.
func (c *Conn[K, W, M]) Reset() {
	for _, fn := range c.resets.All() {
		fn()
	}
}

// Close stops the reader and closes the transport; waiting requests fail
// with ErrClosed. If the Conn was closed before, Close waits for the
// reader and returns nil. Otherwise closing runs first, with Mu held;
// what it returns, if not nil, runs next, while requests can still be
// made (MBIM's CLOSE, QMI's client ID releases).
func (c *Conn[K, W, M]) Close(closing func() func()) error {
	c.Mu.Lock()
	if c.closed {
		c.Mu.Unlock()
		<-c.done
		return nil
	}
	last := closing()
	c.Mu.Unlock()
	if last != nil {
		last()
	}
	c.Mu.Lock()
	c.closed = true
	c.Mu.Unlock()
	c.stop()
	err := c.T.Close()
	<-c.done
	c.FailAll(c.cfg.ErrClosed)
	return err
}

// read is the reader goroutine: it decodes the transport's output and
// dispatches it until Close or a transport failure.
func (c *Conn[K, W, M]) read() {
	defer close(c.done)
	for {
		chunk, err := c.T.Recv(c.ctx)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil && len(chunk) == 0 {
			c.cfg.Logger.Warn(c.cfg.Proto+": transport failed", "err", err)
			c.Mu.Lock()
			c.dead = fmt.Errorf("%s: transport: %w", c.cfg.Proto, err)
			if c.cfg.Lost != nil {
				c.cfg.Lost()
			}
			dead := c.dead
			c.Mu.Unlock()
			c.FailAll(dead)
			// Users waiting on indications (a connected session)
			// would otherwise never learn that nothing will come.
			c.Reset()
			return
		}
		if c.cfg.Chunk != nil {
			c.Mu.Lock()
			c.cfg.Chunk()
			c.Mu.Unlock()
		}
		ctrlstream.Feed(c.cfg.Decoder, chunk, c.cfg.Dispatch, c.cfg.Malformed)
	}
}

// NextID returns the transaction ID after last that free accepts:
// transactions count 1..limit and wrap to 1, skipping IDs in use.
func NextID[T ~uint16 | ~uint32](last, limit T, free func(T) bool) T {
	for {
		last++
		if last == 0 || last > limit {
			last = 1
		}
		if free(last) {
			return last
		}
	}
}

// Dial makes a client on the control port open opens, handing open the
// function MHI calls when the modem resets (it calls notifyReset on the
// client; it only signals, as MHI's reset fan-out must not block), then
// starts the client (MBIM's OPEN, QMI's CTL Sync). A client that does not
// start is closed and the error returned.
func Dial[C interface{ Close() error }](open func(onReset func()) (ctrlstream.Transport, error),
	newClient func(ctrlstream.Transport) C, notifyReset func(C), start func(C) error) (C, error) {
	var none C
	var cl atomic.Pointer[C]
	t, err := open(func() {
		if c := cl.Load(); c != nil {
			notifyReset(*c)
		}
	})
	if err != nil {
		return none, err
	}
	c := newClient(t)
	cl.Store(&c)
	if err := start(c); err != nil {
		c.Close()
		return none, err
	}
	return c, nil
}
