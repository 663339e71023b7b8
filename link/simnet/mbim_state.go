package simnet

import (
	"net/netip"

	"github.com/mhistack/mhistack/link/mbim"
)

// mbimState is what the emulated MBIM function knows: whether it is open,
// the SIM, the radio, the network and the data contexts. It changes only
// under MBIMFunction.mu.
type mbimState struct {
	opened     bool
	sawClose   bool // IgnoreOpenUntilClose: a CLOSE came
	maxXfer    int
	ready      mbim.ReadyState
	pinLocked  bool
	pinType    mbim.PINType
	attempts   int
	hwOn, swOn bool
	reg        mbim.RegisterStateValue
	regNw      mbim.NwError
	ps         mbim.PacketServiceState
	signal     mbim.SignalState
	contexts   map[uint32]*simContext
	subs       []mbim.EventSubscription // nil: every indication
	regPending bool                     // a registration timer is armed
}

// simContext is one data session.
type simContext struct {
	apn     string // the access string it was connected with
	ipType  mbim.IPType
	v6Ready bool // the IPv6 part has been reported (IPv6Delay)
}

func (s *mbimState) deactivateAllLocked(f *MBIMFunction, nw mbim.NwError) {
	for id := range s.contexts {
		delete(s.contexts, id)
		cs := mbim.ContextState{SessionID: id, ActivationState: mbim.ActivationDeactivated,
			ContextType: mbim.ContextTypeInternet, NwError: nw}
		f.indicateLocked(mbim.CIDConnect, cs.Encode())
	}
}

func (s *mbimState) registerState(cfg *MBIMConfig) *mbim.RegisterState {
	r := &mbim.RegisterState{NwError: s.regNw, State: s.reg, Mode: 1, RegistrationFlag: 2}
	if s.reg.Registered() {
		r.AvailableDataClasses = cfg.DataClass
		r.CurrentCellularClass = 1
		r.ProviderID, r.ProviderName = cfg.ProviderID, cfg.ProviderName
	}
	return r
}

func (s *mbimState) packetService(cfg *MBIMConfig) *mbim.PacketService {
	p := &mbim.PacketService{State: s.ps}
	if s.ps == mbim.PacketServiceAttached {
		p.HighestAvailableDataClass = highestDataClass(cfg.DataClass)
		p.UplinkSpeed, p.DownlinkSpeed = 1_000_000_000, 4_000_000_000
	}
	return p
}

func highestDataClass(d mbim.DataClass) mbim.DataClass {
	for b := mbim.DataClass(1 << 7); b != 0; b >>= 1 {
		if d&b != 0 {
			return b
		}
	}
	return 0
}

func (s *mbimState) subscriberReady(cfg *MBIMConfig) *mbim.SubscriberReadyStatus {
	r := &mbim.SubscriberReadyStatus{ReadyState: s.ready}
	if s.ready == mbim.ReadyInitialized || s.ready == mbim.ReadyDeviceLocked {
		r.SIMICCID = cfg.SIMICCID
	}
	if s.ready == mbim.ReadyInitialized {
		r.SubscriberID = cfg.SubscriberID
		if cfg.Number != "" {
			r.TelephoneNumbers = []string{cfg.Number}
		}
	}
	return r
}

// ipConfig is what the carrier assigned to a context of type t.
func (s *mbimState) ipConfig(cfg *MBIMConfig, id uint32, c *simContext) *mbim.IPConfig {
	pool, _ := cfg.carrierFor(c.apn)
	sc := pool.ForSession(int(id))
	car := &sc
	ic := &mbim.IPConfig{SessionID: id}
	if c.ipType.HasIPv4() && car.IPv4.IsValid() {
		ic.IPv4 = []netip.Prefix{car.IPv4}
		ic.IPv4Gateway, ic.IPv4DNS, ic.IPv4MTU = car.IPv4Gateway, car.IPv4DNS, car.MTU
	}
	if c.ipType.HasIPv6() && car.IPv6.IsValid() && c.v6Ready {
		ic.IPv6 = []netip.Prefix{car.IPv6}
		ic.IPv6Gateway, ic.IPv6DNS, ic.IPv6MTU = car.IPv6Gateway, car.IPv6DNS, car.MTU
	}
	return ic
}

