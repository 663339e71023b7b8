package qmi

import (
	"fmt"
	"net/netip"
)

// Message IDs (libqmi data/qmi-service-{ctl,dms,nas,uim,wds,wda}.json).
const (
	CTLGetVersionInfo uint16 = 0x0021
	CTLAllocateCID    uint16 = 0x0022
	CTLReleaseCID     uint16 = 0x0023
	CTLSync           uint16 = 0x0027 // also an indication

	DMSGetModel         uint16 = 0x0022
	DMSGetRevision      uint16 = 0x0023
	DMSGetIDs           uint16 = 0x0025
	DMSGetOperatingMode uint16 = 0x002D
	DMSSetOperatingMode uint16 = 0x002E

	NASGetSignalStrength uint16 = 0x0020
	NASGetServingSystem  uint16 = 0x0024 // also the Serving System indication
	NASGetSignalInfo     uint16 = 0x004F

	UIMVerifyPIN     uint16 = 0x0026
	UIMGetCardStatus uint16 = 0x002F

	WDSStartNetwork           uint16 = 0x0020
	WDSStopNetwork            uint16 = 0x0021
	WDSGetPacketServiceStatus uint16 = 0x0022 // also the Packet Service Status indication
	WDSGetCurrentSettings     uint16 = 0x002D
	WDSSetIPFamily            uint16 = 0x004D
	WDSBindMuxDataPort        uint16 = 0x00A2

	WDASetDataFormat uint16 = 0x0020
	WDAGetDataFormat uint16 = 0x0021
)

var messageNames = map[Service]map[uint16]string{
	ServiceCTL: {CTLGetVersionInfo: "Get Version Info", CTLAllocateCID: "Allocate CID", CTLReleaseCID: "Release CID", CTLSync: "Sync"},
	ServiceDMS: {DMSGetModel: "Get Model", DMSGetRevision: "Get Revision", DMSGetIDs: "Get IDs",
		DMSGetOperatingMode: "Get Operating Mode", DMSSetOperatingMode: "Set Operating Mode"},
	ServiceNAS: {NASGetSignalStrength: "Get Signal Strength", NASGetServingSystem: "Get Serving System", NASGetSignalInfo: "Get Signal Info"},
	ServiceUIM: {UIMVerifyPIN: "Verify PIN", UIMGetCardStatus: "Get Card Status"},
	ServiceWDS: {WDSStartNetwork: "Start Network", WDSStopNetwork: "Stop Network",
		WDSGetPacketServiceStatus: "Get Packet Service Status", WDSGetCurrentSettings: "Get Current Settings",
		WDSSetIPFamily: "Set IP Family", WDSBindMuxDataPort: "Bind Mux Data Port"},
	ServiceWDA: {WDASetDataFormat: "Set Data Format", WDAGetDataFormat: "Get Data Format"},
}

// MessageName names a message for errors and logs ("WDS Start Network").
func MessageName(s Service, id uint16) string {
	if n, ok := messageNames[s][id]; ok {
		return s.String() + " " + n
	}
	return fmt.Sprintf("%s message %#04x", s, id)
}

// NewRequest returns a request of service s with message ID id (client
// and transaction are filled in when it is sent).
func NewRequest(s Service, id uint16) *Message { return &Message{Service: s, ID: id, Kind: Request} }

// tlvReader returns a reader over TLV t of m: required TLVs fail when
// absent.
func tlvReader(m *Message, t uint8) (*reader, bool) {
	v, ok := m.Get(t)
	return newReader(v, fmt.Sprintf("%s TLV %#02x", MessageName(m.Service, m.ID), t)), ok
}

func missing(m *Message, t uint8, what string) error {
	return &FormatError{Header: true, Service: m.Service, Client: m.Client, Kind: m.Kind, TID: m.TID, ID: m.ID,
		Reason: fmt.Sprintf("mandatory TLV %#02x (%s) missing", t, what), Missing: true}
}

// u8TLV, u16TLV, u32TLV read a whole-TLV integer.
func u8TLV(m *Message, t uint8, what string, required bool) (uint8, bool, error) {
	r, ok := tlvReader(m, t)
	if !ok {
		if required {
			return 0, false, missing(m, t, what)
		}
		return 0, false, nil
	}
	v := r.u8(what)
	return v, true, r.done(true)
}

func u32TLV(m *Message, t uint8, what string, required bool) (uint32, bool, error) {
	r, ok := tlvReader(m, t)
	if !ok {
		if required {
			return 0, false, missing(m, t, what)
		}
		return 0, false, nil
	}
	v := r.u32(what)
	return v, true, r.done(true)
}

// ---- CTL ----

// ServiceVersion is one entry of CTL Get Version Info.
type ServiceVersion struct {
	Service      Service
	Major, Minor uint16
}

// VersionInfoTLVs encodes the Get Version Info response list (TLV 0x01:
// u8 count, then {u8 service, u16 major, u16 minor}).
func VersionInfoTLVs(list []ServiceVersion) []TLV {
	v := []byte{byte(len(list))}
	for _, s := range list[:min(len(list), 255)] {
		v = append(v, byte(s.Service))
		v = le.AppendUint16(v, s.Major)
		v = le.AppendUint16(v, s.Minor)
	}
	return []TLV{{Type: 0x01, Value: v}}
}

// ParseVersionInfo decodes a Get Version Info response.
func ParseVersionInfo(m *Message) ([]ServiceVersion, error) {
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return nil, missing(m, 0x01, "service list")
	}
	n := int(r.u8("count"))
	var list []ServiceVersion
	for i := 0; i < n && r.err == nil; i++ {
		s := ServiceVersion{Service: Service(r.u8("service")), Major: r.u16("major"), Minor: r.u16("minor")}
		if r.err == nil {
			list = append(list, s)
		}
	}
	return list, r.done(true)
}

// ClientID is a (service, client) pair: CTL Allocate CID's answer and
// Release CID's argument.
type ClientID struct {
	Service Service
	Client  uint8
}

// TLV encodes the pair as TLV 0x01.
func (c ClientID) TLV() TLV { return TLV{Type: 0x01, Value: []byte{byte(c.Service), c.Client}} }

