// Package pairconn runs a UL/DL channel pair as a connection of whole
// messages, one MHI transfer descriptor each: what the boot and flashing
// protocols (SAHARA, FIREHOSE) need from the engine. A message larger
// than one buffer leaves as a chain of TREs with EOT on the last, as
// Linux drivers/accel/qaic/sahara.c sends image data (the device consumes
// nothing before EOT); a DL transfer split over buffers (OVERFLOW
// completions) is joined again before Recv returns it. A reader that
// falls behind holds the device back: once its queue of received messages
// is full, DL buffers are given back only as Recv takes messages, so the
// device waits for buffers instead of messages being lost.
//
//	conn, err := pairconn.Open(ctx, ctrl, dev.DMA(), "FIREHOSE", pairconn.Options{})
//	err = conn.Send(ctx, request)
//	reply, err := conn.Recv(ctx)
//	conn.Close()
//
// Send and Recv may be called from different goroutines; completions
// arrive on the controller's interrupt goroutine, which only hands buffers
// back and never blocks.
package pairconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

// Defaults of Options.
const (
	DefaultBufLen     = MaxBufLen
	DefaultRxBufs     = 8
	DefaultMaxMessage = 4 << 20
)

// MaxBufLen is the most one TRE carries: its length field is 16 bits
// (docs/PROTOCOL.md, transfer ring elements); qaic sends 0xFFFF-byte TREs.
const MaxBufLen = 0xFFFF

// ErrTooLarge is returned by Send for a message that needs more TREs than
// the UL ring holds at once.
var ErrTooLarge = errors.New("pairconn: message larger than the UL ring can carry in one transfer")

// ErrClosed is returned by Send and Recv after Close.
var ErrClosed = errors.New("pairconn: connection closed")

// Options sizes a connection. Zero values take the defaults.
type Options struct {
	BufLen int // bytes per buffer (one TRE), at most MaxBufLen
	RxBufs int // DL buffers kept queued (bounded by the DL ring)
	// TxBufs is the number of UL buffers (default: the UL ring's
	// capacity); a message may span at most TxBufs buffers.
	TxBufs int
	// MaxMessage bounds a joined DL message: a longer one is dropped
	// and counted (Dropped), never grown without bound.
	MaxMessage int
}

// Conn is an open channel pair.
type Conn struct {
	ul, dl *mhi.Channel
	dma    pci.DMA
	o      Options
	bufs   []*pci.Buffer
	txFree chan *pci.Buffer
	rx     chan []byte
	done   chan struct{}
	sendMu sync.Mutex

	dropped atomic.Uint64

	mu      sync.Mutex // guards partial, over, backlog and held
	partial []byte
	over    bool // the message being joined passed MaxMessage
	// backlog holds messages that found rx full, in order, and held the
	// DL buffers completed meanwhile: they go back to the device when
	// Recv has moved the backlog into rx (refill).
	backlog  [][]byte
	held     []*pci.Buffer
	closeOne sync.Once
}

