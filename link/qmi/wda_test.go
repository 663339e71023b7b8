package qmi_test

import (
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestWDACodec: every WDA codec decodes what it encodes; truncated and
// malformed TLVs are errors naming the field, never partial values.
func TestWDACodec(t *testing.T) {
	df := qmi.DataFormat{LinkLayer: qmi.LinkLayerRawIP, ULAggregation: qmi.AggregationQMAPv5, DLAggregation: qmi.AggregationQMAPv5,
		DLMaxDatagrams: 32, DLMaxSize: 32768, ULMaxDatagrams: 11, ULMaxSize: 8192}
	if got, err := qmi.ParseDataFormat(response(t, qmi.ServiceWDA, qmi.WDASetDataFormat, df.ResponseTLVs())); err != nil || got != df {
		t.Errorf("data format %+v, %v", got, err)
	}
	req := df
	req.Endpoint = qmi.PCIeEndpoint
	if got, err := qmi.ParseSetDataFormat(req.SetRequest()); err != nil || got != req {
		t.Errorf("set data format request %+v, %v", got, err)
	}
	_, err := qmi.ParseSetDataFormat(withTLVs(qmi.ServiceWDA, qmi.WDASetDataFormat))
	wantMalformed(t, "set data format without link layer", err, "link layer protocol")
}

// FuzzWDA: Set Data Format request and the data format answer.
func FuzzWDA(f *testing.F) {
	d := qmi.DataFormat{LinkLayer: 2, ULAggregation: 9, DLAggregation: 9, DLMaxDatagrams: 32, DLMaxSize: 32768, Endpoint: qmi.PCIeEndpoint}
	seedTLVs(f, d.SetRequest(), reply(qmi.ServiceWDA, qmi.WDASetDataFormat, d.ResponseTLVs()))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceWDA, qmi.WDASetDataFormat, data)
		if r, err := qmi.ParseSetDataFormat(m); err == nil {
			if back, err := qmi.ParseSetDataFormat(r.SetRequest()); err != nil || back != r {
				t.Fatalf("set data format %+v re-decodes to %+v, %v", r, back, err)
			}
		}
		if r, err := qmi.ParseDataFormat(m); err == nil {
			if back, err := qmi.ParseDataFormat(reply(qmi.ServiceWDA, 0, r.ResponseTLVs())); err != nil || back != r {
				t.Fatalf("data format %+v re-decodes to %+v, %v", r, back, err)
			}
		}
	})
}
