package mhi

import (
	"context"
	"fmt"
	"sync"

	"github.com/mhistack/mhistack/mhi/pci"
)

// ControlMTU is the largest control message (Linux mhi_wwan_ctrl
// MHI_WWAN_MAX_MTU).
const ControlMTU = 0x8000

// ControlOptions configure a ControlPort.
type ControlOptions struct {
	// RxBuffers is the number of DL buffers kept queued (default 4, at
	// most the ring's free count).
	RxBuffers int
	// TxBuffers is the number of UL buffers (default 4).
	TxBuffers int
	// BufSize is the size of each buffer (default ControlMTU).
	BufSize int
	// OnReset, if set, is called when the modem crashed (EventSysErr) and
	// again when it was recovered (EventRecovered): the function behind
	// the port lost its state (an MBIM function is closed, QMI client IDs
	// are gone). It runs on the controller's event goroutine and must not
	// block.
	OnReset func()
}

// withDefaults fills in the defaults and bounds the buffer counts by the
// free slots of the pair's rings: what OpenControl allocates.
func (o ControlOptions) withDefaults(ul, dl ChannelConfig) ControlOptions {
	if o.RxBuffers <= 0 {
		o.RxBuffers = 4
	}
	if o.TxBuffers <= 0 {
		o.TxBuffers = 4
	}
	if o.BufSize <= 0 {
		o.BufSize = ControlMTU
	}
	o.RxBuffers = min(o.RxBuffers, dl.Elements-1)
	o.TxBuffers = min(o.TxBuffers, ul.Elements-1)
	return o
}

// ControlPort is a message port over a control channel pair (MBIM, QMI,
// DUN, …): Send queues one message as one transfer; Recv returns one
// message, with OVERFLOW pieces joined. Like Linux mhi_wwan_ctrl, a DL
// buffer is queued again only after its message has been received, so a
// slow reader holds the device back instead of losing messages.
type ControlPort struct {
	c      *Controller
	ul, dl *Channel
	size   int
	unsub  func()

	mu       sync.Mutex
	cond     *sync.Cond
	rxFree   []*pci.Buffer // DL buffers to queue
	rxDone   []Completion  // completed DL buffers, in order
	txFree   []*pci.Buffer
	all      []*pci.Buffer
	closed   bool
	down     error // set when the device is gone: waits fail with it
	overflow int   // bytes of a message being joined that exceeded the limit
}

// OpenControl claims, starts and fills the control channel pair name.
func (c *Controller) OpenControl(ctx context.Context, name string, opts ControlOptions) (*ControlPort, error) {
	if opts.BufSize > MaxTRELen {
		return nil, fmt.Errorf("mhi: control buffer size %d exceeds a TRE (%d)", opts.BufSize, MaxTRELen)
	}
	p := &ControlPort{c: c}
	p.cond = sync.NewCond(&p.mu)
	ul, dl, err := c.ChannelPair(name,
		ChannelOptions{OnComplete: p.txDone, Release: p.txRelease},
		ChannelOptions{OnComplete: p.rxComplete, Release: p.rxRelease})
	if err != nil {
		return nil, err
	}
	p.ul, p.dl = ul, dl
	opts = opts.withDefaults(ul.cfg, dl.cfg)
	p.size = opts.BufSize
	rx, tx := opts.RxBuffers, opts.TxBuffers
	dma := c.dev.DMA()
	for i := 0; i < rx+tx; i++ {
		b, err := dma.Alloc(opts.BufSize, 64)
		if err != nil {
			p.free()
			return nil, fmt.Errorf("mhi: %s control buffers: %w", name, err)
		}
		p.all = append(p.all, b)
		if i < rx {
			p.rxFree = append(p.rxFree, b)
		} else {
			p.txFree = append(p.txFree, b)
		}
	}
	if err := ul.Start(ctx); err != nil {
		p.free()
		return nil, err
	}
	if err := dl.Start(ctx); err != nil {
		_ = ul.Reset(ctx)
		p.free()
		return nil, err
	}
	p.unsub = c.Subscribe(func(e Event) {
		switch e.Kind {
		case EventSysErr:
			if opts.OnReset != nil {
				opts.OnReset()
			}
		case EventRecovered:
			p.refill()
			if opts.OnReset != nil {
				opts.OnReset()
			}
		case EventRemoved:
			// No message will ever come: wake Recv and Send, which
			// may wait with no deadline of their own.
			p.mu.Lock()
			p.down = ErrRemoved
			p.cond.Broadcast()
			p.mu.Unlock()
		}
	})
	p.refill()
	return p, nil
}

