package qmi_test

import (
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
)

// TestNASStatusCallsReadTheEmulatedCell: the typed NAS calls read back
// what the emulated carrier was configured with — a UCS2 operator name,
// EN-DC on LTE B3 + B7 (carrier aggregation) and NR n78, and the signal
// of both RATs in Get Signal Info's units.
func TestNASStatusCallsReadTheEmulatedCell(t *testing.T) {
	net := simnet.NewNetwork(simnet.NetworkConfig{ProviderName: "中国移动", Cell: simnet.Cell{
		LTE: &simnet.Measurement{RSRP: -101, RSRQ: -12, SINR: 7.5},
		NR:  &simnet.Measurement{RSRP: -88, RSRQ: -11, SINR: 18.2},
		Components: []simnet.Component{
			{Band: 3, Channel: 1300, PCI: 101, BandwidthMHz: 20},
			{Band: 7, Channel: 3050, PCI: 102, BandwidthMHz: 10},
			{NR: true, Band: 78, Channel: 636666, PCI: 500, BandwidthMHz: 100},
		},
	}})
	c, _ := rig(t, simnet.QMIConfig{Network: net})
	ctx := testCtx(t)
	cid, err := c.AllocateCID(ctx, qmi.ServiceNAS)
	if err != nil {
		t.Fatal(err)
	}
	nas := qmi.NAS{ServiceClient: c.Service(qmi.ServiceNAS, cid)}

	on, err := nas.OperatorName(ctx)
	if err != nil || len(on.PLMNNames) != 1 || on.PLMNNames[0].Coding != qmi.NameUCS2LE {
		t.Fatalf("OperatorName: %+v, %v", on, err)
	}
	if s, err := on.PLMNNames[0].Decode(); s != "中国移动" || err != nil {
		t.Errorf("operator name %q, %v", s, err)
	}
	si, err := nas.SignalInfo(ctx)
	if err != nil || si.LTE == nil || si.NR == nil {
		t.Fatalf("SignalInfo: %+v, %v", si, err)
	}
	if *si.LTE != (qmi.LTESignal{RSSI: -73, RSRQ: -12, RSRP: -101, SNR: 75}) {
		t.Errorf("LTE signal %+v", *si.LTE)
	}
	if *si.NR != (qmi.NRSignal{RSRP: -88, SNR: 182, RSRQ: -11, HasRSRQ: true}) {
		t.Errorf("NR signal %+v", *si.NR)
	}
	bands, err := nas.RFBands(ctx)
	if err != nil || len(bands) != 3 || bands[0].Band.String() != "B3" || bands[2].Band.String() != "n78" || bands[2].Radio != qmi.Radio5GNR {
		t.Errorf("RFBands: %+v, %v", bands, err)
	}
	ca, err := nas.CAInfo(ctx)
	if err != nil || ca.PCell == nil || ca.PCell.Band.String() != "B3" || ca.PCell.BandwidthMHz() != 20 ||
		len(ca.SCells) != 1 || ca.SCells[0].Band.String() != "B7" || ca.SCells[0].State != qmi.SCellActivated {
		t.Errorf("CAInfo: %+v, %v", ca, err)
	}
	ss, err := nas.ServingSystem(ctx)
	if err != nil || len(ss.RadioInterfaces) != 2 || ss.RadioInterfaces[0] != qmi.RadioLTE || ss.RadioInterfaces[1] != qmi.Radio5GNR {
		t.Errorf("ServingSystem: %+v, %v", ss, err)
	}
	if sig, err := nas.SignalStrength(ctx); err != nil || sig.Strength != -73 || sig.Radio != qmi.RadioLTE {
		t.Errorf("SignalStrength: %+v, %v", sig, err)
	}
	// A typed NAS call on a client of another service is refused
	// before anything is sent.
	if _, err := (qmi.NAS{ServiceClient: c.Service(qmi.ServiceWDS, 1)}).SignalInfo(ctx); err == nil {
		t.Error("SignalInfo on a WDS client succeeded")
	}
}
