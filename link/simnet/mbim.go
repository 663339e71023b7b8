package simnet

import (
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/internal/ctrlstream"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi/sim"
)

// MBIMFunction is the modem's MBIM control function on the "MBIM"
// channel pair (12/13): it answers OPEN, CLOSE and the BASIC_CONNECT
// commands a host needs for a data session (docs/FRAMING.md §2, §9) from
// its Network and its own state (mbim_state.go: open, subscriptions, data
// contexts), sends indications when they change, and lets a test turn
// the knobs of MBIMConfig and NetworkConfig to provoke every failure a
// real modem shows.
//
// Receive runs on the modem's device goroutine and only queues the
// transfer; the function's own goroutine (started by Start, stopped by
// Stop) decodes, answers — slowly if Delay says so — and sends. State is
// guarded by the network's lock, taken by that goroutine, by the timers of
// delayed transitions and by the exported methods, which may be called
// from any goroutine at any time (also while the channels are stopped).
//
// Every Start is a modem restart: the function is closed and the network
// returns to what its NetworkConfig describes, as after a SYS_ERR
// recovery or a power cycle.
type MBIMFunction struct {
	net    *Network // the network and its lock
	cfg    MBIMConfig
	st     mbimState
	out    func([]byte) error // nil while stopped
	timers timerSet           // the run's own (IPv6Delay, SignalInterval)
	stop   func()             // stops following the network
	q      ctrlQueue
	log    *slog.Logger

	stats mbimCounters
}

// MBIMConfig configures the MBIM function: the network it answers for,
// and the knobs of the function itself (slow or fragmented answers, a
// function stuck open, late IPv6, unsolicited signal reports).
type MBIMConfig struct {
	// Network is the modem's network, shared with its QMI function (nil:
	// a network of its own with the zero NetworkConfig).
	Network *Network
	// MaxSessions bounds CONNECT session IDs (default 8).
	MaxSessions uint32
	// Delay holds every answer back this long (slow firmware).
	Delay time.Duration
	// Fragment, when set, splits the function's messages at this size
	// even when the negotiated MaxControlTransfer is larger (forced
	// fragmentation; at least mbim.MinControlTransfer).
	Fragment int
	// IgnoreOpenUntilClose drops OPEN until a CLOSE arrives, like a
	// function still open for a previous host: the host's close-then-
	// open retry is what gets it going.
	IgnoreOpenUntilClose bool
	// IPv6Delay reports the IPv6 part of a dual-stack session only in an
	// IP_CONFIGURATION indication this long after CONNECT (ModemManager's
	// "IP configuration async" case).
	IPv6Delay time.Duration
	// SignalInterval, when set, sends an unsolicited SIGNAL_STATE
	// indication this often.
	SignalInterval time.Duration
	// NoMBIMEx makes a function of MBIM 1.0 only: no
	// MS_BASIC_CONNECT_EXTENSIONS (VERSION, BASE_STATIONS_INFO), so a host
	// keeps the 1.0 layouts and has no RSRP, RSRQ, SINR or band.
	NoMBIMEx bool
	// MaxMBIMEx is the highest MBIMEx version the function agrees to
	// in VERSION (0: 3.0, the highest it implements; MBIMEx2 models a
	// function that predates the NR cells of BASE_STATIONS_INFO).
	MaxMBIMEx mbim.Version
	// Logger receives the function's diagnostics (nil: discarded).
	Logger *slog.Logger
}

