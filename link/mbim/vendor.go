package mbim

// Vendor services: the QMI tunnel (QMI messages carried in MBIM, which
// Foxconn's FCC unlock uses) and Quectel's RADIO_STATE (Quectel's FCC
// unlock). Codecs here, calls in vendor_calls.go.

import (
	"encoding/binary"
	"fmt"
)

// CIDQMIMsg is the QMI service's one command: a Set whose buffer is a
// whole QMUX frame and whose answer is the reply frame (libmbim
// data/mbim-service-qmi.json "MSG").
const CIDQMIMsg uint32 = 1

// CIDQuectelRadioState is the Quectel service's RADIO_STATE (libmbim
// data/mbim-service-quectel.json "Radio State"; ModemManager's
// data/dispatcher-fcc-unlock/2c7c sets it on).
const CIDQuectelRadioState uint32 = 1

// QuectelRadioState is the Quectel RADIO_STATE value (a u32,
// MbimQuectelRadioSwitchState).
type QuectelRadioState uint32

// Quectel radio states.
const (
	QuectelRadioOff       QuectelRadioState = 0
	QuectelRadioOn        QuectelRadioState = 1
	QuectelRadioFCCLocked QuectelRadioState = 4
)

func (s QuectelRadioState) String() string {
	switch s {
	case QuectelRadioOff:
		return "off"
	case QuectelRadioOn:
		return "on"
	case QuectelRadioFCCLocked:
		return "fcc-locked"
	}
	return fmt.Sprintf("radio-state-%d", uint32(s))
}

// EncodeQuectelRadioState encodes the set and the answer.
func EncodeQuectelRadioState(s QuectelRadioState) []byte {
	return binary.LittleEndian.AppendUint32(nil, uint32(s))
}

// ParseQuectelRadioState decodes the set or the answer.
func ParseQuectelRadioState(b []byte) (QuectelRadioState, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("mbim: Quectel RADIO_STATE of %d bytes, want 4: %w", len(b), ErrMalformed)
	}
	return QuectelRadioState(binary.LittleEndian.Uint32(b)), nil
}
