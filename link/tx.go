package link

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/internal/segment"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

// A writer that finds no TX buffer or a full UL ring stops, like a driver
// calling netif_stop_queue, and is woken like netif_wake_queue: at the end
// of a batch of TX completions (a poll pass, an interrupt) that freed
// buffers, not by a timer. It reaps the UL event ring itself before it
// sleeps, and again when an interrupt for the UL ring arrives while a poll
// pass is running (notifyUL): the writer may be the poller (an ICMP reply
// or RST sent from inside delivery), which cannot reap while it waits.
//
// inlineReapInterval is the one timed case: with InlinePoll a writer inside
// an inline pass runs on an interrupt goroutine, which may be the one that
// would deliver the UL ring's next interrupt (vectors shared), so while an
// inline pass runs waiters also reap on this interval.
const inlineReapInterval = 50 * time.Microsecond

// txState is the TX side: a fixed set of DMA buffers (one per UL ring
// slot by default) and the encoder, used under mu by one writer at a time.
type txState struct {
	size      int // TX buffer size
	maxPacket int // largest IP packet a buffer can frame
	enc       framing.Encoder
	senc      framing.SessionEncoder // enc, when its frames carry a session
	// unrung says frames were queued since the last doorbell (under mu).
	unrung bool

	// mu serialises writers: frames are built and queued in order, and
	// the doorbell is rung once per WritePackets call. It is never held
	// while waiting for space.
	mu sync.Mutex

	// freeMu guards free and the waiters' wake-up channels; completions
	// take it from the poller or from a reaping writer.
	freeMu sync.Mutex
	free   []*pci.Buffer
	all    []*pci.Buffer
	// asleep holds the wake-up channel (capacity 1) of each writer
	// waiting for room; wakeLocked sends on each and empties it (flush,
	// wake). spare keeps the channels of writers that left, so that a
	// wake-up allocates nothing once as many writers as ever wait at
	// once have waited. waiters is len(asleep), readable without freeMu.
	// returned says buffers came back since the last flush.
	asleep   []chan struct{}
	spare    []chan struct{}
	waiters  atomic.Int32 // changed under freeMu
	returned bool

	timers sync.Pool // *time.Timer for waits, so that backpressure does not allocate

	// hold keeps the UL frames a SYS_ERR takes off the ring (requeue.go).
	hold ulHold
}

func (t *txState) init(dma pci.DMA, e *Endpoint, n int, mtu uint32) error {
	size := txBufferSize(e.opts, mtu, e.framing.Overhead())
	t.size = size
	t.maxPacket = size - e.framing.Overhead()
	if t.maxPacket < int(mtu) {
		return errors.New("TX buffer smaller than MTU + framing overhead")
	}
	t.enc = e.framing.NewEncoder()
	t.senc, _ = t.enc.(framing.SessionEncoder)
	t.free = make([]*pci.Buffer, 0, n)
	for range n {
		b, err := dma.Alloc(size, 64)
		if err != nil {
			i := len(t.all) + 1
			t.destroy(dma)
			return fmt.Errorf("%d-byte DMA buffer %d of %d: %w", size, i, n, err)
		}
		t.all = append(t.all, b)
		t.free = append(t.free, b)
	}
	t.hold.init(t.all)
	return nil
}

func (t *txState) get() *pci.Buffer {
	t.freeMu.Lock()
	defer t.freeMu.Unlock()
	if len(t.free) == 0 {
		return nil
	}
	b := t.free[len(t.free)-1]
	t.free[len(t.free)-1] = nil
	t.free = t.free[:len(t.free)-1]
	return b
}

func (t *txState) put(b *pci.Buffer) {
	t.freeMu.Lock()
	if len(t.free) == cap(t.free) {
		t.freeMu.Unlock()
		panic("link: TX buffer returned twice")
	}
	t.free = append(t.free, b)
	t.returned = true
	t.freeMu.Unlock()
}

// flush ends a batch of returned buffers: waiting writers wake once for
// the whole batch (netif_wake_queue after the TX completions of a pass).
func (t *txState) flush() {
	if t.waiters.Load() == 0 {
		return
	}
	t.freeMu.Lock()
	if t.returned && t.waiters.Load() > 0 {
		t.wakeLocked()
	}
	t.returned = false
	t.freeMu.Unlock()
}

// wake wakes every waiting writer (they reap and look again).
func (t *txState) wake() {
	t.freeMu.Lock()
	if t.waiters.Load() > 0 {
		t.wakeLocked()
	}
	t.freeMu.Unlock()
}

