package simnet

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/internal/ctrlstream"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi/sim"
)

// MBIMFunction is the modem's MBIM control function on the "MBIM"
// channel pair (12/13): it answers OPEN, CLOSE and the BASIC_CONNECT
// commands a host needs for a data session (docs/FRAMING.md §2, §9) from
// the state machine in mbim_state.go, sends indications when that state
// changes, and lets a test turn the knobs of MBIMConfig to provoke every
// failure a real modem shows.
//
// Receive runs on the modem's device goroutine and only queues the
// transfer; the function's own goroutine (started by Start, stopped by
// Stop) decodes, answers — slowly if Delay says so — and sends. State is
// guarded by one lock, taken by that goroutine, by the timers of delayed
// transitions and by the exported methods, which may be called from any
// goroutine at any time (also while the channels are stopped).
//
// Every Start is a modem restart as far as MBIM is concerned: the
// function is closed and its state returns to what MBIMConfig describes,
// as after a SYS_ERR recovery or a power cycle.
type MBIMFunction struct {
	mu     sync.Mutex
	cfg    MBIMConfig
	st     mbimState
	out    func([]byte) error // nil while stopped
	gen    uint64             // run generation: timers of an older run do nothing
	timers map[*timerHandle]struct{}
	q      ctrlQueue
	log    *slog.Logger

	stats mbimCounters

	// watchers follow the network state (watchLocked).
	watchers map[int]func()
	watchID  int
}

// MBIMConfig is the emulated modem's identity, its SIM and network, the
// carrier configuration of a data session, and the failure knobs. The
// zero value is a ready modem: SIM present and unlocked, radio on,
// registered at home, attached, any APN accepted, DefaultCarrier.
type MBIMConfig struct {
	// Identity (DEVICE_CAPS, SUBSCRIBER_READY_STATUS, REGISTER_STATE).
	DeviceID, FirmwareInfo, HardwareInfo string
	SubscriberID, SIMICCID, Number       string
	ProviderID, ProviderName             string
	// DataClass is what the modem and the network offer (default LTE |
	// 5G NSA | 5G SA).
	DataClass mbim.DataClass
	// MaxSessions bounds CONNECT session IDs (default 8).
	MaxSessions uint32

	// SIMAbsent: SUBSCRIBER_READY_STATUS says SIM_NOT_INSERTED and PIN
	// fails with SIM_NOT_INSERTED.
	SIMAbsent bool
	// PIN, when set, locks the SIM until PIN1 is entered (DEVICE_LOCKED);
	// PINAttempts is the number of tries (default 3), after which PUK1
	// is required and the SIM stays locked.
	PIN         string
	PINAttempts int
	// RadioOff starts the software radio switch off (the host must set
	// RADIO_STATE on); HardwareRadioOff is the hardware switch (airplane
	// mode): the radio never comes on.
	RadioOff, HardwareRadioOff bool
	// NotRegistered keeps the network searching for ever; RegisterDenied
	// has it refuse registration with cause RegisterNwError (default 11,
	// PLMN not allowed).
	NotRegistered, RegisterDenied bool
	RegisterNwError               mbim.NwError
	// RegisterDelay is how long registration takes after the radio
	// comes on (REGISTER_STATE indication when done).
	RegisterDelay time.Duration
	// NoAutoAttach leaves packet service detached until the host sets
	// PACKET_SERVICE attach (otherwise registration attaches).
	NoAutoAttach bool
	// APN, when set, is the only access string CONNECT accepts (case
	// insensitive); any other is refused as FAILURE with 3GPP cause 27,
	// as carriers do. User and Password, when set, must match (else
	// cause 29).
	APN, User, Password string
	// ConnectReject refuses every CONNECT with FAILURE and this cause.
	ConnectReject mbim.NwError
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

	// Carrier is what a data session on the default APN (APN above,
	// any name not in APNs when APN is empty, or an empty access string)
	// gets (zero: DefaultCarrier).
	Carrier Carrier
	// APNs are further access point names the network serves, each with
	// its own address pool (DefaultAPNs has "ims" and a private one). A
	// call for one of them gets its Carrier; the network refuses a name
	// that is neither one of these nor the default APN with 3GPP cause
	// 27 (once APN is set). Session k of a function (MBIM session ID k,
	// QMAP mux ID k+1) gets the k-th address of its APN's pool
	// (Carrier.ForSession), so two sessions never share an address.
	APNs []APN
	// Logger receives the function's diagnostics (nil: discarded).
	Logger *slog.Logger
}

// Carrier is the network configuration of a data session, as reported in
// IP_CONFIGURATION.
type Carrier struct {
	IPv4        netip.Prefix
	IPv4Gateway netip.Addr
	IPv4DNS     []netip.Addr
	IPv6        netip.Prefix
	IPv6Gateway netip.Addr
	IPv6DNS     []netip.Addr
	MTU         uint32
}

