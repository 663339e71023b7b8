package qmi

// NAS's radio details for status: operator names (Get Operator Name),
// active bands (Get RF Band Information) and LTE carrier aggregation (Get
// LTE Cphy CA Info). Layouts: libqmi data/qmi-service-nas.json.

import (
	"fmt"
	"strconv"
)

// More NAS message IDs (libqmi data/qmi-service-nas.json).
const (
	NASGetRFBandInfo    uint16 = 0x0031
	NASGetOperatorName  uint16 = 0x0039
	NASGetLTECphyCAInfo uint16 = 0x00AC
)

func init() {
	nasMessages[NASGetRFBandInfo] = "Get RF Band Information"
	nasMessages[NASGetOperatorName] = "Get Operator Name"
	nasMessages[NASGetLTECphyCAInfo] = "Get LTE Cphy CA Info"
}

// Band is NAS's active band (QmiNasActiveBand): its numbering is not the
// 3GPP one, Band.String gives that ("B3", "n78").
type Band uint16

// bandNames maps runs of consecutive QmiNasActiveBand values to the 3GPP
// band numbers they stand for (libqmi src/libqmi-glib/qmi-enums-nas.h).
var bandNames = func() map[Band]string {
	m := map[Band]string{}
	lte := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 33, 34, 35, 36, 37, 38, 39, 40, 18, 19, 20, 21, 24, 25,
		41, 42, 43, 23, 26, 32, 125, 126, 127, 28, 29, 30, 66, 250, 46, 27, 31, 47, 48, 71}
	for i, b := range lte {
		m[120+Band(i)] = "B" + strconv.Itoa(b)
	}
	nr := []int{1, 2, 3, 5, 7, 8, 20, 28, 38, 41, 50, 51, 66, 70, 71, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85,
		257, 258, 259, 260, 261, 12, 25, 34, 39, 40, 65, 86, 48, 14, 13, 18, 26, 30, 29, 53, 46, 91, 92, 93, 94}
	for i, b := range nr {
		m[250+Band(i)] = "n" + strconv.Itoa(b)
	}
	return m
}()

// LTEBand and NRBand return NAS's code of 3GPP band n (ok false for a
// band the table lacks).
func LTEBand(n int) (Band, bool) { return bandOf("B" + strconv.Itoa(n)) }

// NRBand: see LTEBand.
func NRBand(n int) (Band, bool) { return bandOf("n" + strconv.Itoa(n)) }

func bandOf(name string) (Band, bool) {
	for b, s := range bandNames {
		if s == name {
			return b, true
		}
	}
	return 0, false
}

func (b Band) String() string {
	if s, ok := bandNames[b]; ok {
		return s
	}
	return fmt.Sprintf("band-%d", uint16(b))
}

// PLMN name codings of Get Operator Name (QmiNasPlmnEncodingScheme).
const (
	NameGSM7   uint8 = 0 // GSM 7-bit default alphabet, packed
	NameUCS2LE uint8 = 1 // UCS2, little-endian
)

// PLMNName is one entry of Get Operator Name's TLV 0x12 (the network's
// Network Name IEs, TS 24.008 §10.5.3.5a), still coded.
type PLMNName struct {
	Coding                uint8
	CountryInitials       uint8
	LongSpare, ShortSpare uint8 // spare bits in the last octet, 0 unknown
	Long, Short           []byte
}

// Decode returns the long name (the short one if the long is empty)
// decoded per its coding.
func (p *PLMNName) Decode() (string, error) {
	b, spare := p.Long, p.LongSpare
	if len(b) == 0 {
		b, spare = p.Short, p.ShortSpare
	}
	return DecodeName(p.Coding, b, int(spare))
}

// DecodeName decodes a name of coding NameGSM7 or NameUCS2LE.
func DecodeName(coding uint8, b []byte, spare int) (string, error) {
	switch coding {
	case NameGSM7:
		s, err := UnpackGSM7(b, spare)
		if err != nil {
			return "", err
		}
		return DecodeGSM7(s)
	case NameUCS2LE:
		return DecodeUCS2(b, true)
	}
	return "", fmt.Errorf("%w: coding %d", ErrNameCoding, coding)
}

// EncodePLMNName codes name as a network would: GSM 7-bit packed when
// the default alphabet has every character, else UCS2.
func EncodePLMNName(name string) PLMNName {
	if b, spare, ok := PackGSM7(name); ok {
		return PLMNName{Coding: NameGSM7, Long: b, Short: b, LongSpare: uint8(spare), ShortSpare: uint8(spare)}
	}
	b := EncodeUCS2LE(name)
	return PLMNName{Coding: NameUCS2LE, Long: b, Short: b}
}

// OperatorName is Get Operator Name's answer: TLV 0x12, the PLMN names.
// (The SPN 0x10, PLMN list 0x11, operator string 0x13 and NITZ 0x14 are
// not decoded.)
type OperatorName struct {
	PLMNNames []PLMNName
}

// TLVs encodes the response TLVs.
func (o *OperatorName) TLVs() []TLV {
	n := o.PLMNNames[:min(len(o.PLMNNames), 255)]
	v := []byte{byte(len(n))}
	for _, p := range n {
		v = append(v, p.Coding, p.CountryInitials, p.LongSpare, p.ShortSpare)
		l, s := p.Long[:min(len(p.Long), 255)], p.Short[:min(len(p.Short), 255)]
		v = append(append(v, byte(len(l))), l...)
		v = append(append(v, byte(len(s))), s...)
	}
	return []TLV{{Type: 0x12, Value: v}}
}

