package simnet

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
)

// Network is the emulated modem's cellular network as its control
// functions see it — SIM and PIN, radio, registration, packet service,
// signal, the rules a data call must pass and the carrier's addresses —
// and the events a test plays on it (NetworkDetach, NetworkLost,
// OutOfCoverage, SetCarrier, Configure, Reregister, SetSignal). It is one per modem,
// created once (NewNetwork) and shared by the modem's MBIM and QMI
// functions (MBIMConfig.Network, QMIConfig.Network): a PIN entered over
// QMI unlocks the SIM for MBIM, NetworkDetach ends the data calls of both,
// and both report the same addresses.
//
// Each function reports the network's changes in its protocol (MBIM
// indications; QMI Serving System and Packet Service Status indications)
// and keeps its own data calls (MBIM contexts, QMI WDS calls). The state's
// vocabulary is MBIM's (register and packet-service values, 3GPP causes as
// mbim.NwError); the QMI function maps it to NAS/WDS/UIM values.
//
// One lock guards the network and the state of the functions on it: the
// functions' goroutines, the timers and the exported methods, which may
// be called from any goroutine at any time (also while the functions are
// stopped). An MBIM function's Start is a modem restart: the network
// returns to what NetworkConfig describes.
type Network struct {
	mu  sync.Mutex
	cfg NetworkConfig
	st  networkState
	// running counts the started functions: the network's timers run
	// only while one is.
	running int
	timers  timerSet
	// refusal is ConnectReject's count, kept across modem restarts: it is
	// the network that refuses.
	refusal refusalState
	// followers are the started functions, told of every change.
	followers map[int]follower
	nextID    int
	// ra is the IPv6 router's state (ra.go).
	ra raState
}

// NetworkConfig is the emulated modem's identity, its SIM and network,
// the carrier configuration of a data session, and the failure knobs.
// The zero value is a ready network: SIM present and unlocked, radio on,
// registered at home, attached, any APN accepted, DefaultCarrier.
type NetworkConfig struct {
	// Identity (MBIM DEVICE_CAPS, SUBSCRIBER_READY_STATUS, REGISTER_STATE;
	// QMI DMS Get IDs, Get Revision, Get Model and NAS's PLMN).
	DeviceID, FirmwareInfo, HardwareInfo string
	SubscriberID, SIMICCID, Number       string
	ProviderID, ProviderName             string
	// DataClass is what the modem and the network offer (default LTE |
	// 5G NSA | 5G SA).
	DataClass mbim.DataClass

	// SIMAbsent: there is no SIM (MBIM SIM_NOT_INSERTED, QMI card
	// absent).
	SIMAbsent bool
	// PIN, when set, locks the SIM until PIN1 is entered; PINAttempts is
	// the number of tries (default 3), after which PUK1 is required and
	// the SIM stays locked.
	PIN         string
	PINAttempts int
	// PUK unblocks a SIM whose PIN tries are used up (default
	// "12345678"), setting a new PIN; PUKAttempts is the number of
	// tries (default 10), after which the SIM is blocked for good.
	PUK         string
	PUKAttempts int
	// RadioOff starts the software radio switch off (the host must turn
	// it on: MBIM RADIO_STATE, QMI DMS Set Operating Mode);
	// HardwareRadioOff is the hardware switch (airplane mode): the radio
	// never comes on.
	RadioOff, HardwareRadioOff bool
	// FCCLock starts the modem FCC-locked, as the laptop SKUs of
	// ModemManager's fcc-unlock.d list ship (mhi.Profile.FCCLock): the
	// radio stays off — MBIM RADIO_STATE set on answers
	// OPERATION_NOT_ALLOWED, QMI DMS Set Operating Mode online answers
	// Internal — until the host runs this procedure (fcc.go); every
	// modem restart locks it again.
	FCCLock mhi.FCCUnlock
	// NotRegistered keeps the network searching for ever; RegisterDenied
	// has it refuse registration with cause RegisterNwError (default 11,
	// PLMN not allowed).
	NotRegistered, RegisterDenied bool
	RegisterNwError               mbim.NwError
	// RegisterDelay is how long registration takes after the radio
	// comes on.
	RegisterDelay time.Duration
	// Roaming registers the modem on a visited network (MBIM
	// REGISTER_STATE roaming, QMI Serving System roaming indicator 0)
	// instead of at home. Changed with Configure, it takes effect at the
	// next registration (Reregister).
	Roaming bool
	// NoAutoAttach leaves packet service detached until the host attaches
	// (MBIM PACKET_SERVICE; otherwise registration attaches).
	NoAutoAttach bool
	// APN, when set, is the only access string a call may name (case
	// insensitive) besides APNs; any other is refused with 3GPP cause 27,
	// as carriers do. User and Password, when set, must match (else
	// cause 29).
	APN, User, Password string
	// ConnectReject refuses data calls with this 3GPP cause (an MBIM
	// CONNECT answered FAILURE with it as NwError, a QMI Start Network
	// answered Call Failed with it as the verbose call end reason): every
	// call, or only while ConnectRejectCalls calls have not yet been
	// refused and ConnectRejectFor has not yet passed since the first
	// refused one (each bound when set; the first to end ends the
	// refusal); then calls are admitted. A network short of resources
	// refuses with 26 for a while; 33 (option not subscribed) or 27
	// (unknown APN) are a subscription's, for good. A dual-stack QMI
	// session makes one call per IP family: each family counts its own
	// calls, so ConnectRejectCalls n refuses n attempts on MBIM and on QMI
	// alike. Changing any of the three (Configure), or RefuseCalls,
	// starts the count again.
	ConnectReject      mbim.NwError
	ConnectRejectCalls int
	ConnectRejectFor   time.Duration

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

	// Cell is the serving cell: RATs, signal, component carriers and the
	// signal's drift (zero: DefaultCell).
	Cell Cell

	// RAInterval is how often the network sends each IPv6 session an
	// unsolicited Router Advertisement (ra.go), besides one at the
	// session's start and one answering each Router Solicitation (0:
	// DefaultRAInterval, 600 s; negative: the network sends none). A
	// data pair sends them when its CarrierNetwork has the network
	// (CarrierOptions.Network).
	RAInterval time.Duration
}

