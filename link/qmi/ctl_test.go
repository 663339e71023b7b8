package qmi_test

import (
	"reflect"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestCTLCodec: every CTL codec decodes what it encodes; truncated and
// malformed TLVs are errors naming the field, never partial values.
func TestCTLCodec(t *testing.T) {
	vl := []qmi.ServiceVersion{{qmi.ServiceWDS, 1, 67}, {qmi.ServiceWDA, 1, 16}}
	if got, err := qmi.ParseVersionInfo(response(t, qmi.ServiceCTL, qmi.CTLGetVersionInfo, qmi.VersionInfoTLVs(vl))); err != nil || !reflect.DeepEqual(got, vl) {
		t.Errorf("version info %v, %v", got, err)
	}
	_, err := qmi.ParseClientID(withTLVs(qmi.ServiceCTL, qmi.CTLAllocateCID, qmi.TLV{Type: 1, Value: []byte{1}}))
	wantMalformed(t, "client ID short", err, "client ID needs 1")
	_, err = qmi.ParseClientID(withTLVs(qmi.ServiceCTL, qmi.CTLAllocateCID))
	wantMalformed(t, "client ID missing", err, "mandatory TLV 0x01")
	_, err = qmi.ParseVersionInfo(withTLVs(qmi.ServiceCTL, qmi.CTLGetVersionInfo, qmi.TLV{Type: 1, Value: []byte{200, 1, 1, 0, 0, 0}}))
	wantMalformed(t, "version list count beyond TLV", err, "service needs 1")
}

// FuzzCTL: Get Version Info, Allocate/Release CID.
func FuzzCTL(f *testing.F) {
	seedTLVs(f, reply(qmi.ServiceCTL, qmi.CTLGetVersionInfo, qmi.VersionInfoTLVs([]qmi.ServiceVersion{{qmi.ServiceWDS, 1, 2}})),
		reply(qmi.ServiceCTL, qmi.CTLAllocateCID, []qmi.TLV{qmi.ClientID{Service: 1, Client: 2}.TLV()}))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceCTL, qmi.CTLGetVersionInfo, data)
		if l, err := qmi.ParseVersionInfo(m); err == nil {
			back, err := qmi.ParseVersionInfo(reply(qmi.ServiceCTL, qmi.CTLGetVersionInfo, qmi.VersionInfoTLVs(l)))
			if err != nil || !reflect.DeepEqual(back, l) {
				t.Fatalf("version list %v re-decodes to %v, %v", l, back, err)
			}
		}
		if c, err := qmi.ParseClientID(m); err == nil {
			if back, err := qmi.ParseClientID(reply(qmi.ServiceCTL, qmi.CTLAllocateCID, []qmi.TLV{c.TLV()})); err != nil || back != c {
				t.Fatalf("client ID %v re-decodes to %v, %v", c, back, err)
			}
		}
		_, _ = qmi.ParseAllocateCIDRequest(m)
	})
}
