package qmi

// WDA, the wireless data administration service (the data format): its
// message IDs and codecs.

import (
	"fmt"
)

// WDA message IDs (libqmi data/qmi-service-wda.json).
const (
	WDASetDataFormat uint16 = 0x0020
	WDAGetDataFormat uint16 = 0x0021
)

var wdaMessages = map[uint16]string{WDASetDataFormat: "Set Data Format", WDAGetDataFormat: "Get Data Format"}

// Link layer protocols (QmiWdaLinkLayerProtocol).
const (
	LinkLayer8023  = 1
	LinkLayerRawIP = 2
)

// Aggregation is a WDA data aggregation protocol
// (QmiWdaDataAggregationProtocol).
type Aggregation uint32

// Aggregation protocols: QMAP is MAPv1; QMAPv5 is MAPv5 (checksum
// offload header, drivers/net/ethernet/qualcomm/rmnet).
const (
	AggregationDisabled Aggregation = 0
	AggregationQMAP     Aggregation = 5
	AggregationQMAPv2   Aggregation = 6
	AggregationQMAPv3   Aggregation = 7
	AggregationQMAPv4   Aggregation = 8
	AggregationQMAPv5   Aggregation = 9
)

func (a Aggregation) String() string {
	switch a {
	case AggregationDisabled:
		return "disabled"
	case AggregationQMAP:
		return "qmap"
	case AggregationQMAPv5:
		return "qmapv5"
	}
	if a >= AggregationQMAPv2 && a <= AggregationQMAPv4 {
		return fmt.Sprintf("qmapv%d", a-AggregationQMAP+1)
	}
	return fmt.Sprintf("aggregation-%d", uint32(a))
}

// QMAPVersion is the MAP version of a, 1 or 5 (0: not QMAP, or a
// version link/qmap does not speak).
func (a Aggregation) QMAPVersion() int {
	switch a {
	case AggregationQMAP:
		return 1
	case AggregationQMAPv5:
		return 5
	}
	return 0
}

// DataFormat is WDA's data format: what Set Data Format asks for and
// what it and Get Data Format answer.
//
// TLV IDs differ by direction (libqmi data/qmi-service-wda.json for
// 0x10..0x17; the UL limits and padding as Qualcomm's interface defines
// them and Quectel's tools use them): in a request 0x17 is the endpoint
// and 0x1B/0x1C the UL limits; in a response 0x17/0x18 are the UL
// limits the modem accepts and 0x1A its DL minimum padding.
type DataFormat struct {
	LinkLayer                    uint32
	ULAggregation, DLAggregation Aggregation
	DLMaxDatagrams, DLMaxSize    uint32
	ULMaxDatagrams, ULMaxSize    uint32
	DLMinPadding                 uint32
	Endpoint                     Endpoint // request only
}

// SetRequest encodes Set Data Format.
func (d *DataFormat) SetRequest() *Message {
	m := NewRequest(ServiceWDA, WDASetDataFormat).AddU32(0x11, d.LinkLayer).
		AddU32(0x12, uint32(d.ULAggregation)).AddU32(0x13, uint32(d.DLAggregation))
	if d.DLMaxDatagrams != 0 {
		m.AddU32(0x15, d.DLMaxDatagrams)
	}
	if d.DLMaxSize != 0 {
		m.AddU32(0x16, d.DLMaxSize)
	}
	if d.Endpoint != (Endpoint{}) {
		m.Add(0x17, d.Endpoint.value())
	}
	if d.ULMaxDatagrams != 0 {
		m.AddU32(0x1B, d.ULMaxDatagrams)
	}
	if d.ULMaxSize != 0 {
		m.AddU32(0x1C, d.ULMaxSize)
	}
	return m
}

// GetRequest encodes Get Data Format for endpoint e (left out if zero).
func GetDataFormatRequest(e Endpoint) *Message {
	m := NewRequest(ServiceWDA, WDAGetDataFormat)
	if e != (Endpoint{}) {
		m.Add(0x10, e.value())
	}
	return m
}

// ParseSetDataFormat decodes a Set Data Format request. The link layer
// protocol is mandatory (a modem cannot guess it).
func ParseSetDataFormat(m *Message) (DataFormat, error) {
	var d DataFormat
	var err error
	if d.LinkLayer, _, err = u32TLV(m, 0x11, "link layer protocol", true); err != nil {
		return d, err
	}
	fields := []struct {
		t    uint8
		p    *uint32
		what string
	}{
		{0x12, (*uint32)(&d.ULAggregation), "UL aggregation protocol"},
		{0x13, (*uint32)(&d.DLAggregation), "DL aggregation protocol"},
		{0x15, &d.DLMaxDatagrams, "DL max datagrams"},
		{0x16, &d.DLMaxSize, "DL max size"},
		{0x1B, &d.ULMaxDatagrams, "UL max datagrams"},
		{0x1C, &d.ULMaxSize, "UL max size"},
	}
	for _, f := range fields {
		if *f.p, _, err = u32TLV(m, f.t, f.what, false); err != nil {
			return d, err
		}
	}
	d.Endpoint, _, err = parseEndpoint(m, 0x17)
	return d, err
}

// ResponseTLVs encodes the answer of Set or Get Data Format.
func (d *DataFormat) ResponseTLVs() []TLV {
	u32 := func(t uint8, v uint32) TLV { return TLV{Type: t, Value: le.AppendUint32(nil, v)} }
	t := []TLV{u32(0x11, d.LinkLayer), u32(0x12, uint32(d.ULAggregation)), u32(0x13, uint32(d.DLAggregation))}
	if d.DLMaxDatagrams != 0 {
		t = append(t, u32(0x15, d.DLMaxDatagrams))
	}
	if d.DLMaxSize != 0 {
		t = append(t, u32(0x16, d.DLMaxSize))
	}
	if d.ULMaxDatagrams != 0 {
		t = append(t, u32(0x17, d.ULMaxDatagrams))
	}
	if d.ULMaxSize != 0 {
		t = append(t, u32(0x18, d.ULMaxSize))
	}
	t = append(t, u32(0x1A, d.DLMinPadding))
	return t
}

// ParseDataFormat decodes the answer of Set or Get Data Format.
func ParseDataFormat(m *Message) (DataFormat, error) {
	var d DataFormat
	var err error
	fields := []struct {
		t    uint8
		p    *uint32
		what string
	}{
		{0x11, &d.LinkLayer, "link layer protocol"},
		{0x12, (*uint32)(&d.ULAggregation), "UL aggregation protocol"},
		{0x13, (*uint32)(&d.DLAggregation), "DL aggregation protocol"},
		{0x15, &d.DLMaxDatagrams, "DL max datagrams"},
		{0x16, &d.DLMaxSize, "DL max size"},
		{0x17, &d.ULMaxDatagrams, "UL max datagrams"},
		{0x18, &d.ULMaxSize, "UL max size"},
		{0x1A, &d.DLMinPadding, "DL min padding"},
	}
	for _, f := range fields {
		if *f.p, _, err = u32TLV(m, f.t, f.what, false); err != nil {
			return d, err
		}
	}
	return d, nil
}