func (t *txState) wakeLocked() {
	for i, ch := range t.asleep {
		select {
		case ch <- struct{}{}:
		default: // already woken
		}
		t.asleep[i] = nil
	}
	t.asleep = t.asleep[:0]
	t.waiters.Store(0)
}

// sleep registers a writer that is about to wait for room and returns its
// wake-up channel (under freeMu).
func (t *txState) sleepLocked() chan struct{} {
	var ch chan struct{}
	if n := len(t.spare); n > 0 {
		ch, t.spare[n-1] = t.spare[n-1], nil
		t.spare = t.spare[:n-1]
	} else {
		ch = make(chan struct{}, 1)
	}
	t.asleep = append(t.asleep, ch)
	t.waiters.Store(int32(len(t.asleep)))
	return ch
}

// wokeLocked takes back the wake-up channel of a writer that stopped
// waiting, woken or not (under freeMu).
func (t *txState) wokeLocked(ch chan struct{}) {
	for i, c := range t.asleep {
		if c == ch {
			last := len(t.asleep) - 1
			t.asleep[i], t.asleep[last] = t.asleep[last], nil
			t.asleep = t.asleep[:last]
			break
		}
	}
	t.waiters.Store(int32(len(t.asleep)))
	select {
	case <-ch: // a wake-up it did not wait for
	default:
	}
	t.spare = append(t.spare, ch)
}

func (t *txState) available() int {
	t.freeMu.Lock()
	defer t.freeMu.Unlock()
	return len(t.free)
}

func (t *txState) destroy(dma pci.DMA) {
	for _, b := range t.all {
		_ = dma.Free(b)
	}
	t.all, t.free = nil, nil
}

// txComplete handles one UL completion (inside ulER.Poll, on the poller or
// on a reaping writer): the frame left the host, its buffer is free.
func (e *Endpoint) txComplete(c mhi.Completion) {
	e.stats.txCompletions.Add(1)
	e.tx.put(c.Buf)
}

// txRelease is the UL channel's Release (reset, SYS_ERR, Close).
func (e *Endpoint) txRelease(b *pci.Buffer) {
	if e.tx.hold.hold(b) {
		return
	}
	e.tx.put(b)
	e.tx.flush()
}

// reap processes UL completions inline. With a shared event ring it
// cannot (that would deliver RX on this goroutine); it schedules the
// poller instead.
func (e *Endpoint) reap() {
	if e.shared {
		e.notify()
		return
	}
	e.ulER.Poll(e.ul.Elements(), e.txFn)
	e.tx.flush()
}

// WritePackets implements stack.LinkWriter. Each packet is copied into a
// TX DMA buffer through the framing's encoder (the only TX copy), the
// frames are queued on the UL channel and the doorbell is rung once. When
// buffers or ring slots run out it reaps completions inline and then sleeps
// until TX completions free room, up to Options.TXTimeout; it makes
// progress even when called from the poller itself (see notifyUL). It returns the number of
// packets queued from the front of the list, and an error only when that
// is zero — never (0, nil).
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	return e.writePackets(pkts, e.session, false)
}

// WritePacketsKept is WritePackets for a caller that keeps the packets the
// link does not take and offers them again: a transmit queue in front of
// the link (stack.Config.TXQueueLen), which holds packets while the UL
// ring is full as Linux's qdisc holds them while a driver's queue is
// stopped. It returns the number of packets taken from the front of the
// list and, when that is short, why:
//
//   - ErrWouldBlock: no UL space came within Options.TXTimeout (the modem
//     is slow to take transfers). Nothing is counted as dropped: the
//     packets from n on are the caller's, to offer again or to drop and
//     count itself.
//   - ErrMessageTooLong: packet n is too large for a TX buffer; it is
//     dropped and counted (TXDrops.TooBig), the ones after it are the
//     caller's.
//   - any other error: the link is down or closed (or its TX pool held);
//     the packets from n on are dropped and counted in TXDrops by reason.
//
// A packet cut into several frames (GSO) whose later frames found no room
// is offered whole again: its first frames go out twice, which TCP, the
// only user of GSO, takes as duplicates.
func (e *Endpoint) WritePacketsKept(pkts stack.PacketBufferList) (int, tcpip.Error) {
	return e.writePackets(pkts, e.session, true)
}

