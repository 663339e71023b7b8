// Package sim is the emulated modem: the device side of MHI (the Linux EP
// stack's behaviour, docs/PROTOCOL.md §8, plus a boot ROM) as a PCI device
// model for the in-process bus mhi/pci/vpci, impersonating any modem
// profile. Channel pairs are backed by Functions (Loopback by default on
// "LOOPBACK", Generator for DL load; Sahara, the SBL's image loads and RAM
// dumps on SAHARA; Firehose, the flash programmer over emulated Storage on
// FIREHOSE, docs/FLASHING.md); strict mode turns every host protocol
// violation into a test failure naming the rule.
//
// Function and Port are the hook the modem's network side plugs into:
// the carrier network, the MBIM and QMI control functions and the small
// test networks live in link/simnet, one floor up, because they speak the
// link layer's wire formats and nothing under mhi/ imports link/
// (docs/ARCHITECTURE.md).
//
//	dev, modem, err := sim.NewDevice(profile, sim.Options{
//		Strict: true, OnViolation: func(err error) { t.Error(err) },
//	})
//	defer dev.Close() // detaches the modem and stops its goroutines
//	dev.SetBusMaster(true)
//
// The host then drives dev like hardware: BAR 0 registers, DMA buffers,
// MSI vectors.
//
// Concurrency: the bus calls MMIORead/MMIOWrite from host goroutines; they
// touch only the register file and never block. One device goroutine owns
// the MHI state machine and the rings and calls the Functions; a second one
// fires moderated MSIs. Port.Send may run on any goroutine and shares the
// device lock. Detach stops everything.
//
// Section numbers (§N.N) that name no document refer to docs/PROTOCOL.md;
// docs/FRAMING.md (MBIM, NTB, QMAP) is always named.
package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// Boot selects the execution environment the modem powers up in.
type Boot uint8

const (
	// BootAMSS: mission mode firmware runs; MHI comes up READY at once.
	BootAMSS Boot = iota
	// BootPBL: the boot ROM waits for a BHI download (§4.4, §8.7); the
	// image starts the SBL, which comes up READY, reports EE SBL after M0
	// and moves to AMSS after Options.SBLTime.
	BootPBL
)

