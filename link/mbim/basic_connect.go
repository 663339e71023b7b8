package mbim

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// BASIC_CONNECT command IDs (docs/FRAMING.md §2.6, libmbim mbim-cid.h).
const (
	CIDDeviceCaps                 uint32 = 1
	CIDSubscriberReadyStatus      uint32 = 2
	CIDRadioState                 uint32 = 3
	CIDPIN                        uint32 = 4
	CIDPINList                    uint32 = 5
	CIDHomeProvider               uint32 = 6
	CIDPreferredProviders         uint32 = 7
	CIDVisibleProviders           uint32 = 8
	CIDRegisterState              uint32 = 9
	CIDPacketService              uint32 = 10
	CIDSignalState                uint32 = 11
	CIDConnect                    uint32 = 12
	CIDProvisionedContexts        uint32 = 13
	CIDServiceActivation          uint32 = 14
	CIDIPConfiguration            uint32 = 15
	CIDDeviceServices             uint32 = 16
	CIDDeviceServiceSubscribeList uint32 = 19
	CIDPacketStatistics           uint32 = 20
	CIDNetworkIdleHint            uint32 = 21
	CIDEmergencyMode              uint32 = 22
	CIDIPPacketFilters            uint32 = 23
	CIDMulticarrierProviders      uint32 = 24
)

// PROXY_CONTROL command IDs (libmbim mbim-cid.h; §6.1).
const (
	CIDProxyConfiguration uint32 = 1
	CIDProxyVersion       uint32 = 2
)

var basicConnectNames = map[uint32]string{
	1: "DEVICE_CAPS", 2: "SUBSCRIBER_READY_STATUS", 3: "RADIO_STATE", 4: "PIN", 5: "PIN_LIST",
	6: "HOME_PROVIDER", 7: "PREFERRED_PROVIDERS", 8: "VISIBLE_PROVIDERS", 9: "REGISTER_STATE",
	10: "PACKET_SERVICE", 11: "SIGNAL_STATE", 12: "CONNECT", 13: "PROVISIONED_CONTEXTS",
	14: "SERVICE_ACTIVATION", 15: "IP_CONFIGURATION", 16: "DEVICE_SERVICES",
	19: "DEVICE_SERVICE_SUBSCRIBE_LIST", 20: "PACKET_STATISTICS", 21: "NETWORK_IDLE_HINT",
	22: "EMERGENCY_MODE", 23: "IP_PACKET_FILTERS", 24: "MULTICARRIER_PROVIDERS",
}

// cidName names a command for messages and errors.
func cidName(svc UUID, cid uint32) string {
	switch svc {
	case ServiceBasicConnect:
		if n, ok := basicConnectNames[cid]; ok {
			return n
		}
	case ServiceMSBasicConnectExtensions:
		switch cid {
		case CIDMSBaseStationsInfo:
			return "MS_BASE_STATIONS_INFO"
		case CIDMSVersion:
			return "MS_VERSION"
		}
	case ServiceProxyControl:
		switch cid {
		case CIDProxyConfiguration:
			return "PROXY_CONFIGURATION"
		case CIDProxyVersion:
			return "PROXY_VERSION"
		}
	}
	return fmt.Sprintf("%v/%d", svc, cid)
}

// DataClass is a bit set of radio technologies (§2.8).
type DataClass uint32

// Data classes.
const (
	DataClassGPRS   DataClass = 1 << 0
	DataClassEDGE   DataClass = 1 << 1
	DataClassUMTS   DataClass = 1 << 2
	DataClassHSDPA  DataClass = 1 << 3
	DataClassHSUPA  DataClass = 1 << 4
	DataClassLTE    DataClass = 1 << 5
	DataClass5GNSA  DataClass = 1 << 6
	DataClass5GSA   DataClass = 1 << 7
	DataClassCustom DataClass = 1 << 31
)