func (c *MBIMConfig) setDefaults() {
	if c.MaxSessions == 0 {
		c.MaxSessions = 8
	}
	if c.Fragment != 0 && c.Fragment < mbim.MinControlTransfer {
		c.Fragment = mbim.MinControlTransfer
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// NewMBIMFunction returns an MBIM function with cfg; attach it with
// Options.Functions{"MBIM": f}.
func NewMBIMFunction(cfg MBIMConfig) *MBIMFunction {
	cfg.setDefaults()
	n := cfg.Network
	if n == nil {
		n = NewNetwork(NetworkConfig{})
	}
	f := &MBIMFunction{net: n, cfg: cfg, log: cfg.Logger}
	f.q.dropped = &f.stats.dropped
	f.st.reset()
	return f
}

// Network returns the network the function answers for (to play it in
// tests: NetworkDetach, SetCarrier, Configure).
func (f *MBIMFunction) Network() *Network { return f.net }

// MBIMStats counts what the function did.
type MBIMStats struct {
	Commands, Indications, FunctionErrors, Malformed, Dropped, HostErrors uint64
}

type mbimCounters struct {
	commands, indications, functionErrors, malformed, dropped, hostErrors atomic.Uint64
}

// Stats returns the counters.
func (f *MBIMFunction) Stats() MBIMStats {
	s := &f.stats
	return MBIMStats{Commands: s.commands.Load(), Indications: s.indications.Load(),
		FunctionErrors: s.functionErrors.Load(), Malformed: s.malformed.Load(),
		Dropped: s.dropped.Load(), HostErrors: s.hostErrors.Load()}
}

// Start implements sim.Function: the modem (re)started the channels.
func (f *MBIMFunction) Start(p *sim.Port) {
	f.startWith(p.Send)
}

// startWith starts a run whose output goes to send (the fuzz and unit
// tests drive the function without MHI).
func (f *MBIMFunction) startWith(send func([]byte) error) {
	n := f.net
	n.mu.Lock()
	f.timers.stop()
	f.out = send
	f.st.reset()
	n.powerOnLocked()
	f.stop = n.startLocked(f)
	f.scheduleLocked()
	n.mu.Unlock()
	f.q.start(f.run)
}

// Receive implements sim.Function: it queues one UL transfer, or drops it
// (counted) when the queue is full: the device goroutine must not wait.
func (f *MBIMFunction) Receive(td []byte) { f.q.deliver(td, false) }

// Stop implements sim.Function: the run's goroutine and timers end before it
// returns.
func (f *MBIMFunction) Stop() {
	f.net.mu.Lock()
	f.out = nil
	f.timers.stop()
	stop := f.stop
	f.stop = nil
	f.net.mu.Unlock()
	if stop != nil {
		stop()
	}
	f.q.stop()
}

// run is the function's goroutine for one Start..Stop.
func (f *MBIMFunction) run(in <-chan []byte, quit <-chan struct{}) {
	dec := mbim.Decoder{}
	// stopped: Stop came during a Delay; the rest of the chunk is not
	// answered (the run ends with it).
	stopped := false
	handle := func(m *mbim.Message) {
		if stopped {
			return
		}
		if !f.wait(quit) {
			stopped = true
			return
		}
		f.net.mu.Lock()
		f.handleLocked(m)
		f.net.mu.Unlock()
	}
	bad := func(err error) {
		if !stopped {
			f.malformed(err)
		}
	}
	for !stopped {
		select {
		case <-quit:
			return
		case td := <-in:
			ctrlstream.Feed(&dec, td, handle, bad)
		}
	}
}

// wait holds an answer back for Delay; false if the run stopped meanwhile.
func (f *MBIMFunction) wait(quit <-chan struct{}) bool {
	f.net.mu.Lock()
	d := f.cfg.Delay
	f.net.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-quit:
		return false
	}
}

// malformed answers a message the decoder dropped with FUNCTION_ERROR, as
// the specification asks of a function (§9.3.4), when it names a
// transaction.
func (f *MBIMFunction) malformed(err error) {
	f.stats.malformed.Add(1)
	f.log.Debug("sim mbim: malformed host message", "err", err)
	var de *mbim.DecodeError
	if errors.As(err, &de) && de.TID != 0 && de.Type&0x80000000 == 0 {
		f.net.mu.Lock()
		f.sendLocked(&mbim.Message{Type: mbim.TypeFunctionError, TID: de.TID, Error: de.Code})
		f.net.mu.Unlock()
	}
}

// sendLocked fragments m at the negotiated size (or the forced Fragment
// size) and sends it; output is dropped while stopped.
func (f *MBIMFunction) sendLocked(m *mbim.Message) {
	if f.out == nil {
		f.stats.dropped.Add(1)
		return
	}
	size := f.st.maxXfer
	if f.cfg.Fragment > 0 && f.cfg.Fragment < size {
		size = f.cfg.Fragment
	}
	if m.Type == mbim.TypeFunctionError {
		f.stats.functionErrors.Add(1)
	}
	err := m.Fragments(size, func(b []byte) error {
		// Port.Send copies: the fragment buffer may be reused.
		return f.out(b)
	})
	if err != nil {
		f.stats.dropped.Add(1)
		f.log.Debug("sim mbim: send failed", "msg", m.String(), "err", err)
	}
}

// afterLocked runs fn under the lock after d, unless the run stopped
// meanwhile.
func (f *MBIMFunction) afterLocked(d time.Duration, fn func()) {
	if f.out == nil {
		return // stopped: nothing happens until the next Start
	}
	f.timers.after(&f.net.mu, d, fn)
}

// scheduleLocked arms the periodic timers of a run.
func (f *MBIMFunction) scheduleLocked() {
	if iv := f.cfg.SignalInterval; iv > 0 {
		var tick func()
		tick = func() {
			f.indicateLocked(mbim.CIDSignalState, f.encodeSignalState())
			f.afterLocked(iv, tick)
		}
		f.afterLocked(iv, tick)
	}
	f.net.radioChangedLocked()
}

// Configure changes the function's knobs at run time (the network's are
// Network.Configure's; Network changes nothing here).
func (f *MBIMFunction) Configure(change func(*MBIMConfig)) {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	change(&f.cfg)
	f.cfg.Network = f.net
	f.cfg.setDefaults()
}

// Serve runs the function over a byte stream instead of an MHI channel
// pair (a pipe in tests, a PTY or socket for tools): it starts, feeds
// everything read from rw to the function, and stops when reading fails
// (rw closed or EOF). Serve closes rw before it returns.
func (f *MBIMFunction) Serve(rw io.ReadWriteCloser) error {
	return serveStream(rw, mbim.MaxControlTransfer, f.startWith, func(b []byte) { f.q.deliver(b, true) }, f.Stop)
}