// ParseClientID decodes TLV 0x01 of Allocate CID's response or Release
// CID's request or response.
func ParseClientID(m *Message) (ClientID, error) {
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return ClientID{}, missing(m, 0x01, "allocation info")
	}
	c := ClientID{Service: Service(r.u8("service")), Client: r.u8("client ID")}
	return c, r.done(true)
}

// AllocateCIDRequest asks for a client ID of service s.
func AllocateCIDRequest(s Service) *Message {
	return NewRequest(ServiceCTL, CTLAllocateCID).AddU8(0x01, uint8(s))
}

// ParseAllocateCIDRequest returns the service asked for.
func ParseAllocateCIDRequest(m *Message) (Service, error) {
	v, _, err := u8TLV(m, 0x01, "service", true)
	return Service(v), err
}

// ReleaseCIDRequest releases a client ID.
func ReleaseCIDRequest(c ClientID) *Message {
	m := NewRequest(ServiceCTL, CTLReleaseCID)
	m.TLVs = []TLV{c.TLV()}
	return m
}

// ---- DMS ----

// IDs are DMS Get IDs' answer (each a whole-TLV string, absent if empty).
type IDs struct {
	ESN, IMEI, MEID, IMEISV string
}

// TLVs encodes the response TLVs 0x10..0x13.
func (d IDs) TLVs() []TLV {
	var t []TLV
	for i, s := range []string{d.ESN, d.IMEI, d.MEID, d.IMEISV} {
		if s != "" {
			t = append(t, TLV{Type: 0x10 + uint8(i), Value: []byte(s)})
		}
	}
	return t
}

// ParseIDs decodes DMS Get IDs.
func ParseIDs(m *Message) IDs {
	get := func(t uint8) string { v, _ := m.Get(t); return string(v) }
	return IDs{ESN: get(0x10), IMEI: get(0x11), MEID: get(0x12), IMEISV: get(0x13)}
}

// ParseString decodes a response whose TLV 0x01 is a string (DMS Get
// Revision, Get Model).
func ParseString(m *Message) (string, error) {
	v, ok := m.Get(0x01)
	if !ok {
		return "", missing(m, 0x01, "string")
	}
	return string(v), nil
}

// OperatingMode is the DMS operating mode (QmiDmsOperatingMode).
type OperatingMode uint8

// Operating modes.
const (
	ModeOnline             OperatingMode = 0
	ModeLowPower           OperatingMode = 1
	ModeFactoryTest        OperatingMode = 2
	ModeOffline            OperatingMode = 3
	ModeReset              OperatingMode = 4
	ModeShuttingDown       OperatingMode = 5
	ModePersistentLowPower OperatingMode = 6
	ModeOnlyLowPower       OperatingMode = 7
)

func (o OperatingMode) String() string {
	n := [...]string{"online", "low-power", "factory-test", "offline", "reset", "shutting-down",
		"persistent-low-power", "mode-only-low-power"}
	if int(o) < len(n) {
		return n[o]
	}
	return fmt.Sprintf("mode-%d", uint8(o))
}

// SetOperatingModeRequest asks for mode o (TLV 0x01).
func SetOperatingModeRequest(o OperatingMode) *Message {
	return NewRequest(ServiceDMS, DMSSetOperatingMode).AddU8(0x01, uint8(o))
}

// ParseOperatingMode decodes TLV 0x01 of Get Operating Mode's response
// or Set Operating Mode's request.
func ParseOperatingMode(m *Message) (OperatingMode, error) {
	v, _, err := u8TLV(m, 0x01, "mode", true)
	return OperatingMode(v), err
}

// ---- NAS ----

// RegistrationState is NAS's registration state (QmiNasRegistrationState).
type RegistrationState uint8

// Registration states.
const (
	NotRegistered         RegistrationState = 0
	Registered            RegistrationState = 1
	Searching             RegistrationState = 2
	RegistrationDenied    RegistrationState = 3
	RegistrationUnknown   RegistrationState = 4
	registrationStatesEnd                   = 5
)

func (r RegistrationState) String() string {
	n := [...]string{"not-registered", "registered", "searching", "denied", "unknown"}
	if r < registrationStatesEnd {
		return n[r]
	}
	return fmt.Sprintf("registration-%d", uint8(r))
}

// AttachState is NAS's CS/PS attach state.
type AttachState uint8

// Attach states.
const (
	AttachUnknown AttachState = 0
	Attached      AttachState = 1
	Detached      AttachState = 2
)

// RadioInterface is a radio access technology (QmiNasRadioInterface).
type RadioInterface int8

// Radio interfaces.
const (
	RadioNone RadioInterface = 0x00
	RadioGSM  RadioInterface = 0x04
	RadioUMTS RadioInterface = 0x05
	RadioLTE  RadioInterface = 0x08
	Radio5GNR RadioInterface = 0x0C
)

func (r RadioInterface) String() string {
	switch r {
	case RadioNone:
		return "none"
	case RadioGSM:
		return "gsm"
	case RadioUMTS:
		return "umts"
	case RadioLTE:
		return "lte"
	case Radio5GNR:
		return "5gnr"
	}
	return fmt.Sprintf("radio-%d", int8(r))
}

// PLMN is the current network: MCC, MNC and its name.
type PLMN struct {
	MCC, MNC    uint16
	Description string
}

// ServingSystem is NAS Get Serving System's answer (also the Serving
// System indication): TLV 0x01 and, when present, 0x10 (roaming) and
// 0x12 (current PLMN).
type ServingSystem struct {
	Registration       RegistrationState
	CSAttach, PSAttach AttachState
	// Network is the selected network type (0 unknown, 1 3GPP2, 2 3GPP).
	Network         uint8
	RadioInterfaces []RadioInterface
	// Roaming is the roaming indicator (0 roaming, 1 home) when
	// HasRoaming.
	Roaming    uint8
	HasRoaming bool
	PLMN       *PLMN
}

// NetworkType3GPP is ServingSystem.Network for a 3GPP network.
const NetworkType3GPP = 2

// TLVs encodes the response TLVs.
func (s *ServingSystem) TLVs() []TLV {
	v := []byte{byte(s.Registration), byte(s.CSAttach), byte(s.PSAttach), s.Network, byte(len(s.RadioInterfaces))}
	for _, r := range s.RadioInterfaces[:min(len(s.RadioInterfaces), 255)] {
		v = append(v, byte(r))
	}
	t := []TLV{{Type: 0x01, Value: v}}
	if s.HasRoaming {
		t = append(t, TLV{Type: 0x10, Value: []byte{s.Roaming}})
	}
	if p := s.PLMN; p != nil {
		w := le.AppendUint16(nil, p.MCC)
		w = le.AppendUint16(w, p.MNC)
		d := p.Description[:min(len(p.Description), 255)]
		w = append(append(w, byte(len(d))), d...)
		t = append(t, TLV{Type: 0x12, Value: w})
	}
	return t
}

