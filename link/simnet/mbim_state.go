package simnet

import (
	"net/netip"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi"
)

// mbimState is what the MBIM function itself knows (the network's state
// is its Network's): whether it is open, the host's subscriptions and the
// data contexts. It changes only under the network's lock.
type mbimState struct {
	opened   bool
	sawClose bool // IgnoreOpenUntilClose: a CLOSE came
	maxXfer  int
	contexts map[uint32]*simContext
	subs     []mbim.EventSubscription // nil: every indication
	// tunnelCID is the last DMS client ID the QMI tunnel gave out.
	tunnelCID uint8
	// ex is the MBIMEx version agreed with the host since OPEN (0:
	// none, the MBIM 1.0 layouts).
	ex mbim.Version
}

// reset is the state of a function that just started.
func (s *mbimState) reset() {
	*s = mbimState{maxXfer: mbim.DefaultControlTransfer, contexts: map[uint32]*simContext{}}
}

// simContext is one data session.
type simContext struct {
	apn     string // the access string it was connected with
	ipType  mbim.IPType
	v6Ready bool // the IPv6 part has been reported (IPv6Delay)
}

// deactivateAllLocked ends every data context, each with its CONNECT
// indication and cause nw.
func (f *MBIMFunction) deactivateAllLocked(nw mbim.NwError) {
	for id := range f.st.contexts {
		delete(f.st.contexts, id)
		cs := mbim.ContextState{SessionID: id, ActivationState: mbim.ActivationDeactivated,
			ContextType: mbim.ContextTypeInternet, NwError: nw}
		f.indicateLocked(mbim.CIDConnect, f.encodeContextState(&cs))
	}
}

// ipv6SessionsLocked implements follower: the contexts whose IPv6 part
// is up, on the NTB session of their session ID.
func (f *MBIMFunction) ipv6SessionsLocked(yield func(session uint8, c Carrier)) {
	for id, c := range f.st.contexts {
		if c.ipType.HasIPv6() && c.v6Ready && id <= 0xff {
			pool, _ := f.net.cfg.carrierFor(c.apn)
			yield(uint8(id), pool.ForSession(int(id)))
		}
	}
}

// networkEventLocked reports a change of the network as MBIM indications.
func (f *MBIMFunction) networkEventLocked(ev netEvent, nw mbim.NwError) {
	switch ev {
	case evCallsDropped, evCallsDeactivated:
		f.deactivateAllLocked(nw)
	case evRegistration:
		f.indicateLocked(mbim.CIDRegisterState, f.encodeRegisterState())
	case evPacketService:
		ps := f.packetService()
		ps.NwError = nw
		f.indicateLocked(mbim.CIDPacketService, f.encodePacketService(ps))
	case evSIMReady:
		f.indicateLocked(mbim.CIDSubscriberReadyStatus, f.encodeSubscriberReady())
	case evCarrier:
		for id, ctx := range f.st.contexts {
			f.indicateLocked(mbim.CIDIPConfiguration, f.ipConfig(id, ctx).Encode())
		}
	case evSignal:
		f.indicateLocked(mbim.CIDSignalState, f.encodeSignalState())
	}
}

// The answers and indications whose layout MBIMEx 2.0 or 3.0 changes, in
// the layout agreed with the host.

func (f *MBIMFunction) encodeSubscriberReady() []byte {
	r := f.subscriberReady()
	if f.st.ex >= mbim.MBIMEx3 {
		return r.EncodeV3() // Flags 0: a physical SIM, removability not reported
	}
	return r.Encode()
}

func (f *MBIMFunction) encodeContextState(cs *mbim.ContextState) []byte {
	if f.st.ex >= mbim.MBIMEx3 {
		if c := f.st.contexts[cs.SessionID]; c != nil {
			cs.APN = c.apn
		}
		return cs.EncodeV3()
	}
	return cs.Encode()
}

func (f *MBIMFunction) encodeRegisterState() []byte {
	r := f.registerState()
	if f.st.ex >= mbim.MBIMEx2 {
		r.PreferredDataClasses = f.net.cfg.DataClass
		return r.EncodeV2()
	}
	return r.Encode()
}

