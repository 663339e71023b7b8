package mhi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
)

// rig is one host controller driving one emulated modem on the virtual
// bus (mhitest's rig), in strict mode: a host protocol violation or a DMA
// fault fails the test that caused it. It adds what this package's tests
// share: the controller's events and channel loops.
type rig struct {
	t   testing.TB
	p   *mhi.Profile
	dev *vpci.Device
	// host is the device the controller drives when it is not dev (a
	// vfio-user client); loops allocate from it.
	host pci.Device
	m    *sim.Modem
	c    *mhi.Controller
	// srv serves the modem over vfio-user when host is its client.
	srv *vfiouser.Server

	mu     sync.Mutex
	events []mhi.Event
	evCh   chan mhi.Event
}

func profile(t testing.TB, name string) *mhi.Profile {
	t.Helper()
	p, ok := mhi.Lookup(name)
	if !ok {
		t.Fatalf("no profile %s", name)
	}
	return p
}

func newRig(t testing.TB, name string, so sim.Options, co mhi.Options) *rig {
	t.Helper()
	return newRigProfile(t, profile(t, name), so, co)
}

// newRigProfile is newRig for a profile that is not in the table. A test
// that provokes violations on purpose passes its own so.OnViolation.
func newRigProfile(t testing.TB, p *mhi.Profile, so sim.Options, co mhi.Options) *rig {
	t.Helper()
	return newRigWrap(t, p, so, co, nil)
}

// newRigWrap is newRigProfile whose controller drives wrap(dev) instead of
// the bus device itself (a test that changes what the backend can do).
func newRigWrap(t testing.TB, p *mhi.Profile, so sim.Options, co mhi.Options, wrap func(*vpci.Device) pci.Device) *rig {
	t.Helper()
	o := mhitest.Options{Profile: p, Sim: so, Controller: co}
	if wrap != nil {
		o.Wrap = func(d *vpci.Device) (pci.Device, error) { return wrap(d), nil }
	}
	return newRigWith(t, o)
}

// newRigWith is the rig on mhitest's, left in reset (the test calls
// powerUp), with the controller's events recorded.
func newRigWith(t testing.TB, o mhitest.Options) *rig {
	t.Helper()
	r := &rig{t: t, p: o.Profile, evCh: make(chan mhi.Event, 64)}
	o.Controller.OnEvent = func(e mhi.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		select {
		case r.evCh <- e:
		default:
		}
	}
	o.NoPowerUp = true
	tr := mhitest.New(t, o)
	r.dev, r.m, r.c = tr.Device, tr.Modem, tr.Controller
	if tr.Server != nil {
		r.host, r.srv = tr.Host, tr.Server
	}
	return r
}

func (r *rig) powerUp() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.PowerUp(ctx); err != nil {
		r.t.Fatalf("PowerUp: %v", err)
	}
}

// waitEvent waits for a controller event of the given kind.
func (r *rig) waitEvent(kind mhi.EventKind, d time.Duration) mhi.Event {
	r.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-r.evCh:
			if e.Kind == kind {
				return e
			}
		case <-deadline:
			r.t.Fatalf("no %s event within %v", kind, d)
			return mhi.Event{}
		}
	}
}

// loop drives a UL/DL channel pair whose far end loops data back: it
// sends transfers (chaining TREs for transfers larger than one buffer),
// reassembles OVERFLOW pieces on DL, and hands each received transfer to
// got. DL buffers are re-queued from the completion callback, and after
// SYS_ERR recovery from the Recovered event.
type loop struct {
	r      *rig
	ul, dl *mhi.Channel
	bufLen int

	txFree chan *pci.Buffer
	got    chan []byte

	mu      sync.Mutex
	rxFree  []*pci.Buffer
	partial []byte
	bufs    []*pci.Buffer
}

