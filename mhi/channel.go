package mhi

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/mmio"
)

// DefaultMRU is the receive buffer size when neither the channel options
// nor the profile set one (Linux mhi_wwan_mbim MHI_DEFAULT_MRU: one buffer
// per 4 KiB page).
const DefaultMRU = 3500

// Flags select the TRE flags of a queued buffer (docs/PROTOCOL.md §3.2).
// BEI is not a flag: the engine sets it from the event ring's moderation.
type Flags uint32

const (
	// EOT asks for an event when the transfer ends (every in-tree client
	// queues single-TRE transfers with EOT).
	EOT Flags = TREIEOT
	// EOB asks for an event at the end of this block.
	EOB Flags = TREIEOB
	// Chain says the next TRE continues this transfer.
	Chain Flags = TREChain
)

// ChannelOptions configure a channel's client.
type ChannelOptions struct {
	// OnComplete receives completions when the channel's event ring is
	// managed by the controller (control channels). It runs on the
	// controller's interrupt goroutine: it may Queue and Ring but must
	// not block or call Start, Stop or Reset. Rings handed to a client
	// with EventRing.SetNotify deliver completions through Poll instead.
	OnComplete func(Completion)
	// Release receives every buffer still queued when the channel is
	// reset, by the client, by SYS_ERR recovery, by Close or at mission
	// mode for a channel of the SBL (docs/RELIABILITY.md, "The SBL's
	// channels at mission mode"); nothing is lost silently. It must not
	// block.
	Release func(*pci.Buffer)
	// MRU overrides the receive buffer size for this channel.
	MRU int
}

// Channel is one MHI channel: a TRE ring the host produces into and the
// device consumes from. Queue and Ring may be called from any goroutine
// (they serialise on the channel); completions are delivered by whoever
// consumes the channel's event ring.
type Channel struct {
	c      *Controller
	cfg    ChannelConfig
	er     *EventRing
	ctxOff int
	bei    bool

	// mu serialises producers and state changes; the consumer (event
	// processing) only touches rp and slots it owns.
	mu     sync.Mutex
	ring   ring
	slots  []slot
	wp     atomic.Uint32
	rp     atomic.Uint32
	dbMode bool
	opts   ChannelOptions
	claim  bool

	state   atomic.Uint32 // ChanState, host view
	started bool          // the client wants it running (recovery restarts it)
	down    error         // why the channel last went down (for Queue errors)
	// op is the Start, Stop, Reset or recovery restart in flight; the
	// next one waits for it (begin). A channel has one command in flight
	// at a time, and a second Reset never returns before the first has
	// handed every buffer back.
	op *chanOp

	queued, completed, doorbells, bytes atomic.Uint64
}

type slot struct {
	buf   *pci.Buffer
	n     int
	chain bool // the TRE has CHAIN: its TD continues in the next slot
}

// chanOp is one state change of a channel in flight; done is closed when
// it ends.
type chanOp struct {
	reset bool
	done  chan struct{}
}

// begin waits until no other state change of ch is in flight and makes a
// new one current; end finishes it. When ctx ends first, begin returns the
// operation still in flight with the error.
func (ch *Channel) begin(ctx context.Context, reset bool) (*chanOp, *chanOp, error) {
	op := &chanOp{reset: reset, done: make(chan struct{})}
	for {
		ch.mu.Lock()
		cur := ch.op
		if cur == nil {
			ch.op = op
			ch.mu.Unlock()
			return op, nil, nil
		}
		ch.mu.Unlock()
		select {
		case <-cur.done:
		case <-ctx.Done():
			return nil, cur, ctx.Err()
		}
	}
}

func (ch *Channel) end(op *chanOp) {
	ch.mu.Lock()
	ch.op = nil
	ch.mu.Unlock()
	close(op.done)
}