// Options configure a Modem. The zero value is a well-behaved modem in
// AMSS with moderation, lenient about host mistakes.
type Options struct {
	// Boot is where the modem starts (after New, a SoC reset or an FLR).
	// (A field of its own rather than an mhi.EE: EEPBL is 0, so an EE
	// could not default to AMSS.)
	Boot Boot
	// Strict reports every host protocol violation to OnViolation (a
	// test passes t.Error). Violations are always counted and logged.
	Strict      bool
	OnViolation func(error)
	// Functions attaches a Function to channel pairs by name. "LOOPBACK"
	// gets a Loopback unless the map names it (map it to nil for none).
	// Each pair needs its own Function value.
	Functions map[string]Function
	// DisableModeration raises an MSI for every event, ignoring BEI.
	DisableModeration bool
	// BurstIdle is how long a polling burst-mode channel finds nothing
	// new before it sends DB_MODE (default 2 ms); PollInterval is how
	// often it polls the context wp meanwhile (default 100 µs), after
	// busy-polling for PollSpin since it last found something (default
	// 50 µs).
	BurstIdle, PollInterval, PollSpin time.Duration
	// DBModeWatchdog is how often a burst channel in doorbell mode
	// (after it posted DB_MODE) re-reads its context wp; when the host
	// moved it and has not rung the doorbell a quarter period later,
	// the channel polls again and Stats.WPWithoutDoorbell counts it
	// (channel.go, watchDBMode).
	// Default 100 ms; negative: never (the channel waits for the
	// doorbell, as the protocol asks).
	DBModeWatchdog time.Duration
	// EventWait bounds the wait for a free event ring element before
	// the event is dropped (default 1 s).
	EventWait time.Duration
	// SendTimeout bounds Port.Send's wait for queue room (default
	// 100 ms); DLQueue and DLQueueBytes bound each DL channel's queue of
	// data waiting for host buffers (defaults 64 packets, 1 MiB).
	SendTimeout           time.Duration
	DLQueue, DLQueueBytes int
	// MaxTD bounds a UL transfer descriptor (default 1 MiB); larger
	// ones are consumed and dropped.
	MaxTD int
	// SBLTime is how long the SBL runs after M0 before it reports AMSS
	// (default 5 ms).
	SBLTime time.Duration
	// StayInSBL keeps a modem booted from PBL in the SBL until
	// Modem.LeaveSBL: it does not report AMSS, so the host's power-up
	// waits for mission mode while the SBL's channels (SAHARA) run, as
	// during a firmware upload over SAHARA. (When the modem moves on to
	// AMSS, the SBL's channels end with the SBL.)
	StayInSBL bool
	// LoseFirmwareOnSysErr makes the modem come back in PBL after a
	// SYS_ERR recovery reset (the host must download again).
	LoseFirmwareOnSysErr bool
	// DrainDMAOnSysErr models hardware whose DMA engine drains after a
	// crash: the DL buffers the modem held when it entered SYS_ERR (the
	// TREs between its read pointer and the host's write pointer) keep
	// being written, with the byte DrainPattern, on every pass of the
	// device loop and one last time when the host's MHI reset arrives;
	// the reset completes (MHICTRL.RESET clears) only after that. A host
	// that hands those buffers back to their owners before its MHI reset
	// has completed sees them overwritten.
	DrainDMAOnSysErr bool
	// ImageMinSize and ImageMaxSize bound BHI images (defaults 1 byte,
	// 64 MiB); BHIErrCode, when non-zero, fails every BHI download with
	// that BHI_ERRCODE.
	ImageMinSize, ImageMaxSize int
	BHIErrCode                 uint32
	// SerialNumber is reported in BHI_SERIALNU (default: derived from
	// the profile name).
	SerialNumber uint32
	// SOCHWVersion is reported at 0x224 (default 0x40010100).
	SOCHWVersion uint32
	// IDIndex picks which of the profile's PCI IDs to impersonate.
	IDIndex int
	// CrashedRDDM, when set, makes the modem start crashed: EE RDDM,
	// MHISTATUS SYS_ERR, holding this RAM dump image for the host to
	// collect (rddm.go), as a modem whose firmware crashed before any
	// host was there. Only at New: a reset brings it up normally.
	CrashedRDDM []byte
	// MSIVectors is how many MSI vectors the modem asks for (default
	// one per event ring plus one, at most 32). Fewer than that make
	// the host share vector 0 among BHI and every event ring.
	MSIVectors int
	// Quirks turns on documented behaviours of real modems (quirks.go,
	// docs/QUIRKS.md) besides the profile's own (ProfileQuirks), which
	// are on unless NoProfileQuirks is set. ReadyDelay is how long
	// READY takes after power-on or a reset with QuirkSlowReady (0:
	// READY at once; tests keep it short).
	Quirks          []Quirk
	NoProfileQuirks bool
	ReadyDelay      time.Duration
	// Logger receives device logs (nil: discarded).
	Logger *slog.Logger

	// Firmware misbehaviour a real modem shows (faults.go), apart from
	// the quirks.
	//
	// CrashLoop, when positive, makes the firmware crash this long after
	// every arrival in AMSS M0: SYS_ERR, as TriggerSysErr, and the same
	// again after each recovery, like a modem flashed with the wrong
	// image (docs/RELIABILITY.md, "Crash loop").
	CrashLoop time.Duration
	// BadImageID is the PCI ID the modem enumerates with when the AMSS
	// image on its flash is bad (amss.go); zero: 17cb:0306.
	BadImageID mhi.PCIID
}