// APN is an access point name the emulated network serves, with its
// address pool.
type APN struct {
	Name    string
	Carrier Carrier
}

// DefaultAPNs are the access point names the emulated modem stack.Open
// builds serves: "internet" (DefaultCarrier, 10.0.0.0/24 and
// 2001:db8:64::/56), "ims" (10.64.0.0/24 and 2001:db8:1a5::/56, its own
// DNS servers, MTU 1400) and the private "corp.mhistack"
// (172.16.0.0/24, IPv4 only).
func DefaultAPNs() []APN {
	return []APN{
		{Name: "internet", Carrier: DefaultCarrier()},
		{Name: "ims", Carrier: Carrier{
			IPv4:        netip.MustParsePrefix("10.64.0.2/30"),
			IPv4Gateway: netip.MustParseAddr("10.64.0.1"),
			IPv4DNS:     []netip.Addr{netip.MustParseAddr("10.64.255.53")},
			IPv6:        netip.MustParsePrefix("2001:db8:1a5::2/64"),
			IPv6Gateway: netip.MustParseAddr("2001:db8:1a5::1"),
			IPv6DNS:     []netip.Addr{netip.MustParseAddr("2001:db8:1a5:ff::53")},
			MTU:         1400,
		}},
		{Name: "corp.mhistack", Carrier: Carrier{
			IPv4:        netip.MustParsePrefix("172.16.0.2/30"),
			IPv4Gateway: netip.MustParseAddr("172.16.0.1"),
			IPv4DNS:     []netip.Addr{netip.MustParseAddr("172.16.255.53")},
			MTU:         1500,
		}},
	}
}

// ForSession returns the configuration of the k-th session of a pool
// whose first session gets c: the IPv4 address and gateway moved by k
// subnets of c.IPv4's size (10.0.0.2/30 → 10.0.0.6/30 for k = 1), the
// IPv6 prefix by k /64s (2001:db8:64::2/64 → 2001:db8:64:1::2/64); the
// DNS servers and MTU are the pool's.
func (c Carrier) ForSession(k int) Carrier {
	if k <= 0 {
		return c
	}
	out := c
	if c.IPv4.IsValid() {
		step := uint32(1) << (32 - c.IPv4.Bits())
		if c.IPv4.Bits() == 0 {
			step = 0
		}
		out.IPv4 = netip.PrefixFrom(addV4(c.IPv4.Addr(), uint32(k)*step), c.IPv4.Bits())
		if c.IPv4Gateway.Is4() {
			out.IPv4Gateway = addV4(c.IPv4Gateway, uint32(k)*step)
		}
	}
	if c.IPv6.IsValid() {
		out.IPv6 = netip.PrefixFrom(addV6Net(c.IPv6.Addr(), uint64(k)), c.IPv6.Bits())
		if c.IPv6Gateway.Is6() {
			out.IPv6Gateway = addV6Net(c.IPv6Gateway, uint64(k))
		}
	}
	out.IPv4DNS, out.IPv6DNS = slices.Clone(c.IPv4DNS), slices.Clone(c.IPv6DNS)
	return out
}