func (c *NetworkConfig) setDefaults() {
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
	if c.PINAttempts <= 0 {
		c.PINAttempts = 3
	}
	if c.PUK == "" {
		c.PUK = "12345678"
	}
	if c.PUKAttempts <= 0 {
		c.PUKAttempts = 10
	}
	if c.RegisterNwError == 0 {
		c.RegisterNwError = 11
	}
	if !c.Carrier.IPv4.IsValid() && !c.Carrier.IPv6.IsValid() {
		c.Carrier = DefaultCarrier()
	}
	c.Cell.setDefaults()
	if c.Carrier.MTU == 0 {
		c.Carrier.MTU = 1500
	}
}

// NewNetwork returns a network configured by cfg; give it to the modem's
// functions (MBIMConfig.Network, QMIConfig.Network).
func NewNetwork(cfg NetworkConfig) *Network {
	cfg.setDefaults()
	n := &Network{cfg: cfg}
	n.st.powerOn(&n.cfg)
	return n
}

// networkState is what the network is doing. It changes only under
// Network.mu.
type networkState struct {
	ready      mbim.ReadyState
	pinLocked  bool
	pinType    mbim.PINType
	attempts   int
	pukLeft    int  // PUK1 tries; 0: blocked for good
	simSeen    bool // powered on before: the SIM's tries are kept
	hwOn, swOn bool
	fccLocked  bool
	reg        mbim.RegisterStateValue
	regNw      mbim.NwError
	ps         mbim.PacketServiceState
	signal     mbim.SignalState
	regPending bool // a registration timer is armed
	// drift is the signal's offset from NetworkConfig.Cell (dB), walk
	// the generator of its steps, drifting whether a step is armed.
	drift    float64
	walk     *driftWalk
	drifting bool
	// step is the Schedule step in force plus one (0: none yet),
	// schedGen the newest schedule start's; older timers do nothing.
	step     int
	schedGen uint64
	// noCoverage: the modem is out of coverage (OutOfCoverage): no
	// registration until it is back.
	noCoverage  bool
	coverageGen uint64 // the newest OutOfCoverage's; older timers do nothing
}