// ParseOperatorName decodes Get Operator Name.
func ParseOperatorName(m *Message) (OperatorName, error) {
	var o OperatorName
	r, ok := tlvReader(m, 0x12)
	if !ok {
		return o, nil
	}
	n := int(r.u8("PLMN name count"))
	for range n {
		p := PLMNName{Coding: r.u8("name encoding"), CountryInitials: r.u8("country initials"),
			LongSpare: r.u8("long name spare bits"), ShortSpare: r.u8("short name spare bits")}
		p.Long = r.bytes8("long name")
		p.Short = r.bytes8("short name")
		if r.err != nil {
			break
		}
		o.PLMNNames = append(o.PLMNNames, p)
	}
	return o, r.done(true)
}

// RFBand is one entry of Get RF Band Information's TLV 0x01.
type RFBand struct {
	Radio   RadioInterface
	Band    Band
	Channel uint16
}

// RFBands is Get RF Band Information's answer.
type RFBands []RFBand

// TLVs encodes the response TLVs.
func (b RFBands) TLVs() []TLV {
	b = b[:min(len(b), 255)]
	v := []byte{byte(len(b))}
	for _, e := range b {
		v = append(v, byte(e.Radio))
		v = le.AppendUint16(v, uint16(e.Band))
		v = le.AppendUint16(v, e.Channel)
	}
	return []TLV{{Type: 0x01, Value: v}}
}

// ParseRFBands decodes Get RF Band Information.
func ParseRFBands(m *Message) (RFBands, error) {
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return nil, missing(m, 0x01, "RF band list")
	}
	n := int(r.u8("band count"))
	var out RFBands
	for range n {
		e := RFBand{Radio: RadioInterface(r.u8("radio interface")), Band: Band(r.u16("band")), Channel: r.u16("channel")}
		if r.err != nil {
			break
		}
		out = append(out, e)
	}
	return out, r.done(true)
}

// SCellState is a secondary cell's state (QmiNasScellState).
type SCellState uint32

// Secondary cell states.
const (
	SCellDeconfigured SCellState = 0
	SCellDeactivated  SCellState = 1
	SCellActivated    SCellState = 2
)

func (s SCellState) String() string {
	switch s {
	case SCellDeconfigured:
		return "deconfigured"
	case SCellDeactivated:
		return "deactivated"
	case SCellActivated:
		return "active"
	}
	return fmt.Sprintf("scell-state-%d", uint32(s))
}

// Cell is a component carrier of Get LTE Cphy CA Info: physical cell ID,
// EARFCN, DL bandwidth (QmiNasDLBandwidth) and band; State and Index only
// for a secondary cell.
type Cell struct {
	PCI, EARFCN uint16
	Bandwidth   uint32
	Band        Band
	State       SCellState
	Index       uint8
}

// BandwidthMHz returns the DL bandwidth in MHz (0 when the code is
// unknown).
func (c *Cell) BandwidthMHz() float64 {
	mhz := [...]float64{1.4, 3, 5, 10, 15, 20, 5, 10, 15, 20, 25, 30, 40, 50, 60, 80, 90, 100, 200, 400, 0.2, 1.6, 5, 10, 70}
	if c.Bandwidth < uint32(len(mhz)) {
		return mhz[c.Bandwidth]
	}
	return 0
}

// CAInfo is Get LTE Cphy CA Info's answer: TLV 0x13 (primary cell) and
// 0x15 (secondary cells, each with its index).
type CAInfo struct {
	PCell  *Cell
	SCells []Cell
}

// TLVs encodes the response TLVs.
func (c *CAInfo) TLVs() []TLV {
	var t []TLV
	if p := c.PCell; p != nil {
		v := le.AppendUint16(nil, p.PCI)
		v = le.AppendUint16(v, p.EARFCN)
		v = le.AppendUint32(v, p.Bandwidth)
		t = append(t, TLV{Type: 0x13, Value: le.AppendUint16(v, uint16(p.Band))})
	}
	if len(c.SCells) > 0 {
		s := c.SCells[:min(len(c.SCells), 255)]
		v := []byte{byte(len(s))}
		for _, e := range s {
			v = le.AppendUint16(v, e.PCI)
			v = le.AppendUint16(v, e.EARFCN)
			v = le.AppendUint32(v, e.Bandwidth)
			v = le.AppendUint16(v, uint16(e.Band))
			v = le.AppendUint32(v, uint32(e.State))
			v = append(v, e.Index)
		}
		t = append(t, TLV{Type: 0x15, Value: v})
	}
	return t
}

// ParseCAInfo decodes Get LTE Cphy CA Info.
func ParseCAInfo(m *Message) (CAInfo, error) {
	var c CAInfo
	if r, ok := tlvReader(m, 0x13); ok {
		p := &Cell{PCI: r.u16("PCI"), EARFCN: r.u16("EARFCN"), Bandwidth: r.u32("bandwidth"), Band: Band(r.u16("band"))}
		if err := r.done(true); err != nil {
			return c, err
		}
		c.PCell = p
	}
	if r, ok := tlvReader(m, 0x15); ok {
		n := int(r.u8("secondary cell count"))
		for range n {
			e := Cell{PCI: r.u16("PCI"), EARFCN: r.u16("EARFCN"), Bandwidth: r.u32("bandwidth"), Band: Band(r.u16("band")),
				State: SCellState(r.u32("state")), Index: r.u8("cell index")}
			if r.err != nil {
				break
			}
			c.SCells = append(c.SCells, e)
		}
		if err := r.done(true); err != nil {
			return c, err
		}
	}
	return c, nil
}