func (f *MBIMFunction) encodePacketService(p *mbim.PacketService) []byte {
	if f.st.ex < mbim.MBIMEx2 {
		return p.Encode()
	}
	if p.State == mbim.PacketServiceAttached {
		p.FrequencyRange = 1 // FR1: the emulated carriers are all below 7.125 GHz
	}
	if f.st.ex < mbim.MBIMEx3 {
		return p.EncodeV2()
	}
	if p.HighestAvailableDataClass&(mbim.DataClass5GNSA|mbim.DataClass5GSA) != 0 {
		// MbimDataClassV3 has one 5G bit (5G-NSA's); the subclass
		// tells EN-DC from standalone.
		p.HighestAvailableDataClass, p.DataSubclass = mbim.DataClass5GNSA, mbim.DataSubclass5GNR
		if f.net.cellLocked().LTE != nil {
			p.DataSubclass = mbim.DataSubclass5GENDC
		}
	}
	return p.EncodeV3()
}

// encodeSignalState adds MBIMEx 2.0's RSRP and SNR of each RAT the cell
// measures, from the same state QMI's Get Signal Info reads.
func (f *MBIMFunction) encodeSignalState() []byte {
	s := f.net.st.signal
	if f.st.ex < mbim.MBIMEx2 {
		return s.Encode()
	}
	c := f.net.cellLocked()
	add := func(m *Measurement, dc mbim.DataClass) {
		if m != nil {
			s.RSRPSNR = append(s.RSRPSNR, mbim.RSRPSNR{RSRP: mbim.CodeRSRP(m.RSRP), SNR: mbim.CodeSNR(m.SINR),
				RSRPThreshold: mbim.Unknown, SNRThreshold: mbim.Unknown, SystemType: dc})
		}
	}
	add(c.LTE, mbim.DataClassLTE)
	nr := mbim.DataClass5GSA
	if c.LTE != nil {
		nr = mbim.DataClass5GNSA // EN-DC
	}
	add(c.NR, nr)
	return s.EncodeV2()
}

func (f *MBIMFunction) registerState() *mbim.RegisterState {
	s, cfg := &f.net.st, &f.net.cfg
	r := &mbim.RegisterState{NwError: s.regNw, State: s.reg, Mode: 1, RegistrationFlag: 2}
	if s.reg.Registered() {
		r.AvailableDataClasses = cfg.DataClass
		r.CurrentCellularClass = 1
		r.ProviderID, r.ProviderName = cfg.ProviderID, cfg.ProviderName
	}
	return r
}