// ParseServingSystem decodes Get Serving System or its indication.
func ParseServingSystem(m *Message) (ServingSystem, error) {
	var s ServingSystem
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return s, missing(m, 0x01, "serving system")
	}
	s.Registration = RegistrationState(r.u8("registration state"))
	s.CSAttach = AttachState(r.u8("CS attach state"))
	s.PSAttach = AttachState(r.u8("PS attach state"))
	s.Network = r.u8("selected network")
	for _, b := range r.bytes8("radio interfaces") {
		s.RadioInterfaces = append(s.RadioInterfaces, RadioInterface(b))
	}
	if err := r.done(true); err != nil {
		return s, err
	}
	var err error
	s.Roaming, s.HasRoaming, err = u8TLV(m, 0x10, "roaming indicator", false)
	if err != nil {
		return s, err
	}
	if r, ok := tlvReader(m, 0x12); ok {
		p := &PLMN{MCC: r.u16("MCC"), MNC: r.u16("MNC"), Description: r.str8("description")}
		if err := r.done(true); err != nil {
			return s, err
		}
		s.PLMN = p
	}
	return s, nil
}

// SignalStrength is NAS Get Signal Strength's answer: TLV 0x01 (dBm and
// radio) and, for LTE, 0x17 SNR (0.1 dB) and 0x18 RSRP (dBm).
type SignalStrength struct {
	Strength        int8
	Radio           RadioInterface
	LTESNR, LTERSRP int16
	HasSNR, HasRSRP bool
}

// TLVs encodes the response TLVs.
func (s *SignalStrength) TLVs() []TLV {
	t := []TLV{{Type: 0x01, Value: []byte{byte(s.Strength), byte(s.Radio)}}}
	if s.HasSNR {
		t = append(t, TLV{Type: 0x17, Value: le.AppendUint16(nil, uint16(s.LTESNR))})
	}
	if s.HasRSRP {
		t = append(t, TLV{Type: 0x18, Value: le.AppendUint16(nil, uint16(s.LTERSRP))})
	}
	return t
}

// ParseSignalStrength decodes Get Signal Strength.
func ParseSignalStrength(m *Message) (SignalStrength, error) {
	var s SignalStrength
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return s, missing(m, 0x01, "signal strength")
	}
	s.Strength, s.Radio = int8(r.u8("strength")), RadioInterface(r.u8("radio interface"))
	if err := r.done(true); err != nil {
		return s, err
	}
	if r, ok := tlvReader(m, 0x17); ok {
		s.LTESNR, s.HasSNR = int16(r.u16("LTE SNR")), true
		if err := r.done(true); err != nil {
			return s, err
		}
	}
	if r, ok := tlvReader(m, 0x18); ok {
		s.LTERSRP, s.HasRSRP = int16(r.u16("LTE RSRP")), true
		if err := r.done(true); err != nil {
			return s, err
		}
	}
	return s, nil
}

// LTESignal is TLV 0x14 of Get Signal Info: RSSI and RSRQ (dB), RSRP
// (dBm), SNR (0.1 dB).
type LTESignal struct {
	RSSI, RSRQ int8
	RSRP, SNR  int16
}

// NRSignal is TLV 0x17 of Get Signal Info: RSRP (dBm), SNR (0.1 dB).
type NRSignal struct {
	RSRP, SNR int16
}

// SignalInfo is NAS Get Signal Info's answer for LTE and 5G NR.
type SignalInfo struct {
	LTE *LTESignal
	NR  *NRSignal
}

// TLVs encodes the response TLVs.
func (s *SignalInfo) TLVs() []TLV {
	var t []TLV
	if l := s.LTE; l != nil {
		v := []byte{byte(l.RSSI), byte(l.RSRQ)}
		v = le.AppendUint16(v, uint16(l.RSRP))
		t = append(t, TLV{Type: 0x14, Value: le.AppendUint16(v, uint16(l.SNR))})
	}
	if n := s.NR; n != nil {
		v := le.AppendUint16(nil, uint16(n.RSRP))
		t = append(t, TLV{Type: 0x17, Value: le.AppendUint16(v, uint16(n.SNR))})
	}
	return t
}

// ParseSignalInfo decodes Get Signal Info.
func ParseSignalInfo(m *Message) (SignalInfo, error) {
	var s SignalInfo
	if r, ok := tlvReader(m, 0x14); ok {
		l := &LTESignal{RSSI: int8(r.u8("RSSI")), RSRQ: int8(r.u8("RSRQ")), RSRP: int16(r.u16("RSRP")), SNR: int16(r.u16("SNR"))}
		if err := r.done(true); err != nil {
			return s, err
		}
		s.LTE = l
	}
	if r, ok := tlvReader(m, 0x17); ok {
		n := &NRSignal{RSRP: int16(r.u16("RSRP")), SNR: int16(r.u16("SNR"))}
		if err := r.done(true); err != nil {
			return s, err
		}
		s.NR = n
	}
	return s, nil
}

// ---- UIM ----

// CardState is a UIM card's state.
type CardState uint8

// Card states.
const (
	CardAbsent  CardState = 0
	CardPresent CardState = 1
	CardError   CardState = 2
)

// PINState is a UIM PIN's state (QmiUimPinState).
type PINState uint8

// PIN states.
const (
	PINNotInitialized     PINState = 0
	PINEnabledNotVerified PINState = 1
	PINEnabledVerified    PINState = 2
	PINDisabled           PINState = 3
	PINBlocked            PINState = 4
	PINPermanentlyBlocked PINState = 5
)

// AppState is a UIM application's state (QmiUimCardApplicationState).
type AppState uint8

// Application states.
const (
	AppUnknown     AppState = 0
	AppDetected    AppState = 1
	AppPINRequired AppState = 2
	AppPUKRequired AppState = 3
	AppPIN1Blocked AppState = 5
	AppIllegal     AppState = 6
	AppReady       AppState = 7
)