// Open claims the pair name of c, allocates its buffers from dma, starts
// both channels and queues the receive buffers.
func Open(ctx context.Context, c *mhi.Controller, dma pci.DMA, name string, o Options) (*Conn, error) {
	if o.BufLen <= 0 || o.BufLen > MaxBufLen {
		o.BufLen = DefaultBufLen
	}
	if o.RxBufs <= 0 {
		o.RxBufs = DefaultRxBufs
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	p := &Conn{dma: dma, done: make(chan struct{})}
	ul, dl, err := c.ChannelPair(name,
		mhi.ChannelOptions{OnComplete: func(c mhi.Completion) { p.txFree <- c.Buf }, Release: func(b *pci.Buffer) { p.txFree <- b }},
		mhi.ChannelOptions{OnComplete: p.onRX})
	if err != nil {
		return nil, err
	}
	p.ul, p.dl = ul, dl
	// A ring of N elements holds N-1 TREs.
	o.RxBufs = max(1, min(o.RxBufs, dl.Elements()-1))
	if o.TxBufs <= 0 || o.TxBufs > ul.Elements()-1 {
		o.TxBufs = max(1, ul.Elements()-1)
	}
	p.o = o
	p.txFree = make(chan *pci.Buffer, o.TxBufs)
	p.rx = make(chan []byte, 4*o.RxBufs)
	for i := 0; i < o.RxBufs+o.TxBufs; i++ {
		b, err := dma.Alloc(o.BufLen, 64)
		if err != nil {
			p.freeBufs()
			return nil, fmt.Errorf("pairconn: %s buffers: %w", name, err)
		}
		p.bufs = append(p.bufs, b)
		if i >= o.RxBufs {
			p.txFree <- b
		}
	}
	if err := ul.Start(ctx); err != nil {
		p.freeBufs()
		return nil, fmt.Errorf("start %s UL: %w", name, err)
	}
	if err := dl.Start(ctx); err != nil {
		_ = ul.Reset(ctx)
		p.freeBufs()
		return nil, fmt.Errorf("start %s DL: %w", name, err)
	}
	for _, b := range p.bufs[:o.RxBufs] {
		if err := dl.Queue(b, o.BufLen, mhi.EOT); err != nil {
			p.Close()
			return nil, err
		}
	}
	dl.Ring()
	return p, nil
}

// MaxSend returns the largest message Send accepts.
func (p *Conn) MaxSend() int { return p.o.TxBufs * p.o.BufLen }

// Dropped returns how many DL messages were lost: longer than
// MaxMessage. A message arriving while the queue is full is kept, and the
// device is held back (see the package comment), not dropped.
func (p *Conn) Dropped() uint64 { return p.dropped.Load() }

// onRX runs on the controller's interrupt goroutine: join the pieces of a
// transfer, give the buffer straight back to the device unless messages
// wait for room in rx (then hold it until Recv makes room).
func (p *Conn) onRX(c mhi.Completion) {
	p.mu.Lock()
	if !p.over {
		if len(p.partial)+c.Len > p.o.MaxMessage {
			p.over, p.partial = true, nil
		} else {
			p.partial = append(p.partial, c.Buf.Mem[:c.Len]...)
		}
	}
	var msg []byte
	end := c.Code != mhi.CodeOverflow
	if end {
		if p.over {
			p.dropped.Add(1)
		} else {
			msg = p.partial
			if msg == nil {
				msg = []byte{}
			}
		}
		p.partial, p.over = nil, false
	}
	if msg != nil {
		// Under mu, so that rx and the backlog keep the device's order.
		if len(p.backlog) > 0 {
			p.backlog = append(p.backlog, msg)
		} else {
			select {
			case p.rx <- msg:
			default:
				p.backlog = append(p.backlog, msg)
			}
		}
	}
	hold := len(p.backlog) > 0
	if hold {
		p.held = append(p.held, c.Buf)
	}
	p.mu.Unlock()
	if !hold && p.dl.Queue(c.Buf, p.o.BufLen, mhi.EOT) == nil {
		p.dl.Ring()
	}
}

// refill moves backlogged messages into rx while it has room and, once
// the backlog is empty, gives the held DL buffers back to the device.
// At most RxBufs messages wait in the backlog: each one completed while
// it is not empty holds a buffer.
func (p *Conn) refill() {
	p.mu.Lock()
	for len(p.backlog) > 0 {
		select {
		case p.rx <- p.backlog[0]:
			p.backlog[0] = nil
			p.backlog = p.backlog[1:]
			continue
		default:
		}
		break
	}
	var give []*pci.Buffer
	if len(p.backlog) == 0 {
		p.backlog = nil
		give, p.held = p.held, nil
	}
	p.mu.Unlock()
	// Outside mu: Queue takes the channel's lock, which the interrupt
	// goroutine may hold while it waits for mu in onRX. After Close the
	// channel is reset and Queue refuses.
	queued := false
	for _, b := range give {
		queued = p.dl.Queue(b, p.o.BufLen, mhi.EOT) == nil || queued
	}
	if queued {
		p.dl.Ring()
	}
}

// Send queues b as one transfer and returns once it is queued (not when
// the device consumed it). It waits, bounded by ctx, for UL buffers the
// device has not given back yet.
func (p *Conn) Send(ctx context.Context, b []byte) error {
	n := max(1, (len(b)+p.o.BufLen-1)/p.o.BufLen)
	if n > p.o.TxBufs {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(b), p.MaxSend())
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	got := make([]*pci.Buffer, 0, n)
	giveBack := func() {
		for _, x := range got {
			p.txFree <- x
		}
	}
	for len(got) < n {
		select {
		case x := <-p.txFree:
			got = append(got, x)
		case <-p.done:
			giveBack()
			return ErrClosed
		case <-ctx.Done():
			giveBack()
			return fmt.Errorf("pairconn: %s: no UL buffer back from the device: %w", p.ul.Name(), ctx.Err())
		}
	}
	for i, x := range got {
		k := copy(x.Mem[:p.o.BufLen], b)
		b = b[k:]
		f := mhi.EOT
		if i < n-1 {
			f = mhi.Chain
		}
		if err := p.ul.Queue(x, k, f); err != nil {
			// The TREs already queued belong to the ring now; they
			// come back through Release when the channel is reset.
			for _, y := range got[i:] {
				p.txFree <- y
			}
			return err
		}
	}
	p.ul.Ring()
	return nil
}

// Recv returns the next DL message, waiting until ctx ends.
func (p *Conn) Recv(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.rx:
		p.refill()
		return b, nil
	case <-p.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("pairconn: %s: nothing received: %w", p.dl.Name(), ctx.Err())
	}
}

// Close resets both channels (the controller hands queued buffers back)
// and frees the buffers. Pending Send and Recv return ErrClosed.
func (p *Conn) Close() error {
	var err error
	p.closeOne.Do(func() {
		close(p.done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(p.ul.Reset(ctx), p.dl.Reset(ctx))
		p.freeBufs()
	})
	return err
}

func (p *Conn) freeBufs() {
	for _, b := range p.bufs {
		_ = p.dma.Free(b)
	}
	p.bufs = nil
}