func (o *Options) setDefaults(p *mhi.Profile) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.BurstIdle, 2*time.Millisecond)
	if o.DBModeWatchdog == 0 {
		o.DBModeWatchdog = 100 * time.Millisecond
	}
	def(&o.PollInterval, 100*time.Microsecond)
	def(&o.PollSpin, 50*time.Microsecond)
	def(&o.EventWait, time.Second)
	def(&o.SendTimeout, 100*time.Millisecond)
	def(&o.SBLTime, 5*time.Millisecond)
	defInt(&o.DLQueue, 64)
	defInt(&o.DLQueueBytes, 1<<20)
	defInt(&o.MaxTD, 1<<20)
	defInt(&o.ImageMinSize, 1)
	defInt(&o.ImageMaxSize, 64<<20)
	if o.SerialNumber == 0 {
		h := fnv.New32a()
		h.Write([]byte(p.Name))
		o.SerialNumber = h.Sum32()
	}
	if o.SOCHWVersion == 0 {
		o.SOCHWVersion = defaultSOCHWVersion
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// ErrDetached is returned by requests to a modem that is not attached to a
// bus (before Attach or after Detach).
var ErrDetached = errors.New("sim: modem not attached")

// ErrState is returned by a request the MHI state does not allow.
var ErrState = errors.New("sim: not possible in the current MHI state")

// Modem is the emulated modem. It implements vpci.Model.
type Modem struct {
	p    *mhi.Profile
	opts Options
	log  *slog.Logger
	id   pci.Identity
	host vpci.Host

	regs   regFile
	cfgPOR uint32                      // MHICFG at power-on
	bhiPOR [mhi.BHIBlockLen / 4]uint32 // BHI block at power-on

	// Signals. wake (device goroutine), erKick (event ring space
	// waiters) hold at most one token.
	wake      chan struct{}
	erKick    chan struct{}
	reqs      chan *request
	quit      chan struct{}
	exited    chan struct{}
	deviceG   atomic.Uint64 // id of the device goroutine (run), for Port.Send
	irqExited chan struct{}
	abort     atomic.Bool // a reset or crash is pending: stop waiting
	// lateWindow: QuirkLateStateChange posted its late STATE_CHANGE at
	// an MHI reset; any doorbell before the host next requests a state
	// is a violation (read by MMIOWrite).
	lateWindow atomic.Bool
	attached   atomic.Bool
	attach     sync.Once
	detach     sync.Once

	// mu is the device lock: everything below, the channels and the
	// event rings. The device goroutine holds it while it works, Send
	// while it places data.
	mu    sync.Mutex
	state mhi.State
	// boots counts the modem's restarts (power-on, SoC reset, MHI
	// reset, SYS_ERR): Port.Boot.
	boots      uint64
	ee         mhi.EE
	hc         hostCfg
	cmd        cmdRing
	cmdPending bool
	// needsSoCReset: QuirkResetOnRemove saw an MHI reset in mission
	// mode; M0 requests are ignored until power-on.
	needsSoCReset bool
	ers           [maxEventRings]eventRing
	chans         [mhi.MaxChannels]*channel
	pairs         []*pair
	burstChans    []*channel
	dbWork        chanBits  // channel doorbells to handle
	ulWork        chanBits  // UL channels with TREs to consume
	polling       bool      // a burst channel polls: wake up every PollInterval
	lastActive    time.Time // a polling channel last found something new
	watchNext     time.Time // the next doorbell-mode watchdog check (zero: none)
	sblUntil      time.Time
	// fpAt is when the flash programmer takes over MHI after its
	// download (QuirkEDLReadyAgain; zero: not pending).
	fpAt time.Time
	// batchEvents holds back rp stores and MSIs of posted events until
	// postBatch publishes them together.
	batchEvents bool
	crashAt     time.Time   // when Options.CrashLoop crashes the firmware (faults.go)
	amss        amssVerdict // the AMSS image on the flash at New (amss.go)
	readyAt     time.Time   // QuirkSlowReady: when READY comes up (zero: not pending)
	quirks      quirkSet    // the quirks played (quirks.go)
	hung        bool        // Hang: MHICTRL ignored until an FLR or SoC reset
	bootSysErr  bool        // a boot ROM's SYS_ERR (QuirkSysErrAtPowerUp, QuirkPBLSysErrTwice), until the reset: it keeps the EE
	actions     []action
	boot        bootState
	evBuf       [mhi.ElementSize]byte
	waitTimer   *time.Timer

	irq    moderator
	stats  counters
	strict strictState
	slow   atomic.Int64
	// holdCmds: HoldCommands; the command doorbell stays pending.
	holdCmds atomic.Bool
	// draining: the DL buffers still written after a SYS_ERR
	// (Options.DrainDMAOnSysErr), guarded by mu.
	draining []dmaSpan
	// sblReleased: LeaveSBL ended a StayInSBL SBL (until the next SoC
	// reset), guarded by mu.
	sblReleased bool
	// sysErrOnStart: SysErrOnStart's countdown of START_CHAN
	// completions (0: off), guarded by mu.
	sysErrOnStart int
}

var zeroTime time.Time

// hostCfg is the host configuration read at READY → M0.
type hostCfg struct {
	hostConfig
	valid bool
}

// inCtrl and inData check [iova, iova+n) against the control and data
// windows the host programmed (MHICTRLBASE/LIMIT, MHIDATABASE/LIMIT, §1.1);
// a window never programmed (limit 0) allows everything.
func (h *hostCfg) inCtrl(iova uint64, n int) bool {
	return inWindow(h.ctrlBase, h.ctrlLimit, iova, n)
}

func (h *hostCfg) inData(iova uint64, n int) bool {
	return inWindow(h.dataBase, h.dataLimit, iova, n)
}

func inWindow(base, limit, iova uint64, n int) bool {
	if limit == 0 || n <= 0 {
		return true
	}
	end := iova + uint64(n) - 1
	return iova >= base && end >= iova && end <= limit
}

// New builds a modem impersonating profile p. It is powered on (READY in
// AMSS, or waiting in PBL) but does nothing until a bus attaches it.
func New(p *mhi.Profile, opts Options) (*Modem, error) {
	if p == nil {
		return nil, errors.New("sim: nil profile")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if opts.IDIndex < 0 || opts.IDIndex >= len(p.IDs) {
		return nil, fmt.Errorf("sim: profile %s: no PCI ID #%d", p.Name, opts.IDIndex)
	}
	if len(p.EventRings) > maxEventRings {
		return nil, fmt.Errorf("sim: profile %s: %d event rings, at most %d", p.Name, len(p.EventRings), maxEventRings)
	}
	if opts.Boot > BootPBL {
		return nil, fmt.Errorf("sim: unknown boot stage %d", opts.Boot)
	}
	opts.setDefaults(p)
	quirks, err := activeQuirks(p, &opts)
	if err != nil {
		return nil, err
	}
	fns := map[string]Function{}
	for name, f := range opts.Functions {
		if _, _, ok := p.ChannelPair(name); !ok {
			return nil, fmt.Errorf("sim: profile %s has no channel pair %q", p.Name, name)
		}
		fns[name] = f
	}
	if _, named := fns["LOOPBACK"]; !named {
		if _, _, ok := p.ChannelPair("LOOPBACK"); ok {
			fns["LOOPBACK"] = &Loopback{}
		}
	}
	m := &Modem{
		p:         p,
		opts:      opts,
		log:       opts.Logger.With("modem", p.Name),
		wake:      make(chan struct{}, 1),
		erKick:    make(chan struct{}, 1),
		reqs:      make(chan *request),
		quit:      make(chan struct{}),
		exited:    make(chan struct{}),
		irqExited: make(chan struct{}),
		waitTimer: time.NewTimer(time.Hour),
		quirks:    quirks,
	}
	m.waitTimer.Stop()
	m.irq.kick = make(chan struct{}, 1)
	id := p.IDs[opts.IDIndex]
	m.id = pci.Identity{
		Vendor: id.Vendor, Device: id.Device,
		SubVendor: id.Vendor, SubDev: id.Device,
		Class:      pci.ClassWirelessOther,
		MSIVectors: min(1+len(p.EventRings), 32),
	}
	if opts.MSIVectors > 0 {
		m.id.MSIVectors = min(opts.MSIVectors, 32)
	}
	if quirks.has(QuirkOneMSI) {
		m.id.MSIVectors = 1
	}
	m.regs.badOffsets = quirks.has(QuirkBadOffsets)
	if id.MatchSub {
		m.id.SubVendor, m.id.SubDev = id.SubVendor, id.SubDevice
	}
	m.id.BARSize[0] = barSize
	if fh, ok := fns["FIREHOSE"].(*Firehose); ok {
		m.amss = checkAMSS(fh.Storage, p)
	}
	if m.amss == amssBad {
		bad := opts.BadImageID
		if bad.Vendor == 0 {
			bad = defaultBadImageID
		}
		m.id.Vendor, m.id.Device, m.id.SubVendor, m.id.SubDev = bad.Vendor, bad.Device, bad.Vendor, bad.Device
		if bad.MatchSub {
			m.id.SubVendor, m.id.SubDev = bad.SubVendor, bad.SubDevice
		}
		if m.opts.CrashLoop <= 0 {
			m.opts.CrashLoop = badImageCrashLoop
		}
	}
	m.buildPairs(fns)
	for i := range m.ers {
		m.ers[i].idx = i
	}

	// Power-on register values.
	nhwer, nhwch := 0, len(m.burstChans)
	for _, e := range p.EventRings {
		if e.Hardware() {
			nhwer++
		}
	}
	m.cfgPOR = uint32(nhwer)<<mhi.CfgNHWERShift | uint32(len(p.EventRings))<<mhi.CfgNERShift |
		uint32(nhwch)<<mhi.CfgNHWCHShift | uint32(mhi.MaxChannels&0xFF)<<mhi.CfgNCHShift
	m.bhiPOR[mhi.BHIVersionMajor/4] = 1
	m.bhiPOR[mhi.BHISerialNum/4] = opts.SerialNumber
	h := fnv.New32a()
	for i := range 6 + 16 {
		h.Write([]byte(p.Name))
		// MSM HW IDs and OEM PK hash words: stable per profile.
		m.bhiPOR[mhi.BHIMSMHWID0/4+i] = h.Sum32()
	}
	m.mu.Lock()
	m.powerOn()
	if opts.CrashedRDDM != nil {
		// No host is attached yet: no event, no MSI.
		m.boot.rddm.dump = append([]byte(nil), opts.CrashedRDDM...)
		m.setEE(mhi.EERDDM)
		m.setState(mhi.StateSysErr)
	}
	m.mu.Unlock()
	return m, nil
}

// NewDevice builds a modem and plugs it into a new virtual PCI slot.
// Closing the device detaches the modem.
func NewDevice(p *mhi.Profile, opts Options, vopts ...vpci.Option) (*vpci.Device, *Modem, error) {
	m, err := New(p, opts)
	if err != nil {
		return nil, nil, err
	}
	dev, err := vpci.New(m, vopts...)
	if err != nil {
		return nil, nil, err
	}
	return dev, m, nil
}

// powerOn returns the device to its power-on state (New, SoC reset, FLR):
// functions stopped, rings forgotten without touching host memory,
// registers at their reset values, the boot stage of Options.Boot. The
// caller holds m.mu.
func (m *Modem) powerOn() {
	m.boots++
	m.draining = nil // a SoC reset or FLR stops DMA at once
	m.stopChannels(false)
	m.forgetRings()
	m.regs.powerOn(m.cfgPOR, m.bhiPOR, m.opts.SOCHWVersion)
	m.state = mhi.StateReset
	m.readyAt = zeroTime
	m.sblUntil = zeroTime
	m.fpAt = zeroTime
	m.crashAt = zeroTime
	m.hung = false
	m.sblReleased = false
	m.boot.rddm.dump, m.boot.rddm.armed = nil, false
	m.bootSysErr = false
	if m.opts.Boot == BootPBL {
		m.setEE(mhi.EEPBL)
	} else {
		m.setEE(mhi.EEAMSS)
		m.enterReady()
	}
	m.powerOnQuirks() // quirks_pm.go
}

// Identity implements vpci.Model: the profile's PCI IDs (subsystem IDs
// when the profile matches on them, else the vendor/device pair again),
// class "wireless, other", a 4 KiB BAR 0 and one MSI vector for INTVEC plus
// one per event ring (§9).
func (m *Modem) Identity() pci.Identity { return m.id }

// Attach implements vpci.Model: it starts the device goroutines.
func (m *Modem) Attach(h vpci.Host) {
	m.attach.Do(func() {
		m.host = h
		m.attached.Store(true)
		go m.run()
		go m.runModerator()
	})
}

// Detach implements vpci.Model: it stops the device goroutines and the
// functions; no Host call follows.
func (m *Modem) Detach() {
	m.detach.Do(func() {
		if !m.attached.Load() {
			return
		}
		m.abort.Store(true)
		close(m.quit)
		<-m.exited
		<-m.irqExited
		m.mu.Lock()
		for _, pr := range m.pairs {
			m.stopPort(pr)
		}
		m.mu.Unlock()
		m.runActions()
	})
}

// Reset implements vpci.Model (function-level reset): the modem returns to
// its power-on state before Reset returns.
func (m *Modem) Reset() {
	if err := m.call(reqReset); errors.Is(err, ErrDetached) && !m.attached.Load() {
		m.mu.Lock()
		m.powerOn()
		m.mu.Unlock()
	}
}

// MMIORead implements vpci.Model.
func (m *Modem) MMIORead(bar int, off uint64) uint32 {
	if bar != 0 || off%4 != 0 || off >= barSize {
		return ^uint32(0)
	}
	return m.regs.read(off)
}

// MMIOWrite implements vpci.Model. It only updates the register file and
// queues work for the device goroutine, so it never blocks.
func (m *Modem) MMIOWrite(bar int, off uint64, v uint32) {
	if bar != 0 || off%4 != 0 || off >= barSize {
		return
	}
	if off == mhi.RegCCABAPLower {
		m.lateWindow.Store(false) // a new power-up programs the contexts
	}
	if m.lateWindow.Load() && isDoorbell(off) {
		m.violate(ruleLateDoorbell, "doorbell register %#x written after the host reset the device", off)
	}
	res := m.regs.write(off, v)
	if res.readOnly {
		m.violate(ruleReadOnly, "write of %#x to read-only register %#x", v, off)
	}
	if res.abort {
		m.abort.Store(true)
		kick(m.erKick)
	}
	if res.erKick {
		kick(m.erKick)
	}
	if res.work {
		kick(m.wake)
	}
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// signal wakes the device goroutine.
func (m *Modem) signal() { kick(m.wake) }

func (m *Modem) now() time.Time { return time.Now() }

// State returns the MHI state and execution environment the modem is in.
func (m *Modem) State() (mhi.State, mhi.EE) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, m.ee
}

// ulBudget is how many UL TDs one channel delivers per device-loop pass,
// so that a busy channel does not delay control work (resets, commands).
const ulBudget = 64

// pollReqs handles a pending request, without waiting for one; it
// reports false when the modem is told to quit.
func (m *Modem) pollReqs() bool {
	select {
	case <-m.quit:
		return false
	case r := <-m.reqs:
		m.handle(r)
	default:
	}
	return true
}

// run is the device goroutine.
func (m *Modem) run() {
	defer close(m.exited)
	m.deviceG.Store(goid())
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if m.step() {
			if !m.pollReqs() {
				return
			}
			continue
		}
		if m.spinning() {
			// Busy-poll a burst channel briefly after activity: a
			// timer sleep costs far more than the host takes to
			// queue the next TRE.
			runtime.Gosched()
			if !m.pollReqs() {
				return
			}
			continue
		}
		t.Reset(m.nextWait())
		select {
		case <-m.quit:
			return
		case r := <-m.reqs:
			m.handle(r)
		case <-m.wake:
		case <-t.C:
		}
	}
}

// step does all queued work once and reports whether work is left.
func (m *Modem) step() bool {
	m.abort.Store(false)
	p := m.regs.take()
	now := m.now()
	m.mu.Lock()
	if p.soc {
		m.socReset() // edl.go: honours a pending EDL cookie
	}
	// Channel doorbells before MHICTRL and commands: a doorbell and a
	// state request or command queued in the same pass were written in
	// that order by any host that waits for its events (a refill rung
	// just before the MHICTRL = M3 or the RESET_CHAN that follows);
	// doorbells that answer an event cannot share a pass with it.
	m.dbWork.or(p.chdb)
	db := m.dbWork.take()
	if m.state == mhi.StateSysErr {
		// Crashed firmware answers nothing but MHICTRL.RESET; a host
		// that has not noticed yet is not at fault.
		db, p.crdb = chanBits{}, false
		m.cmdPending = false
	}
	for n := range mhi.MaxChannels {
		if db.has(n) {
			m.chDoorbell(n)
		}
	}
	if p.ctrl {
		m.handleCtrl()
	}
	if p.bhi {
		m.bhiDownload()
	}
	if p.bhie {
		m.bhieDownload()
	}
	if p.rddm {
		m.rddmDoorbell(p.rddmSeq) // rddm.go
	}
	if !m.sblUntil.IsZero() && !now.Before(m.sblUntil) {
		m.sblDone()
	}
	if !m.fpAt.IsZero() && !now.Before(m.fpAt) {
		m.fpStart() // quirks_boot.go
	}
	m.crashLoop(now) // faults.go
	if !m.readyAt.IsZero() && !now.Before(m.readyAt) {
		m.readyDone()
	}
	if p.crdb || m.cmdPending {
		m.cmdPending = m.holdCmds.Load()
		if !m.cmdPending {
			m.commandDoorbell()
		}
	}
	m.polling = m.pollBurst(now)
	m.drainDMA()
	ul := m.ulWork.take()
	m.mu.Unlock()
	m.runActions()
	more := false
	for n := range mhi.MaxChannels {
		if !ul.has(n) {
			continue
		}
		if m.serviceUL(m.chans[n], ulBudget) {
			more = true
			m.mu.Lock()
			m.ulWork.set(n)
			m.mu.Unlock()
		}
	}
	return more
}

// spinning reports whether burst channels poll and were active within
// PollSpin.
func (m *Modem) spinning() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.polling && time.Since(m.lastActive) < m.opts.PollSpin
}

