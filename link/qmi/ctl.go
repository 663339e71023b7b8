package qmi

// CTL, the control service (the service list, client IDs and Sync): its
// message IDs and codecs.

// CTL message IDs (libqmi data/qmi-service-ctl.json).
const (
	CTLGetVersionInfo uint16 = 0x0021
	CTLAllocateCID    uint16 = 0x0022
	CTLReleaseCID     uint16 = 0x0023
	CTLSync           uint16 = 0x0027 // also an indication
)

var ctlMessages = map[uint16]string{CTLGetVersionInfo: "Get Version Info", CTLAllocateCID: "Allocate CID", CTLReleaseCID: "Release CID", CTLSync: "Sync"}

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