// refill queues every free DL buffer.
func (p *ControlPort) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	queued := 0
	for len(p.rxFree) > 0 && !p.closed {
		b := p.rxFree[len(p.rxFree)-1]
		if err := p.dl.Queue(b, p.size, EOT); err != nil {
			break
		}
		p.rxFree = p.rxFree[:len(p.rxFree)-1]
		queued++
	}
	if queued > 0 {
		p.dl.Ring()
	}
}

func (p *ControlPort) rxComplete(cpl Completion) {
	p.mu.Lock()
	p.rxDone = append(p.rxDone, cpl)
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *ControlPort) rxRelease(b *pci.Buffer) {
	p.mu.Lock()
	p.rxFree = append(p.rxFree, b)
	p.mu.Unlock()
}

func (p *ControlPort) txDone(cpl Completion) { p.txRelease(cpl.Buf) }

func (p *ControlPort) txRelease(b *pci.Buffer) {
	p.mu.Lock()
	p.txFree = append(p.txFree, b)
	p.cond.Broadcast()
	p.mu.Unlock()
}

// waitLocked waits on the port's condition until ready, ctx ends, the port
// is closed or the device is removed. Other controller state changes
// (SYS_ERR, recovery) do not end the wait: the port works again after
// recovery.
func (p *ControlPort) waitLocked(ctx context.Context, ready func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	for !ready() {
		if p.closed {
			return ErrClosed
		}
		if p.down != nil {
			return p.down
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		p.cond.Wait()
	}
	return nil
}

// Send queues msg as one transfer and rings the doorbell. It waits for a
// free UL buffer until ctx ends.
func (p *ControlPort) Send(ctx context.Context, msg []byte) error {
	if len(msg) == 0 || len(msg) > p.size {
		return fmt.Errorf("mhi: %s: message of %d bytes outside 1..%d", p.ul, len(msg), p.size)
	}
	p.mu.Lock()
	if err := p.waitLocked(ctx, func() bool { return len(p.txFree) > 0 }); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("mhi: send on %s: %w", p.ul, err)
	}
	b := p.txFree[len(p.txFree)-1]
	p.txFree = p.txFree[:len(p.txFree)-1]
	p.mu.Unlock()
	copy(b.Mem, msg)
	if err := p.ul.Queue(b, len(msg), EOT); err != nil {
		p.txRelease(b)
		return err
	}
	p.ul.Ring()
	return nil
}

// Recv returns the next message, joining OVERFLOW pieces (up to
// ControlMTU·4 bytes; a longer one is truncated and reported). It waits
// until ctx ends.
func (p *ControlPort) Recv(ctx context.Context) ([]byte, error) {
	const limit = 4 * ControlMTU
	var msg []byte
	for {
		p.mu.Lock()
		if err := p.waitLocked(ctx, func() bool { return len(p.rxDone) > 0 }); err != nil {
			p.mu.Unlock()
			return nil, fmt.Errorf("mhi: receive on %s: %w", p.dl, err)
		}
		cpl := p.rxDone[0]
		p.rxDone = p.rxDone[1:]
		p.mu.Unlock()
		n := min(cpl.Len, limit-len(msg))
		msg = append(msg, cpl.Buf.Mem[:n]...)
		p.rxRelease(cpl.Buf)
		p.refill()
		if cpl.Code != CodeOverflow {
			if len(msg) == limit {
				return msg, fmt.Errorf("mhi: receive on %s: message longer than %d bytes truncated", p.dl, limit)
			}
			return msg, nil
		}
	}
}

// Close resets both channels and frees the buffers.
func (p *ControlPort) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	if p.unsub != nil {
		p.unsub()
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.c.timeout)
	defer cancel()
	err := p.dl.Reset(ctx)
	if e := p.ul.Reset(ctx); err == nil {
		err = e
	}
	p.free()
	return err
}

func (p *ControlPort) free() {
	dma := p.c.dev.DMA()
	for _, b := range p.all {
		_ = dma.Free(b)
	}
	p.all = nil
}
