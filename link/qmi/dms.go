package qmi

// DMS, the device management service (identity and operating mode): its
// message IDs and codecs.

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
)

// DMS message IDs (libqmi data/qmi-service-dms.json).
const (
	DMSGetModel         uint16 = 0x0022
	DMSGetRevision      uint16 = 0x0023
	DMSGetIDs           uint16 = 0x0025
	DMSGetOperatingMode uint16 = 0x002D
	DMSSetOperatingMode uint16 = 0x002E
	// Foxconn vendor messages (libqmi data/qmi-service-dms.json,
	// "Foxconn Get Firmware Version", "Foxconn Set FCC Authentication"
	// and its "v2", which shares the ID).
	DMSFoxconnGetFirmwareVersion uint16 = 0x555E
	DMSFoxconnSetFCCAuth         uint16 = 0x5571
)

var dmsMessages = map[uint16]string{DMSGetModel: "Get Model", DMSGetRevision: "Get Revision", DMSGetIDs: "Get IDs",
	DMSGetOperatingMode: "Get Operating Mode", DMSSetOperatingMode: "Set Operating Mode",
	DMSFoxconnGetFirmwareVersion: "Foxconn Get Firmware Version", DMSFoxconnSetFCCAuth: "Foxconn Set FCC Authentication"}

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

// FoxconnVersionType selects the version Foxconn Get Firmware Version
// returns (TLV 0x01 of the request, QmiDmsFoxconnFirmwareVersionType).
type FoxconnVersionType uint8

// Foxconn firmware version types.
const (
	FoxconnFirmwareMCFG     FoxconnVersionType = 0
	FoxconnFirmwareMCFGApps FoxconnVersionType = 1
	FoxconnApps             FoxconnVersionType = 2
)

// FoxconnGetFirmwareVersionRequest asks for the version of type t.
func FoxconnGetFirmwareVersionRequest(t FoxconnVersionType) *Message {
	return NewRequest(ServiceDMS, DMSFoxconnGetFirmwareVersion).AddU8(0x01, uint8(t))
}

// ParseFoxconnVersionType decodes the request's TLV 0x01.
func ParseFoxconnVersionType(m *Message) (FoxconnVersionType, error) {
	v, _, err := u8TLV(m, 0x01, "version type", true)
	return FoxconnVersionType(v), err
}

// FoxconnFCCAuth is Foxconn Set FCC Authentication's request: v1 carries
// one byte (TLV 0x01, ModemManager sends 0); v2 a string filling TLV
// 0x01 (no length prefix) and a byte in TLV 0x02 (ModemManager sends
// 48).
type FoxconnFCCAuth struct {
	V2    bool
	Value uint8  // v1
	Magic string // v2
	Num   uint8  // v2
}

// Request encodes the request.
func (a *FoxconnFCCAuth) Request() *Message {
	m := NewRequest(ServiceDMS, DMSFoxconnSetFCCAuth)
	if !a.V2 {
		return m.AddU8(0x01, a.Value)
	}
	return m.AddString(0x01, a.Magic).AddU8(0x02, a.Num)
}

// ParseFoxconnFCCAuth decodes the request: TLV 0x02 present means v2.
func ParseFoxconnFCCAuth(m *Message) (FoxconnFCCAuth, error) {
	var a FoxconnFCCAuth
	v1, ok := m.Get(0x01)
	if !ok {
		return a, missing(m, 0x01, "FCC authentication value")
	}
	num, v2, err := u8TLV(m, 0x02, "magic number", false)
	if err != nil {
		return a, err
	}
	if v2 {
		return FoxconnFCCAuth{V2: true, Magic: string(v1), Num: num}, nil
	}
	b, _, err := u8TLV(m, 0x01, "FCC authentication value", true)
	return FoxconnFCCAuth{Value: b}, err
}

// FoxconnFCCMagicNumber is the number ModemManager's script sends with
// the v2 string.
const FoxconnFCCMagicNumber = 48

// FoxconnFCCMagic returns the v2 string from the device's facts, as
// ModemManager's data/dispatcher-fcc-unlock/105b builds it: "salt" and
// the lower-case hex MD5 of the firmware MCFG version without its last
// two dot-separated fields, the apps version, the IMEI, "salt" and
// "foxc".
func FoxconnFCCMagic(mcfgVersion, appsVersion, imei string) string {
	const salt, magic = "salt", "foxc"
	v := mcfgVersion
	if i := strings.LastIndexByte(v, '.'); i >= 0 {
		if j := strings.LastIndexByte(v[:i], '.'); j >= 0 {
			v = v[:j] // a version with fewer than two dots is kept whole
		}
	}
	sum := md5.Sum([]byte(v + appsVersion + imei + salt + magic))
	return salt + hex.EncodeToString(sum[:])
}