func addV4(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	v := binary.BigEndian.Uint32(b[:]) + n
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// addV6Net adds n to the upper 64 bits (the /64 network) of a.
func addV6Net(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	binary.BigEndian.PutUint64(b[:8], binary.BigEndian.Uint64(b[:8])+n)
	return netip.AddrFrom16(b)
}

// carrierFor returns the configuration of the first session of a call
// for apn, or false when the network does not serve apn.
func (c *MBIMConfig) carrierFor(apn string) (Carrier, bool) {
	for i := range c.APNs {
		if strings.EqualFold(c.APNs[i].Name, apn) {
			return c.APNs[i].Carrier, true
		}
	}
	if c.APN == "" || apn == "" || strings.EqualFold(c.APN, apn) {
		return c.Carrier, true
	}
	return Carrier{}, false
}

// DefaultCarrier is the carrier configuration used when none is given:
// documentation addresses, MTU 1500 (docs/FRAMING.md §7).
func DefaultCarrier() Carrier {
	return Carrier{
		IPv4:        netip.MustParsePrefix("10.0.0.2/30"),
		IPv4Gateway: netip.MustParseAddr("10.0.0.1"),
		IPv4DNS:     []netip.Addr{netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("10.0.0.54")},
		IPv6:        netip.MustParsePrefix("2001:db8:64::2/64"),
		IPv6Gateway: netip.MustParseAddr("2001:db8:64::1"),
		IPv6DNS:     []netip.Addr{netip.MustParseAddr("2001:db8:64::53")},
		MTU:         1500,
	}
}

func (c *MBIMConfig) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.DeviceID, "867929060000017")
	def(&c.FirmwareInfo, "MHISTACK.SIM.1.0")
	def(&c.HardwareInfo, "mhistack emulated modem")
	def(&c.SubscriberID, "001010000000017")
	def(&c.SIMICCID, "89001012012341234012")
	def(&c.Number, "+15550100017")
	def(&c.ProviderID, "00101")
	def(&c.ProviderName, "mhistack")
	if c.DataClass == 0 {
		c.DataClass = mbim.DataClassLTE | mbim.DataClass5GNSA | mbim.DataClass5GSA
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = 8
	}
	if c.PINAttempts <= 0 {
		c.PINAttempts = 3
	}
	if c.RegisterNwError == 0 {
		c.RegisterNwError = 11
	}
	if c.Fragment != 0 && c.Fragment < mbim.MinControlTransfer {
		c.Fragment = mbim.MinControlTransfer
	}
	if !c.Carrier.IPv4.IsValid() && !c.Carrier.IPv6.IsValid() {
		c.Carrier = DefaultCarrier()
	}
	if c.Carrier.MTU == 0 {
		c.Carrier.MTU = 1500
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// NewMBIMFunction returns an MBIM function with cfg; attach it with
// Options.Functions{"MBIM": f}.
func NewMBIMFunction(cfg MBIMConfig) *MBIMFunction {
	cfg.setDefaults()
	f := &MBIMFunction{cfg: cfg, log: cfg.Logger}
	f.q.dropped = &f.stats.dropped
	f.st.powerOn(&f.cfg)
	return f
}

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
	f.mu.Lock()
	f.gen++
	f.out = send
	f.st.powerOn(&f.cfg)
	f.scheduleLocked()
	f.mu.Unlock()
	f.q.start(f.run)
}

// Receive implements sim.Function: it queues one UL transfer, or drops it
// (counted) when the queue is full: the device goroutine must not wait.
func (f *MBIMFunction) Receive(td []byte) { f.q.deliver(td, false) }

// Stop implements sim.Function: the run's goroutine and timers end before it
// returns.
func (f *MBIMFunction) Stop() {
	f.mu.Lock()
	f.out = nil
	f.gen++
	for h := range f.timers {
		h.t.Stop()
	}
	f.timers = nil
	f.mu.Unlock()
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
		f.mu.Lock()
		f.handleLocked(m)
		f.mu.Unlock()
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
	f.mu.Lock()
	d := f.cfg.Delay
	f.mu.Unlock()
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
		f.mu.Lock()
		f.sendLocked(&mbim.Message{Type: mbim.TypeFunctionError, TID: de.TID, Error: de.Code})
		f.mu.Unlock()
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

// timerHandle lets a fired timer remove itself from the run's set.
type timerHandle struct{ t *time.Timer }

// afterLocked runs fn under the lock after d, unless the run stopped
// meanwhile. The handle is filled in under the lock the callback takes
// first, so the callback always sees it.
func (f *MBIMFunction) afterLocked(d time.Duration, fn func()) {
	if f.out == nil {
		return // stopped: nothing happens until the next Start
	}
	gen := f.gen
	h := &timerHandle{}
	h.t = time.AfterFunc(d, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.timers, h)
		if f.gen == gen {
			fn()
		}
	})
	if f.timers == nil {
		f.timers = map[*timerHandle]struct{}{}
	}
	f.timers[h] = struct{}{}
}

// scheduleLocked arms the periodic timers of a run.
func (f *MBIMFunction) scheduleLocked() {
	if iv := f.cfg.SignalInterval; iv > 0 {
		var tick func()
		tick = func() {
			f.indicateLocked(mbim.CIDSignalState, f.st.signal.Encode())
			f.afterLocked(iv, tick)
		}
		f.afterLocked(iv, tick)
	}
	f.st.radioChangedLocked(f)
}

// Configure changes the knobs at run time (the identity and carrier
// included); the state is not reset, so e.g. clearing NotRegistered takes
// effect at the next registration attempt (radio off and on, or
// Reregister).
func (f *MBIMFunction) Configure(change func(*MBIMConfig)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.cfg)
	f.cfg.setDefaults()
}

// Serve runs the function over a byte stream instead of an MHI channel
// pair (a pipe in tests, a PTY or socket for tools): it starts, feeds
// everything read from rw to the function, and stops when reading fails
// (rw closed or EOF). Serve closes rw before it returns.
func (f *MBIMFunction) Serve(rw io.ReadWriteCloser) error {
	return serveStream(rw, mbim.MaxControlTransfer, f.startWith, func(b []byte) { f.q.deliver(b, true) }, f.Stop)
}