// AppTypeUSIM is the application type of a USIM.
const AppTypeUSIM = 2

// App is one application of a card.
type App struct {
	Type, State                       uint8
	PersoState, PersoFeature          uint8
	PersoRetries, PersoUnblockRetries uint8
	AID                               []byte
	UPINReplacesPIN1                  bool
	PIN1State                         PINState
	PIN1Retries, PUK1Retries          uint8
	PIN2State                         PINState
	PIN2Retries, PUK2Retries          uint8
}

// Card is one card of Get Card Status.
type Card struct {
	State                    CardState
	UPINState                PINState
	UPINRetries, UPUKRetries uint8
	Error                    uint8
	Apps                     []App
}

// CardStatus is UIM Get Card Status's TLV 0x10.
type CardStatus struct {
	IndexGWPrimary, Index1xPrimary, IndexGWSecondary, Index1xSecondary uint16
	Cards                                                              []Card
}

// TLVs encodes the response TLV 0x10.
func (c *CardStatus) TLVs() []TLV {
	v := le.AppendUint16(nil, c.IndexGWPrimary)
	v = le.AppendUint16(v, c.Index1xPrimary)
	v = le.AppendUint16(v, c.IndexGWSecondary)
	v = le.AppendUint16(v, c.Index1xSecondary)
	v = append(v, byte(len(c.Cards)))
	for _, cd := range c.Cards {
		v = append(v, byte(cd.State), byte(cd.UPINState), cd.UPINRetries, cd.UPUKRetries, cd.Error, byte(len(cd.Apps)))
		for _, a := range cd.Apps {
			v = append(v, a.Type, a.State, a.PersoState, a.PersoFeature, a.PersoRetries, a.PersoUnblockRetries, byte(len(a.AID)))
			v = append(v, a.AID...)
			up := byte(0)
			if a.UPINReplacesPIN1 {
				up = 1
			}
			v = append(v, up, byte(a.PIN1State), a.PIN1Retries, a.PUK1Retries, byte(a.PIN2State), a.PIN2Retries, a.PUK2Retries)
		}
	}
	return []TLV{{Type: 0x10, Value: v}}
}

// ParseCardStatus decodes Get Card Status. Counts are bounded by the
// TLV's length: every element takes bytes.
func ParseCardStatus(m *Message) (CardStatus, error) {
	var c CardStatus
	r, ok := tlvReader(m, 0x10)
	if !ok {
		return c, missing(m, 0x10, "card status")
	}
	c.IndexGWPrimary, c.Index1xPrimary = r.u16("index GW primary"), r.u16("index 1x primary")
	c.IndexGWSecondary, c.Index1xSecondary = r.u16("index GW secondary"), r.u16("index 1x secondary")
	nc := int(r.u8("card count"))
	for i := 0; i < nc && r.err == nil; i++ {
		cd := Card{State: CardState(r.u8("card state")), UPINState: PINState(r.u8("UPIN state")),
			UPINRetries: r.u8("UPIN retries"), UPUKRetries: r.u8("UPUK retries"), Error: r.u8("error code")}
		na := int(r.u8("application count"))
		for j := 0; j < na && r.err == nil; j++ {
			a := App{Type: r.u8("type"), State: r.u8("state"), PersoState: r.u8("personalization state"),
				PersoFeature: r.u8("personalization feature"), PersoRetries: r.u8("personalization retries"),
				PersoUnblockRetries: r.u8("personalization unblock retries")}
			a.AID = append([]byte(nil), r.bytes8("AID")...)
			a.UPINReplacesPIN1 = r.u8("UPIN replaces PIN1") != 0
			a.PIN1State, a.PIN1Retries, a.PUK1Retries = PINState(r.u8("PIN1 state")), r.u8("PIN1 retries"), r.u8("PUK1 retries")
			a.PIN2State, a.PIN2Retries, a.PUK2Retries = PINState(r.u8("PIN2 state")), r.u8("PIN2 retries"), r.u8("PUK2 retries")
			if r.err == nil {
				cd.Apps = append(cd.Apps, a)
			}
		}
		if r.err == nil {
			c.Cards = append(c.Cards, cd)
		}
	}
	return c, r.done(true)
}

// UIM session types (QmiUimSessionType).
const (
	SessionPrimaryGW = 0
	SessionCardSlot1 = 6
)

// PINID names a PIN (QmiUimPinId).
type PINID uint8

// PIN IDs.
const (
	PIN1 PINID = 1
	PIN2 PINID = 2
	UPIN PINID = 3
)

// VerifyPIN is UIM Verify PIN's request: the session (TLV 0x01: u8 type,
// u8-counted AID) and the PIN (TLV 0x02: u8 ID, u8-prefixed value).
type VerifyPIN struct {
	SessionType uint8
	AID         []byte
	ID          PINID
	PIN         string
}

// Request encodes the request.
func (v *VerifyPIN) Request() *Message {
	s := append([]byte{v.SessionType, byte(len(v.AID))}, v.AID...)
	p := append([]byte{byte(v.ID), byte(len(v.PIN))}, v.PIN...)
	return NewRequest(ServiceUIM, UIMVerifyPIN).Add(0x01, s).Add(0x02, p)
}

// ParseVerifyPIN decodes a Verify PIN request.
func ParseVerifyPIN(m *Message) (VerifyPIN, error) {
	var v VerifyPIN
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return v, missing(m, 0x01, "session")
	}
	v.SessionType = r.u8("session type")
	v.AID = append([]byte(nil), r.bytes8("AID")...)
	if err := r.done(true); err != nil {
		return v, err
	}
	r, ok = tlvReader(m, 0x02)
	if !ok {
		return v, missing(m, 0x02, "PIN info")
	}
	v.ID = PINID(r.u8("PIN ID"))
	v.PIN = r.str8("PIN value")
	return v, r.done(true)
}

// Retries is Verify PIN's response TLV 0x10 (present also on failure).
type Retries struct {
	Verify, Unblock uint8
}

// TLV encodes the retries.
func (r Retries) TLV() TLV { return TLV{Type: 0x10, Value: []byte{r.Verify, r.Unblock}} }