func newLoop(r *rig, name string, bufLen, rxBufs, txBufs int) *loop {
	r.t.Helper()
	l := &loop{r: r, bufLen: bufLen, txFree: make(chan *pci.Buffer, txBufs), got: make(chan []byte, 4096)}
	ul, dl, err := r.c.ChannelPair(name,
		mhi.ChannelOptions{OnComplete: func(c mhi.Completion) { l.txFree <- c.Buf }, Release: func(b *pci.Buffer) { l.txFree <- b }},
		mhi.ChannelOptions{OnComplete: l.rx, Release: l.rxRelease})
	if err != nil {
		r.t.Fatalf("ChannelPair(%s): %v", name, err)
	}
	l.ul, l.dl = ul, dl
	var dma pci.DMA
	if r.host != nil {
		dma = r.host.DMA()
	} else {
		dma = r.dev.DMA()
	}
	for i := 0; i < rxBufs+txBufs; i++ {
		b, err := dma.Alloc(bufLen, 64)
		if err != nil {
			r.t.Fatal(err)
		}
		l.bufs = append(l.bufs, b)
		if i < rxBufs {
			l.rxFree = append(l.rxFree, b)
		} else {
			l.txFree <- b
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ul.Start(ctx); err != nil {
		r.t.Fatalf("start %s UL: %v", name, err)
	}
	if err := dl.Start(ctx); err != nil {
		r.t.Fatalf("start %s DL: %v", name, err)
	}
	l.refill()
	unsub := r.c.Subscribe(func(e mhi.Event) {
		if e.Kind == mhi.EventRecovered {
			l.refill()
		}
	})
	r.t.Cleanup(unsub)
	return l
}

func (l *loop) refill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for len(l.rxFree) > 0 {
		b := l.rxFree[len(l.rxFree)-1]
		if err := l.dl.Queue(b, l.bufLen, mhi.EOT); err != nil {
			break
		}
		l.rxFree = l.rxFree[:len(l.rxFree)-1]
		n++
	}
	if n > 0 {
		l.dl.Ring()
	}
}

func (l *loop) rx(c mhi.Completion) {
	l.mu.Lock()
	l.partial = append(l.partial, c.Buf.Mem[:c.Len]...)
	if c.Code != mhi.CodeOverflow {
		pkt := l.partial
		l.partial = nil
		select {
		case l.got <- pkt:
		default:
			l.r.t.Errorf("receiver backlog overflow")
		}
	}
	l.rxFree = append(l.rxFree, c.Buf)
	l.mu.Unlock()
	l.refill()
}

func (l *loop) rxRelease(b *pci.Buffer) {
	l.mu.Lock()
	l.rxFree = append(l.rxFree, b)
	l.partial = nil // a transfer cut by a reset is gone
	l.mu.Unlock()
}

// send queues data as one transfer of ceil(len/bufLen) chained TREs.
func (l *loop) send(ctx context.Context, data []byte) error {
	var held []*pci.Buffer
	for off := 0; off < len(data); off += l.bufLen {
		select {
		case b := <-l.txFree:
			held = append(held, b)
		case <-ctx.Done():
			for _, b := range held {
				l.txFree <- b
			}
			return ctx.Err()
		}
	}
	for i, b := range held {
		off := i * l.bufLen
		n := copy(b.Mem, data[off:min(off+l.bufLen, len(data))])
		flags := mhi.Chain
		if i == len(held)-1 {
			flags = mhi.EOT
		}
		for {
			err := l.ul.Queue(b, n, flags)
			if err == nil {
				break
			}
			if errors.Is(err, mhi.ErrRingFull) {
				l.ul.Ring()
				select {
				case <-time.After(100 * time.Microsecond):
					continue
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			for _, b := range held[i:] {
				l.txFree <- b
			}
			return err
		}
	}
	l.ul.Ring()
	return nil
}

// recv waits for the next looped transfer.
func (l *loop) recv(d time.Duration) ([]byte, error) {
	select {
	case b := <-l.got:
		return b, nil
	case <-time.After(d):
		return nil, fmt.Errorf("nothing received within %v", d)
	}
}

// exchange sends n random transfers of 1..maxLen bytes and checks each
// comes back intact and in order.
func (l *loop) exchange(t testing.TB, rng *rand.Rand, n, maxLen int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := make(chan []byte, n)
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			data := make([]byte, 1+rng.IntN(maxLen))
			for j := range data {
				data[j] = byte(i*7 + j)
			}
			sent <- data
			if err := l.send(ctx, data); err != nil {
				errc <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < n; i++ {
		got, err := l.recv(10 * time.Second)
		if err != nil {
			t.Fatalf("transfer %d: %v", i, err)
		}
		want := <-sent
		if !bytes.Equal(got, want) {
			t.Fatalf("transfer %d: got %d bytes, want %d (first difference at %d)", i, len(got), len(want), firstDiff(got, want))
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// bar0Device is an emulated function whose BAR 0 a test replaces (a BAR
// that fails, lies or holds writes back); its other BARs and everything
// else are the function's.
type bar0Device struct {
	*vpci.Device
	bar0 pci.BAR
}

func (d bar0Device) BAR(i int) (pci.BAR, error) {
	if i != 0 {
		return d.Device.BAR(i)
	}
	return d.bar0, nil
}