// Channel claims channel num for a client and returns it. A channel can
// have one client; claiming a stopped channel again replaces the options.
// A channel that runs, or whose Reset has not finished, is in use.
func (c *Controller) Channel(num int, opts ChannelOptions) (*Channel, error) {
	ch := c.channels[num]
	if ch == nil {
		return nil, fmt.Errorf("mhi: %s: profile has no channel %d", c.name, num)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.claim && (ChanState(ch.state.Load()) == ChanEnabled || ch.op != nil) {
		return nil, fmt.Errorf("mhi: %s: channel %d (%s) is in use", c.name, num, ch.cfg.Name)
	}
	ch.claim = true
	ch.opts = opts
	return ch, nil
}

// ChannelPair claims the UL and DL channels named name.
func (c *Controller) ChannelPair(name string, ul, dl ChannelOptions) (*Channel, *Channel, error) {
	ulc, dlc, ok := c.prof.ChannelPair(name)
	if !ok {
		return nil, nil, fmt.Errorf("mhi: %s: profile has no %s channel pair", c.name, name)
	}
	u, err := c.Channel(ulc.Num, ul)
	if err != nil {
		return nil, nil, err
	}
	d, err := c.Channel(dlc.Num, dl)
	if err != nil {
		return nil, nil, err
	}
	return u, d, nil
}

// Num returns the channel number.
func (ch *Channel) Num() int { return ch.cfg.Num }

// Name returns the channel name from the profile.
func (ch *Channel) Name() string { return ch.cfg.Name }

// Config returns the channel's profile entry.
func (ch *Channel) Config() ChannelConfig { return ch.cfg }

// EventRing returns the event ring the channel completes on.
func (ch *Channel) EventRing() *EventRing { return ch.er }

// Inbound reports whether this is a DL (device → host) channel.
func (ch *Channel) Inbound() bool { return ch.cfg.Dir == ChanTypeInbound }

// MRU returns the receive buffer size for this channel.
func (ch *Channel) MRU() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.c.prof.ChannelMRU(ch.opts.MRU)
}

// Elements returns the TRE ring size.
func (ch *Channel) Elements() int { return ch.cfg.Elements }

func (ch *Channel) String() string {
	return fmt.Sprintf("%s channel %d (%s)", ch.c.name, ch.cfg.Num, ch.cfg.Name)
}

func (ch *Channel) running() bool { return ChanState(ch.state.Load()) == ChanEnabled }

// Start sends START_CHAN and waits for its completion (docs/PROTOCOL.md
// §4.7). A channel started from DISABLED gets a fresh, empty ring. Start
// UL before DL, as Linux does. A Start, Stop or Reset still in flight on
// the channel is waited for first.
func (ch *Channel) Start(ctx context.Context) error {
	op, _, err := ch.begin(ctx, false)
	if err != nil {
		return fmt.Errorf("mhi: start %s: %w", ch, err)
	}
	defer ch.end(op)
	if err := ch.start(ctx); err != nil {
		return err
	}
	ch.mu.Lock()
	ch.started = true
	ch.mu.Unlock()
	return nil
}

// restart is SYS_ERR recovery's Start: it starts the channel only if its
// client still wants it running when recovery gets to it. A client that
// reset (closed) the channel during recovery keeps it released, and one
// that resets it while this START is in flight finds it running, waits
// for it (begin) and resets it.
func (ch *Channel) restart(ctx context.Context) error {
	op, _, err := ch.begin(ctx, false)
	if err != nil {
		return fmt.Errorf("mhi: restart %s: %w", ch, err)
	}
	defer ch.end(op)
	ch.mu.Lock()
	want := ch.started
	ch.mu.Unlock()
	if !want {
		return nil
	}
	return ch.start(ctx)
}

func (ch *Channel) start(ctx context.Context) error {
	c := ch.c
	c.mu.Lock()
	ee := c.ee
	err := c.operationalLocked()
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("mhi: start %s: %w", ch, err)
	}
	if !ch.cfg.EE.Has(ee) {
		return fmt.Errorf("mhi: start %s: channel not available in EE %s: %w", ch, ee, ErrState)
	}
	ch.mu.Lock()
	st := ChanState(ch.state.Load())
	switch st {
	case ChanEnabled:
		ch.mu.Unlock()
		return nil
	case ChanDisabled:
		if err := ch.initContextLocked(); err != nil {
			ch.mu.Unlock()
			return fmt.Errorf("mhi: start %s: %w", ch, err)
		}
	}
	ch.mu.Unlock()
	if err := c.command(ctx, TypeStartCmd, ch.cfg.Num); err != nil {
		if st == ChanDisabled {
			ch.mu.Lock()
			ch.clearContextLocked()
			ch.mu.Unlock()
		}
		return fmt.Errorf("mhi: start %s: %w", ch, err)
	}
	ch.mu.Lock()
	ch.state.Store(uint32(ChanEnabled))
	ch.down = nil
	ch.mu.Unlock()
	return nil
}