// ParseRetries decodes Verify PIN's retries (ok false when absent).
func ParseRetries(m *Message) (Retries, bool, error) {
	r, ok := tlvReader(m, 0x10)
	if !ok {
		return Retries{}, false, nil
	}
	v := Retries{Verify: r.u8("verify retries"), Unblock: r.u8("unblock retries")}
	return v, true, r.done(true)
}

// ---- WDS ----

// IPFamily is a WDS IP family (QmiWdsIpFamily).
type IPFamily uint8

// IP families.
const (
	IPFamilyUnspecified IPFamily = 0
	IPv4                IPFamily = 4
	IPv6                IPFamily = 6
)

// Auth is the WDS authentication preference bit mask.
type Auth uint8

// Authentication bits.
const (
	AuthPAP  Auth = 1 << 0
	AuthCHAP Auth = 1 << 1
)

// StartNetwork is WDS Start Network's request: APN (0x14), auth (0x16),
// user (0x17), password (0x18), IP family (0x19), 3GPP profile (0x31).
type StartNetwork struct {
	APN, User, Password string
	Auth                Auth
	Family              IPFamily
	Profile             uint8
}

// Request encodes the request; empty or zero fields are left out.
func (s *StartNetwork) Request() *Message {
	m := NewRequest(ServiceWDS, WDSStartNetwork)
	if s.APN != "" {
		m.AddString(0x14, s.APN)
	}
	if s.Auth != 0 {
		m.AddU8(0x16, uint8(s.Auth))
	}
	if s.User != "" {
		m.AddString(0x17, s.User)
	}
	if s.Password != "" {
		m.AddString(0x18, s.Password)
	}
	if s.Family != IPFamilyUnspecified {
		m.AddU8(0x19, uint8(s.Family))
	}
	if s.Profile != 0 {
		m.AddU8(0x31, s.Profile)
	}
	return m
}

// ParseStartNetwork decodes a Start Network request.
func ParseStartNetwork(m *Message) (StartNetwork, error) {
	var s StartNetwork
	get := func(t uint8) string { v, _ := m.Get(t); return string(v) }
	s.APN, s.User, s.Password = get(0x14), get(0x17), get(0x18)
	a, _, err := u8TLV(m, 0x16, "authentication", false)
	if err != nil {
		return s, err
	}
	f, _, err := u8TLV(m, 0x19, "IP family", false)
	if err != nil {
		return s, err
	}
	p, _, err := u8TLV(m, 0x31, "3GPP profile", false)
	s.Auth, s.Family, s.Profile = Auth(a), IPFamily(f), p
	return s, err
}

// CallEnd is why a call ended or failed: Start Network's response TLVs
// 0x10 (call end reason) and 0x11 (verbose: type and reason); also the
// Packet Service Status indication's.
type CallEnd struct {
	Reason      uint16
	VerboseType uint16
	Verbose     int16
	HasReason   bool
	HasVerbose  bool
}

// Verbose call end reason types (QmiWdsVerboseCallEndReasonType).
const (
	VerboseMIP      = 1
	VerboseInternal = 2
	VerboseCM       = 3
	Verbose3GPP     = 6
	VerbosePPP      = 7
	VerboseEHRPD    = 8
	VerboseIPv6     = 9
)

// TLVs encodes the call end TLVs that are set.
func (c CallEnd) TLVs() []TLV {
	var t []TLV
	if c.HasReason {
		t = append(t, TLV{Type: 0x10, Value: le.AppendUint16(nil, c.Reason)})
	}
	if c.HasVerbose {
		v := le.AppendUint16(nil, c.VerboseType)
		t = append(t, TLV{Type: 0x11, Value: le.AppendUint16(v, uint16(c.Verbose))})
	}
	return t
}

func (c CallEnd) String() string {
	switch {
	case c.HasVerbose && c.VerboseType == Verbose3GPP:
		return fmt.Sprintf("3GPP cause %d", c.Verbose)
	case c.HasVerbose:
		return fmt.Sprintf("verbose reason %d/%d", c.VerboseType, c.Verbose)
	case c.HasReason:
		return fmt.Sprintf("call end reason %d", c.Reason)
	}
	return "no reason given"
}

// Cause3GPP returns the 3GPP cause (TS 24.008 §10.5.6.6, TS 24.301
// §9.9.4.4: 27 is "missing or unknown APN") when the verbose reason is
// of type Verbose3GPP.
func (c CallEnd) Cause3GPP() (int, bool) {
	if c.HasVerbose && c.VerboseType == Verbose3GPP {
		return int(c.Verbose), true
	}
	return 0, false
}

// CallError is a Start Network the modem refused with a call end reason
// (TLVs 0x10/0x11): Family is the call's IP version, End the reason,
// Err the response's *Error (errors.Is(err, ErrCallFailed)). errors.As
// finds it in what a Session returns.
type CallError struct {
	Family IPFamily
	End    CallEnd
	Err    error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("qmi: IPv%d call refused (%v): %v", e.Family, e.End, e.Err)
}

// Unwrap returns Err.
func (e *CallError) Unwrap() error { return e.Err }

// ParseCallEnd decodes TLVs 0x10/0x11 if present.
func ParseCallEnd(m *Message) (CallEnd, error) {
	var c CallEnd
	if r, ok := tlvReader(m, 0x10); ok {
		c.Reason, c.HasReason = r.u16("call end reason"), true
		if err := r.done(true); err != nil {
			return c, err
		}
	}
	if r, ok := tlvReader(m, 0x11); ok {
		c.VerboseType, c.Verbose, c.HasVerbose = r.u16("verbose type"), int16(r.u16("verbose reason")), true
		if err := r.done(true); err != nil {
			return c, err
		}
	}
	return c, nil
}

// ParseHandle decodes TLV 0x01, the packet data handle, of Start
// Network's response or Stop Network's request.
func ParseHandle(m *Message) (uint32, error) {
	v, _, err := u32TLV(m, 0x01, "packet data handle", true)
	return v, err
}

// StopNetworkRequest stops the call with handle h.
func StopNetworkRequest(h uint32) *Message {
	return NewRequest(ServiceWDS, WDSStopNetwork).AddU32(0x01, h)
}

// ConnectionStatus is WDS's packet service status (QmiWdsConnectionStatus).
type ConnectionStatus uint8

// Connection states.
const (
	StatusUnknown        ConnectionStatus = 0
	StatusDisconnected   ConnectionStatus = 1
	StatusConnected      ConnectionStatus = 2
	StatusSuspended      ConnectionStatus = 3
	StatusAuthenticating ConnectionStatus = 4
)