// indicateLocked sends INDICATE_STATUS for a BASIC_CONNECT CID if the
// host subscribed to it (everything until it sets a subscribe list).
func (f *MBIMFunction) indicateLocked(cid uint32, buf []byte) {
	f.indicateServiceLocked(mbim.ServiceBasicConnect, cid, buf)
}

func (f *MBIMFunction) indicateServiceLocked(svc mbim.UUID, cid uint32, buf []byte) {
	if !f.st.opened {
		return
	}
	if f.st.subs != nil {
		wanted := false
		for i := range f.st.subs {
			if f.st.subs[i].Wants(svc, cid) {
				wanted = true
				break
			}
		}
		if !wanted {
			return
		}
	}
	f.stats.indications.Add(1)
	f.sendLocked(&mbim.Message{Type: mbim.TypeIndicateStatus, Service: svc, CID: cid, Buffer: buf})
}

// handleLocked answers one host message.
func (f *MBIMFunction) handleLocked(m *mbim.Message) {
	s := &f.st
	switch m.Type {
	case mbim.TypeOpen:
		if f.cfg.IgnoreOpenUntilClose && !s.sawClose {
			return
		}
		st := mbim.StatusNone
		if m.MaxControlTransfer < mbim.MinControlTransfer {
			st = mbim.StatusInvalidParameters
		} else {
			s.opened = true
			s.maxXfer = int(min(m.MaxControlTransfer, mbim.MaxControlTransfer))
		}
		f.sendLocked(&mbim.Message{Type: mbim.TypeOpenDone, TID: m.TID, Status: st})
	case mbim.TypeClose:
		s.sawClose = true
		// Closing the function ends its data sessions (real modems
		// do, which is why the proxy never forwards a client's CLOSE).
		s.deactivateAllLocked(f, 0)
		s.opened = false
		s.subs = nil
		f.sendLocked(&mbim.Message{Type: mbim.TypeCloseDone, TID: m.TID})
	case mbim.TypeCommand:
		f.stats.commands.Add(1)
		if !s.opened {
			f.sendLocked(&mbim.Message{Type: mbim.TypeFunctionError, TID: m.TID, Error: mbim.ProtoNotOpened})
			return
		}
		st, buf := f.commandLocked(m)
		f.sendLocked(&mbim.Message{Type: mbim.TypeCommandDone, TID: m.TID,
			Service: m.Service, CID: m.CID, Status: st, Buffer: buf})
	case mbim.TypeHostError:
		f.stats.hostErrors.Add(1)
	default:
		// A response type from the host is a protocol error.
		f.sendLocked(&mbim.Message{Type: mbim.TypeFunctionError, TID: m.TID, Error: mbim.ProtoUnknown})
	}
}