// A netEvent is a change of the network a function reports to its host.
type netEvent int

const (
	// evCallsDropped: the network ended every data call (cause nw);
	// packet service detaches next.
	evCallsDropped netEvent = iota
	// evCallsDeactivated: the network deactivated every data call
	// (cause nw), the modem staying attached.
	evCallsDeactivated
	evRegistration
	evPacketService // cause nw
	evSIMReady      // the SIM was unlocked
	evCarrier       // the carrier's addresses changed
	evSignal
)

// A follower is a started control function: it hears of every change of
// the network, under the lock, and reports it in its protocol.
type follower interface {
	networkEventLocked(ev netEvent, nw mbim.NwError)
	// ipv6SessionsLocked calls yield for each data session with IPv6
	// up: its session on the data pair (MBIM session ID, QMAP mux ID)
	// and its configuration as its pool gives it (before renumbering).
	ipv6SessionsLocked(yield func(session uint8, c Carrier))
}

// startLocked registers a started function: it follows the network
// until the returned stop, which takes the lock.
func (n *Network) startLocked(f follower) (stop func()) {
	if n.followers == nil {
		n.followers = map[int]follower{}
	}
	n.nextID++
	id := n.nextID
	n.followers[id] = f
	n.running++
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if _, ok := n.followers[id]; !ok {
			return
		}
		delete(n.followers, id)
		n.running--
		if n.running == 0 {
			n.timers.stop()
			n.st.drifting = false
		}
	}
}

func (n *Network) eventLocked(ev netEvent, nw mbim.NwError) {
	for _, f := range n.followers {
		f.networkEventLocked(ev, nw)
	}
}

// afterLocked runs fn under the lock after d, unless every function
// stopped or the modem restarted meanwhile.
func (n *Network) afterLocked(d time.Duration, fn func()) {
	if n.running == 0 {
		return // nothing happens until a function starts
	}
	n.timers.after(&n.mu, d, fn)
}

// powerOnLocked is a modem restart: the network returns to what the
// configuration describes and its timers are dropped.
func (n *Network) powerOnLocked() {
	n.timers.stop()
	n.st.powerOn(&n.cfg)
}

// powerOn resets the state to what cfg describes. The SIM's tries are
// the card's, not the modem's: they survive a restart, and a SIM that
// needs its PUK still does.
func (s *networkState) powerOn(cfg *NetworkConfig) {
	sim := *s
	*s = networkState{}
	switch {
	case cfg.SIMAbsent:
		s.ready = mbim.ReadySIMNotInserted
	case cfg.PIN != "":
		s.ready, s.pinLocked, s.pinType = mbim.ReadyDeviceLocked, true, mbim.PINTypePIN1
	default:
		s.ready = mbim.ReadyInitialized
	}
	s.attempts, s.pukLeft = cfg.PINAttempts, cfg.PUKAttempts
	if sim.simSeen && !cfg.SIMAbsent {
		s.attempts, s.pukLeft = sim.attempts, sim.pukLeft
		if sim.pinLocked && sim.pinType == mbim.PINTypePUK1 {
			s.ready, s.pinLocked, s.pinType = mbim.ReadyDeviceLocked, true, mbim.PINTypePUK1
		}
	}
	s.simSeen = true
	s.hwOn, s.swOn = !cfg.HardwareRadioOff, !cfg.RadioOff
	if cfg.FCCLock != mhi.FCCUnlockNone {
		s.fccLocked, s.swOn = true, false
	}
	s.reg, s.ps = mbim.RegisterDeregistered, mbim.PacketServiceDetached
	s.signal = mbim.SignalState{RSSI: 99, ErrorRate: 99}
}

func (s *networkState) radioOn() bool { return s.hwOn && s.swOn }

