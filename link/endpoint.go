package link

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"

	"github.com/mhistack/mhistack/link/experiment"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

// ErrClosed is returned by operations on a closed endpoint.
var ErrClosed = errors.New("link: endpoint closed")

// Defaults of Options.
const (
	DefaultChannel   = mhi.ChannelIPHW0
	DefaultMTU       = 1500
	DefaultBudget    = 64 // NAPI_POLL_WEIGHT
	DefaultTXTimeout = 50 * time.Millisecond
	DefaultDeferPoll = 50 * time.Microsecond // gro_flush_timeout
)

// Options configure an Endpoint. The zero value is the default design:
// IP_HW0, raw IP, MTU 1500, budget 64, a threaded poller with deferred
// polling (50 µs), TX completions outside the budget, a dedicated refill
// goroutine, GRO and RX checksum offload on, host-style GSO segmented in
// WritePackets.
type Options struct {
	// Channel names the data channel pair (default mhi.ChannelIPHW0;
	// mhi.ChannelIPSW0, mhi.ChannelIPHW0MBIM). Its event rings must
	// serve only this pair.
	Channel string
	// Framing of the channel (default RawIP). IP_HW0_MBIM needs
	// mbim.NTB; IP_HW0 carries raw IP or, when QMI negotiated it,
	// qmap.Framing; IP_SW0 likewise (FramingFor maps what
	// mhi.Profile.DataPath decides to a framing; docs/LINK.md,
	// "Framings"). On a pair whose framing mhi does not know
	// (mhi.ChannelFraming) it must be set: New does not take such a
	// pair for raw IP.
	Framing framing.Framing
	// Session is the endpoint's own MBIM session ID or QMAP mux ID
	// (default 0; ModemManager's first QMAP mux ID is 1). Other
	// sessions on the same pair get endpoints from NewSessionEndpoint.
	// It is the MBIM session index, as in MBIM_CID_CONNECT: the framing
	// adds a modem's session offset on the wire (mbim.NTB.SessionOffset).
	Session uint8
	// MTU of the link (default 1500).
	MTU uint32

	// Budget is the most RX packets one poll pass delivers (default 64,
	// Linux's NAPI_POLL_WEIGHT).
	Budget int
	// DeferPoll and DeferCount are Linux's gro_flush_timeout and
	// napi_defer_hard_irqs for the dedicated poller: after a pass that
	// found work it polls again DeferPoll later without waiting for an
	// interrupt, until DeferCount passes in a row find nothing. A modem
	// that defers its MSIs (BEI, 1 ms on SDX55) otherwise leaves a raw-IP
	// DL ring full and stalled until the next interrupt. Defaults: 50 µs
	// and 2 (docs/LINK.md has the measurements); a negative DeferPoll
	// turns it off (every pass then waits for an interrupt). Idle, the
	// poller still sleeps until an interrupt. While a writer is stopped
	// on a full UL ring the poller also polls every DeferPoll, backing
	// off to 1 ms, until TX completions free room.
	DeferPoll  time.Duration
	DeferCount int
	// MRU is the RX buffer size (default the channel's MRU, usually the
	// profile's 32768; "[PATCH] bus: mhi: pci-generic: configurable
	// network interface MRU", net-next 5c2c85315948).
	MRU int
	// RXBuffers is the size of the fixed RX DMA pool (default: the DL
	// ring, plus one budget of frames in flight, plus one OVERFLOW chain).
	RXBuffers int
	// TXBuffers and TXBufferSize size the TX DMA buffers (defaults: one
	// per UL ring slot; MTU + framing overhead, or the UL frame size of
	// an aggregating framing (framing.Aggregating: qmap.Framing or
	// mbim.NTB with MaxDatagrams > 1 and MaxBytes) when larger). A
	// WritePackets batch fills each frame with as many of its packets as
	// the framing's limits and the buffer allow; it never waits for
	// packets that are not in the batch.
	TXBuffers, TXBufferSize int
	// TXTimeout bounds how long WritePackets waits for UL space before
	// it fails (default 50 ms).
	TXTimeout time.Duration

	// NoGRO turns off gVisor's GRO on RX.
	NoGRO bool
	// NoChecksumOffload leaves RX checksums to the stack. By default the
	// endpoint validates IPv4 header, TCP and UDP checksums once, drops
	// bad packets and advertises CapabilityRXChecksumOffload, so GRO and
	// the stack do not validate them again. Transport checksums of IP
	// fragments are then not validated at all (as with any
	// RX-checksum-offloading NIC that skips fragments). A packet whose
	// framing says the modem validated its TCP/UDP checksum (QMAPv5
	// csum_valid, Span.CsumValid) gets only its IPv4 header checked.
	NoChecksumOffload bool
	// GSO selects TCP segmentation offload: GSOSegment (default; the
	// endpoint cuts TCP's large segments itself as it copies them into
	// DMA), GSOGVisor (TCP splits them before the link) or GSOOff.
	GSO GSOMode
	// GSOMaxSize is the largest segment TCP hands over (default 65536).
	GSOMaxSize uint32

	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger

	// Experiments are switches for design comparisons (hack/bench,
	// docs/LINK.md "Design comparisons"); leave nil.
	Experiments *experiment.Options
}

