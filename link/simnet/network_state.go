package simnet

import (
	"time"

	"github.com/mhistack/mhistack/link/mbim"
)

// The modem's network state — SIM and PIN, radio, registration, packet
// service, the rules a data call must pass, the carrier's addresses — is
// one per modem and shared by its control functions: the MBIM function
// owns it (mbimState, under MBIMFunction.mu, reset by a modem restart)
// and reports its changes as MBIM indications; the QMI function
// (QMIConfig.Network) reads and changes the same state under the same
// lock and follows it through watchLocked. The state's vocabulary is
// MBIM's (register and packet-service values, 3GPP causes as NwError);
// the QMI function maps it to NAS/WDS/UIM values.

// powerOn resets the state to what cfg describes (Start, i.e. a modem
// restart).
func (s *mbimState) powerOn(cfg *MBIMConfig) {
	*s = mbimState{maxXfer: mbim.DefaultControlTransfer, contexts: map[uint32]*simContext{}}
	switch {
	case cfg.SIMAbsent:
		s.ready = mbim.ReadySIMNotInserted
	case cfg.PIN != "":
		s.ready, s.pinLocked, s.pinType = mbim.ReadyDeviceLocked, true, mbim.PINTypePIN1
	default:
		s.ready = mbim.ReadyInitialized
	}
	s.attempts = cfg.PINAttempts
	s.hwOn, s.swOn = !cfg.HardwareRadioOff, !cfg.RadioOff
	s.reg, s.ps = mbim.RegisterDeregistered, mbim.PacketServiceDetached
	s.signal = mbim.SignalState{RSSI: 99, ErrorRate: 99}
}

func (s *mbimState) radioOn() bool { return s.hwOn && s.swOn }

// radioChangedLocked moves the network state after a change of radio or
// SIM: registration starts (now or after RegisterDelay) when the radio is
// on and the SIM ready; everything is lost when the radio goes off.
func (s *mbimState) radioChangedLocked(f *MBIMFunction) {
	if !s.radioOn() || s.ready != mbim.ReadyInitialized {
		s.dropNetworkLocked(f, mbim.RegisterDeregistered, 0)
		return
	}
	if s.reg.Registered() || s.regPending {
		return
	}
	cfg := &f.cfg
	switch {
	case cfg.RegisterDenied:
		s.setRegisterLocked(f, mbim.RegisterDenied, cfg.RegisterNwError)
		return
	case cfg.NotRegistered:
		s.setRegisterLocked(f, mbim.RegisterSearching, 0)
		return
	}
	if cfg.RegisterDelay > 0 && f.out != nil {
		s.setRegisterLocked(f, mbim.RegisterSearching, 0)
		s.regPending = true
		f.afterLocked(cfg.RegisterDelay, func() {
			s.regPending = false
			if s.radioOn() && s.ready == mbim.ReadyInitialized && !f.cfg.NotRegistered && !f.cfg.RegisterDenied {
				s.registeredLocked(f)
			}
		})
		return
	}
	s.registeredLocked(f)
}

// registeredLocked registers at home and, unless NoAutoAttach, attaches.
func (s *mbimState) registeredLocked(f *MBIMFunction) {
	s.signal.RSSI, s.signal.ErrorRate = 20, 0 // −73 dBm
	s.setRegisterLocked(f, mbim.RegisterHome, 0)
	if !f.cfg.NoAutoAttach {
		s.setPacketServiceLocked(f, mbim.PacketServiceAttached, 0)
	}
}

func (s *mbimState) setRegisterLocked(f *MBIMFunction, v mbim.RegisterStateValue, nw mbim.NwError) {
	if s.reg == v && s.regNw == nw {
		return
	}
	s.reg, s.regNw = v, nw
	f.indicateLocked(mbim.CIDRegisterState, s.registerState(&f.cfg).Encode())
	f.notifyLocked()
}

func (s *mbimState) setPacketServiceLocked(f *MBIMFunction, v mbim.PacketServiceState, nw mbim.NwError) {
	if s.ps == v {
		return
	}
	s.ps = v
	ps := s.packetService(&f.cfg)
	ps.NwError = nw
	f.indicateLocked(mbim.CIDPacketService, ps.Encode())
	f.notifyLocked()
}

// dropNetworkLocked detaches and deactivates every context (indicating
// each change), and sets the registration to reg.
func (s *mbimState) dropNetworkLocked(f *MBIMFunction, reg mbim.RegisterStateValue, nw mbim.NwError) {
	s.deactivateAllLocked(f, nw)
	s.setPacketServiceLocked(f, mbim.PacketServiceDetached, nw)
	s.setRegisterLocked(f, reg, nw)
	if !reg.Registered() {
		s.signal.RSSI, s.signal.ErrorRate = 99, 99
	}
}

