package mbim

import (
	"encoding/hex"
	"fmt"
)

// UUID is a service or context-type identifier. MBIM sends the 16 bytes
// in textual order, big-endian, without the GUID byte swapping of USB
// descriptors (docs/FRAMING.md §2.5, libmbim mbim-uuid.c).
type UUID [16]byte

// Well-known UUIDs (docs/FRAMING.md §2.5).
var (
	// ServiceBasicConnect is the MBIM 1.0 BASIC_CONNECT service.
	ServiceBasicConnect = MustParseUUID("a289cc33-bcbb-8b4f-b6b0-133ec2aae6df")
	// ServiceProxyControl is libmbim's private service spoken between
	// mbim-proxy and its clients; it never reaches a modem.
	ServiceProxyControl = MustParseUUID("838cf7fb-8d0d-4d7f-871e-d71dbefbb39b")
	// ServiceMSBasicConnectExtensions is Microsoft's extension service
	// (MBIMEx): VERSION and BASE_STATIONS_INFO (ms_extensions.go).
	ServiceMSBasicConnectExtensions = MustParseUUID("3d01dcc5-fef5-4d05-0d3a-bef7058e9aaf")
	// ServiceQMI is the Qualcomm QMI-over-MBIM ("QMUX") service.
	ServiceQMI = MustParseUUID("d1a30bc2-f97a-6e43-bf65-c7e24fb0f0d3")
	// ServiceQuectel is Quectel's vendor service (libmbim mbim-uuid.c
	// uuid_quectel), whose RADIO_STATE lifts the FCC lock.
	ServiceQuectel = MustParseUUID("11223344-5566-7788-99aa-bbccddeeff11")
	// ContextTypeInternet is the Internet context type of CONNECT.
	ContextTypeInternet = MustParseUUID("7e5e2a7e-4e6f-7272-736b-656e7e5e2a7e")
)

// ParseUUID parses the 8-4-4-4-12 hex form.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("mbim: bad UUID %q", s)
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("mbim: bad UUID %q: %w", s, err)
	}
	return u, nil
}

// MustParseUUID is ParseUUID for constants; it panics on a bad literal.
func MustParseUUID(s string) UUID {
	u, err := ParseUUID(s)
	if err != nil {
		panic(err)
	}
	return u
}

// String returns the 8-4-4-4-12 form, or the service's name when known.
func (u UUID) String() string {
	switch u {
	case ServiceBasicConnect:
		return "basic-connect"
	case ServiceProxyControl:
		return "proxy-control"
	case ServiceMSBasicConnectExtensions:
		return "ms-basic-connect-extensions"
	case ServiceQMI:
		return "qmi"
	case ServiceQuectel:
		return "quectel"
	case ContextTypeInternet:
		return "internet"
	}
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