// Endpoint is a stack.LinkEndpoint over one MHI data channel pair, NAPI
// style. See the package documentation for its goroutines.
type Endpoint struct {
	opts    Options
	x       experiment.Options // *opts.Experiments, or the defaults
	c       *mhi.Controller
	ul, dl  *mhi.Channel
	ulER    *mhi.EventRing
	dlER    *mhi.EventRing
	shared  bool // UL and DL complete on one event ring
	framing framing.Framing
	log     *slog.Logger
	budget  int
	mru     int
	level   int
	mtu     atomic.Uint32

	rxPool *pool
	tx     txState

	// Lifecycle.
	closed   atomic.Bool
	stop     chan struct{} // closed by Close: blocked writers return
	quit     chan struct{} // closed by Close or Attach(nil): the goroutines return
	quitOnce sync.Once
	stopped  atomic.Bool // quit is closed
	// workers counts the running poller and refiller goroutines, and
	// inPass is set while the threaded poller runs a pass (which may be
	// inside gVisor): Wait needs both (see Wait).
	workers   atomic.Int32
	inPass    atomic.Bool
	lifeMu    sync.RWMutex // writers hold it shared; Close takes it to wait for them
	wg        sync.WaitGroup
	closeOnce sync.Once
	unsub     func()
	onClose   atomic.Pointer[func()]

	// Scheduling (napi_schedule): scheduled is the NAPI SCHED bit; the
	// token in sched wakes the dedicated poller.
	scheduled atomic.Bool
	sched     chan struct{}
	// stopKick carries a writer's stop on a full UL ring to the dedicated
	// poller, which then polls deferred (DeferPoll) rather than waiting
	// for the UL ring's moderated interrupt (see pollLoop).
	stopKick  chan struct{}
	pollMu    sync.Mutex  // held while a pass runs in InlinePoll mode
	inlineRun atomic.Bool // an InlinePoll pass is running

	disp atomic.Pointer[stack.NetworkDispatcher]

	// Poller-owned state (the only goroutine that touches it).
	gro      gro.GRO
	rx       rxState
	pass     passCounts
	rxFn     func(mhi.Completion) // e.rxComplete, bound once
	txFn     func(mhi.Completion) // e.txComplete, bound once
	resetRX  atomic.Bool          // SYS_ERR: drop the partial chain
	kicked   bool                 // the last pass woke the refiller
	txWoke   bool                 // the last pass freed TX buffers for stopped writers
	groSink  groSink
	rxCsum   bool
	txBudget int

	// Refill.
	refillKick chan struct{}
	refillMu   sync.Mutex
	refillBufs []*pci.Buffer
	starved    atomic.Bool
	worker     *experiment.Member // RefillShared: the endpoint's place on the worker

	tap atomic.Pointer[Tap]

	// Sessions: session is the endpoint's own; sessions[id] serves
	// another (NewSessionEndpoint), read by the poller without locks.
	session  uint8
	sessions [256]atomic.Pointer[SessionEndpoint]

	stats counters
	// atClose counts RX and TX buffers home (and in all) when Close freed
	// the pools.
	atClose [4]int
}