func (d DataClass) String() string {
	names := []string{"GPRS", "EDGE", "UMTS", "HSDPA", "HSUPA", "LTE", "5G-NSA", "5G-SA"}
	var s []string
	for i, n := range names {
		if d&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if d&0x007f0000 != 0 {
		s = append(s, "CDMA")
	}
	if d&DataClassCustom != 0 {
		s = append(s, "custom")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// DeviceCaps is the DEVICE_CAPS answer (§2.8: 64-byte fixed part).
type DeviceCaps struct {
	DeviceType      uint32 // 1 embedded, 2 removable, 3 remote
	CellularClass   uint32 // 1 GSM, 2 CDMA
	VoiceClass      uint32
	SIMClass        uint32 // 1 logical, 2 removable
	DataClass       DataClass
	SMSCaps         uint32
	ControlCaps     uint32
	MaxSessions     uint32
	CustomDataClass string
	DeviceID        string // IMEI
	FirmwareInfo    string
	HardwareInfo    string
}

// Encode returns the information buffer.
func (d *DeviceCaps) Encode() []byte {
	w := newWriter(64)
	for i, v := range []uint32{d.DeviceType, d.CellularClass, d.VoiceClass, d.SIMClass,
		uint32(d.DataClass), d.SMSCaps, d.ControlCaps, d.MaxSessions} {
		w.u32(4*i, v)
	}
	w.str(32, d.CustomDataClass)
	w.str(40, d.DeviceID)
	w.str(48, d.FirmwareInfo)
	w.str(56, d.HardwareInfo)
	return w.bytes()
}

// ParseDeviceCaps decodes a DEVICE_CAPS answer.
func ParseDeviceCaps(b []byte) (DeviceCaps, error) {
	r := newReader(b, "DEVICE_CAPS", 64)
	d := DeviceCaps{
		DeviceType: r.u32(0), CellularClass: r.u32(4), VoiceClass: r.u32(8), SIMClass: r.u32(12),
		DataClass: DataClass(r.u32(16)), SMSCaps: r.u32(20), ControlCaps: r.u32(24), MaxSessions: r.u32(28),
		CustomDataClass: r.str(32, 0, "CustomDataClass"), DeviceID: r.str(40, 0, "DeviceId"),
		FirmwareInfo: r.str(48, 0, "FirmwareInfo"), HardwareInfo: r.str(56, 0, "HardwareInfo"),
	}
	return d, r.err
}

// ReadyState is the SIM / subscriber state (§2.8).
type ReadyState uint32

// Ready states.
const (
	ReadyNotInitialized ReadyState = 0
	ReadyInitialized    ReadyState = 1
	ReadySIMNotInserted ReadyState = 2
	ReadyBadSIM         ReadyState = 3
	ReadyFailure        ReadyState = 4
	ReadyNotActivated   ReadyState = 5
	ReadyDeviceLocked   ReadyState = 6
	ReadyNoESIMProfile  ReadyState = 7
)

func (s ReadyState) String() string {
	n := [...]string{"not-initialized", "initialized", "sim-not-inserted", "bad-sim", "failure",
		"not-activated", "device-locked", "no-esim-profile"}
	if int(s) < len(n) {
		return n[s]
	}
	return fmt.Sprintf("ready-state-%d", uint32(s))
}

// SubscriberReadyStatus is the SUBSCRIBER_READY_STATUS answer and
// indication (§2.8: 28 bytes + 8 per telephone number).
type SubscriberReadyStatus struct {
	ReadyState       ReadyState
	SubscriberID     string // IMSI
	SIMICCID         string
	ReadyInfo        uint32 // bit0 protect unique ID
	TelephoneNumbers []string
	// Flags is MBIMEx 3.0's (EncodeV3 only): bit 0 eSIM, bit 1 SIM
	// removability known, bit 2 removable.
	Flags uint32
}

// maxTelephoneNumbers bounds the count a device may claim; each needs an
// 8-byte pair in the buffer anyway, this only keeps the error early.
const maxTelephoneNumbers = 64

// Encode returns the information buffer.
func (s *SubscriberReadyStatus) Encode() []byte {
	w := newWriter(28 + 8*len(s.TelephoneNumbers))
	w.u32(0, uint32(s.ReadyState))
	s.encodeFrom(w, 4)
	return w.bytes()
}

// encodeFrom writes the fields after ReadyState (and, in MBIMEx 3.0,
// Flags) from off on: parseFrom's counterpart.
func (s *SubscriberReadyStatus) encodeFrom(w *writer, off int) {
	w.str(off, s.SubscriberID)
	w.str(off+8, s.SIMICCID)
	w.u32(off+16, s.ReadyInfo)
	w.u32(off+20, uint32(len(s.TelephoneNumbers)))
	for i, n := range s.TelephoneNumbers {
		w.str(off+24+8*i, n)
	}
}

// ParseSubscriberReadyStatus decodes SUBSCRIBER_READY_STATUS.
func ParseSubscriberReadyStatus(b []byte) (SubscriberReadyStatus, error) {
	r := newReader(b, "SUBSCRIBER_READY_STATUS", 28)
	s := SubscriberReadyStatus{ReadyState: ReadyState(r.u32(0))}
	s.parseFrom(r, 4)
	return s, r.err
}

// parseFrom reads the fields from SubscriberId on, which start at off
// (4 in the 1.0 layout, 8 in the 3.0 one).
func (s *SubscriberReadyStatus) parseFrom(r *reader, off int) {
	s.SubscriberID, s.SIMICCID, s.ReadyInfo = r.str(off, 0, "SubscriberId"), r.str(off+8, 0, "SimIccId"), r.u32(off+16)
	n, nums := r.u32(off+20), off+24
	if r.err == nil && (n > maxTelephoneNumbers || !r.span(uint64(nums), 8*uint64(n), "TelephoneNumbers")) {
		r.failf("%d telephone numbers", n)
	}
	for i := 0; r.err == nil && i < int(n); i++ {
		s.TelephoneNumbers = append(s.TelephoneNumbers, r.str(nums+8*i, 0, "TelephoneNumber"))
	}
}

// RadioState is the RADIO_STATE answer and indication: the hardware
// switch and the software (host-controlled) state (§2.8).
type RadioState struct {
	HardwareOn, SoftwareOn bool
}

func b32(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

// Encode returns the information buffer.
func (s *RadioState) Encode() []byte {
	w := newWriter(8)
	w.u32(0, b32(s.HardwareOn))
	w.u32(4, b32(s.SoftwareOn))
	return w.bytes()
}

// ParseRadioState decodes RADIO_STATE.
func ParseRadioState(b []byte) (RadioState, error) {
	r := newReader(b, "RADIO_STATE", 8)
	s := RadioState{HardwareOn: r.u32(0) == 1, SoftwareOn: r.u32(4) == 1}
	return s, r.err
}

// EncodeRadioStateSet returns the RADIO_STATE set buffer.
func EncodeRadioStateSet(on bool) []byte {
	w := newWriter(4)
	w.u32(0, b32(on))
	return w.bytes()
}

// ParseRadioStateSet decodes a RADIO_STATE set buffer (device side).
func ParseRadioStateSet(b []byte) (on bool, err error) {
	r := newReader(b, "RADIO_STATE set", 4)
	v := r.u32(0)
	if r.err == nil && v > 1 {
		r.failf("radio state %d", v)
	}
	return v == 1, r.err
}

// PINType names a PIN or PUK (§2.8; 2 = PIN1, 11 = PUK1).
type PINType uint32

// PIN types used here.
const (
	PINTypeNone   PINType = 0
	PINTypeCustom PINType = 1
	PINTypePIN1   PINType = 2
	PINTypePIN2   PINType = 3
	PINTypePUK1   PINType = 11
	PINTypePUK2   PINType = 12
)

func (t PINType) String() string {
	switch t {
	case PINTypeNone:
		return "none"
	case PINTypePIN1:
		return "PIN1"
	case PINTypePIN2:
		return "PIN2"
	case PINTypePUK1:
		return "PUK1"
	case PINTypePUK2:
		return "PUK2"
	}
	return fmt.Sprintf("pin-type-%d", uint32(t))
}

// PINOperation is the set operation.
type PINOperation uint32

// PIN operations.
const (
	PINEnter   PINOperation = 0
	PINEnable  PINOperation = 1
	PINDisable PINOperation = 2
	PINChange  PINOperation = 3
)

// PINInfo is the PIN answer: which PIN is asked for, whether it is
// locked and how many attempts remain.
type PINInfo struct {
	Type              PINType
	Locked            bool
	RemainingAttempts uint32
}

// Encode returns the information buffer.
func (p *PINInfo) Encode() []byte {
	w := newWriter(12)
	w.u32(0, uint32(p.Type))
	w.u32(4, b32(p.Locked))
	w.u32(8, p.RemainingAttempts)
	return w.bytes()
}

// ParsePINInfo decodes the PIN answer.
func ParsePINInfo(b []byte) (PINInfo, error) {
	r := newReader(b, "PIN", 12)
	p := PINInfo{Type: PINType(r.u32(0)), Locked: r.u32(4) == 1, RemainingAttempts: r.u32(8)}
	return p, r.err
}

// PINRequest is the PIN set buffer.
type PINRequest struct {
	Type      PINType
	Operation PINOperation
	PIN       string
	NewPIN    string
}

// Encode returns the information buffer.
func (p *PINRequest) Encode() []byte {
	w := newWriter(24)
	w.u32(0, uint32(p.Type))
	w.u32(4, uint32(p.Operation))
	w.str(8, p.PIN)
	w.str(16, p.NewPIN)
	return w.bytes()
}

// ParsePINRequest decodes a PIN set buffer (device side).
func ParsePINRequest(b []byte) (PINRequest, error) {
	r := newReader(b, "PIN set", 24)
	p := PINRequest{Type: PINType(r.u32(0)), Operation: PINOperation(r.u32(4)),
		PIN: r.str(8, 0, "Pin"), NewPIN: r.str(16, 0, "NewPin")}
	return p, r.err
}

// RegisterStateValue is where the modem stands with the network (§2.8).
type RegisterStateValue uint32

// Register states.
const (
	RegisterUnknown      RegisterStateValue = 0
	RegisterDeregistered RegisterStateValue = 1
	RegisterSearching    RegisterStateValue = 2
	RegisterHome         RegisterStateValue = 3
	RegisterRoaming      RegisterStateValue = 4
	RegisterPartner      RegisterStateValue = 5
	RegisterDenied       RegisterStateValue = 6
)

func (s RegisterStateValue) String() string {
	n := [...]string{"unknown", "deregistered", "searching", "home", "roaming", "partner", "denied"}
	if int(s) < len(n) {
		return n[s]
	}
	return fmt.Sprintf("register-state-%d", uint32(s))
}

// Registered reports home, roaming or partner registration.
func (s RegisterStateValue) Registered() bool {
	return s == RegisterHome || s == RegisterRoaming || s == RegisterPartner
}

// RegisterState is the REGISTER_STATE answer and indication (48 bytes
// fixed, §2.8).
type RegisterState struct {
	NwError              NwError
	State                RegisterStateValue
	Mode                 uint32 // 1 automatic, 2 manual
	AvailableDataClasses DataClass
	CurrentCellularClass uint32
	ProviderID           string // MCC+MNC
	ProviderName         string
	RoamingText          string
	RegistrationFlag     uint32
	// PreferredDataClasses is MBIMEx 2.0's (EncodeV2 only).
	PreferredDataClasses DataClass
}

// Encode returns the information buffer.
func (s *RegisterState) Encode() []byte {
	w := newWriter(48)
	s.encodeFixed(w)
	s.encodeStrings(w)
	return w.bytes()
}

func (s *RegisterState) encodeFixed(w *writer) {
	w.u32(0, uint32(s.NwError))
	w.u32(4, uint32(s.State))
	w.u32(8, s.Mode)
	w.u32(12, uint32(s.AvailableDataClasses))
	w.u32(16, s.CurrentCellularClass)
	w.u32(44, s.RegistrationFlag)
}

func (s *RegisterState) encodeStrings(w *writer) {
	w.str(20, s.ProviderID)
	w.str(28, s.ProviderName)
	w.str(36, s.RoamingText)
}

// ParseRegisterState decodes REGISTER_STATE.
func ParseRegisterState(b []byte) (RegisterState, error) {
	r := newReader(b, "REGISTER_STATE", 48)
	s := RegisterState{
		NwError: NwError(r.u32(0)), State: RegisterStateValue(r.u32(4)), Mode: r.u32(8),
		AvailableDataClasses: DataClass(r.u32(12)), CurrentCellularClass: r.u32(16),
		ProviderID: r.str(20, 0, "ProviderId"), ProviderName: r.str(28, 0, "ProviderName"),
		RoamingText: r.str(36, 0, "RoamingText"), RegistrationFlag: r.u32(44),
	}
	return s, r.err
}

// PacketServiceState is the attach state (§2.8).
type PacketServiceState uint32

// Packet service states.
const (
	PacketServiceUnknown   PacketServiceState = 0
	PacketServiceAttaching PacketServiceState = 1
	PacketServiceAttached  PacketServiceState = 2
	PacketServiceDetaching PacketServiceState = 3
	PacketServiceDetached  PacketServiceState = 4
)

func (s PacketServiceState) String() string {
	n := [...]string{"unknown", "attaching", "attached", "detaching", "detached"}
	if int(s) < len(n) {
		return n[s]
	}
	return fmt.Sprintf("packet-service-%d", uint32(s))
}

// PacketService is the PACKET_SERVICE answer and indication (28 bytes).
type PacketService struct {
	NwError                   NwError
	State                     PacketServiceState
	HighestAvailableDataClass DataClass
	UplinkSpeed               uint64 // bit/s
	DownlinkSpeed             uint64
	// FrequencyRange is MBIMEx 2.0's (EncodeV2 only): bit 0 FR1, bit 1
	// FR2 (libmbim MbimFrequencyRange).
	FrequencyRange uint32
	// DataSubclass and TAI are MBIMEx 3.0's (EncodeV3 only).
	DataSubclass DataSubclass
	TAI          TAI
}

// Encode returns the information buffer.
func (p *PacketService) Encode() []byte {
	w := newWriter(28)
	w.u32(0, uint32(p.NwError))
	w.u32(4, uint32(p.State))
	w.u32(8, uint32(p.HighestAvailableDataClass))
	w.u64(12, p.UplinkSpeed)
	w.u64(20, p.DownlinkSpeed)
	return w.bytes()
}

// ParsePacketService decodes PACKET_SERVICE; the u64 speeds sit at
// offsets 12 and 20, not 8-aligned.
func ParsePacketService(b []byte) (PacketService, error) {
	r := newReader(b, "PACKET_SERVICE", 28)
	p := PacketService{NwError: NwError(r.u32(0)), State: PacketServiceState(r.u32(4)),
		HighestAvailableDataClass: DataClass(r.u32(8)), UplinkSpeed: r.u64(12), DownlinkSpeed: r.u64(20)}
	return p, r.err
}

// PacketServiceAction is the PACKET_SERVICE set action.
type PacketServiceAction uint32

// Actions.
const (
	Attach PacketServiceAction = 0
	Detach PacketServiceAction = 1
)

// EncodePacketServiceSet returns the PACKET_SERVICE set buffer.
func EncodePacketServiceSet(a PacketServiceAction) []byte {
	w := newWriter(4)
	w.u32(0, uint32(a))
	return w.bytes()
}

// ParsePacketServiceSet decodes a PACKET_SERVICE set buffer (device side).
func ParsePacketServiceSet(b []byte) (PacketServiceAction, error) {
	r := newReader(b, "PACKET_SERVICE set", 4)
	a := PacketServiceAction(r.u32(0))
	if r.err == nil && a > Detach {
		r.failf("action %d", a)
	}
	return a, r.err
}

// SignalState is the SIGNAL_STATE answer and indication (20 bytes; 28
// and more in the MBIMEx 2.0 layout, ms_extensions.go). RSSI is coded
// 0..31 (−113 + 2·RSSI dBm), 99 unknown; ErrorRate 0..7, 99.
type SignalState struct {
	RSSI                   uint32
	ErrorRate              uint32
	SignalStrengthInterval uint32
	RSSIThreshold          uint32
	ErrorRateThreshold     uint32
	// RSRPSNR is MBIMEx 2.0's per-RAT RSRP and SNR (Encode and
	// ParseSignalState, the 1.0 layout, leave it out).
	RSRPSNR []RSRPSNR
}

// DBm converts the coded RSSI; ok is false for "unknown".
func (s *SignalState) DBm() (dbm int, ok bool) {
	if s.RSSI > 31 {
		return 0, false
	}
	return -113 + 2*int(s.RSSI), true
}

// Encode returns the information buffer.
func (s *SignalState) Encode() []byte {
	w := newWriter(20)
	for i, v := range []uint32{s.RSSI, s.ErrorRate, s.SignalStrengthInterval, s.RSSIThreshold, s.ErrorRateThreshold} {
		w.u32(4*i, v)
	}
	return w.bytes()
}

// ParseSignalState decodes SIGNAL_STATE.
func ParseSignalState(b []byte) (SignalState, error) {
	r := newReader(b, "SIGNAL_STATE", 20)
	s := SignalState{RSSI: r.u32(0), ErrorRate: r.u32(4), SignalStrengthInterval: r.u32(8),
		RSSIThreshold: r.u32(12), ErrorRateThreshold: r.u32(16)}
	return s, r.err
}

// AuthProtocol is the CONNECT authentication.
type AuthProtocol uint32

// Authentication protocols.
const (
	AuthNone     AuthProtocol = 0
	AuthPAP      AuthProtocol = 1
	AuthCHAP     AuthProtocol = 2
	AuthMSCHAPv2 AuthProtocol = 3
)

func (a AuthProtocol) String() string {
	n := [...]string{"none", "pap", "chap", "mschapv2"}
	if int(a) < len(n) {
		return n[a]
	}
	return fmt.Sprintf("auth-%d", uint32(a))
}

// IPType is the requested or granted IP family.
type IPType uint32

// IP types.
const (
	IPTypeDefault     IPType = 0
	IPTypeIPv4        IPType = 1
	IPTypeIPv6        IPType = 2
	IPTypeIPv4v6      IPType = 3
	IPTypeIPv4AndIPv6 IPType = 4
)

func (t IPType) String() string {
	n := [...]string{"default", "ipv4", "ipv6", "ipv4v6", "ipv4-and-ipv6"}
	if int(t) < len(n) {
		return n[t]
	}
	return fmt.Sprintf("ip-type-%d", uint32(t))
}

// HasIPv4 and HasIPv6 report whether the type includes the family.
func (t IPType) HasIPv4() bool { return t != IPTypeIPv6 }
func (t IPType) HasIPv6() bool { return t >= IPTypeIPv6 }

// ConnectRequest is the CONNECT set buffer (60-byte fixed part, §2.8).
type ConnectRequest struct {
	SessionID   uint32
	Activate    bool // false: DEACTIVATE
	APN         string
	User        string
	Password    string
	Compression uint32
	Auth        AuthProtocol
	IPType      IPType
	ContextType UUID // zero is MBIMContextTypeNone on the wire; Client.Connect sends ContextTypeInternet for it
	// MediaPreference is MBIMEx 3.0's (EncodeV3 only): 0 unknown, 1
	// 3GPP, 2 3GPP preferred (libmbim MbimAccessMediaType).
	MediaPreference uint32
}

// Encode returns the information buffer; the strings follow the fixed
// part in the order APN, user, password, as mbimcli sends them (§2.9).
func (c *ConnectRequest) Encode() []byte {
	w := newWriter(60)
	w.u32(0, c.SessionID)
	w.u32(4, b32(c.Activate))
	w.str(8, c.APN)
	w.str(16, c.User)
	w.str(24, c.Password)
	w.u32(32, c.Compression)
	w.u32(36, uint32(c.Auth))
	w.u32(40, uint32(c.IPType))
	w.uuid(44, c.ContextType)
	return w.bytes()
}

// ParseConnectRequest decodes a CONNECT set buffer (device side).
func ParseConnectRequest(b []byte) (ConnectRequest, error) {
	r := newReader(b, "CONNECT set", 60)
	c := ConnectRequest{SessionID: r.u32(0), APN: r.str(8, 0, "AccessString"),
		User: r.str(16, 0, "UserName"), Password: r.str(24, 0, "Password"),
		Compression: r.u32(32), Auth: AuthProtocol(r.u32(36)), IPType: IPType(r.u32(40)),
		ContextType: r.uuid(44)}
	switch a := r.u32(4); {
	case r.err != nil:
	case a > 1:
		r.failf("activation command %d", a)
	default:
		c.Activate = a == 1
	}
	return c, r.err
}

// ActivationState is a context's state (§2.8).
type ActivationState uint32

// Activation states.
const (
	ActivationUnknown      ActivationState = 0
	ActivationActivated    ActivationState = 1
	ActivationActivating   ActivationState = 2
	ActivationDeactivated  ActivationState = 3
	ActivationDeactivating ActivationState = 4
)

func (s ActivationState) String() string {
	n := [...]string{"unknown", "activated", "activating", "deactivated", "deactivating"}
	if int(s) < len(n) {
		return n[s]
	}
	return fmt.Sprintf("activation-%d", uint32(s))
}

// ContextState is the CONNECT answer, query buffer and indication
// (MBIM_CONTEXT_STATE, 36 bytes).
type ContextState struct {
	SessionID       uint32
	ActivationState ActivationState
	VoiceCallState  uint32
	IPType          IPType
	ContextType     UUID
	NwError         NwError
	// MediaPreference and APN (the context's access string) are MBIMEx
	// 3.0's (EncodeV3 only).
	MediaPreference uint32
	APN             string
}

// Encode returns the information buffer.
func (c *ContextState) Encode() []byte {
	w := newWriter(36)
	w.u32(0, c.SessionID)
	w.u32(4, uint32(c.ActivationState))
	w.u32(8, c.VoiceCallState)
	w.u32(12, uint32(c.IPType))
	w.uuid(16, c.ContextType)
	w.u32(32, uint32(c.NwError))
	return w.bytes()
}

// ParseContextState decodes CONNECT.
func ParseContextState(b []byte) (ContextState, error) {
	r := newReader(b, "CONNECT", 36)
	c := ContextState{SessionID: r.u32(0), ActivationState: ActivationState(r.u32(4)),
		VoiceCallState: r.u32(8), IPType: IPType(r.u32(12)), ContextType: r.uuid(16), NwError: NwError(r.u32(32))}
	return c, r.err
}

// ParseSessionQuery returns the SessionId of a CONNECT or IP_CONFIGURATION
// query buffer. libmbim sends the whole 36- or 60-byte struct with only
// SessionId set; a bare 4-byte buffer is accepted too (§2.8).
func ParseSessionQuery(b []byte) (uint32, error) {
	r := newReader(b, "session query", 4)
	return r.u32(0), r.err
}

// EncodeConnectQuery returns a CONNECT query buffer for session: the full
// context-state struct, as libmbim and ModemManager send it, since some
// firmware rejects a shorter one.
func EncodeConnectQuery(session uint32) []byte {
	c := ContextState{SessionID: session}
	return c.Encode()
}

// IPConfig is the IP_CONFIGURATION answer and indication: what the
// network assigned to a session (§2.8, 60-byte fixed part). Addresses are
// prefixes (address + on-link prefix length).
type IPConfig struct {
	SessionID   uint32
	IPv4        []netip.Prefix
	IPv6        []netip.Prefix
	IPv4Gateway netip.Addr
	IPv6Gateway netip.Addr
	IPv4DNS     []netip.Addr
	IPv6DNS     []netip.Addr
	IPv4MTU     uint32
	IPv6MTU     uint32
}

// IP_CONFIGURATION availability flags.
const (
	ipAvailAddress = 1
	ipAvailGateway = 2
	ipAvailDNS     = 4
	ipAvailMTU     = 8
)

// maxIPElements bounds address and DNS counts.
const maxIPElements = 64

// IsZero reports a config with no address (the session is down).
func (c *IPConfig) IsZero() bool { return len(c.IPv4) == 0 && len(c.IPv6) == 0 }

// Equal compares two configs field by field.
func (c *IPConfig) Equal(o *IPConfig) bool {
	return c.SessionID == o.SessionID && slicesEqual(c.IPv4, o.IPv4) && slicesEqual(c.IPv6, o.IPv6) &&
		c.IPv4Gateway == o.IPv4Gateway && c.IPv6Gateway == o.IPv6Gateway &&
		slicesEqual(c.IPv4DNS, o.IPv4DNS) && slicesEqual(c.IPv6DNS, o.IPv6DNS) &&
		c.IPv4MTU == o.IPv4MTU && c.IPv6MTU == o.IPv6MTU
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (c IPConfig) String() string {
	var s []string
	for _, p := range c.IPv4 {
		s = append(s, p.String())
	}
	for _, p := range c.IPv6 {
		s = append(s, p.String())
	}
	if c.IPv4Gateway.IsValid() {
		s = append(s, "gw "+c.IPv4Gateway.String())
	}
	if c.IPv6Gateway.IsValid() {
		s = append(s, "gw "+c.IPv6Gateway.String())
	}
	for _, d := range append(append([]netip.Addr(nil), c.IPv4DNS...), c.IPv6DNS...) {
		s = append(s, "dns "+d.String())
	}
	if c.IPv4MTU != 0 {
		s = append(s, fmt.Sprintf("mtu %d", c.IPv4MTU))
	}
	if c.IPv6MTU != 0 && c.IPv6MTU != c.IPv4MTU {
		s = append(s, fmt.Sprintf("mtu6 %d", c.IPv6MTU))
	}
	return fmt.Sprintf("session %d: %s", c.SessionID, strings.Join(s, ", "))
}

// Encode returns the information buffer; availability flags follow from
// which fields are set. Addresses of the wrong family are skipped.
func (c *IPConfig) Encode() []byte {
	w := newWriter(60)
	w.u32(0, c.SessionID)
	var v4, v6 uint32
	var a4, a6 []byte
	for _, p := range c.IPv4 {
		if p.Addr().Is4() {
			a := p.Addr().As4()
			a4 = append(append(a4, le32(uint32(p.Bits()))...), a[:]...)
		}
	}
	for _, p := range c.IPv6 {
		// An IPv4-mapped address is an IPv6 address on the wire.
		if p.Addr().Is6() {
			a := p.Addr().As16()
			a6 = append(append(a6, le32(uint32(p.Bits()))...), a[:]...)
		}
	}
	if len(a4) > 0 {
		v4 |= ipAvailAddress
		w.u32(12, uint32(len(a4)/8))
		w.u32(16, w.data(a4))
	}
	if len(a6) > 0 {
		v6 |= ipAvailAddress
		w.u32(20, uint32(len(a6)/20))
		w.u32(24, w.data(a6))
	}
	if c.IPv4Gateway.Is4() {
		v4 |= ipAvailGateway
		a := c.IPv4Gateway.As4()
		w.u32(28, w.data(a[:]))
	}
	if c.IPv6Gateway.Is6() {
		v6 |= ipAvailGateway
		a := c.IPv6Gateway.As16()
		w.u32(32, w.data(a[:]))
	}
	var d4, d6 []byte
	for _, d := range c.IPv4DNS {
		if d.Is4() {
			a := d.As4()
			d4 = append(d4, a[:]...)
		}
	}
	for _, d := range c.IPv6DNS {
		if d.Is6() {
			a := d.As16()
			d6 = append(d6, a[:]...)
		}
	}
	if len(d4) > 0 {
		v4 |= ipAvailDNS
		w.u32(36, uint32(len(d4)/4))
		w.u32(40, w.data(d4))
	}
	if len(d6) > 0 {
		v6 |= ipAvailDNS
		w.u32(44, uint32(len(d6)/16))
		w.u32(48, w.data(d6))
	}
	if c.IPv4MTU != 0 {
		v4 |= ipAvailMTU
		w.u32(52, c.IPv4MTU)
	}
	if c.IPv6MTU != 0 {
		v6 |= ipAvailMTU
		w.u32(56, c.IPv6MTU)
	}
	w.u32(4, v4)
	w.u32(8, v6)
	return w.bytes()
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// EncodeIPConfigurationQuery returns the query buffer libmbim sends: the
// whole 60-byte struct, zero except SessionId (§2.9).
func EncodeIPConfigurationQuery(session uint32) []byte {
	w := newWriter(60)
	w.u32(0, session)
	return w.bytes()
}

// ParseIPConfig decodes IP_CONFIGURATION. A field is read only when its
// availability flag is set, as libmbim's users do; a flagged array must
// lie inside the buffer and its count be sane.
func ParseIPConfig(b []byte) (IPConfig, error) {
	r := newReader(b, "IP_CONFIGURATION", 60)
	c := IPConfig{SessionID: r.u32(0)}
	v4, v6 := r.u32(4), r.u32(8)
	array := func(countOff, offOff, elem int, what string) []byte {
		n, o := r.u32(countOff), r.u32(offOff)
		if r.err != nil || n == 0 {
			return nil
		}
		if n > maxIPElements || o == 0 {
			r.failf("%s: %d elements at offset %d", what, n, o)
			return nil
		}
		return r.bytesAt(0, uint64(o), uint64(n)*uint64(elem), what)
	}
	ref := func(offOff, n int, what string) []byte {
		o := r.u32(offOff)
		if r.err != nil || o == 0 {
			return nil
		}
		return r.bytesAt(0, uint64(o), uint64(n), what)
	}
	prefix := func(bits uint32, a netip.Addr, what string) netip.Prefix {
		if bits > uint32(a.BitLen()) {
			r.failf("%s: prefix length %d", what, bits)
			return netip.Prefix{}
		}
		return netip.PrefixFrom(a, int(bits))
	}
	le := func(p []byte) uint32 { return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24 }
	if v4&ipAvailAddress != 0 {
		p := array(12, 16, 8, "IPv4Address")
		for i := 0; i+8 <= len(p) && r.err == nil; i += 8 {
			c.IPv4 = append(c.IPv4, prefix(le(p[i:]), netip.AddrFrom4([4]byte(p[i+4:i+8])), "IPv4Address"))
		}
	}
	if v6&ipAvailAddress != 0 {
		p := array(20, 24, 20, "IPv6Address")
		for i := 0; i+20 <= len(p) && r.err == nil; i += 20 {
			c.IPv6 = append(c.IPv6, prefix(le(p[i:]), netip.AddrFrom16([16]byte(p[i+4:i+20])), "IPv6Address"))
		}
	}
	if v4&ipAvailGateway != 0 {
		if p := ref(28, 4, "IPv4Gateway"); p != nil {
			c.IPv4Gateway = netip.AddrFrom4([4]byte(p))
		}
	}
	if v6&ipAvailGateway != 0 {
		if p := ref(32, 16, "IPv6Gateway"); p != nil {
			c.IPv6Gateway = netip.AddrFrom16([16]byte(p))
		}
	}
	if v4&ipAvailDNS != 0 {
		p := array(36, 40, 4, "IPv4DnsServer")
		for i := 0; i+4 <= len(p); i += 4 {
			c.IPv4DNS = append(c.IPv4DNS, netip.AddrFrom4([4]byte(p[i:i+4])))
		}
	}
	if v6&ipAvailDNS != 0 {
		p := array(44, 48, 16, "IPv6DnsServer")
		for i := 0; i+16 <= len(p); i += 16 {
			c.IPv6DNS = append(c.IPv6DNS, netip.AddrFrom16([16]byte(p[i:i+16])))
		}
	}
	if v4&ipAvailMTU != 0 {
		c.IPv4MTU = r.u32(52)
	}
	if v6&ipAvailMTU != 0 {
		c.IPv6MTU = r.u32(56)
	}
	if r.err != nil {
		return IPConfig{}, r.err
	}
	return c, nil
}

// DeviceService is one element of DEVICE_SERVICES.
type DeviceService struct {
	ID              UUID
	DSSPayload      uint32
	MaxDSSInstances uint32
	CIDs            []uint32
}

// DeviceServices is the DEVICE_SERVICES answer (§2.8).
type DeviceServices struct {
	MaxDSSSessions uint32
	Services       []DeviceService
}

// Bounds on DEVICE_SERVICES and subscribe lists: real modems list a
// dozen services with up to ~60 CIDs each.
const (
	maxServices = 256
	maxCIDs     = 1024
)

// Encode returns the information buffer.
// Supports reports whether the function lists service svc with command
// cid.
func (d *DeviceServices) Supports(svc UUID, cid uint32) bool {
	for _, s := range d.Services {
		if s.ID == svc {
			return slices.Contains(s.CIDs, cid)
		}
	}
	return false
}

func (d *DeviceServices) Encode() []byte {
	w := newWriter(8 + 8*len(d.Services))
	w.u32(0, uint32(len(d.Services)))
	w.u32(4, d.MaxDSSSessions)
	for i, s := range d.Services {
		e := make([]byte, 0, 28+4*len(s.CIDs))
		e = append(e, s.ID[:]...)
		e = append(e, le32(s.DSSPayload)...)
		e = append(e, le32(s.MaxDSSInstances)...)
		e = append(e, le32(uint32(len(s.CIDs)))...)
		for _, c := range s.CIDs {
			e = append(e, le32(c)...)
		}
		w.ol(8+8*i, e)
	}
	return w.bytes()
}

// ParseDeviceServices decodes DEVICE_SERVICES (a ref-struct-array: count
// inline (offset, length) pairs).
func ParseDeviceServices(b []byte) (DeviceServices, error) {
	r := newReader(b, "DEVICE_SERVICES", 8)
	n := r.u32(0)
	d := DeviceServices{MaxDSSSessions: r.u32(4)}
	if r.err == nil && (n > maxServices || !r.span(8, 8*uint64(n), "services")) {
		r.failf("%d services", n)
	}
	for i := 0; r.err == nil && i < int(n); i++ {
		o, l := r.u32(8+8*i), r.u32(12+8*i)
		e := r.bytesAt(0, uint64(o), uint64(l), "service")
		if r.err != nil {
			break
		}
		er := newReader(e, "DEVICE_SERVICES element", 28)
		s := DeviceService{ID: er.uuid(0), DSSPayload: er.u32(16), MaxDSSInstances: er.u32(20)}
		s.CIDs = readCIDs(er, 24)
		if er.err != nil {
			r.err = er.err
			break
		}
		d.Services = append(d.Services, s)
	}
	if r.err != nil {
		return DeviceServices{}, r.err
	}
	return d, nil
}

// readCIDs reads a u32 count at off followed by that many u32 CIDs.
func readCIDs(r *reader, off int) []uint32 {
	n := r.u32(off)
	if r.err != nil {
		return nil
	}
	if n > maxCIDs || !r.span(uint64(off)+4, 4*uint64(n), "CIDs") {
		r.failf("%d CIDs", n)
		return nil
	}
	cids := make([]uint32, n)
	for i := range cids {
		cids[i] = r.u32(off + 4 + 4*i)
	}
	return cids
}

// EventSubscription is one service of DEVICE_SERVICE_SUBSCRIBE_LIST: the
// indications wanted (no CIDs: every CID of the service).
type EventSubscription struct {
	Service UUID
	CIDs    []uint32
}

// Wants reports whether the subscription covers (svc, cid).
func (e *EventSubscription) Wants(svc UUID, cid uint32) bool {
	if e.Service != svc {
		return false
	}
	if len(e.CIDs) == 0 {
		return true
	}
	for _, c := range e.CIDs {
		if c == cid {
			return true
		}
	}
	return false
}

// EncodeSubscribeList returns a DEVICE_SERVICE_SUBSCRIBE_LIST buffer
// (set and answer share the layout).
func EncodeSubscribeList(list []EventSubscription) []byte {
	w := newWriter(4 + 8*len(list))
	w.u32(0, uint32(len(list)))
	for i, s := range list {
		e := make([]byte, 0, 20+4*len(s.CIDs))
		e = append(e, s.Service[:]...)
		e = append(e, le32(uint32(len(s.CIDs)))...)
		for _, c := range s.CIDs {
			e = append(e, le32(c)...)
		}
		w.ol(4+8*i, e)
	}
	return w.bytes()
}

// ParseSubscribeList decodes a DEVICE_SERVICE_SUBSCRIBE_LIST buffer.
func ParseSubscribeList(b []byte) ([]EventSubscription, error) {
	r := newReader(b, "DEVICE_SERVICE_SUBSCRIBE_LIST", 4)
	n := r.u32(0)
	if r.err == nil && (n > maxServices || !r.span(4, 8*uint64(n), "elements")) {
		r.failf("%d elements", n)
	}
	var list []EventSubscription
	for i := 0; r.err == nil && i < int(n); i++ {
		o, l := r.u32(4+8*i), r.u32(8+8*i)
		e := r.bytesAt(0, uint64(o), uint64(l), "element")
		if r.err != nil {
			break
		}
		er := newReader(e, "subscribe list element", 20)
		s := EventSubscription{Service: er.uuid(0)}
		s.CIDs = readCIDs(er, 16)
		if er.err != nil {
			r.err = er.err
			break
		}
		list = append(list, s)
	}
	if r.err != nil {
		return nil, r.err
	}
	return list, nil
}

// ProxyConfiguration is libmbim's PROXY_CONTROL CONFIGURATION set buffer
// (§6.1): the device path the client wants and its timeout in seconds.
type ProxyConfiguration struct {
	DevicePath string
	Timeout    uint32
}

// Encode returns the information buffer.
func (p *ProxyConfiguration) Encode() []byte {
	w := newWriter(12)
	w.str(0, p.DevicePath)
	w.u32(8, p.Timeout)
	return w.bytes()
}

// ParseProxyConfiguration decodes a CONFIGURATION set buffer.
func ParseProxyConfiguration(b []byte) (ProxyConfiguration, error) {
	r := newReader(b, "PROXY_CONFIGURATION", 12)
	p := ProxyConfiguration{DevicePath: r.str(0, 0, "DevicePath"), Timeout: r.u32(8)}
	return p, r.err
}