func (c ConnectionStatus) String() string {
	n := [...]string{"unknown", "disconnected", "connected", "suspended", "authenticating"}
	if int(c) < len(n) {
		return n[c]
	}
	return fmt.Sprintf("status-%d", uint8(c))
}

// ParseConnectionStatus decodes Get Packet Service Status's response
// (TLV 0x01: u8).
func ParseConnectionStatus(m *Message) (ConnectionStatus, error) {
	v, _, err := u8TLV(m, 0x01, "connection status", true)
	return ConnectionStatus(v), err
}

// PacketStatus is the Packet Service Status indication.
type PacketStatus struct {
	Status      ConnectionStatus
	Reconfigure bool
	End         CallEnd
	Family      IPFamily
}

// Indication encodes the indication for client.
func (p *PacketStatus) Indication(client uint8) *Message {
	rc := byte(0)
	if p.Reconfigure {
		rc = 1
	}
	m := &Message{Service: ServiceWDS, Client: client, FromModem: true, Kind: Indication, ID: WDSGetPacketServiceStatus}
	m.Add(0x01, []byte{byte(p.Status), rc})
	m.TLVs = append(m.TLVs, p.End.TLVs()...)
	if p.Family != 0 {
		m.AddU8(0x12, uint8(p.Family))
	}
	return m
}

// ParsePacketStatus decodes the indication.
func ParsePacketStatus(m *Message) (PacketStatus, error) {
	var p PacketStatus
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return p, missing(m, 0x01, "connection status")
	}
	p.Status, p.Reconfigure = ConnectionStatus(r.u8("status")), r.u8("reconfiguration required") != 0
	if err := r.done(true); err != nil {
		return p, err
	}
	var err error
	if p.End, err = ParseCallEnd(m); err != nil {
		return p, err
	}
	f, _, err := u8TLV(m, 0x12, "IP family", false)
	p.Family = IPFamily(f)
	return p, err
}

// Requested-settings mask bits of Get Current Settings (TLV 0x10).
const (
	SettingsDNS      = 1 << 4
	SettingsAPN      = 1 << 2
	SettingsAddress  = 1 << 8
	SettingsGateway  = 1 << 9
	SettingsMTU      = 1 << 13
	SettingsFamily   = 1 << 15
	SettingsDataPath = SettingsDNS | SettingsAddress | SettingsGateway | SettingsMTU | SettingsFamily
)

// GetCurrentSettingsRequest asks for the settings in mask.
func GetCurrentSettingsRequest(mask uint32) *Message {
	return NewRequest(ServiceWDS, WDSGetCurrentSettings).AddU32(0x10, mask)
}

// GetCurrentSettingsMask decodes the request's requested-settings mask
// (0 when absent).
func GetCurrentSettingsMask(m *Message) (uint32, error) {
	v, _, err := u32TLV(m, 0x10, "requested settings", false)
	return v, err
}

// Settings is Get Current Settings' answer. IPv4 values are u32
// little-endian on the wire (10.1.2.3 is 03 02 01 0a); IPv6 values are
// 16 network-order bytes, addresses with a u8 prefix length.
type Settings struct {
	APN         string
	IPv4        netip.Prefix // address (0x1E) with the subnet mask's length (0x21)
	IPv4Gateway netip.Addr   // 0x20
	IPv4DNS     []netip.Addr // 0x15, 0x16
	IPv6        netip.Prefix // 0x25
	IPv6Gateway netip.Addr   // 0x26 (its prefix length is dropped)
	IPv6DNS     []netip.Addr // 0x27, 0x28
	MTU         uint32       // 0x29
	Family      IPFamily     // 0x2B
}

func appendV4(v []byte, a netip.Addr) []byte {
	b := a.As4()
	return append(v, b[3], b[2], b[1], b[0])
}

func v4(b []byte) netip.Addr { return netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}) }

