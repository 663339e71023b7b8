package qmi_test

import (
	"reflect"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestNASCodec: every NAS codec decodes what it encodes; truncated and
// malformed TLVs are errors naming the field, never partial values.
func TestNASCodec(t *testing.T) {
	ss := qmi.ServingSystem{Registration: qmi.Registered, PSAttach: qmi.Attached, Network: qmi.NetworkType3GPP,
		RadioInterfaces: []qmi.RadioInterface{qmi.Radio5GNR, qmi.RadioLTE}, HasRoaming: true, Roaming: 1,
		PLMN: &qmi.PLMN{MCC: 1, MNC: 1, Description: "mhistack"}}
	if got, err := qmi.ParseServingSystem(response(t, qmi.ServiceNAS, qmi.NASGetServingSystem, ss.TLVs())); err != nil || !reflect.DeepEqual(got, ss) {
		t.Errorf("serving system %+v, %v", got, err)
	}
	sig := qmi.SignalStrength{Strength: -71, Radio: qmi.RadioLTE, HasRSRP: true, LTERSRP: -95, HasSNR: true, LTESNR: 120}
	if got, err := qmi.ParseSignalStrength(response(t, qmi.ServiceNAS, qmi.NASGetSignalStrength, sig.TLVs())); err != nil || got != sig {
		t.Errorf("signal strength %+v, %v", got, err)
	}
	si := qmi.SignalInfo{LTE: &qmi.LTESignal{RSSI: -60, RSRQ: -9, RSRP: -90, SNR: 130}, NR: &qmi.NRSignal{RSRP: -88, SNR: 90}}
	if got, err := qmi.ParseSignalInfo(response(t, qmi.ServiceNAS, qmi.NASGetSignalInfo, si.TLVs())); err != nil || !reflect.DeepEqual(got, si) {
		t.Errorf("signal info %+v, %v", got, err)
	}
	_, err := qmi.ParseServingSystem(withTLVs(qmi.ServiceNAS, qmi.NASGetServingSystem, qmi.TLV{Type: 1, Value: []byte{1, 1, 1, 2, 0}},
		qmi.TLV{Type: 0x12, Value: []byte{1, 0, 1, 0, 5, 'a'}}))
	wantMalformed(t, "PLMN description beyond TLV", err, "description needs 5")
}

// FuzzNAS: serving system, signal strength, signal info.
func FuzzNAS(f *testing.F) {
	ss := qmi.ServingSystem{Registration: qmi.Registered, RadioInterfaces: []qmi.RadioInterface{qmi.RadioLTE}, PLMN: &qmi.PLMN{MCC: 1, Description: "x"}}
	sig := qmi.SignalStrength{Strength: -70, Radio: qmi.RadioLTE, HasRSRP: true}
	si := qmi.SignalInfo{LTE: &qmi.LTESignal{RSRP: -90}}
	seedTLVs(f, reply(qmi.ServiceNAS, qmi.NASGetServingSystem, ss.TLVs()), reply(qmi.ServiceNAS, 0, sig.TLVs()), reply(qmi.ServiceNAS, 0, si.TLVs()))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceNAS, qmi.NASGetServingSystem, data)
		if s, err := qmi.ParseServingSystem(m); err == nil {
			back, err := qmi.ParseServingSystem(reply(qmi.ServiceNAS, 0, s.TLVs()))
			if err != nil || !reflect.DeepEqual(back, s) {
				t.Fatalf("serving system %+v re-decodes to %+v, %v", s, back, err)
			}
		}
		if s, err := qmi.ParseSignalStrength(m); err == nil {
			if back, err := qmi.ParseSignalStrength(reply(qmi.ServiceNAS, 0, s.TLVs())); err != nil || back != s {
				t.Fatalf("signal strength %+v re-decodes to %+v, %v", s, back, err)
			}
		}
		if s, err := qmi.ParseSignalInfo(m); err == nil {
			back, err := qmi.ParseSignalInfo(reply(qmi.ServiceNAS, 0, s.TLVs()))
			if err != nil || !reflect.DeepEqual(back, s) {
				t.Fatalf("signal info %+v re-decodes to %+v, %v", s, back, err)
			}
		}
	})
}
