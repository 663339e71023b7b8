package qmi

// WDS, the wireless data service (data calls, their status and settings,
// mux binding): its message IDs and codecs.

import (
	"fmt"
	"net/netip"
)

// WDS message IDs (libqmi data/qmi-service-wds.json).
const (
	WDSStartNetwork           uint16 = 0x0020
	WDSStopNetwork            uint16 = 0x0021
	WDSGetPacketServiceStatus uint16 = 0x0022 // also the Packet Service Status indication
	WDSGetCurrentSettings     uint16 = 0x002D
	WDSSetIPFamily            uint16 = 0x004D
	WDSBindMuxDataPort        uint16 = 0x00A2
)

var wdsMessages = map[uint16]string{WDSStartNetwork: "Start Network", WDSStopNetwork: "Stop Network",
	WDSGetPacketServiceStatus: "Get Packet Service Status", WDSGetCurrentSettings: "Get Current Settings",
	WDSSetIPFamily: "Set IP Family", WDSBindMuxDataPort: "Bind Mux Data Port"}

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
	get := func(t uint8) string { v, _ := m.Get(t); return tlvString(v) }
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
		s.APN = tlvString(v)
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