// initContextLocked allocates the ring (once) and writes the context:
// ENABLED, rbase, rlen, rp = wp = rbase (Linux mhi_init_chan_ctxt).
func (ch *Channel) initContextLocked() error {
	if ch.ring.buf == nil {
		r, err := newRing(ch.c.dev.DMA(), ch.cfg.Elements)
		if err != nil {
			return err
		}
		ch.ring = r
		ch.slots = make([]slot, r.n)
	}
	clear(ch.ring.buf.Mem)
	ch.rp.Store(0)
	ch.wp.Store(0)
	ch.dbMode = true
	b, o := ch.c.chanCtx, ch.ctxOff
	b.Store64(o+CtxRBase, ch.ring.base)
	b.Store64(o+CtxRLen, ch.ring.len())
	b.Store64(o+CtxRP, ch.ring.base)
	b.Store64(o+CtxWP, ch.ring.base)
	b.Store32(o+CtxW0, ChCfg(ChanEnabled, ch.cfg.Burst))
	return nil
}

// clearContextLocked returns the context to its disabled form
// (Linux mhi_deinit_chan_ctxt).
func (ch *Channel) clearContextLocked() {
	b, o := ch.c.chanCtx, ch.ctxOff
	b.Store32(o+CtxW0, ChCfg(ChanDisabled, ch.cfg.Burst))
	for _, f := range []int{CtxRBase, CtxRLen, CtxRP, CtxWP} {
		b.Store64(o+f, 0)
	}
	ch.state.Store(uint32(ChanDisabled))
}

// Stop sends STOP_CHAN. Queued buffers stay queued; Start resumes.
// Completions the device posted before it stopped are still delivered
// (with their lengths); Queue is refused until Start. Linux never stops a
// channel in normal operation; Reset is what a client uses to tear down.
func (ch *Channel) Stop(ctx context.Context) error {
	op, _, err := ch.begin(ctx, false)
	if err != nil {
		return fmt.Errorf("mhi: stop %s: %w", ch, err)
	}
	defer ch.end(op)
	if !ch.running() {
		return fmt.Errorf("mhi: stop %s: %w", ch, ErrNotRunning)
	}
	if err := ch.c.command(ctx, TypeStopCmd, ch.cfg.Num); err != nil {
		return fmt.Errorf("mhi: stop %s: %w", ch, err)
	}
	ch.state.Store(uint32(ChanStop))
	return nil
}