var (
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Endpoint)(nil)
)

// New claims the channel pair opts.Channel on c (which must be in
// mission mode), allocates the DMA pools, starts the channels (UL, then
// DL), takes over their event rings and starts the poller and refiller.
// Packets received before Attach are dropped and counted.
func New(ctx context.Context, c *mhi.Controller, opts Options) (*Endpoint, error) {
	e := &Endpoint{
		opts:       opts,
		c:          c,
		framing:    opts.Framing,
		log:        opts.Logger,
		budget:     opts.Budget,
		stop:       make(chan struct{}),
		quit:       make(chan struct{}),
		sched:      make(chan struct{}, 1),
		stopKick:   make(chan struct{}, 1),
		refillKick: make(chan struct{}, 1),
		rxCsum:     !opts.NoChecksumOffload,
	}
	if opts.Channel == "" {
		e.opts.Channel = DefaultChannel
	}
	if err := checkFraming(e.opts.Channel, opts.Framing); err != nil {
		return nil, err
	}
	if e.framing == nil {
		e.framing = framing.RawIP{}
	}
	if err := checkSession(e.framing, opts.Session); err != nil {
		return nil, err
	}
	e.session = opts.Session
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.budget <= 0 {
		e.budget = DefaultBudget
	}
	mtu := opts.MTU
	if mtu == 0 {
		mtu = DefaultMTU
	}
	e.mtu.Store(mtu)
	if e.opts.TXTimeout <= 0 {
		e.opts.TXTimeout = DefaultTXTimeout
	}
	switch {
	case e.opts.DeferPoll == 0:
		e.opts.DeferPoll = DefaultDeferPoll
	case e.opts.DeferPoll < 0:
		e.opts.DeferPoll = 0
	}
	if e.opts.DeferCount <= 0 {
		e.opts.DeferCount = 2
	}
	if e.opts.GSOMaxSize == 0 {
		e.opts.GSOMaxSize = stack.GVisorGSOMaxSize
	}
	if opts.Experiments != nil {
		e.x = *opts.Experiments
	}
	switch e.x.Refill {
	case experiment.RefillDedicated:
	case experiment.RefillShared:
		if e.x.Worker == nil {
			return nil, errors.New("link: RefillShared needs Experiments.Worker")
		}
	case experiment.RefillInline:
		if e.x.InlinePoll {
			return nil, errors.New("link: RefillInline needs the dedicated poller (not InlinePoll)")
		}
	default:
		return nil, fmt.Errorf("link: unknown refill mode %d", e.x.Refill)
	}
	e.log = e.log.With("link", e.opts.Channel)

	ul, dl, err := c.ChannelPair(e.opts.Channel,
		mhi.ChannelOptions{Release: e.txRelease},
		mhi.ChannelOptions{Release: e.rxRelease, MRU: opts.MRU})
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	e.ul, e.dl = ul, dl
	e.ulER, e.dlER = ul.EventRing(), dl.EventRing()
	e.shared = e.ulER == e.dlER
	if err := e.checkRings(); err != nil {
		return nil, err
	}
	e.mru = dl.MRU()
	if e.mru > mhi.MaxTRELen {
		return nil, fmt.Errorf("link: MRU %d over the %d-byte TRE limit", e.mru, mhi.MaxTRELen)
	}
	slots := dl.Elements() - 1
	e.level = e.x.RefillLevel
	if e.level <= 0 {
		e.level = max(1, slots/4)
	}
	e.level = min(e.level, slots)

	nrx, maxPieces := rxBuffers(opts, dl.Elements(), e.budget, e.mru)
	dma := c.Device().DMA()
	if e.rxPool, err = newPool(dma, nrx, e.mru); err != nil {
		return nil, fmt.Errorf("link: %s RX pool: %w", e.opts.Channel, err)
	}
	if err := e.tx.init(dma, e, txBuffers(opts, ul.Elements()), mtu); err != nil {
		e.rxPool.destroy(dma)
		return nil, fmt.Errorf("link: %s TX pool: %w", e.opts.Channel, err)
	}
	e.refillBufs = make([]*pci.Buffer, dl.Elements())
	e.rx.init(e.budget, maxPieces, nrx)
	e.rx.seqr, _ = e.framing.(framing.Sequenced)
	e.groSink.e = e
	e.gro.Init(!opts.NoGRO)
	e.gro.Dispatcher = &e.groSink
	e.rxFn = e.rxComplete
	e.txFn = e.txComplete
	e.txBudget = ul.Elements()
	if e.x.TXInBudget {
		e.txBudget = e.budget
	}

	if err := ul.Start(ctx); err != nil {
		e.freeMemory()
		return nil, fmt.Errorf("link: %w", err)
	}
	if err := dl.Start(ctx); err != nil {
		_ = ul.Reset(ctx)
		e.freeMemory()
		return nil, fmt.Errorf("link: %w", err)
	}
	if e.x.Refill == experiment.RefillShared {
		// Before anything can kick the refill.
		e.worker = e.x.Worker.Join(e.refill)
	}
	e.unsub = c.Subscribe(e.onControllerEvent)
	e.dlER.SetNotify(e.notify)
	if !e.shared {
		e.ulER.SetNotify(e.notifyUL)
	}

	// With InlinePoll the poller goroutine takes over inline runs that
	// exceed their time slice (ksoftirqd).
	e.wg.Add(1)
	e.workers.Add(1)
	go e.pollLoop()
	switch e.x.Refill {
	case experiment.RefillDedicated:
		e.wg.Add(1)
		e.workers.Add(1)
		go e.refillLoop()
	}
	e.kickRefill()
	// Completions may have been posted before the rings were ours.
	e.notify()
	return e, nil
}