// writePackets is WritePackets (WritePacketsKept with kept) for session id
// (the Endpoint's own, or a Session's): every frame it builds carries id.
func (e *Endpoint) writePackets(pkts stack.PacketBufferList, id uint8, kept bool) (int, tcpip.Error) {
	list := pkts.AsSlice()
	if len(list) == 0 {
		return 0, nil
	}
	// lifeMu (read) keeps Close from freeing the buffers while this
	// call, possibly waiting with t.mu released, still uses them.
	e.lifeMu.RLock()
	defer e.lifeMu.RUnlock()
	t := &e.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.closed.Load() {
		e.stats.txClosed.Add(uint64(len(list)))
		return 0, &tcpip.ErrClosedForSend{}
	}
	var (
		// sent counts packets of list whose last piece is queued;
		// inFrame those whose last piece is in the frame being built,
		// pieces and frameBytes what that frame holds.
		sent, inFrame      int
		pieces, frameBytes int
		buf                *pci.Buffer
		deadline           time.Time
		err                tcpip.Error
		holdFull           bool // no TX buffer while frames are held
		tooBig             bool // packet sent is too big: the loop stopped there
	)
	// flush queues the frame being built; false means it could not be
	// (timeout or link down) and the packets in it are dropped.
	flush := func() bool {
		n := t.enc.End()
		b := buf
		buf = nil
		if n == 0 {
			t.put(b)
			return true
		}
		if qerr := e.queueFrame(b, n, pieces, &deadline); qerr != nil {
			t.put(b)
			err = qerr
			return false
		}
		sent += inFrame
		e.stats.txPackets.Add(uint64(pieces))
		e.stats.txBytes.Add(uint64(frameBytes))
		inFrame, pieces, frameBytes = 0, 0, 0
		return true
	}
	// seg is per call: waiting for TX space releases t.mu, and another
	// writer may run meanwhile.
	var seg segment.Segmenter
outer:
	for _, pkt := range list {
		if !seg.Reset(pkt) {
			tooBig = true
			break
		}
		if seg.Cut() {
			e.stats.txGSO.Add(1)
		}
		for !seg.Done() {
			size := seg.Next()
			if size <= 0 || size > t.maxPacket {
				tooBig = true
				break outer
			}
			if buf == nil {
				if buf = e.getTXBuffer(&deadline, &err, &holdFull); buf == nil {
					break outer
				}
				t.enc.Begin(buf.Mem[:t.size])
				if t.senc != nil {
					t.senc.SetSession(id)
				}
			}
			dst := t.enc.Add(size)
			if dst == nil {
				if pieces == 0 {
					// A fresh frame refused a packet that fits the
					// buffer: a framing bug. Drop the packet rather
					// than spin.
					t.put(buf)
					buf = nil
					tooBig = true
					break outer
				}
				if !flush() {
					break outer
				}
				continue
			}
			seg.Write(dst)
			if tap := e.tap.Load(); tap != nil {
				tap.write(dst)
			}
			pieces++
			frameBytes += size
		}
		inFrame++
	}
	if buf != nil {
		flush()
	}
	e.ringUL()
	dropped := len(list) - sent
	if dropped == 0 {
		return sent, nil
	}
	if err == nil && tooBig {
		// Packet sent is dropped. After it, WritePackets's caller
		// (gVisor's queue) drops the rest as it drops any short
		// count's; WritePacketsKept's offers them again.
		e.stats.txTooBig.Add(1)
		err = &tcpip.ErrMessageTooLong{}
	}
	switch err.(type) {
	case *tcpip.ErrNoBufferSpace:
		switch {
		case holdFull:
			e.stats.txHeldDrops.Add(uint64(dropped))
		case kept:
			// The caller keeps them: not a drop.
			return sent, &tcpip.ErrWouldBlock{}
		default:
			e.stats.txTimeout.Add(uint64(dropped))
		}
	case *tcpip.ErrClosedForSend:
		if e.closed.Load() {
			e.stats.txClosed.Add(uint64(dropped))
		} else {
			e.stats.txLinkDown.Add(uint64(dropped))
		}
	}
	if sent > 0 && !kept {
		return sent, nil
	}
	if err == nil {
		err = &tcpip.ErrNoBufferSpace{}
	}
	return sent, err
}