// Reset sends RESET_CHAN and tears the channel down: events still in the
// event ring for it are marked stale, and every queued buffer goes back to
// ChannelOptions.Release exactly once. When Reset returns, the buffers are
// back, whoever took the channel down: a Reset still in flight (from
// another goroutine, PowerDown or Close) is waited for, and a channel taken
// down by SYS_ERR gets its buffers back once the MHI reset has stopped the
// device's DMA (docs/RELIABILITY.md, "The recovery sequence"). On a command
// failure the host resets its side anyway, like Linux. The channel stays
// released: SYS_ERR recovery does not restart it. A RESET_CHAN the device
// can no longer answer because it left the channel's execution environment
// (SAHARA as the SBL moves on to AMSS) is given up once the host sees the
// new EE, and the reset is host-side only. (If ctx ends while a
// Start or Stop of the channel is still in flight, Reset returns the error
// and the buffers stay queued; reset again.)
func (ch *Channel) Reset(ctx context.Context) error {
	ch.mu.Lock()
	ch.started = false
	ch.mu.Unlock()
	op, cur, err := ch.begin(ctx, true)
	if err != nil {
		if cur.reset {
			// The reset in flight will take the channel down; the
			// buffers come back now, as after a command timeout.
			ch.abort(ErrNotRunning)
		}
		return fmt.Errorf("mhi: reset %s: waiting for the %s in flight: %w", ch, opName(cur), err)
	}
	defer ch.end(op)
	if ChanState(ch.state.Load()) != ChanDisabled {
		// Drop further events for the channel before the device
		// confirms.
		ch.state.Store(uint32(ChanDisabled))
		if ch.cfg.EE.Has(ch.c.currentEE()) {
			err = ch.c.chanCommand(ctx, TypeResetCmd, ch.cfg.Num, ch.cfg.EE)
			if err != nil && !ch.cfg.EE.Has(ch.c.currentEE()) {
				// The device left the channel's EE while the
				// RESET_CHAN was in flight (SAHARA as the SBL
				// moves on): nothing there can answer it.
				ch.c.log.Info("RESET_CHAN overtaken by the end of the channel's EE; reset host-side",
					"dev", ch.c.name, "ch", ch.cfg.Num, "err", err)
				err = nil
			}
		}
		// else the EE that ran it has ended (eeEnded): host side
		// only, as Linux mhi_unprepare_channel.
		ch.er.markStale(ch.cfg.Num)
	}
	// Down already (SYS_ERR, removal, power-down), or the command
	// failed: the device may still hold buffers until an MHI reset
	// stops its DMA.
	if werr := ch.c.waitDMAStopped(ctx); werr != nil && err == nil {
		err = werr
	}
	ch.abort(ErrNotRunning)
	if err != nil {
		return fmt.Errorf("mhi: reset %s: %w", ch, err)
	}
	return nil
}

func opName(op *chanOp) string {
	if op.reset {
		return "reset"
	}
	return "start or stop"
}

// eeEnded takes the channel down when the device has moved to execution
// environment ee and ee has no such channel (SAHARA, an SBL channel, at
// mission mode), like Linux: mhi_pm_mission_mode_transition
// (drivers/bus/mhi/host/pm.c) destroys the devices of the environment
// being left (mhi_destroy_device, main.c), and their channels are reset
// host-side only: mhi_unprepare_channel sends no RESET_CHAN for a channel
// the current EE does not have (the firmware that ran it is gone). Every
// queued buffer goes back through Release exactly once, the channel is
// DISABLED and released (recovery does not restart it), and Queue fails
// with ErrNotRunning wrapping ErrState. A state change of the channel in
// flight is waited for first (bounded by ctx).
func (ch *Channel) eeEnded(ctx context.Context, ee EE) {
	if ch.cfg.EE.Has(ee) {
		return
	}
	ch.mu.Lock()
	idle := ChanState(ch.state.Load()) == ChanDisabled && !ch.started && ch.op == nil &&
		(ch.ring.buf == nil || ch.rp.Load() == ch.wp.Load())
	ch.mu.Unlock()
	if idle {
		return
	}
	op, cur, err := ch.begin(ctx, true)
	if err != nil {
		ch.c.log.Warn("channel of an ended EE: waiting for the operation in flight", "dev", ch.c.name, "ch", ch.cfg.Num, "op", opName(cur), "err", err)
		return
	}
	defer ch.end(op)
	ch.abort(fmt.Errorf("channel not available in EE %s: %w", ee, ErrState))
	ch.c.log.Info("channel of an ended EE reset host-side", "dev", ch.c.name, "ch", ch.cfg.Num, "name", ch.cfg.Name, "ee", ee)
}

// quiesce takes the channel down host-side without touching its buffers
// (SYS_ERR, before the MHI reset): Queue fails, completions are dropped, and
// the queued buffers stay with the device until abort.
func (ch *Channel) quiesce(cause error) {
	ch.er.mu.Lock()
	ch.mu.Lock()
	if ChanState(ch.state.Load()) != ChanDisabled {
		ch.state.Store(uint32(ChanDisabled))
		ch.down = cause
	}
	ch.mu.Unlock()
	ch.er.mu.Unlock()
}