// nextWait is how long the device goroutine may sleep without a signal.
func (m *Modem) nextWait() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := time.Hour
	if m.polling || len(m.draining) > 0 {
		d = m.opts.PollInterval
	}
	if !m.sblUntil.IsZero() {
		d = min(d, time.Until(m.sblUntil))
	}
	if !m.fpAt.IsZero() {
		d = min(d, time.Until(m.fpAt))
	}
	if !m.readyAt.IsZero() {
		d = min(d, time.Until(m.readyAt))
	}
	if !m.watchNext.IsZero() {
		d = min(d, time.Until(m.watchNext))
	}
	if !m.crashAt.IsZero() {
		d = min(d, time.Until(m.crashAt))
	}
	return max(d, time.Microsecond)
}

// chDoorbell handles a channel doorbell commit (§8.2). The caller holds
// m.mu.
func (m *Modem) chDoorbell(n int) {
	if n == mhi.WakeDoorbellChannel {
		if m.quirks.has(QuirkNoInbandWake) {
			m.fuzedByWake()
			return
		}
		m.wakeDoorbell()
		return
	}
	c := m.chans[n]
	if c == nil {
		if n == mhi.EDLDoorbellChannel {
			// The EDL cookie; the SoC reset that follows acts on
			// it (socReset, edl.go).
			m.log.Info("EDL doorbell written", "value", m.regs.chLatch(n).val)
			return
		}
		m.violate(ruleUnknownChannel, "doorbell for channel %d, which %s does not define", n, m.p.Name)
		return
	}
	if !c.active() {
		if l := m.regs.chLatch(n); l.seq != c.dbSeq {
			c.dbSeq = l.seq
			if c.eeEnded {
				return
			}
			m.violate(ruleDoorbellState, "doorbell for channel %d, which is %s", n, c.state)
		}
		return
	}
	if m.state == mhi.StateM3 || c.state == mhi.ChanSuspended {
		// Picked up again at M0 (resume). A host that wrote
		// MHICTRL = M0 before this doorbell has resumed already;
		// the request is handled later in this same pass (step).
		if l := m.regs.chLatch(n); l.seq != c.dbSeq && !m.resumeRequested() {
			m.violate(ruleDoorbellState, "doorbell for channel %d while the device is in M3", n)
		}
		return
	}
	if !m.canTransfer(c) {
		return
	}
	m.refresh(c)
	if c.ul {
		if c.rp != c.wp {
			m.ulWork.set(n)
		}
	} else {
		m.drain(c)
	}
	m.m0DuringPrepare(c) // quirks_pm.go
}