// commandLocked runs one COMMAND and returns the status and information
// buffer of the answer.
func (f *MBIMFunction) commandLocked(m *mbim.Message) (mbim.Status, []byte) {
	if m.Service != mbim.ServiceBasicConnect {
		return mbim.StatusNoDeviceSupport, nil
	}
	s, cfg := &f.st, &f.cfg
	set := m.CommandType == mbim.Set
	if m.CommandType > mbim.Set {
		return mbim.StatusInvalidParameters, nil
	}
	switch m.CID {
	case mbim.CIDDeviceCaps:
		if set {
			return mbim.StatusNoDeviceSupport, nil
		}
		dc := mbim.DeviceCaps{DeviceType: 1, CellularClass: 1, SIMClass: 2, DataClass: cfg.DataClass,
			ControlCaps: 0x1 | 0x2, // manual registration, hardware radio switch
			MaxSessions: cfg.MaxSessions,
			DeviceID:    cfg.DeviceID, FirmwareInfo: cfg.FirmwareInfo, HardwareInfo: cfg.HardwareInfo}
		return mbim.StatusNone, dc.Encode()
	case mbim.CIDDeviceServices:
		if set {
			return mbim.StatusNoDeviceSupport, nil
		}
		ds := mbim.DeviceServices{Services: []mbim.DeviceService{{ID: mbim.ServiceBasicConnect,
			CIDs: []uint32{1, 2, 3, 4, 9, 10, 11, 12, 15, 16, 19}}}}
		return mbim.StatusNone, ds.Encode()
	case mbim.CIDSubscriberReadyStatus:
		if set {
			return mbim.StatusNoDeviceSupport, nil
		}
		return mbim.StatusNone, s.subscriberReady(cfg).Encode()
	case mbim.CIDPIN:
		return f.pinLocked(m)
	case mbim.CIDRadioState:
		if set {
			on, err := mbim.ParseRadioStateSet(m.Buffer)
			if err != nil {
				return mbim.StatusInvalidParameters, nil
			}
			if s.swOn != on {
				s.swOn = on
				rs := mbim.RadioState{HardwareOn: s.hwOn, SoftwareOn: s.swOn}
				f.indicateLocked(mbim.CIDRadioState, rs.Encode())
				s.radioChangedLocked(f)
			}
		}
		rs := mbim.RadioState{HardwareOn: s.hwOn, SoftwareOn: s.swOn}
		return mbim.StatusNone, rs.Encode()
	case mbim.CIDRegisterState:
		if set {
			// Only automatic registration is modelled: a set
			// restarts it.
			if s.ready != mbim.ReadyInitialized {
				return mbim.StatusSIMNotInserted, nil
			}
			if !s.radioOn() {
				return mbim.StatusRadioPowerOff, nil
			}
			s.radioChangedLocked(f)
		}
		return mbim.StatusNone, s.registerState(cfg).Encode()
	case mbim.CIDPacketService:
		return f.packetServiceLocked(m)
	case mbim.CIDSignalState:
		if set {
			if len(m.Buffer) < 12 {
				return mbim.StatusInvalidParameters, nil
			}
			// Interval and thresholds are accepted and echoed; the
			// emulator reports signal on its own schedule.
			p, _ := mbim.ParseSignalState(append(make([]byte, 8), m.Buffer[:12]...))
			s.signal.SignalStrengthInterval, s.signal.RSSIThreshold, s.signal.ErrorRateThreshold =
				p.SignalStrengthInterval, p.RSSIThreshold, p.ErrorRateThreshold
		}
		return mbim.StatusNone, s.signal.Encode()
	case mbim.CIDConnect:
		return f.connectLocked(m)
	case mbim.CIDIPConfiguration:
		if set {
			return mbim.StatusNoDeviceSupport, nil
		}
		id, err := mbim.ParseSessionQuery(m.Buffer)
		if err != nil {
			return mbim.StatusInvalidParameters, nil
		}
		c := s.contexts[id]
		if c == nil {
			return mbim.StatusContextNotActivated, nil
		}
		return mbim.StatusNone, s.ipConfig(cfg, id, c).Encode()
	case mbim.CIDDeviceServiceSubscribeList:
		if !set {
			return mbim.StatusNoDeviceSupport, nil
		}
		list, err := mbim.ParseSubscribeList(m.Buffer)
		if err != nil {
			return mbim.StatusInvalidParameters, nil
		}
		s.subs = list
		if s.subs == nil {
			s.subs = []mbim.EventSubscription{}
		}
		return mbim.StatusNone, mbim.EncodeSubscribeList(list)
	}
	return mbim.StatusNoDeviceSupport, nil
}

func (f *MBIMFunction) pinLocked(m *mbim.Message) (mbim.Status, []byte) {
	s := &f.st
	if s.ready == mbim.ReadySIMNotInserted {
		return mbim.StatusSIMNotInserted, nil
	}
	info := func() []byte {
		pi := mbim.PINInfo{Type: mbim.PINTypeNone, RemainingAttempts: uint32(s.attempts)}
		if s.pinLocked {
			pi.Type, pi.Locked = s.pinType, true
		}
		return pi.Encode()
	}
	if m.CommandType != mbim.Set {
		return mbim.StatusNone, info()
	}
	req, err := mbim.ParsePINRequest(m.Buffer)
	if err != nil {
		return mbim.StatusInvalidParameters, nil
	}
	if req.Operation != mbim.PINEnter {
		return mbim.StatusNoDeviceSupport, nil
	}
	if !s.pinLocked || req.Type != s.pinType {
		return mbim.StatusFailure, info()
	}
	if !s.enterPINLocked(f, req.PIN) {
		return mbim.StatusFailure, info()
	}
	return mbim.StatusNone, info()
}