// enterPINLocked tries PIN1 on a locked SIM (the MBIM PIN set and QMI
// UIM Verify PIN both come here): a wrong PIN costs an attempt and the
// last one leaves the SIM needing PUK1; the right one unlocks the SIM,
// which then registers.
func (s *mbimState) enterPINLocked(f *MBIMFunction, pin string) bool {
	cfg := &f.cfg
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
	f.indicateLocked(mbim.CIDSubscriberReadyStatus, s.subscriberReady(cfg).Encode())
	s.radioChangedLocked(f)
	return true
}

// admitCallLocked is the network's decision on a data call (an MBIM
// CONNECT or a QMI WDS Start Network): the radio must be on, the modem
// registered and attached; ConnectReject refuses every call; a wrong APN
// is refused with 3GPP cause 27 (missing or unknown APN), wrong
// credentials with 29 (user authentication failed), as carriers do. An
// APN is wrong when the network does not serve it (MBIMConfig.APN and
// APNs).
func (s *mbimState) admitCallLocked(cfg *MBIMConfig, apn, user, password string) (mbim.Status, mbim.NwError) {
	switch {
	case !s.radioOn():
		return mbim.StatusRadioPowerOff, 0
	case !s.reg.Registered():
		return mbim.StatusNotRegistered, 0
	case s.ps != mbim.PacketServiceAttached:
		return mbim.StatusPacketServiceDetached, 0
	case cfg.ConnectReject != 0:
		return mbim.StatusFailure, cfg.ConnectReject
	case !servesAPN(cfg, apn):
		return mbim.StatusFailure, 27
	case cfg.User != "" && (user != cfg.User || password != cfg.Password):
		return mbim.StatusFailure, 29
	}
	return mbim.StatusNone, 0
}

func servesAPN(cfg *MBIMConfig, apn string) bool {
	_, ok := cfg.carrierFor(apn)
	return ok
}

// watchLocked registers fn to run, under the lock, after every change of
// the network state (registration, packet service, carrier): the QMI
// function of the same modem follows the network through it.
func (f *MBIMFunction) watchLocked(fn func()) (cancel func()) {
	if f.watchers == nil {
		f.watchers = map[int]func(){}
	}
	f.watchID++
	id := f.watchID
	f.watchers[id] = fn
	return func() {
		f.mu.Lock()
		delete(f.watchers, id)
		f.mu.Unlock()
	}
}

func (f *MBIMFunction) notifyLocked() {
	for _, fn := range f.watchers {
		fn()
	}
}

// NetworkDetach makes the network drop the data connection: every
// context is deactivated and packet service detaches, each with its
// indication and 3GPP cause nw (e.g. 36 regular deactivation); the modem
// stays registered. The host must attach and connect again.
func (f *MBIMFunction) NetworkDetach(nw mbim.NwError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.deactivateAllLocked(f, nw)
	f.st.setPacketServiceLocked(f, mbim.PacketServiceDetached, nw)
}

// NetworkLost makes the modem lose the network (out of coverage): the
// data connection drops and registration goes to searching; it comes back
// after RegisterDelay unless NotRegistered is set.
func (f *MBIMFunction) NetworkLost() {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &f.st
	s.dropNetworkLocked(f, mbim.RegisterSearching, 0)
	if f.cfg.RegisterDelay <= 0 {
		// Come back at once, but in its own step so the host sees the
		// loss first.
		f.afterLocked(time.Millisecond, func() { s.radioChangedLocked(f) })
		return
	}
	s.radioChangedLocked(f)
}

// Reregister retries registration now (after a knob changed).
func (f *MBIMFunction) Reregister() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.setRegisterLocked(f, mbim.RegisterSearching, 0)
	f.st.radioChangedLocked(f)
}

// SetCarrier changes the network configuration and reports it to the
// host with an IP_CONFIGURATION indication for every active context (an
// address change).
func (f *MBIMFunction) SetCarrier(c Carrier) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg.Carrier = c
	f.cfg.setDefaults()
	for id, ctx := range f.st.contexts {
		f.indicateLocked(mbim.CIDIPConfiguration, f.st.ipConfig(&f.cfg, id, ctx).Encode())
	}
	f.notifyLocked()
}

// SetSignal sets the coded RSSI (0..31, 99 unknown) and indicates it.
func (f *MBIMFunction) SetSignal(rssi uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.signal.RSSI = rssi
	f.indicateLocked(mbim.CIDSignalState, f.st.signal.Encode())
}
