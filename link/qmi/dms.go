package qmi

// DMS, the device management service (identity and operating mode): its
// message IDs and codecs.

import (
	"fmt"
)

// DMS message IDs (libqmi data/qmi-service-dms.json).
const (
	DMSGetModel         uint16 = 0x0022
	DMSGetRevision      uint16 = 0x0023
	DMSGetIDs           uint16 = 0x0025
	DMSGetOperatingMode uint16 = 0x002D
	DMSSetOperatingMode uint16 = 0x002E
)

var dmsMessages = map[uint16]string{DMSGetModel: "Get Model", DMSGetRevision: "Get Revision", DMSGetIDs: "Get IDs",
	DMSGetOperatingMode: "Get Operating Mode", DMSSetOperatingMode: "Set Operating Mode"}

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
	get := func(t uint8) string { v, _ := m.Get(t); return tlvString(v) }
	return IDs{ESN: get(0x10), IMEI: get(0x11), MEID: get(0x12), IMEISV: get(0x13)}
}

// ParseString decodes a response whose TLV 0x01 is a string (DMS Get
// Revision, Get Model).
func ParseString(m *Message) (string, error) {
	v, ok := m.Get(0x01)
	if !ok {
		return "", missing(m, 0x01, "string")
	}
	return tlvString(v), nil
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