// radioChangedLocked moves the network state after a change of radio or
// SIM: registration starts (now or after RegisterDelay) when the radio is
// on and the SIM ready; everything is lost when the radio goes off.
func (n *Network) radioChangedLocked() {
	s := &n.st
	if !s.radioOn() || s.ready != mbim.ReadyInitialized {
		n.dropNetworkLocked(mbim.RegisterDeregistered, 0)
		return
	}
	if s.reg.Registered() || s.regPending {
		return
	}
	cfg := &n.cfg
	switch {
	case s.noCoverage:
		n.setRegisterLocked(mbim.RegisterSearching, 0)
		return
	case cfg.RegisterDenied:
		n.setRegisterLocked(mbim.RegisterDenied, cfg.RegisterNwError)
		return
	case cfg.NotRegistered:
		n.setRegisterLocked(mbim.RegisterSearching, 0)
		return
	}
	if cfg.RegisterDelay > 0 && n.running > 0 {
		n.setRegisterLocked(mbim.RegisterSearching, 0)
		s.regPending = true
		n.afterLocked(cfg.RegisterDelay, func() {
			s.regPending = false
			if s.radioOn() && s.ready == mbim.ReadyInitialized && !n.cfg.NotRegistered && !n.cfg.RegisterDenied {
				n.registeredLocked()
			}
		})
		return
	}
	n.registeredLocked()
}

// registeredLocked registers (at home, or roaming) and, unless
// NoAutoAttach, attaches.
func (n *Network) registeredLocked() {
	n.startScheduleLocked()
	n.st.signal.RSSI, n.st.signal.ErrorRate = n.rssiLocked(), 0
	reg := mbim.RegisterHome
	if n.cfg.Roaming {
		reg = mbim.RegisterRoaming
	}
	n.setRegisterLocked(reg, 0)
	n.startDriftLocked()
	if !n.cfg.NoAutoAttach {
		n.setPacketServiceLocked(mbim.PacketServiceAttached, 0)
	}
}

func (n *Network) setRegisterLocked(v mbim.RegisterStateValue, nw mbim.NwError) {
	if n.st.reg == v && n.st.regNw == nw {
		return
	}
	n.st.reg, n.st.regNw = v, nw
	n.eventLocked(evRegistration, nw)
}

func (n *Network) setPacketServiceLocked(v mbim.PacketServiceState, nw mbim.NwError) {
	if n.st.ps == v {
		return
	}
	n.st.ps = v
	n.eventLocked(evPacketService, nw)
}

// detachLocked ends every data call and detaches packet service, each
// with its indication and cause nw.
func (n *Network) detachLocked(nw mbim.NwError) {
	n.eventLocked(evCallsDropped, nw)
	n.setPacketServiceLocked(mbim.PacketServiceDetached, nw)
}

// dropNetworkLocked detaches, ending every call (indicating each
// change), and sets the registration to reg.
func (n *Network) dropNetworkLocked(reg mbim.RegisterStateValue, nw mbim.NwError) {
	n.detachLocked(nw)
	n.setRegisterLocked(reg, nw)
	if !reg.Registered() {
		n.st.signal.RSSI, n.st.signal.ErrorRate = 99, 99
	}
}

// enterPINLocked tries PIN1 on a locked SIM (the MBIM PIN set and QMI
// UIM Verify PIN both come here): a wrong PIN costs an attempt and the
// last one leaves the SIM needing PUK1; the right one unlocks the SIM,
// which then registers.
func (n *Network) enterPINLocked(pin string) bool {
	s, cfg := &n.st, &n.cfg
	if !s.pinLocked || s.pinType != mbim.PINTypePIN1 || pin != cfg.PIN {
		if s.pinLocked && s.attempts > 0 {
			s.attempts--
		}
		if s.pinLocked && s.attempts == 0 {
			s.pinType = mbim.PINTypePUK1
		}
		return false
	}
	s.pinLocked, s.pinType, s.attempts = false, mbim.PINTypeNone, cfg.PINAttempts
	s.ready = mbim.ReadyInitialized
	n.eventLocked(evSIMReady, 0)
	n.radioChangedLocked()
	return true
}