// checkRings refuses event rings that also serve channels outside the
// pair: their completions would reach the poller, which cannot hand them
// to their owners.
func (e *Endpoint) checkRings() error {
	for _, cc := range e.c.Profile().Channels {
		if cc.Num == e.ul.Num() || cc.Num == e.dl.Num() {
			continue
		}
		if cc.EventRing == e.ulER.Index() || cc.EventRing == e.dlER.Index() {
			return fmt.Errorf("link: %s: event ring %d also serves channel %d (%s); the endpoint needs the pair's rings to itself",
				e.opts.Channel, cc.EventRing, cc.Num, cc.Name)
		}
	}
	return nil
}

// onControllerEvent runs on a controller goroutine: it must not block.
func (e *Endpoint) onControllerEvent(ev mhi.Event) {
	switch ev.Kind {
	case mhi.EventSysErr:
		// The channels are down: their buffers come back through
		// Release once the MHI reset has stopped the device's DMA. A
		// chain in progress will never end.
		e.resetRX.Store(true)
		e.tx.hold.startSysErr()
		e.log.Warn("SYS_ERR: channels down", "err", ev.Err)
	case mhi.EventRecovered:
		// Channels restarted with empty rings: the UL frames the
		// SYS_ERR took off go first, then those written during it
		// (unless TX is paused); refill at once.
		e.requeueHeld()
		e.resetRX.Store(true)
		e.kickRefill()
		e.notify()
	case mhi.EventRemoved, mhi.EventRecoveryFailed:
		e.dropHeld()
	}
}

// notify is napi_schedule: it runs on the controller's interrupt
// goroutines and only schedules the poller (or, with InlinePoll, polls
// right there).
func (e *Endpoint) notify() { e.schedule() }

// schedule is notify; it reports false when the poller was already
// scheduled (the running pass's re-check sees the new events).
func (e *Endpoint) schedule() bool {
	e.stats.interrupts.Add(1)
	if !e.scheduled.CompareAndSwap(false, true) {
		return false
	}
	if e.x.InlinePoll {
		e.pollInline()
		return true
	}
	select {
	case e.sched <- struct{}{}:
	default:
	}
	return true
}

