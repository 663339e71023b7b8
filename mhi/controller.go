// Package mhi is the host side of the Modem Host Interface: it brings a
// Qualcomm PCIe modem from power-on to mission mode and moves data over its
// channels through rings in DMA memory, doorbells and MSI-driven events.
//
// A user opens a pci.Device (VFIO or the emulated modem), then:
//
//	c, err := mhi.New(dev, mhi.Options{})        // profile matched by PCI IDs
//	err = c.PowerUp(ctx)                           // READY → M0 → mission mode
//	ch, err := c.Channel(100, mhi.ChannelOptions{}) // then ch.Start, Queue, Ring
//
// The engine follows Linux drivers/bus/mhi/host (init.c, main.c, pm.c,
// boot.c) as summarised in docs/PROTOCOL.md. Every value the device writes
// (ring pointers, event fields, lengths) is validated before use.
//
// SYS_ERR recovery resets the device (MHICTRL.RESET, which stops its DMA)
// before any queued buffer goes back to its client, and restarts only the
// channels whose client still wants them (docs/RELIABILITY.md, "The
// recovery sequence"); a SYS_ERR before it has ended, the restarts
// included, makes it go round again instead of being lost. PowerUp resets a device found in any state but RESET
// or READY — one a host process left running when it died — with bus
// mastering off before it hands it new rings (same document, "Power-up
// over a device left running"). At mission mode the channels of the SBL
// (SAHARA) are taken down host-side, their buffers handed back (same
// document, "The SBL's channels at mission mode").
//
// Section numbers (§N.N) that name no document refer to docs/PROTOCOL.md,
// which describes the MHI protocol this package implements.
package mhi

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/mhi/pci"
)