// enterPUKLocked tries PUK1 on a SIM that needs it (MBIM PIN set PUK1,
// QMI UIM Unblock PIN): the right PUK sets newPIN as the SIM's PIN and
// unlocks it; a wrong one costs a PUK try, and the last one blocks the
// SIM for good.
func (n *Network) enterPUKLocked(puk, newPIN string) bool {
	s, cfg := &n.st, &n.cfg
	if !s.pinLocked || s.pinType != mbim.PINTypePUK1 || s.pukLeft == 0 {
		return false
	}
	if puk != cfg.PUK || newPIN == "" {
		s.pukLeft--
		return false
	}
	cfg.PIN = newPIN
	s.pinLocked, s.pinType, s.attempts, s.pukLeft = false, mbim.PINTypeNone, cfg.PINAttempts, cfg.PUKAttempts
	s.ready = mbim.ReadyInitialized
	n.eventLocked(evSIMReady, 0)
	n.radioChangedLocked()
	return true
}

// PINState reports whether the SIM is locked, which code it asks for
// and the tries left of it (for tests).
func (n *Network) PINState() (locked bool, need mbim.PINType, left int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := &n.st
	if s.pinLocked && s.pinType == mbim.PINTypePUK1 {
		return true, s.pinType, s.pukLeft
	}
	return s.pinLocked, s.pinType, s.attempts
}

// admitCallLocked is the network's decision on a data call (an MBIM
// CONNECT or a QMI WDS Start Network): the radio must be on, the modem
// registered and attached; ConnectReject refuses every call; a wrong APN
// is refused with 3GPP cause 27 (missing or unknown APN), wrong
// credentials with 29 (user authentication failed), as carriers do. An
// APN is wrong when the network does not serve it (NetworkConfig.APN and
// APNs). family is the call's IP family (qmi.IPv4 or qmi.IPv6) on QMI,
// 0 for an MBIM CONNECT, whose one call carries both.
func (n *Network) admitCallLocked(apn, user, password string, family qmi.IPFamily) (mbim.Status, mbim.NwError) {
	s, cfg := &n.st, &n.cfg
	switch {
	case !s.radioOn():
		return mbim.StatusRadioPowerOff, 0
	case !s.reg.Registered():
		return mbim.StatusNotRegistered, 0
	case s.ps != mbim.PacketServiceAttached:
		return mbim.StatusPacketServiceDetached, 0
	case n.refuseLocked(family):
		return mbim.StatusFailure, cfg.ConnectReject
	case !servesAPN(cfg, apn):
		return mbim.StatusFailure, 27
	case cfg.User != "" && (user != cfg.User || password != cfg.Password):
		return mbim.StatusFailure, 29
	}
	return mbim.StatusNone, 0
}

// refusalState counts the calls ConnectReject refused, per call family
// (MBIM's one call, QMI's IPv4 and IPv6 calls), and when it refused the
// first.
type refusalState struct {
	refused [3]int
	first   time.Time
	// cause, calls, d are the knobs the count was started for.
	cause mbim.NwError
	calls int
	d     time.Duration
}

// refuseLocked reports whether ConnectReject refuses a call of family
// now, and counts it.
func (n *Network) refuseLocked(family qmi.IPFamily) bool {
	cfg, r := &n.cfg, &n.refusal
	if cfg.ConnectReject != r.cause || cfg.ConnectRejectCalls != r.calls || cfg.ConnectRejectFor != r.d {
		*r = refusalState{cause: cfg.ConnectReject, calls: cfg.ConnectRejectCalls, d: cfg.ConnectRejectFor}
	}
	if r.cause == 0 {
		return false
	}
	i := 0
	switch family {
	case qmi.IPv4:
		i = 1
	case qmi.IPv6:
		i = 2
	}
	now := time.Now()
	if r.calls > 0 && r.refused[i] >= r.calls || r.d > 0 && !r.first.IsZero() && now.Sub(r.first) >= r.d {
		return false
	}
	if r.first.IsZero() {
		r.first = now
	}
	r.refused[i]++
	return true
}