// notifyUL is the interrupt of a UL event ring of its own: notify, and
// when a pass is already running, wake writers waiting for UL space so
// that they reap the completions themselves — the pass may be the one
// waiting (a reply written from inside delivery).
func (e *Endpoint) notifyUL() {
	if !e.schedule() && e.tx.waiters.Load() > 0 {
		e.tx.wake()
	}
}

// --- stack.LinkEndpoint ----------------------------------------------------

// MTU implements stack.LinkEndpoint.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint. It is capped so that one packet
// always fits a TX buffer.
func (e *Endpoint) SetMTU(mtu uint32) {
	e.mtu.Store(min(mtu, uint32(e.tx.maxPacket)))
}

// MaxHeaderLength implements stack.LinkEndpoint: framing headers are
// written into the TX buffer, not pushed into the packet.
func (e *Endpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: raw IP has none.
func (e *Endpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint (ignored: raw IP).
func (e *Endpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint.
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities {
	if e.rxCsum {
		return stack.CapabilityRXChecksumOffload
	}
	return stack.CapabilityNone
}

// Attach implements stack.LinkEndpoint. The poller delivers to d from now
// on. nil means the NIC is being removed: the poller and refiller stop
// (gVisor's Stack.Wait then calls Wait, before it calls Close), the
// endpoint cannot be attached again, and Close releases the rest.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		e.disp.Store(nil)
		e.stopWorkers()
		return
	}
	e.disp.Store(&d)
}

// Session returns the endpoint's own MBIM session ID or QMAP mux ID
// (Options.Session).
func (e *Endpoint) Session() uint8 { return e.session }

// Detach stops delivery to the attached dispatcher without stopping the
// poller and refiller (Attach(nil) stops them for good): packets of the
// endpoint's own session are then dropped and counted
// (RXDrops.NotAttached) while the other sessions' (NewSessionEndpoint) keep
// flowing, and a later Attach delivers again. stack.Modem uses it when
// the stack of the endpoint's own session closes but others stay.
func (e *Endpoint) Detach() { e.disp.Store(nil) }

// stopWorkers tells the poller and refiller to return.
func (e *Endpoint) stopWorkers() {
	e.quitOnce.Do(func() {
		e.stopped.Store(true)
		close(e.quit)
		if e.worker != nil {
			e.worker.Leave()
		}
	})
}

// IsAttached implements stack.LinkEndpoint.
func (e *Endpoint) IsAttached() bool { return e.disp.Load() != nil }

// Wait implements stack.LinkEndpoint: it returns when the goroutines the
// endpoint started have stopped (after Close or Attach(nil)).
//
// One exception keeps gVisor's teardown from deadlocking: Stack.Wait calls
// Attach(nil) and then Wait while holding the stack lock, and a poll pass
// in progress may be blocked on that very lock (a TCP reset it delivers
// needs a route). So once the endpoint is stopped, Wait also returns while
// the poller is inside a pass; Close, which the stack calls after
// releasing its lock, waits for the pass to end and the poller to exit.
func (e *Endpoint) Wait() {
	for e.workers.Load() > 0 {
		if e.stopped.Load() && e.inPass.Load() {
			return
		}
		// Teardown only: a short sleep beats a condition variable
		// that every pass would have to signal.
		time.Sleep(50 * time.Microsecond)
	}
	e.wg.Wait()
}

// ARPHardwareType implements stack.LinkEndpoint.
func (e *Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint (nothing: framing is added when
// the packet is copied into its TX buffer).
func (e *Endpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint.
func (e *Endpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// SetOnCloseAction implements stack.LinkEndpoint.
func (e *Endpoint) SetOnCloseAction(fn func()) { e.onClose.Store(&fn) }

// GSOMaxSize implements stack.GSOEndpoint.
func (e *Endpoint) GSOMaxSize() uint32 { return e.opts.GSOMaxSize }

// SupportedGSO implements stack.GSOEndpoint. The modem has no TSO: with
// GSOSegment the endpoint advertises host GSO and segments in
// WritePackets; with GSOGVisor TCP splits its segments itself.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	switch {
	case e.opts.GSO == GSOOff:
		return stack.GSONotSupported
	case e.opts.GSO == GSOGVisor:
		return stack.GVisorGSOSupported
	}
	return stack.HostGSOSupported
}

// Channels returns the UL and DL channels (for diagnostics and tests).
func (e *Endpoint) Channels() (ul, dl *mhi.Channel) { return e.ul, e.dl }

// RefillLevel returns the number of free DL descriptors that wakes the
// refiller.
func (e *Endpoint) RefillLevel() int { return e.level }

// Close implements stack.LinkEndpoint: it stops the poller and refiller,
// fails blocked and later writers, resets both channels (every queued
// buffer comes back), hands the event rings back to the controller and
// frees the DMA pools. It is idempotent and returns when everything has
// stopped.
func (e *Endpoint) Close() {
	// The stack's close action (RemoveNIC) runs first and outside the
	// once: it calls Close again itself, which then does the work.
	if fn := e.onClose.Swap(nil); fn != nil && *fn != nil {
		(*fn)()
	}
	e.closeOnce.Do(e.close)
}

func (e *Endpoint) close() {
	e.closed.Store(true)
	close(e.stop)
	e.stopWorkers()
	e.unsub()
	e.wg.Wait()
	// An inline poll may be running on an interrupt goroutine; it sees
	// closed and stops at the end of its pass.
	waitUnlocked(&e.pollMu)
	// Writers in flight see closed (or stop) and return; so does a
	// refill in progress on a shared worker.
	waitWriters(&e.lifeMu)
	waitUnlocked(&e.refillMu)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Reset (not Stop): the device forgets the rings and every queued
	// buffer comes back through Release. UL first, as Linux does.
	if err := e.ul.Reset(ctx); err != nil {
		e.log.Warn("reset UL channel", "err", err)
	}
	if err := e.dl.Reset(ctx); err != nil {
		e.log.Warn("reset DL channel", "err", err)
	}
	// Frames held across a SYS_ERR or a pause.
	e.dropHeld()
	e.ulER.SetNotify(nil)
	e.dlER.SetNotify(nil)
	// Frames the poller still held.
	e.rx.releaseAll(e)
	e.freeMemory()
}

// freeMemory frees the DMA pools; every buffer must be back.
func (e *Endpoint) freeMemory() {
	dma := e.c.Device().DMA()
	rx, rxAll, tx, txAll := e.buffersHome()
	e.atClose = [4]int{rx, rxAll, tx, txAll}
	if n, all := e.rxPool.available(), len(e.rxPool.all); n != all {
		e.log.Error("RX buffers missing at close", "back", n, "of", all)
	}
	if n, all := e.tx.available(), len(e.tx.all); n != all {
		e.log.Error("TX buffers missing at close", "back", n, "of", all)
	}
	e.rxPool.destroy(dma)
	e.tx.destroy(dma)
}

// buffersHome counts the RX and TX DMA buffers in their pools (tests).
func (e *Endpoint) buffersHome() (rx, rxAll, tx, txAll int) {
	return e.rxPool.available(), len(e.rxPool.all), e.tx.available(), len(e.tx.all)
}

// groSink is the dispatcher GRO delivers to: it counts what comes out of
// GRO (merges = in − out) and forwards to the attached stack.
type groSink struct{ e *Endpoint }

func (s *groSink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	e := s.e
	e.pass.groOut++
	if d := e.disp.Load(); d != nil {
		(*d).DeliverNetworkPacket(proto, pkt)
		return
	}
	e.pass.dropNoAtt++
}

func (s *groSink) DeliverLinkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if d := s.e.disp.Load(); d != nil {
		(*d).DeliverLinkPacket(proto, pkt)
	}
}

// waitUnlocked returns once whoever holds mu has released it.
func waitUnlocked(mu *sync.Mutex) {
	mu.Lock()
	defer mu.Unlock()
}

// waitWriters returns once no reader (writer goroutine) holds mu.
func waitWriters(mu *sync.RWMutex) {
	mu.Lock()
	defer mu.Unlock()
}