func (f *MBIMFunction) packetServiceLocked(m *mbim.Message) (mbim.Status, []byte) {
	s, cfg := &f.st, &f.cfg
	if m.CommandType != mbim.Set {
		return mbim.StatusNone, s.packetService(cfg).Encode()
	}
	a, err := mbim.ParsePacketServiceSet(m.Buffer)
	if err != nil {
		return mbim.StatusInvalidParameters, nil
	}
	if a == mbim.Detach {
		s.deactivateAllLocked(f, 0)
		s.setPacketServiceLocked(f, mbim.PacketServiceDetached, 0)
		return mbim.StatusNone, s.packetService(cfg).Encode()
	}
	switch {
	case !s.radioOn():
		return mbim.StatusRadioPowerOff, s.packetService(cfg).Encode()
	case !s.reg.Registered():
		return mbim.StatusNotRegistered, s.packetService(cfg).Encode()
	}
	s.setPacketServiceLocked(f, mbim.PacketServiceAttached, 0)
	return mbim.StatusNone, s.packetService(cfg).Encode()
}

func (f *MBIMFunction) connectLocked(m *mbim.Message) (mbim.Status, []byte) {
	s, cfg := &f.st, &f.cfg
	state := func(id uint32, nw mbim.NwError) []byte {
		cs := mbim.ContextState{SessionID: id, ActivationState: mbim.ActivationDeactivated,
			ContextType: mbim.ContextTypeInternet, NwError: nw}
		if c := s.contexts[id]; c != nil {
			cs.ActivationState, cs.IPType = mbim.ActivationActivated, c.ipType
		}
		return cs.Encode()
	}
	if m.CommandType != mbim.Set {
		id, err := mbim.ParseSessionQuery(m.Buffer)
		if err != nil {
			return mbim.StatusInvalidParameters, nil
		}
		return mbim.StatusNone, state(id, 0)
	}
	req, err := mbim.ParseConnectRequest(m.Buffer)
	if err != nil {
		return mbim.StatusInvalidParameters, nil
	}
	if req.SessionID >= cfg.MaxSessions {
		return mbim.StatusMaxActivatedContexts, state(req.SessionID, 0)
	}
	if !req.Activate {
		if s.contexts[req.SessionID] == nil {
			return mbim.StatusContextNotActivated, state(req.SessionID, 0)
		}
		delete(s.contexts, req.SessionID)
		return mbim.StatusNone, state(req.SessionID, 0)
	}
	if req.ContextType != mbim.ContextTypeInternet && req.ContextType != (mbim.UUID{}) {
		return mbim.StatusContextNotSupported, state(req.SessionID, 0)
	}
	if st, nw := s.admitCallLocked(cfg, req.APN, req.User, req.Password); st != mbim.StatusNone {
		return st, state(req.SessionID, nw)
	}
	t := req.IPType
	switch {
	case t == mbim.IPTypeDefault || t == mbim.IPTypeIPv4AndIPv6:
		t = mbim.IPTypeIPv4v6
	case t > mbim.IPTypeIPv4AndIPv6:
		return mbim.StatusInvalidParameters, state(req.SessionID, 0)
	}
	pool, _ := cfg.carrierFor(req.APN)
	if !pool.IPv6.IsValid() && t == mbim.IPTypeIPv4v6 {
		t = mbim.IPTypeIPv4
	}
	if !pool.IPv4.IsValid() && t == mbim.IPTypeIPv4v6 {
		t = mbim.IPTypeIPv6
	}
	c := &simContext{apn: req.APN, ipType: t, v6Ready: cfg.IPv6Delay <= 0 || !t.HasIPv6()}
	s.contexts[req.SessionID] = c
	if !c.v6Ready {
		id := req.SessionID
		f.afterLocked(cfg.IPv6Delay, func() {
			if s.contexts[id] == c {
				c.v6Ready = true
				f.indicateLocked(mbim.CIDIPConfiguration, s.ipConfig(&f.cfg, id, c).Encode())
			}
		})
	}
	return mbim.StatusNone, state(req.SessionID, 0)
}

// Indicate sends an arbitrary unsolicited indication (subject to the
// host's subscribe list), for tests of indication handling.
func (f *MBIMFunction) Indicate(svc mbim.UUID, cid uint32, buf []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.indicateServiceLocked(svc, cid, buf)
}

// Opened reports whether the host has the function open.
func (f *MBIMFunction) Opened() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.opened
}

// Active reports whether data session id is connected.
func (f *MBIMFunction) Active(id uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.contexts[id] != nil
}