// abort resets the channel host-side only (recovery, power-down, after a
// RESET command): state DISABLED, context cleared, queued buffers
// released. The caller makes sure the device no longer writes them.
// Recovery (cause ErrSysErr) keeps the client's wish to run the channel;
// any other cause ends it.
func (ch *Channel) abort(cause error) {
	ch.er.mu.Lock()
	ch.mu.Lock()
	if cause != ErrSysErr {
		ch.started = false
	}
	var released []*pci.Buffer
	if ch.ring.buf != nil {
		rp, wp := ch.rp.Load(), ch.wp.Load()
		for i, n := rp, 0; i != wp && n < len(ch.slots); i, n = ch.ring.next(i), n+1 {
			if b := ch.slots[i].buf; b != nil {
				released = append(released, b)
			}
			ch.slots[i] = slot{}
		}
		ch.rp.Store(0)
		ch.wp.Store(0)
	}
	if ch.c.chanCtx != nil {
		ch.clearContextLocked()
	}
	ch.state.Store(uint32(ChanDisabled))
	ch.down = cause
	release := ch.opts.Release
	ch.mu.Unlock()
	ch.er.mu.Unlock()
	if release != nil {
		for _, b := range released {
			release(b)
		}
	}
}

// Queue writes one TRE for buf[:n] at the ring's write pointer without
// ringing the doorbell (call Ring once per batch). n must be 1..65535 and
// fit in buf. A full ring returns ErrRingFull: the caller applies
// backpressure, never drops silently.
func (ch *Channel) Queue(buf *pci.Buffer, n int, flags Flags) error {
	if n <= 0 || n > MaxTRELen || n > len(buf.Mem) {
		return fmt.Errorf("mhi: queue on %s: length %d outside 1..%d and the %d-byte buffer", ch, n, MaxTRELen, len(buf.Mem))
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ChanState(ch.state.Load()) != ChanEnabled {
		if ch.down != nil && ch.down != ErrNotRunning {
			return fmt.Errorf("mhi: queue on %s: %w (%w)", ch, ErrNotRunning, ch.down)
		}
		return fmt.Errorf("mhi: queue on %s: %w", ch, ErrNotRunning)
	}
	wp := ch.wp.Load()
	if ch.ring.full(ch.rp.Load(), wp) {
		return ErrRingFull
	}
	f := uint32(flags) & (TREChain | TREIEOB | TREIEOT)
	if ch.bei {
		f |= TREBEI
	}
	TRE(buf.IOVA, n, f).Encode(ch.ring.element(wp))
	ch.slots[wp] = slot{buf: buf, n: n, chain: f&TREChain != 0}
	// Publish the slot to the consumer only after the TRE and slot are
	// written.
	ch.wp.Store(ch.ring.next(wp))
	ch.queued.Add(1)
	return nil
}

// Ring publishes queued TREs to the device: the context wp is stored
// (after the TREs, with release ordering), then the doorbell is written,
// high word first — or, for a burst-mode channel that is not in doorbell
// mode, only the context wp, which the device polls (§5.2, §5.3). In M3
// nothing is written; the M0 transition rings it.
func (ch *Channel) Ring() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.ringLocked()
}

func (ch *Channel) ringLocked() {
	if ChanState(ch.state.Load()) != ChanEnabled {
		return
	}
	c := ch.c
	c.dbGate.RLock()
	defer c.dbGate.RUnlock()
	c.mu.Lock()
	allowed, m2 := c.doorbellAllowedLocked(), c.pm == pmM2
	// Not for a channel the device's EE does not have: the SBL's
	// channels between EE_EVENT(AMSS) and their teardown (eeEnded).
	allowed = allowed && ch.cfg.EE.Has(c.ee)
	c.mu.Unlock()
	if !allowed {
		return
	}
	if m2 {
		c.wake(true)
	}
	db := ch.ring.iova(ch.wp.Load())
	// TREs must be visible to the device before the pointer that
	// publishes them (Linux dma_wmb in mhi_ring_chan_db).
	mmio.DMAWriteBarrier()
	c.chanCtx.Store64(ch.ctxOff+CtxWP, db)
	if !ch.cfg.Burst || ch.dbMode {
		c.doorbell(c.chdbOff+uint64(ch.cfg.Num)*DoorbellStride, db)
		ch.doorbells.Add(1)
		if ch.cfg.Burst {
			ch.dbMode = false
		}
	}
}

