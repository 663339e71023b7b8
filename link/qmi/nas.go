package qmi

// NAS, the network access service (registration, serving system and
// signal): its message IDs and codecs.

import (
	"fmt"
)

// NAS message IDs (libqmi data/qmi-service-nas.json).
const (
	NASGetSignalStrength uint16 = 0x0020
	NASGetServingSystem  uint16 = 0x0024 // also the Serving System indication
	NASGetSignalInfo     uint16 = 0x004F
)

var nasMessages = map[uint16]string{NASGetSignalStrength: "Get Signal Strength", NASGetServingSystem: "Get Serving System", NASGetSignalInfo: "Get Signal Info"}

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

// NRSignal is TLV 0x17 of Get Signal Info: RSRP (dBm), SNR (0.1 dB);
// RSRQ (dB) is TLV 0x18 when HasRSRQ.
type NRSignal struct {
	RSRP, SNR int16
	RSRQ      int16
	HasRSRQ   bool
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
		if n.HasRSRQ {
			t = append(t, TLV{Type: 0x18, Value: le.AppendUint16(nil, uint16(n.RSRQ))})
		}
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
		if r, ok := tlvReader(m, 0x18); ok {
			n.RSRQ, n.HasRSRQ = int16(r.u16("NR RSRQ")), true
			if err := r.done(true); err != nil {
				return s, err
			}
		}
		s.NR = n
	}
	return s, nil
}