// Options configure a Controller. The zero value works for any profiled
// device.
type Options struct {
	// Profile overrides matching the device's PCI IDs against the table.
	Profile *Profile
	// Firmware returns the image named by the profile (FirmwareImage) for
	// a device found in PBL. nil: a PBL device goes straight to READY.
	Firmware func(name string) ([]byte, error)
	// Boot configures full-boot-chain download, BHIe segment length and
	// progress callbacks (boot.go).
	Boot BootOptions
	// Timeout overrides the profile's Timeout: the state and command
	// waits it bounds (Profile.Timeout). The power-up waits keep the
	// profile's ReadyTimeout, or its Timeout (Profile.ReadyWait).
	Timeout time.Duration
	// PollInterval is how often register waits re-read the device when
	// no interrupt arrives (Linux polls every 25 ms; default 5 ms).
	PollInterval time.Duration
	// OnEvent is called on state changes (SYS_ERR, recovery, removal,
	// suspend). It runs on a controller goroutine and must not block.
	OnEvent func(Event)
	// NoRecovery disables automatic SYS_ERR recovery.
	NoRecovery bool
	// OnCrashDump receives the RAM dump the host collected when the
	// firmware crashed into EE RDDM (rddm.go), before the reset that
	// recovers the modem; LastCrashDump keeps the latest one too. It
	// runs on the recovery goroutine, which waits for it: write the dump
	// out and return.
	OnCrashDump func(CrashDump)
	// LivenessInterval is how often a powered controller reads
	// MHISTATUS on its own, so that a surprise removal (or a SYS_ERR
	// whose MSI was lost) is noticed even when nothing else touches the
	// device, e.g. when its only user is blocked in ControlPort.Recv
	// (liveness.go). Default DefaultLivenessInterval; negative: never.
	LivenessInterval time.Duration
	// HealthCheckInterval is how often a powered controller reads the
	// function's vendor ID from config space, like Linux pci_generic's
	// health check: 0xFFFF means removal, 0 a function-level reset and,
	// if that does not bring it back, removal (health.go). Default
	// DefaultHealthCheckInterval (2 s); negative: never.
	HealthCheckInterval time.Duration
	// CrashLoopLimit and CrashLoopWindow bound SYS_ERR recovery: the
	// CrashLoopLimit-th SYS_ERR within CrashLoopWindow is not recovered
	// from; the controller resets the device to quiet it, reports
	// EventRecoveryFailed with an error wrapping ErrCrashLoop, and stays
	// failed until the next PowerUp (crashloop.go). Defaults
	// DefaultCrashLoopLimit (5) and DefaultCrashLoopWindow (60 s); a
	// negative limit: no bound.
	CrashLoopLimit  int
	CrashLoopWindow time.Duration
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// EventKind says what happened to the controller.
type EventKind int

const (
	EventMissionMode    EventKind = iota // power-up reached mission mode
	EventSysErr                          // SYS_ERR detected; channels are down (buffers come back after the MHI reset)
	EventRecovered                       // recovery done; channels restarted
	EventRecoveryFailed                  // recovery gave up, function-level reset included; Err says each step
	EventSuspended
	EventResumed
	EventRemoved // the device stopped answering
	EventPowerDown
	// EventFunctionReset: recovery through MHI reset failed (Err says
	// how); the controller resets the PCI function and powers up again
	// (Linux pci_generic mhi_pci_recovery_work). EventRecovered or
	// EventRecoveryFailed follows.
	EventFunctionReset
	// EventCrashDump: the firmware crashed into EE RDDM and the host
	// collected its RAM dump (Err nil: Options.OnCrashDump has it and
	// LastCrashDump returns it) or failed to (Err says why); recovery
	// follows.
	EventCrashDump
)

func (k EventKind) String() string {
	names := [...]string{"mission-mode", "sys-err", "recovered", "recovery-failed", "suspended", "resumed", "removed", "power-down",
		"function-reset", "crash-dump"}
	if k < 0 || int(k) >= len(names) {
		return fmt.Sprintf("EventKind(%d)", int(k))
	}
	return names[k]
}

// Event is passed to Options.OnEvent.
type Event struct {
	Kind EventKind
	EE   EE
	Err  error
}

// pmState is the host's power-management state (Linux MHI_PM_*).
type pmState int

const (
	pmDisabled pmState = iota
	pmPOR
	pmM0
	pmM2
	pmM3Enter
	pmM3
	pmM3Exit
	pmSysErrProcess
	pmFatal
	pmRemoved
	// pmShutdown: PowerDown is tearing the device down (Linux
	// MHI_PM_SHUTDOWN_PROCESS): no doorbell, and a state change the
	// device reports now (a late M0, READY after the reset) moves
	// nothing (docs/QUIRKS.md, "State change during teardown").
	pmShutdown
)

func (s pmState) String() string {
	return [...]string{"DISABLED", "POR", "M0", "M2", "M3_ENTER", "M3", "M3_EXIT", "SYS_ERR_PROCESS", "FATAL", "REMOVED", "SHUTDOWN_PROCESS"}[s]
}

// Controller drives one MHI device. Its methods are safe for concurrent
// use. It owns one goroutine per MSI vector and, while recovering from
// SYS_ERR, one recovery goroutine; Close stops them all.
type Controller struct {
	dev  pci.Device
	bar  pci.BAR
	prof *Profile
	opts Options
	log  *slog.Logger
	name string

	timeout time.Duration // the state and command timeout: Options.Timeout or Profile.Timeout
	poll    time.Duration

	bhiOff, bhieOff  uint64
	chdbOff, erdbOff uint64

	chanCtx, evCtx, cmdCtx *pci.Buffer
	cmd                    commandRing
	events                 []*EventRing
	channels               map[int]*Channel
	hwRings                int

	vectors []pci.Vector
	shared  bool // fewer vectors than rings: everything on vector 0
	wg      sync.WaitGroup

	// dbGate orders doorbell writes against M3 entry, as Linux's
	// pm_lock does: a ringer holds it for reading from the check that
	// doorbells are allowed to the doorbell write, and Suspend holds it
	// for writing while it leaves M0/M2. Without it a doorbell checked
	// in M0 could land after MHICTRL = M3 (§4.6: no doorbells in M3).
	// Taken before mu.
	dbGate sync.RWMutex

	mu         sync.Mutex
	changed    chan struct{}
	pm         pmState
	devState   State
	ee         EE
	mission    bool
	poweringUp bool
	recovering bool
	// dmaFence: a SYS_ERR left the device's DMA running; the channels'
	// buffers stay with it until an MHI reset completes (reclaim).
	dmaFence bool
	// cancelRecovery aborts the recovery goroutine's waits.
	cancelRecovery context.CancelFunc
	closed         bool
	serial         uint32
	wakeAsserted   bool
	subs           map[int]func(Event)
	nextSub        int
	lastRecover    time.Duration
	boot           bootRun
	live           *liveness   // the liveness goroutine while powered
	savedCfg       savedConfig // config space saved by New, read-only after (pcistate.go)
	lastDump       *CrashDump  // the latest RDDM dump (rddm.go)
	// crashes are the starts of the recent SYS_ERR recoveries, and
	// recoveryStopped the crash-loop error once they were too many
	// (crashloop.go); PowerUp clears both.
	crashes         []time.Time
	recoveryStopped error

	stats ControllerStats

	// recoveryEndHook, when set (tests only, export_test.go), runs on
	// the recovery goroutine after the channel restarts, just before
	// endRecovery: the window in which nothing of recovery waits on the
	// device.
	recoveryEndHook func()
	// eeHook, when set (tests only, export_test.go), runs on the control
	// ring's goroutine with each execution environment the controller
	// publishes to its clients, right after it did: the moment a client
	// that acts on an EE change would act.
	eeHook func(EE)
}

// ControllerStats are counters; read them with Stats.
type ControllerStats struct {
	Interrupts      atomic.Uint64
	Events          atomic.Uint64
	InvalidEvents   atomic.Uint64
	Commands        atomic.Uint64
	CommandTimeouts atomic.Uint64
	SysErrs         atomic.Uint64
	Recoveries      atomic.Uint64
	Suspends        atomic.Uint64
	Resumes         atomic.Uint64
	LivenessChecks  atomic.Uint64
	HealthChecks    atomic.Uint64
	CrashDumps      atomic.Uint64
}

// Stats is a snapshot of ControllerStats.
type Stats struct {
	Interrupts, Events, InvalidEvents, Commands, CommandTimeouts uint64
	SysErrs, Recoveries, Suspends, Resumes                       uint64
	LastRecovery                                                 time.Duration
	LivenessChecks                                               uint64 // MHISTATUS reads by the liveness check
	CrashDumps                                                   uint64 // RDDM dumps collected (rddm.go)
	HealthChecks                                                 uint64 // vendor-ID reads by the health check (health.go)
}

// New prepares a controller for dev: it matches the profile, maps BAR 0,
// enables memory decoding with bus mastering off, saves config space
// (restored after a SoC or function-level reset, pcistate.go) and
// allocates the contexts, command ring and event rings (Linux
// mhi_prepare_for_power_up). The device is not touched beyond reading its
// layout registers until PowerUp, which resets a device found in any state
// but RESET or READY (one a dead host process left running) before it
// enables bus mastering.
func New(dev pci.Device, opts Options) (*Controller, error) {
	info := dev.Info()
	prof := opts.Profile
	if prof == nil {
		var ok bool
		prof, ok = Match(info.Vendor, info.Device, info.SubVendor, info.SubDev)
		if !ok {
			return nil, fmt.Errorf("mhi: %s: no modem profile matches; pass Options.Profile", info)
		}
	}
	if err := prof.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		dev:      dev,
		prof:     prof,
		opts:     opts,
		log:      opts.Logger,
		name:     fmt.Sprintf("%s (%s)", info.Address, prof.Name),
		timeout:  prof.Timeout,
		poll:     5 * time.Millisecond,
		changed:  make(chan struct{}),
		channels: make(map[int]*Channel),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout > 0 {
		c.timeout = opts.Timeout
	}
	if opts.PollInterval > 0 {
		c.poll = opts.PollInterval
	}
	bar, err := dev.BAR(0)
	if err != nil {
		return nil, fmt.Errorf("mhi: %s: BAR 0: %w", c.name, err)
	}
	c.bar = bar
	// Registers readable, DMA not yet: a device left running by a host
	// that died may still be writing rings that are gone. PowerUp resets
	// such a device before it turns bus mastering on.
	if err := c.setBusMaster(false); err != nil {
		return nil, err
	}
	c.saveConfig()
	if err := c.readLayout(); err != nil {
		return nil, err
	}
	if err := c.allocate(); err != nil {
		c.freeMemory()
		return nil, err
	}
	return c, nil
}

// readLayout reads and checks the offsets the device advertises.
func (c *Controller) readLayout() error {
	n := c.bar.Len()
	c.bhiOff = uint64(c.bar.Read32(RegBHIOFF))
	if c.bhiOff == 0xFFFFFFFF {
		return fmt.Errorf("mhi: %s: registers read all-ones: %w", c.name, ErrRemoved)
	}
	if c.bhiOff+BHIBlockLen > n || c.bhiOff%4 != 0 {
		return fmt.Errorf("mhi: %s: BHIOFF %#x outside the %d-byte BAR: %w", c.name, c.bhiOff, n, ErrProtocol)
	}
	c.bhieOff = uint64(c.bar.Read32(RegBHIEOFF))
	if c.bhieOff != 0 && (c.bhieOff+BHIEBlockLen > n || c.bhieOff%4 != 0) {
		return fmt.Errorf("mhi: %s: BHIEOFF %#x outside the %d-byte BAR: %w", c.name, c.bhieOff, n, ErrProtocol)
	}
	return nil
}

func (c *Controller) allocate() error {
	dma := c.dev.DMA()
	var err error
	if c.chanCtx, err = dma.Alloc(MaxChannels*ContextSize, 64); err != nil {
		return fmt.Errorf("mhi: %s: channel contexts: %w", c.name, err)
	}
	if c.evCtx, err = dma.Alloc(len(c.prof.EventRings)*ContextSize, 64); err != nil {
		return fmt.Errorf("mhi: %s: event contexts: %w", c.name, err)
	}
	if c.cmdCtx, err = dma.Alloc(ContextSize, 64); err != nil {
		return fmt.Errorf("mhi: %s: command context: %w", c.name, err)
	}
	if c.cmd.ring, err = newRing(dma, cmdRingElements); err != nil {
		return fmt.Errorf("mhi: %s: command ring: %w", c.name, err)
	}
	for i, cfg := range c.prof.EventRings {
		r, err := newRing(dma, cfg.Elements)
		if err != nil {
			return fmt.Errorf("mhi: %s: event ring %d: %w", c.name, i, err)
		}
		c.events = append(c.events, &EventRing{c: c, idx: i, cfg: cfg, ring: r, ctxOff: i * ContextSize})
		if cfg.Hardware() {
			c.hwRings++
		}
	}
	for _, cfg := range c.prof.Channels {
		ch := &Channel{c: c, cfg: cfg, er: c.events[cfg.EventRing], ctxOff: cfg.Num * ContextSize}
		ch.bei = c.prof.EventRings[cfg.EventRing].IntModMs != 0
		c.channels[cfg.Num] = ch
		c.events[cfg.EventRing].chans = append(c.events[cfg.EventRing].chans, ch)
	}
	c.initContexts()
	return nil
}

// initContexts writes the power-on contents of every context (Linux
// mhi_init_dev_ctxt): channels DISABLED with their type, burst mode and
// event ring; event rings valid with moderation and vector; rings empty.
func (c *Controller) initContexts() {
	for _, ch := range c.channels {
		b, o := c.chanCtx, ch.ctxOff
		b.Store32(o+CtxW0, ChCfg(ChanDisabled, ch.cfg.Burst))
		b.Store32(o+CtxW1, uint32(ch.cfg.Dir))
		b.Store32(o+CtxW2, uint32(ch.cfg.EventRing))
		for _, f := range []int{CtxRBase, CtxRLen, CtxRP, CtxWP} {
			b.Store64(o+f, 0)
		}
	}
	for _, er := range c.events {
		er.initContext(c.shared)
	}
	c.cmd.reset(c.cmdCtx)
}

// Profile returns the profile the controller uses.
func (c *Controller) Profile() *Profile { return c.prof }

// Device returns the PCI device.
func (c *Controller) Device() pci.Device { return c.dev }

// String names the controller in logs and errors.
func (c *Controller) String() string { return c.name }

// State returns the device's MHI state and execution environment as last
// reported, and whether the controller is in mission mode.
func (c *Controller) State() (State, EE, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.devState, c.ee, c.mission
}

// SerialNumber returns BHI_SERIALNU as read at power-up in PBL, or, for a
// device that started in mission mode, as it reads now.
func (c *Controller) SerialNumber() uint32 {
	c.mu.Lock()
	s := c.serial
	c.mu.Unlock()
	if s == 0 {
		if v := c.read(c.bhiOff + BHISerialNum); v != 0xFFFFFFFF {
			return v
		}
	}
	return s
}

// EventRing returns event ring i.
func (c *Controller) EventRing(i int) (*EventRing, error) {
	if i < 0 || i >= len(c.events) {
		return nil, fmt.Errorf("mhi: %s: no event ring %d", c.name, i)
	}
	return c.events[i], nil
}

// Stats returns a snapshot of the controller counters.
func (c *Controller) Stats() Stats {
	s := &c.stats
	c.mu.Lock()
	last := c.lastRecover
	c.mu.Unlock()
	return Stats{
		Interrupts: s.Interrupts.Load(), Events: s.Events.Load(), InvalidEvents: s.InvalidEvents.Load(),
		Commands: s.Commands.Load(), CommandTimeouts: s.CommandTimeouts.Load(), SysErrs: s.SysErrs.Load(),
		Recoveries: s.Recoveries.Load(), Suspends: s.Suspends.Load(), Resumes: s.Resumes.Load(),
		LastRecovery: last, LivenessChecks: s.LivenessChecks.Load(), CrashDumps: s.CrashDumps.Load(),
		HealthChecks: s.HealthChecks.Load(),
	}
}

// --- register access -----------------------------------------------------

func (c *Controller) read(off uint64) uint32 { return c.bar.Read32(off) }

func (c *Controller) write(off uint64, v uint32) { c.bar.Write32(off, v) }

// write64 writes a 64-bit register pair, high word first (§10 pitfall 1).
func (c *Controller) write64(lowOff, highOff uint64, v uint64) {
	c.write(highOff, uint32(v>>32))
	c.write(lowOff, uint32(v))
}

// doorbell rings a doorbell at off with a 64-bit IOVA: high word, then
// the low word that commits it.
func (c *Controller) doorbell(off uint64, v uint64) {
	c.write(off+4, uint32(v>>32))
	c.write(off, uint32(v))
}

func (c *Controller) rmw(off uint64, mask uint32, shift uint, v uint32) {
	c.write(off, SetField(c.read(off), mask, shift, v))
}

// setBusMaster sets the Command register: memory decoding always on (the
// registers stay readable), bus mastering (DMA and MSI) on or off.
func (c *Controller) setBusMaster(on bool) error {
	var b [2]byte
	if err := c.dev.ConfigRead(pci.CfgCommand, b[:]); err != nil {
		return fmt.Errorf("mhi: %s: read the command register: %w", c.name, err)
	}
	cmd := uint16(b[0]) | uint16(b[1])<<8 | pci.CmdMemory
	if on {
		cmd |= pci.CmdBusMaster
	} else {
		cmd &^= pci.CmdBusMaster
	}
	b[0], b[1] = byte(cmd), byte(cmd>>8)
	if err := c.dev.ConfigWrite(pci.CfgCommand, b[:]); err != nil {
		return fmt.Errorf("mhi: %s: set bus mastering %v: %w", c.name, on, err)
	}
	return nil
}

// deviceStatus reads MHISTATUS and BHI_EXECENV. removed is set when the
// function reads all-ones and its config space confirms it is gone.
func (c *Controller) deviceStatus() (st uint32, ee EE, removed bool) {
	st = c.read(RegMHISTATUS)
	if st == 0xFFFFFFFF && c.confirmRemoved() {
		return st, 0, true
	}
	return st, EE(c.read(c.bhiOff + BHIExecEnv)), false
}

func (c *Controller) confirmRemoved() bool {
	var id [2]byte
	if err := c.dev.ConfigRead(pci.CfgVendorID, id[:]); err != nil {
		return true
	}
	return id[0] == 0xff && id[1] == 0xff
}

// --- waiting ---------------------------------------------------------------

// broadcast wakes every waiter; call with c.mu held.
func (c *Controller) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// bound is how long a wait may take and the setting that says so: a wait
// that runs out names both, so that the error tells which knob to turn.
type bound struct {
	d    time.Duration
	from string // "profile Timeout", "Options.Timeout", …
	// power: a power-up wait (Profile.ReadyWait), which can take tens of
	// seconds on some modems: it reports progress (waitProgress).
	power bool
}

// Progress of the long power-up waits: the first report after
// waitProgressFirst, then one every waitProgressEvery.
const (
	waitProgressFirst = time.Second
	waitProgressEvery = 5 * time.Second
)

// waitProgress reports a power-up wait still running: a log line and a
// PhaseReady Progress ("still waiting for READY: 6s of 50s").
func (c *Controller) waitProgress(what string, waited time.Duration, limit bound) {
	waited = waited.Truncate(100 * time.Millisecond)
	c.log.Info("still waiting for "+what, "dev", c.name, "waited", waited, "bound", limit.d, "from", limit.from)
	c.progress(nil, Progress{Phase: PhaseReady, Waiting: what, Waited: waited, Limit: limit.d})
}

// stateBound bounds the waits of the state and command timeout
// (Profile.Timeout, or Options.Timeout when set).
func (c *Controller) stateBound() bound {
	if c.opts.Timeout > 0 {
		return bound{d: c.timeout, from: "Options.Timeout"}
	}
	return bound{d: c.timeout, from: "profile Timeout"}
}

// twice is b doubled, for the waits that cover a whole sequence of waits
// bounded by b.
func (b bound) twice() bound { return bound{d: 2 * b.d, from: "twice the " + b.from, power: b.power} }

// waitFor blocks until cond (called with c.mu held) reports done or an
// error, the bound passes, or ctx ends. It re-evaluates on every
// broadcast (interrupts, events) and every poll interval, because a device
// may change registers without an interrupt. Waits fail fast when the
// controller is closed or the device is removed.
func (c *Controller) waitFor(ctx context.Context, limit bound, what string, cond func() (bool, error)) error {
	deadline := time.NewTimer(limit.d)
	defer deadline.Stop()
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	start, nextReport := time.Now(), waitProgressFirst
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return fmt.Errorf("mhi: %s: waiting for %s: %w", c.name, what, ErrClosed)
		}
		if c.pm == pmRemoved {
			c.mu.Unlock()
			return fmt.Errorf("mhi: %s: waiting for %s: %w", c.name, what, ErrRemoved)
		}
		done, err := cond()
		ch := c.changed
		c.mu.Unlock()
		if err != nil {
			return fmt.Errorf("mhi: %s: waiting for %s: %w", c.name, what, err)
		}
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-tick.C:
			c.checkAlive()
			if waited := time.Since(start); limit.power && waited >= nextReport {
				nextReport = waited + waitProgressEvery
				c.waitProgress(what, waited, limit)
			}
		case <-deadline.C:
			return fmt.Errorf("mhi: %s: waited %v for %s (%s): %w", c.name, limit.d, what, limit.from, ErrTimeout)
		case <-ctx.Done():
			return fmt.Errorf("mhi: %s: waiting for %s: %w", c.name, what, ctx.Err())
		}
	}
}