// reRing is the M0-transition re-arm: burst channels go back to doorbell
// mode and a non-empty ring is rung.
func (ch *Channel) reRing() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.cfg.Burst {
		ch.dbMode = true
	}
	if ch.ring.buf != nil && ch.rp.Load() != ch.wp.Load() {
		ch.ringLocked()
	}
}

// FreeCount returns how many more TREs can be queued (§5.7): N − 1 right
// after Start.
func (ch *Channel) FreeCount() int {
	if ch.ring.n == 0 {
		return 0
	}
	return ch.ring.freeCount(ch.rp.Load(), ch.wp.Load())
}

// Full reports whether the ring is full (§5.7).
func (ch *Channel) Full() bool {
	if ch.ring.n == 0 {
		return true
	}
	return ch.ring.full(ch.rp.Load(), ch.wp.Load())
}

// Outstanding returns the number of queued, not yet completed buffers.
func (ch *Channel) Outstanding() int {
	if ch.ring.n == 0 {
		return 0
	}
	return ch.ring.pending(ch.rp.Load(), ch.wp.Load())
}

// complete handles a transfer event for this channel (called by the event
// ring's consumer, holding the ring lock). It reports false for an event
// that names no outstanding TRE or carries a code that completes nothing.
func (ch *Channel) complete(e Element, fn func(Completion)) bool {
	code := e.Code()
	switch code {
	case CodeEOT, CodeEOB, CodeOverflow:
	case CodeOOB, CodeDBMode:
		// The device stopped polling a burst channel: back to doorbell
		// mode, and ring now if TREs are waiting (§5.3).
		ch.mu.Lock()
		ch.dbMode = true
		if ch.rp.Load() != ch.wp.Load() {
			ch.ringLocked()
		}
		ch.mu.Unlock()
		return true
	default:
		// SUCCESS and errors release nothing (§3.5).
		return false
	}
	// A STOPped channel's ring stays: completions the device posted
	// before it stopped still release their buffers and move rp, or the
	// first event after Start would walk over them (and report DL
	// lengths it never read).
	if st := ChanState(ch.state.Load()); (st != ChanEnabled && st != ChanStop) || ch.ring.n == 0 {
		return true // channel being reset: dropped, not invalid
	}
	t, ok := ch.ring.index(e.Ptr)
	if !ok {
		return false
	}
	rp, wp := ch.rp.Load(), ch.wp.Load()
	if ch.ring.pending(rp, t) >= ch.ring.pending(rp, wp) {
		return false // not an outstanding TRE: never walk past wp
	}
	// One event completes one TD: the TRE at rp, or the last of the
	// chain that starts there. An event naming a TRE past the end of
	// that chain points at a transfer the device has not done (Linux
	// main.c, "Detect events pointing to unexpected TREs").
	for i := rp; i != t; i = ch.ring.next(i) {
		if !ch.slots[i].chain {
			return false
		}
	}
	for i := rp; ; i = ch.ring.next(i) {
		s := ch.slots[i]
		ch.slots[i] = slot{}
		n := s.n
		if i == t {
			n = min(e.Len(), s.n)
		}
		ch.rp.Store(ch.ring.next(i))
		ch.completed.Add(1)
		ch.bytes.Add(uint64(n))
		fn(Completion{Channel: ch, Buf: s.buf, Len: n, Code: code})
		if i == t {
			return true
		}
	}
}

// ChannelStats are per-channel counters.
type ChannelStats struct {
	Queued, Completed, Doorbells, Bytes uint64
}

// Stats returns the channel's counters.
func (ch *Channel) Stats() ChannelStats {
	return ChannelStats{Queued: ch.queued.Load(), Completed: ch.completed.Load(), Doorbells: ch.doorbells.Load(), Bytes: ch.bytes.Load()}
}