// getTXBuffer takes a free TX buffer, reaping and then waiting (bounded)
// when there is none; while frames are held it does not wait and sets
// *held. The caller holds t.mu.
func (e *Endpoint) getTXBuffer(deadline *time.Time, err *tcpip.Error, held *bool) *pci.Buffer {
	t := &e.tx
	for {
		if b := t.get(); b != nil {
			return b
		}
		if t.hold.active.Load() {
			// The pool is held (or on a ring being reset): no
			// completion will free a buffer before the hold ends.
			*held = true
			*err = &tcpip.ErrNoBufferSpace{}
			return nil
		}
		if !e.waitTX(deadline, false) {
			*err = e.txWaitError()
			return nil
		}
	}
}

// queueFrame queues one frame of n bytes holding pkts packets on the UL
// ring, waiting (bounded) while the ring is full. The caller holds t.mu.
func (e *Endpoint) queueFrame(b *pci.Buffer, n, pkts int, deadline *time.Time) tcpip.Error {
	for {
		// Held (a SYS_ERR, PauseTX): kept in order, queued later.
		if e.tx.hold.active.Load() && e.tx.hold.keep(b, n, pkts) {
			e.stats.txHeld.Add(1)
			e.stats.txFrames.Add(1)
			return nil
		}
		err := e.ul.Queue(b, n, mhi.EOT)
		if err == nil {
			e.tx.unrung = true
			e.tx.hold.queued(b, n, pkts)
			e.stats.txFrames.Add(1)
			return nil
		}
		if !errors.Is(err, mhi.ErrRingFull) {
			e.log.Debug("UL queue failed", "err", err)
			return &tcpip.ErrClosedForSend{}
		}
		if !e.waitTX(deadline, true) {
			return e.txWaitError()
		}
	}
}

// ringUL rings the UL doorbell once for the frames queued since the last
// one. The caller holds t.mu.
func (e *Endpoint) ringUL() {
	if e.tx.unrung {
		e.tx.unrung = false
		e.ul.Ring()
		e.stats.txDoorbells.Add(1)
	}
}

func (e *Endpoint) txWaitError() tcpip.Error {
	if e.closed.Load() {
		return &tcpip.ErrClosedForSend{}
	}
	return &tcpip.ErrNoBufferSpace{}
}

// waitTX reaps completions and, if that freed nothing, sleeps with t.mu
// released until TX completions free room (or an interrupt asks it to reap,
// see notifyUL). It returns false at the deadline or when the endpoint
// closes; the caller holds t.mu on entry and on return.
func (e *Endpoint) waitTX(deadline *time.Time, forRing bool) bool {
	t := &e.tx
	e.stats.txFull.Add(1)
	if e.closed.Load() {
		return false
	}
	// The device must see what this call queued before it can make room.
	e.ringUL()
	if deadline.IsZero() {
		*deadline = time.Now().Add(e.opts.TXTimeout)
	}
	// progress reaps and reports whether what the caller waits for (a
	// TX buffer, or a UL ring slot) is there.
	progress := func() bool {
		e.reap()
		if forRing {
			return !e.ul.Full()
		}
		return t.available() > 0
	}
	if progress() {
		return true
	}
	tm, _ := t.timers.Get().(*time.Timer)
	if tm == nil {
		tm = time.NewTimer(time.Hour)
	}
	defer t.timers.Put(tm)
	for {
		left := time.Until(*deadline)
		if left <= 0 {
			// A last look: the interrupt that would have woken this
			// writer may have been lost.
			return progress()
		}
		t.freeMu.Lock()
		room := t.sleepLocked()
		t.returned = false // what came back before is seen just below
		t.freeMu.Unlock()
		// Completions that came in before this writer was counted woke
		// nobody: look once more now that any later one will.
		if progress() {
			t.freeMu.Lock()
			t.wokeLocked(room)
			t.freeMu.Unlock()
			return true
		}
		t.mu.Unlock()
		select {
		case e.stopKick <- struct{}{}:
		default:
		}
		if e.x.InlinePoll && e.inlineRun.Load() {
			left = min(left, inlineReapInterval)
		}
		tm.Reset(left)
		select {
		case <-room:
		case <-tm.C:
		case <-e.stop:
		}
		// Since Go 1.23 Stop leaves no stale tick in the channel.
		tm.Stop()
		t.mu.Lock()
		e.stats.txWakeups.Add(1)
		t.freeMu.Lock()
		t.wokeLocked(room)
		t.freeMu.Unlock()
		if e.closed.Load() {
			return false
		}
		// Woken by completions, asked to reap (notifyUL), or the
		// inline interval: the loop reaps and looks before it sleeps
		// again.
	}
}
