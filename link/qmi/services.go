package qmi

import "fmt"

// Service is the QMUX service a message belongs to.
type Service uint8

// QMI services (libqmi data/qmi-service-*.json, QmiService).
const (
	ServiceCTL Service = 0x00
	ServiceWDS Service = 0x01
	ServiceDMS Service = 0x02
	ServiceNAS Service = 0x03
	ServiceQOS Service = 0x04
	ServiceUIM Service = 0x0B
	ServiceWDA Service = 0x1A
)

// services names each service and its messages (String, MessageName).
// Each service's file (ctl.go, dms.go, nas.go, uim.go, wds.go, wda.go)
// holds its message IDs with their names, and their codecs: a new
// message is added there, a new service here.
var services = map[Service]struct {
	name     string
	messages map[uint16]string
}{
	ServiceCTL: {"CTL", ctlMessages},
	ServiceWDS: {"WDS", wdsMessages},
	ServiceDMS: {"DMS", dmsMessages},
	ServiceNAS: {"NAS", nasMessages},
	ServiceQOS: {"QOS", nil},
	ServiceUIM: {"UIM", uimMessages},
	ServiceWDA: {"WDA", wdaMessages},
}

func (s Service) String() string {
	if i, ok := services[s]; ok {
		return i.name
	}
	return fmt.Sprintf("service-%#02x", uint8(s))
}

// MessageName names a message for errors and logs ("WDS Start Network").
func MessageName(s Service, id uint16) string {
	if n, ok := services[s].messages[id]; ok {
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

// u8TLV and u32TLV read a whole-TLV integer.
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