// checkAlive re-reads MHISTATUS from a wait's poll tick: it catches
// surprise removal and a SYS_ERR whose interrupt was lost.
func (c *Controller) checkAlive() { c.checkStatus("MHISTATUS poll") }

// checkStatus reads MHISTATUS and acts on removal or SYS_ERR; how names
// the detection path for the log.
func (c *Controller) checkStatus(how string) {
	st, ee, removed := c.deviceStatus()
	if removed {
		c.markRemoved()
		return
	}
	if State(Field(st, StatusStateMask, StatusStateShift)) == StateSysErr {
		c.sysErrDetected(ee, how)
	}
}

// markRemoved fails everything with ErrRemoved: the device reads
// all-ones, or its backend was asked to release it (markRemovedWhy).
func (c *Controller) markRemoved() { c.markRemovedWhy("registers read all-ones") }

func (c *Controller) markRemovedWhy(why string) {
	c.mu.Lock()
	if c.pm == pmRemoved || c.closed {
		c.mu.Unlock()
		return
	}
	c.setRemovedLocked()
	c.mu.Unlock()
	c.finishRemoved(why)
}

// setRemovedLocked puts the controller in pmRemoved: waits fail and no
// doorbell is rung from now on. The caller holds c.mu.
func (c *Controller) setRemovedLocked() {
	c.pm = pmRemoved
	c.mission = false
	c.dmaFence = false // a removed device reaches no host memory
	c.broadcast()
}