// request is a call into the device goroutine from outside.
type request struct {
	kind reqKind
	done chan error
	// ring and ev are the event of a reqInject; ring and rp the value
	// of a reqCorruptRP; dump the RAM image of a reqCrash.
	ring int
	ev   mhi.Element
	rp   uint64
	dump []byte
}

type reqKind uint8

const (
	reqSysErr reqKind = iota
	reqM1
	reqReset
	reqInject
	reqCorruptRP
	reqHang
	reqCrash
	reqLeaveSBL
	reqHibernationRestore
)

// call runs a request on the device goroutine and waits for it.
func (m *Modem) call(k reqKind) error {
	return m.callRequest(&request{kind: k, done: make(chan error, 1)})
}

func (m *Modem) callRequest(r *request) error {
	k := r.kind
	if !m.attached.Load() {
		return ErrDetached
	}
	if k != reqM1 && k != reqInject && k != reqCorruptRP && k != reqLeaveSBL {
		// A crash or reset interrupts whatever the device waits for.
		m.abort.Store(true)
		kick(m.erKick)
	}
	select {
	case m.reqs <- r:
	case <-m.exited:
		return ErrDetached
	}
	return <-r.done
}

// handle executes a request on the device goroutine.
func (m *Modem) handle(r *request) {
	m.abort.Store(false)
	var err error
	m.mu.Lock()
	switch r.kind {
	case reqSysErr:
		m.enterSysErr()
	case reqHang:
		m.enterSysErr()
		m.hung = true
	case reqCrash:
		m.crashIntoRDDM(r.dump) // rddm.go
	case reqLeaveSBL:
		err = m.leaveSBL()
	case reqM1:
		err = m.enterM1()
	case reqReset:
		m.powerOn()
	case reqInject:
		if !m.post(r.ring, r.ev, false) {
			err = fmt.Errorf("sim: event ring %d cannot take an event now", r.ring)
		}
	case reqCorruptRP:
		err = m.corruptEventRP(r.ring, r.rp)
	case reqHibernationRestore:
		err = m.hibernationRestore() // quirks_pm.go
	}
	m.mu.Unlock()
	m.runActions()
	r.done <- err
}