// RefuseCalls makes the network refuse data calls with 3GPP cause nw from
// now on (NetworkConfig.ConnectReject): at most calls of them (0: no
// bound), for at most d from the first refused one (0: no bound); nw 0
// admits calls again. It starts RefusedCalls' count again.
func (n *Network) RefuseCalls(nw mbim.NwError, calls int, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg.ConnectReject, n.cfg.ConnectRejectCalls, n.cfg.ConnectRejectFor = nw, calls, d
	n.refusal = refusalState{cause: nw, calls: calls, d: d}
}

// RefusedCalls is how many data calls of one family ConnectReject has
// refused since it was set: the host's refused attempts (a dual-stack
// QMI attempt makes two calls, one per family; the larger count is
// reported).
func (n *Network) RefusedCalls() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return max(n.refusal.refused[0], n.refusal.refused[1], n.refusal.refused[2])
}

func servesAPN(cfg *NetworkConfig, apn string) bool {
	_, ok := cfg.carrierFor(apn)
	return ok
}

// NetworkDetach makes the network drop the data connection: every call
// ends and packet service detaches, each with its indication and 3GPP
// cause nw (e.g. 36 regular deactivation); the modem stays registered.
// The host must attach and connect again.
func (n *Network) NetworkDetach(nw mbim.NwError) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.detachLocked(nw)
}

// DeactivateCalls makes the network deactivate every data call with 3GPP
// cause nw, the modem staying registered and attached, as an EPS bearer
// deactivation does (TS 24.301 §6.4.4; 26 insufficient resources, 36
// regular deactivation, 39 reactivation requested): MBIM indicates each
// context deactivated (CONNECT, NwError nw), QMI ends each WDS call
// (Packet Service Status disconnected, nw as its verbose call end
// reason). The host connects again; RefuseCalls before it makes the
// network refuse that for a while.
func (n *Network) DeactivateCalls(nw mbim.NwError) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.eventLocked(evCallsDeactivated, nw)
}

// NetworkLost makes the modem lose the network (out of coverage): the
// data connection drops and registration goes to searching; it comes back
// after RegisterDelay unless NotRegistered is set.
func (n *Network) NetworkLost() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropNetworkLocked(mbim.RegisterSearching, 0)
	if n.cfg.RegisterDelay <= 0 {
		// Come back at once, but in its own step so the host sees the
		// loss first.
		n.afterLocked(time.Millisecond, n.radioChangedLocked)
		return
	}
	n.radioChangedLocked()
}

// OutOfCoverage takes the modem out of coverage for d, as a train in a
// tunnel: the network stops carrying the session's packets — the data
// calls end and packet service detaches, indicated — and registration
// goes to deregistered (MBIM REGISTER_STATE, QMI NAS Serving System),
// then searching; after d the modem registers and attaches again (plus
// RegisterDelay), and the host may reconnect. Another OutOfCoverage
// meanwhile extends the outage to its own d.
func (n *Network) OutOfCoverage(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := &n.st
	s.noCoverage = true
	// The registration goes first: the host learns why its calls end.
	n.setRegisterLocked(mbim.RegisterDeregistered, 0)
	n.dropNetworkLocked(mbim.RegisterSearching, 0)
	s.coverageGen++
	gen := s.coverageGen
	n.afterLocked(d, func() {
		if s.coverageGen != gen {
			return // a later outage holds it
		}
		s.noCoverage = false
		n.radioChangedLocked()
	})
}

// Reregister retries registration now (after a knob changed).
func (n *Network) Reregister() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setRegisterLocked(mbim.RegisterSearching, 0)
	n.radioChangedLocked()
}

// Configure changes the knobs at run time (the identity and carrier
// included); the state is not reset, so e.g. clearing NotRegistered takes
// effect at the next registration attempt (radio off and on, or
// Reregister).
func (n *Network) Configure(change func(*NetworkConfig)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	change(&n.cfg)
	n.cfg.setDefaults()
}

// SetCarrier changes the carrier configuration of the default APN and
// reports it to the host (MBIM: an IP_CONFIGURATION indication for every
// active context, an address change).
func (n *Network) SetCarrier(c Carrier) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg.Carrier = c
	n.cfg.setDefaults()
	n.eventLocked(evCarrier, 0)
}