// TLVs encodes the response TLVs that are set.
func (s *Settings) TLVs() []TLV {
	var t []TLV
	if s.APN != "" {
		t = append(t, TLV{Type: 0x14, Value: []byte(s.APN)})
	}
	for i, d := range s.IPv4DNS[:min(len(s.IPv4DNS), 2)] {
		if d.Is4() {
			t = append(t, TLV{Type: 0x15 + uint8(i), Value: appendV4(nil, d)})
		}
	}
	if s.IPv4.IsValid() && s.IPv4.Addr().Is4() {
		t = append(t, TLV{Type: 0x1E, Value: appendV4(nil, s.IPv4.Addr())})
	}
	if s.IPv4Gateway.Is4() {
		t = append(t, TLV{Type: 0x20, Value: appendV4(nil, s.IPv4Gateway)})
	}
	if s.IPv4.IsValid() && s.IPv4.Addr().Is4() {
		var mask [4]byte
		for i := range s.IPv4.Bits() {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		t = append(t, TLV{Type: 0x21, Value: appendV4(nil, netip.AddrFrom4(mask))})
	}
	if s.IPv6.IsValid() && s.IPv6.Addr().Is6() {
		a := s.IPv6.Addr().As16()
		t = append(t, TLV{Type: 0x25, Value: append(a[:], byte(s.IPv6.Bits()))})
	}
	if s.IPv6Gateway.Is6() {
		a := s.IPv6Gateway.As16()
		bits := 64
		if s.IPv6.IsValid() {
			bits = s.IPv6.Bits()
		}
		t = append(t, TLV{Type: 0x26, Value: append(a[:], byte(bits))})
	}
	for i, d := range s.IPv6DNS[:min(len(s.IPv6DNS), 2)] {
		if d.Is6() {
			a := d.As16()
			t = append(t, TLV{Type: 0x27 + uint8(i), Value: a[:]})
		}
	}
	if s.MTU != 0 {
		t = append(t, TLV{Type: 0x29, Value: le.AppendUint32(nil, s.MTU)})
	}
	if s.Family != 0 {
		t = append(t, TLV{Type: 0x2B, Value: []byte{byte(s.Family)}})
	}
	return t
}

// ParseSettings decodes Get Current Settings. A subnet mask that is not
// a prefix (ones then zeros) is an error; without a mask the IPv4
// address is a /32.
func ParseSettings(m *Message) (Settings, error) {
	var s Settings
	fixed := func(t uint8, n int, what string) ([]byte, bool, error) {
		v, ok := m.Get(t)
		if !ok {
			return nil, false, nil
		}
		if len(v) != n {
			return nil, false, &FormatError{Header: true, Service: m.Service, Client: m.Client, Kind: m.Kind, TID: m.TID, ID: m.ID,
				Reason: fmt.Sprintf("TLV %#02x (%s) of %d bytes, want %d", t, what, len(v), n)}
		}
		return v, true, nil
	}
	if v, ok := m.Get(0x14); ok {
		s.APN = string(v)
	}
	for i := range uint8(2) {
		v, ok, err := fixed(0x15+i, 4, "IPv4 DNS")
		if err != nil {
			return s, err
		}
		if ok {
			s.IPv4DNS = append(s.IPv4DNS, v4(v))
		}
	}
	addr, hasAddr, err := fixed(0x1E, 4, "IPv4 address")
	if err != nil {
		return s, err
	}
	if v, ok, err := fixed(0x20, 4, "IPv4 gateway"); err != nil {
		return s, err
	} else if ok {
		s.IPv4Gateway = v4(v)
	}
	bits := 32
	if v, ok, err := fixed(0x21, 4, "IPv4 subnet mask"); err != nil {
		return s, err
	} else if ok {
		mask := le.Uint32(v)
		ones := 0
		for ones < 32 && mask&(1<<(31-ones)) != 0 {
			ones++
		}
		if ones < 32 && mask<<ones != 0 {
			return s, &FormatError{Header: true, Service: m.Service, Client: m.Client, Kind: m.Kind, TID: m.TID, ID: m.ID,
				Reason: fmt.Sprintf("IPv4 subnet mask %v is not a prefix", v4(v))}
		}
		bits = ones
	}
	if hasAddr {
		s.IPv4 = netip.PrefixFrom(v4(addr), bits)
	}
	if v, ok, err := fixed(0x25, 17, "IPv6 address"); err != nil {
		return s, err
	} else if ok {
		if v[16] > 128 {
			return s, &FormatError{Header: true, Service: m.Service, Client: m.Client, Kind: m.Kind, TID: m.TID, ID: m.ID,
				Reason: fmt.Sprintf("IPv6 prefix length %d", v[16])}
		}
		s.IPv6 = netip.PrefixFrom(netip.AddrFrom16([16]byte(v[:16])), int(v[16]))
	}
	if v, ok, err := fixed(0x26, 17, "IPv6 gateway"); err != nil {
		return s, err
	} else if ok {
		s.IPv6Gateway = netip.AddrFrom16([16]byte(v[:16]))
	}
	for i := range uint8(2) {
		v, ok, err := fixed(0x27+i, 16, "IPv6 DNS")
		if err != nil {
			return s, err
		}
		if ok {
			s.IPv6DNS = append(s.IPv6DNS, netip.AddrFrom16([16]byte(v)))
		}
	}
	if s.MTU, _, err = u32TLV(m, 0x29, "MTU", false); err != nil {
		return s, err
	}
	f, _, err := u8TLV(m, 0x2B, "IP family", false)
	s.Family = IPFamily(f)
	return s, err
}

// SetIPFamilyRequest sets the client's IP family preference.
func SetIPFamilyRequest(f IPFamily) *Message {
	return NewRequest(ServiceWDS, WDSSetIPFamily).AddU8(0x01, uint8(f))
}

// ParseIPFamily decodes Set IP Family's request.
func ParseIPFamily(m *Message) (IPFamily, error) {
	v, _, err := u8TLV(m, 0x01, "IP family preference", true)
	return IPFamily(v), err
}

// Endpoint names the data port (QmiDataEndpointType and interface
// number).
type Endpoint struct {
	Type, Interface uint32
}

// Data endpoint types.
const (
	EndpointHSUSB = 2
	EndpointPCIe  = 3
)

// PCIeEndpoint is what ModemManager sends for an MHI modem: type PCIe,
// interface 4 (mm-port-qmi.c).
var PCIeEndpoint = Endpoint{Type: EndpointPCIe, Interface: 4}

func (e Endpoint) value() []byte { return le.AppendUint32(le.AppendUint32(nil, e.Type), e.Interface) }

func parseEndpoint(m *Message, t uint8) (Endpoint, bool, error) {
	r, ok := tlvReader(m, t)
	if !ok {
		return Endpoint{}, false, nil
	}
	e := Endpoint{Type: r.u32("endpoint type"), Interface: r.u32("interface number")}
	return e, true, r.done(true)
}

// ClientTypeTethered is Bind Mux Data Port's client type (TLV 0x13).
const ClientTypeTethered = 1

// BindMuxDataPort binds a WDS client to a QMAP mux ID on an endpoint.
type BindMuxDataPort struct {
	Endpoint   Endpoint
	MuxID      uint8
	ClientType uint32
}

// Request encodes the request (0x10 endpoint, 0x11 mux ID, 0x13 client
// type if set).
func (b *BindMuxDataPort) Request() *Message {
	m := NewRequest(ServiceWDS, WDSBindMuxDataPort).Add(0x10, b.Endpoint.value()).AddU8(0x11, b.MuxID)
	if b.ClientType != 0 {
		m.AddU32(0x13, b.ClientType)
	}
	return m
}

// ParseBindMuxDataPort decodes the request; endpoint and mux ID are
// mandatory.
func ParseBindMuxDataPort(m *Message) (BindMuxDataPort, error) {
	var b BindMuxDataPort
	e, ok, err := parseEndpoint(m, 0x10)
	if err != nil {
		return b, err
	}
	if !ok {
		return b, missing(m, 0x10, "endpoint info")
	}
	b.Endpoint = e
	if b.MuxID, _, err = u8TLV(m, 0x11, "mux ID", true); err != nil {
		return b, err
	}
	b.ClientType, _, err = u32TLV(m, 0x13, "client type", false)
	return b, err
}

// ---- WDA ----

// Link layer protocols (QmiWdaLinkLayerProtocol).
const (
	LinkLayer8023  = 1
	LinkLayerRawIP = 2
)

// Aggregation is a WDA data aggregation protocol
// (QmiWdaDataAggregationProtocol).
type Aggregation uint32

// Aggregation protocols: QMAP is MAPv1; QMAPv5 is MAPv5 (checksum
// offload header, drivers/net/ethernet/qualcomm/rmnet).
const (
	AggregationDisabled Aggregation = 0
	AggregationQMAP     Aggregation = 5
	AggregationQMAPv2   Aggregation = 6
	AggregationQMAPv3   Aggregation = 7
	AggregationQMAPv4   Aggregation = 8
	AggregationQMAPv5   Aggregation = 9
)

func (a Aggregation) String() string {
	switch a {
	case AggregationDisabled:
		return "disabled"
	case AggregationQMAP:
		return "qmap"
	case AggregationQMAPv5:
		return "qmapv5"
	}
	if a >= AggregationQMAPv2 && a <= AggregationQMAPv4 {
		return fmt.Sprintf("qmapv%d", a-AggregationQMAP+1)
	}
	return fmt.Sprintf("aggregation-%d", uint32(a))
}

// QMAPVersion is the MAP version of a, 1 or 5 (0: not QMAP, or a
// version link/qmap does not speak).
func (a Aggregation) QMAPVersion() int {
	switch a {
	case AggregationQMAP:
		return 1
	case AggregationQMAPv5:
		return 5
	}
	return 0
}

// DataFormat is WDA's data format: what Set Data Format asks for and
// what it and Get Data Format answer.
//
// TLV IDs differ by direction (libqmi data/qmi-service-wda.json for
// 0x10..0x17; the UL limits and padding as Qualcomm's interface defines
// them and Quectel's tools use them): in a request 0x17 is the endpoint
// and 0x1B/0x1C the UL limits; in a response 0x17/0x18 are the UL
// limits the modem accepts and 0x1A its DL minimum padding.
type DataFormat struct {
	LinkLayer                    uint32
	ULAggregation, DLAggregation Aggregation
	DLMaxDatagrams, DLMaxSize    uint32
	ULMaxDatagrams, ULMaxSize    uint32
	DLMinPadding                 uint32
	Endpoint                     Endpoint // request only
}

// SetRequest encodes Set Data Format.
func (d *DataFormat) SetRequest() *Message {
	m := NewRequest(ServiceWDA, WDASetDataFormat).AddU32(0x11, d.LinkLayer).
		AddU32(0x12, uint32(d.ULAggregation)).AddU32(0x13, uint32(d.DLAggregation))
	if d.DLMaxDatagrams != 0 {
		m.AddU32(0x15, d.DLMaxDatagrams)
	}
	if d.DLMaxSize != 0 {
		m.AddU32(0x16, d.DLMaxSize)
	}
	if d.Endpoint != (Endpoint{}) {
		m.Add(0x17, d.Endpoint.value())
	}
	if d.ULMaxDatagrams != 0 {
		m.AddU32(0x1B, d.ULMaxDatagrams)
	}
	if d.ULMaxSize != 0 {
		m.AddU32(0x1C, d.ULMaxSize)
	}
	return m
}

// GetRequest encodes Get Data Format for endpoint e (left out if zero).
func GetDataFormatRequest(e Endpoint) *Message {
	m := NewRequest(ServiceWDA, WDAGetDataFormat)
	if e != (Endpoint{}) {
		m.Add(0x10, e.value())
	}
	return m
}

// ParseSetDataFormat decodes a Set Data Format request. The link layer
// protocol is mandatory (a modem cannot guess it).
func ParseSetDataFormat(m *Message) (DataFormat, error) {
	var d DataFormat
	var err error
	if d.LinkLayer, _, err = u32TLV(m, 0x11, "link layer protocol", true); err != nil {
		return d, err
	}
	fields := []struct {
		t    uint8
		p    *uint32
		what string
	}{
		{0x12, (*uint32)(&d.ULAggregation), "UL aggregation protocol"},
		{0x13, (*uint32)(&d.DLAggregation), "DL aggregation protocol"},
		{0x15, &d.DLMaxDatagrams, "DL max datagrams"},
		{0x16, &d.DLMaxSize, "DL max size"},
		{0x1B, &d.ULMaxDatagrams, "UL max datagrams"},
		{0x1C, &d.ULMaxSize, "UL max size"},
	}
	for _, f := range fields {
		if *f.p, _, err = u32TLV(m, f.t, f.what, false); err != nil {
			return d, err
		}
	}
	d.Endpoint, _, err = parseEndpoint(m, 0x17)
	return d, err
}

// ResponseTLVs encodes the answer of Set or Get Data Format.
func (d *DataFormat) ResponseTLVs() []TLV {
	u32 := func(t uint8, v uint32) TLV { return TLV{Type: t, Value: le.AppendUint32(nil, v)} }
	t := []TLV{u32(0x11, d.LinkLayer), u32(0x12, uint32(d.ULAggregation)), u32(0x13, uint32(d.DLAggregation))}
	if d.DLMaxDatagrams != 0 {
		t = append(t, u32(0x15, d.DLMaxDatagrams))
	}
	if d.DLMaxSize != 0 {
		t = append(t, u32(0x16, d.DLMaxSize))
	}
	if d.ULMaxDatagrams != 0 {
		t = append(t, u32(0x17, d.ULMaxDatagrams))
	}
	if d.ULMaxSize != 0 {
		t = append(t, u32(0x18, d.ULMaxSize))
	}
	t = append(t, u32(0x1A, d.DLMinPadding))
	return t
}

// ParseDataFormat decodes the answer of Set or Get Data Format.
func ParseDataFormat(m *Message) (DataFormat, error) {
	var d DataFormat
	var err error
	fields := []struct {
		t    uint8
		p    *uint32
		what string
	}{
		{0x11, &d.LinkLayer, "link layer protocol"},
		{0x12, (*uint32)(&d.ULAggregation), "UL aggregation protocol"},
		{0x13, (*uint32)(&d.DLAggregation), "DL aggregation protocol"},
		{0x15, &d.DLMaxDatagrams, "DL max datagrams"},
		{0x16, &d.DLMaxSize, "DL max size"},
		{0x17, &d.ULMaxDatagrams, "UL max datagrams"},
		{0x18, &d.ULMaxSize, "UL max size"},
		{0x1A, &d.DLMinPadding, "DL min padding"},
	}
	for _, f := range fields {
		if *f.p, _, err = u32TLV(m, f.t, f.what, false); err != nil {
			return d, err
		}
	}
	return d, nil
}
