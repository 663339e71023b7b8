package qmi_test

import (
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestDMSCodec: every DMS codec decodes what it encodes.
func TestDMSCodec(t *testing.T) {
	ids := qmi.IDs{IMEI: "867929060000017", IMEISV: "01"}
	if got := qmi.ParseIDs(response(t, qmi.ServiceDMS, qmi.DMSGetIDs, ids.TLVs())); got != ids {
		t.Errorf("IDs %v", got)
	}
	if got, err := qmi.ParseOperatingMode(qmi.SetOperatingModeRequest(qmi.ModeLowPower)); err != nil || got != qmi.ModeLowPower {
		t.Errorf("operating mode %v, %v", got, err)
	}
}

// FuzzDMS: Get IDs, strings, operating mode.
func FuzzDMS(f *testing.F) {
	seedTLVs(f, reply(qmi.ServiceDMS, qmi.DMSGetIDs, qmi.IDs{IMEI: "1", ESN: "2"}.TLVs()))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceDMS, qmi.DMSGetIDs, data)
		_ = qmi.ParseIDs(m)
		_, _ = qmi.ParseString(m)
		_, _ = qmi.ParseOperatingMode(m)
	})
}