// SetSignal sets the coded RSSI (0..31, 99 unknown) and indicates it
// (MBIM SIGNAL_STATE).
func (n *Network) SetSignal(rssi uint32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.st.signal.RSSI = rssi
	n.eventLocked(evSignal, 0)
}

// timerSet is the timers of a run (the network's, or an MBIM function's
// own): stop cancels them, and one that already fired does nothing.
type timerSet struct {
	gen uint64 // bumped by stop: timers of an older generation do nothing
	set map[*timerHandle]struct{}
}

// timerHandle lets a fired timer remove itself from its set.
type timerHandle struct{ t *time.Timer }

// after runs fn under mu after d, unless stop came meanwhile. The caller
// holds mu; the handle is filled in under the lock the callback takes
// first, so the callback always sees it.
func (ts *timerSet) after(mu *sync.Mutex, d time.Duration, fn func()) {
	gen := ts.gen
	h := &timerHandle{}
	h.t = time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		delete(ts.set, h)
		if ts.gen == gen {
			fn()
		}
	})
	if ts.set == nil {
		ts.set = map[*timerHandle]struct{}{}
	}
	ts.set[h] = struct{}{}
}

// stop cancels every timer of the set (the caller holds the lock).
func (ts *timerSet) stop() {
	ts.gen++
	for h := range ts.set {
		h.t.Stop()
	}
	ts.set = nil
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
	// NAT64, when set, is the RFC 6052 prefix (64:ff9b::/96, the
	// Well-Known Prefix, or a network-specific one of length 32, 40, 48,
	// 56, 64 or 96) of the carrier's NAT64 and DNS64 for this APN, as an
	// IPv6-only APN has (RFC 6877 §6.1): IPv6 packets to the prefix are
	// translated (link/siit) to IPv4 from an address of NAT64Pool and
	// forwarded like the host's own IPv4, and the APN's IPv6 DNS
	// servers synthesise AAAA records under it for names with only A
	// records (RFC 6147 §5.1), ipv4only.arpa included (RFC 7050 §2.2).
	// The session does not report it: the host discovers it (RFC 7050).
	NAT64 netip.Prefix
}

// APN is an access point name the emulated network serves, with its
// address pool.
type APN struct {
	Name    string
	Carrier Carrier
}

// DefaultAPNs are the access point names the emulated network stack.Open
// builds serves: "internet" (DefaultCarrier, 10.0.0.0/24 and
// 2001:db8:64::/56), "ims" (10.64.0.0/24 and 2001:db8:1a5::/56, its own
// DNS servers, MTU 1400) and the private "corp.mhistack"
// (172.16.0.0/24, IPv4 only) and "v6only.mhistack", IPv6 only
// (2001:db8:6::/56) with a NAT64 and DNS64 on the Well-Known Prefix
// 64:ff9b::/96 (Carrier.NAT64), and "v6only-nsp.mhistack", the same on
// the network-specific prefix 2001:db8:464::/96, under which the
// non-global addresses the Well-Known Prefix may not carry (TestAddr4,
// documentation addresses; RFC 6052 §3.1) are reachable too.
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
		{Name: "v6only.mhistack", Carrier: Carrier{
			IPv6:        netip.MustParsePrefix("2001:db8:6::2/64"),
			IPv6Gateway: netip.MustParseAddr("2001:db8:6::1"),
			IPv6DNS:     []netip.Addr{netip.MustParseAddr("2001:db8:6:ff::53")},
			MTU:         1500,
			NAT64:       netip.MustParsePrefix("64:ff9b::/96"),
		}},
		{Name: "v6only-nsp.mhistack", Carrier: Carrier{
			IPv6:        netip.MustParsePrefix("2001:db8:7::2/64"),
			IPv6Gateway: netip.MustParseAddr("2001:db8:7::1"),
			IPv6DNS:     []netip.Addr{netip.MustParseAddr("2001:db8:7:ff::53")},
			MTU:         1500,
			NAT64:       netip.MustParsePrefix("2001:db8:464::/96"),
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
func (c *NetworkConfig) carrierFor(apn string) (Carrier, bool) {
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