// counters are the atomics behind Stats.
type counters struct {
	tres, bytesUL, bytesDL, tdsUL, packetsDL  atomic.Uint64
	events, eventDrops, eventRingFull         atomic.Uint64
	msiRaised, msiModerated, dbMode, commands atomic.Uint64
	violations, ulDrops, dlDrops              atomic.Uint64
	wpNoDoorbell, powerLosses                 atomic.Uint64
}

// Stats counts what the modem did since New.
type Stats struct {
	TREs      uint64 // TREs consumed (UL) or filled (DL)
	BytesUL   uint64 // bytes read from host UL buffers
	BytesDL   uint64 // bytes written to host DL buffers
	TDsUL     uint64 // UL transfer descriptors delivered to functions
	PacketsDL uint64 // DL packets completed with EOT
	Events    uint64 // events posted
	// EventDrops counts events that could not be posted (ring unusable,
	// full beyond EventWait, reset pending); EventRingFull counts the
	// times posting found the ring full and had to wait.
	EventDrops, EventRingFull uint64
	MSIs                      uint64 // MSIs raised (immediate, delayed and INTVEC)
	MSIsModerated             uint64 // events whose MSI was deferred or suppressed by BEI
	DBModes                   uint64 // DB_MODE events sent by burst channels going idle
	Commands                  uint64 // command elements processed
	Violations                uint64 // host protocol violations
	// ULDrops counts UL TDs not delivered (no function, broken or over
	// MaxTD); DLDrops counts DL packets dropped (queue full, pair stopped
	// with data queued).
	ULDrops, DLDrops uint64
	// WPWithoutDoorbell counts the times the doorbell-mode watchdog
	// (Options.DBModeWatchdog) found a burst channel's context wp moved
	// after its DB_MODE with no doorbell written on two looks a quarter
	// period apart: a host that lost its doorbell mode (or took longer
	// than that from its context wp write to its doorbell write).
	WPWithoutDoorbell uint64
	// PowerLosses counts the power losses played (Modem.LosePower and
	// QuirkD3Cold), each a return to the power-on state the host did
	// not ask for.
	PowerLosses uint64
}

// Function returns the function Options.Functions attached to the channel
// pair named pair (nil if none), for tests that did not build the modem
// themselves: stack.Open attaches a *simnet.MBIMFunction to "MBIM"
// and a *simnet.CarrierNetwork to its data pair.
func (m *Modem) Function(pair string) Function { return m.opts.Functions[pair] }

// Stats returns the counters.
func (m *Modem) Stats() Stats {
	s := &m.stats
	return Stats{
		TREs: s.tres.Load(), BytesUL: s.bytesUL.Load(), BytesDL: s.bytesDL.Load(),
		TDsUL: s.tdsUL.Load(), PacketsDL: s.packetsDL.Load(),
		Events: s.events.Load(), EventDrops: s.eventDrops.Load(), EventRingFull: s.eventRingFull.Load(),
		MSIs: s.msiRaised.Load(), MSIsModerated: s.msiModerated.Load(), DBModes: s.dbMode.Load(),
		Commands: s.commands.Load(), Violations: s.violations.Load(),
		ULDrops: s.ulDrops.Load(), DLDrops: s.dlDrops.Load(),
		WPWithoutDoorbell: s.wpNoDoorbell.Load(), PowerLosses: s.powerLosses.Load(),
	}
}