func (f *MBIMFunction) packetService() *mbim.PacketService {
	s, cfg := &f.net.st, &f.net.cfg
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

func (f *MBIMFunction) subscriberReady() *mbim.SubscriberReadyStatus {
	s, cfg := &f.net.st, &f.net.cfg
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
func (f *MBIMFunction) ipConfig(id uint32, c *simContext) *mbim.IPConfig {
	pool, _ := f.net.cfg.carrierFor(c.apn)
	sc := f.net.renumberedLocked(pool.ForSession(int(id)))
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
			s.ex = 0 // a new host: the MBIM 1.0 layouts until VERSION
			s.maxXfer = int(min(m.MaxControlTransfer, mbim.MaxControlTransfer))
		}
		f.sendLocked(&mbim.Message{Type: mbim.TypeOpenDone, TID: m.TID, Status: st})
	case mbim.TypeClose:
		s.sawClose = true
		// Closing the function ends its data sessions (real modems
		// do, which is why the proxy never forwards a client's CLOSE).
		f.deactivateAllLocked(0)
		s.opened = false
		s.subs = nil
		s.ex = 0
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
	switch m.Service {
	case mbim.ServiceBasicConnect:
	case mbim.ServiceQMI:
		return f.qmiTunnelLocked(m)
	case mbim.ServiceQuectel:
		return f.quectelLocked(m)
	case mbim.ServiceMSBasicConnectExtensions:
		if !f.cfg.NoMBIMEx {
			return f.msExtensionsLocked(m)
		}
		return mbim.StatusNoDeviceSupport, nil
	default:
		return mbim.StatusNoDeviceSupport, nil
	}
	s, n, cfg := &f.st, f.net, &f.net.cfg
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
			MaxSessions: f.cfg.MaxSessions,
			DeviceID:    cfg.DeviceID, FirmwareInfo: cfg.FirmwareInfo, HardwareInfo: cfg.HardwareInfo}
		return mbim.StatusNone, dc.Encode()
	case mbim.CIDDeviceServices:
		if set {
			return mbim.StatusNoDeviceSupport, nil
		}
		ds := mbim.DeviceServices{Services: []mbim.DeviceService{{ID: mbim.ServiceBasicConnect,
			CIDs: []uint32{1, 2, 3, 4, 9, 10, 11, 12, 15, 16, 19}}}}
		if !f.cfg.NoMBIMEx {
			ds.Services = append(ds.Services, mbim.DeviceService{ID: mbim.ServiceMSBasicConnectExtensions,
				CIDs: []uint32{mbim.CIDMSBaseStationsInfo, mbim.CIDMSVersion}})
		}
		switch cfg.FCCLock {
		case mhi.FCCUnlockFoxconn:
			ds.Services = append(ds.Services, mbim.DeviceService{ID: mbim.ServiceQMI, CIDs: []uint32{mbim.CIDQMIMsg}})
		case mhi.FCCUnlockQuectel:
			ds.Services = append(ds.Services, mbim.DeviceService{ID: mbim.ServiceQuectel, CIDs: []uint32{mbim.CIDQuectelRadioState}})
		}
		return mbim.StatusNone, ds.Encode()
	case mbim.CIDSubscriberReadyStatus:
		if set {
			return mbim.StatusNoDeviceSupport, nil
		}
		return mbim.StatusNone, f.encodeSubscriberReady()
	case mbim.CIDPIN:
		return f.pinLocked(m)
	case mbim.CIDRadioState:
		if set {
			on, err := mbim.ParseRadioStateSet(m.Buffer)
			if err != nil {
				return mbim.StatusInvalidParameters, nil
			}
			if on && n.st.fccLocked {
				// What an FCC-locked SDX55 answers; ModemManager
				// takes any failure of this set as its cue to
				// run the fcc-unlock.d script.
				return mbim.StatusOperationNotAllowed, nil
			}
			if n.st.swOn != on {
				n.st.swOn = on
				rs := mbim.RadioState{HardwareOn: n.st.hwOn, SoftwareOn: n.st.swOn}
				f.indicateLocked(mbim.CIDRadioState, rs.Encode())
				n.radioChangedLocked()
			}
		}
		rs := mbim.RadioState{HardwareOn: n.st.hwOn, SoftwareOn: n.st.swOn}
		return mbim.StatusNone, rs.Encode()
	case mbim.CIDRegisterState:
		if set {
			// Only automatic registration is modelled: a set
			// restarts it.
			if n.st.ready != mbim.ReadyInitialized {
				return mbim.StatusSIMNotInserted, nil
			}
			if !n.st.radioOn() {
				return mbim.StatusRadioPowerOff, nil
			}
			n.radioChangedLocked()
		}
		return mbim.StatusNone, f.encodeRegisterState()
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
			n.st.signal.SignalStrengthInterval, n.st.signal.RSSIThreshold, n.st.signal.ErrorRateThreshold =
				p.SignalStrengthInterval, p.RSSIThreshold, p.ErrorRateThreshold
		}
		return mbim.StatusNone, f.encodeSignalState()
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
		return mbim.StatusNone, f.ipConfig(id, c).Encode()
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
	s := &f.net.st
	if s.ready == mbim.ReadySIMNotInserted {
		return mbim.StatusSIMNotInserted, nil
	}
	info := func() []byte {
		pi := mbim.PINInfo{Type: mbim.PINTypeNone, RemainingAttempts: uint32(s.attempts)}
		if s.pinLocked {
			pi.Type, pi.Locked = s.pinType, true
		}
		if s.pinLocked && s.pinType == mbim.PINTypePUK1 {
			pi.RemainingAttempts = uint32(s.pukLeft)
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
	if req.Type == mbim.PINTypePUK1 {
		if !f.net.enterPUKLocked(req.PIN, req.NewPIN) {
			return mbim.StatusFailure, info()
		}
		return mbim.StatusNone, info()
	}
	if !f.net.enterPINLocked(req.PIN) {
		return mbim.StatusFailure, info()
	}
	return mbim.StatusNone, info()
}

func (f *MBIMFunction) packetServiceLocked(m *mbim.Message) (mbim.Status, []byte) {
	n := f.net
	if m.CommandType != mbim.Set {
		return mbim.StatusNone, f.encodePacketService(f.packetService())
	}
	a, err := mbim.ParsePacketServiceSet(m.Buffer)
	if err != nil {
		return mbim.StatusInvalidParameters, nil
	}
	if a == mbim.Detach {
		n.detachLocked(0)
		return mbim.StatusNone, f.encodePacketService(f.packetService())
	}
	switch {
	case !n.st.radioOn():
		return mbim.StatusRadioPowerOff, f.encodePacketService(f.packetService())
	case !n.st.reg.Registered():
		return mbim.StatusNotRegistered, f.encodePacketService(f.packetService())
	}
	n.setPacketServiceLocked(mbim.PacketServiceAttached, 0)
	return mbim.StatusNone, f.encodePacketService(f.packetService())
}

func (f *MBIMFunction) connectLocked(m *mbim.Message) (mbim.Status, []byte) {
	s, cfg := &f.st, &f.net.cfg
	state := func(id uint32, nw mbim.NwError) []byte {
		cs := mbim.ContextState{SessionID: id, ActivationState: mbim.ActivationDeactivated,
			ContextType: mbim.ContextTypeInternet, NwError: nw}
		if c := s.contexts[id]; c != nil {
			cs.ActivationState, cs.IPType = mbim.ActivationActivated, c.ipType
		}
		return f.encodeContextState(&cs)
	}
	if m.CommandType != mbim.Set {
		id, err := mbim.ParseSessionQuery(m.Buffer)
		if err != nil {
			return mbim.StatusInvalidParameters, nil
		}
		return mbim.StatusNone, state(id, 0)
	}
	parse := mbim.ParseConnectRequest
	if s.ex >= mbim.MBIMEx3 {
		parse = mbim.ParseConnectRequestV3
	}
	req, err := parse(m.Buffer)
	if err != nil {
		return mbim.StatusInvalidParameters, nil
	}
	if req.SessionID >= f.cfg.MaxSessions {
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
	if st, nw := f.net.admitCallLocked(req.APN, req.User, req.Password, 0); st != mbim.StatusNone {
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
	c := &simContext{apn: req.APN, ipType: t, v6Ready: f.cfg.IPv6Delay <= 0 || !t.HasIPv6()}
	s.contexts[req.SessionID] = c
	if !c.v6Ready {
		id := req.SessionID
		f.afterLocked(f.cfg.IPv6Delay, func() {
			if s.contexts[id] == c {
				c.v6Ready = true
				f.indicateLocked(mbim.CIDIPConfiguration, f.ipConfig(id, c).Encode())
				f.net.raChangedLocked()
			}
		})
	} else if t.HasIPv6() {
		f.net.raChangedLocked()
	}
	return mbim.StatusNone, state(req.SessionID, 0)
}

// Indicate sends an arbitrary unsolicited indication (subject to the
// host's subscribe list), for tests of indication handling.
func (f *MBIMFunction) Indicate(svc mbim.UUID, cid uint32, buf []byte) {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	f.indicateServiceLocked(svc, cid, buf)
}

// Opened reports whether the host has the function open.
func (f *MBIMFunction) Opened() bool {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	return f.st.opened
}

// Active reports whether data session id is connected.
func (f *MBIMFunction) Active(id uint32) bool {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	return f.st.contexts[id] != nil
}