// finishRemoved fails the channels with ErrRemoved and tells the
// subscribers, after setRemovedLocked.
func (c *Controller) finishRemoved(why string) {
	c.log.Error("device removed: "+why, "dev", c.name)
	for _, ch := range c.channels {
		ch.abort(ErrRemoved)
	}
	c.emit(Event{Kind: EventRemoved, Err: ErrRemoved})
}

func (c *Controller) emit(e Event) {
	if c.opts.OnEvent != nil {
		c.opts.OnEvent(e)
	}
	c.mu.Lock()
	subs := make([]func(Event), 0, len(c.subs))
	for _, fn := range c.subs {
		subs = append(subs, fn)
	}
	c.mu.Unlock()
	for _, fn := range subs {
		fn(e)
	}
}

// Subscribe registers fn for controller events (like Options.OnEvent; fn
// runs on a controller goroutine and must not block). Clients use it to
// re-queue buffers after SYS_ERR recovery. The returned func unsubscribes.
func (c *Controller) Subscribe(fn func(Event)) (cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextSub++
	id := c.nextSub
	if c.subs == nil {
		c.subs = make(map[int]func(Event))
	}
	c.subs[id] = fn
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.subs, id)
	}
}

// operationalLocked returns nil when the controller can run channel
// commands: in mission mode, or in the SBL once the device reached M0
// there (Linux creates the SBL EE's channel devices, SAHARA, at the SBL
// transition, before mission mode). Channel.Start checks the channel's own
// EE mask.
func (c *Controller) operationalLocked() error {
	switch {
	case c.closed:
		return ErrClosed
	case c.pm == pmRemoved:
		return ErrRemoved
	case c.pm == pmFatal && c.recoveryStopped != nil:
		return c.recoveryStopped
	case c.pm == pmSysErrProcess || c.pm == pmFatal:
		return ErrSysErr
	case c.mission:
		return nil
	case c.ee == EESBL && (c.pm == pmM0 || c.pm == pmM2):
		return nil
	}
	return fmt.Errorf("%w: not in mission mode or M0 in the SBL (pm %s, EE %s)", ErrState, c.pm, c.ee)
}

// doorbellAllowedLocked reports whether the host may ring doorbells now
// (Linux MHI_DB_ACCESS_VALID: POR, M0, M2, M3 exit; docs/PROTOCOL.md §4.6).
// TREs queued otherwise stay in memory and are rung at the next M0.
func (c *Controller) doorbellAllowedLocked() bool {
	switch c.pm {
	case pmPOR, pmM0, pmM2, pmM3Exit:
		return true
	}
	return false
}

func (c *Controller) doorbellAllowed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.doorbellAllowedLocked()
}
