package qmi_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestWDSCodec: every WDS codec decodes what it encodes; truncated and
// malformed TLVs are errors naming the field, never partial values.
func TestWDSCodec(t *testing.T) {
	st := qmi.Settings{APN: "internet", IPv4: netip.MustParsePrefix("10.0.0.2/30"), IPv4Gateway: netip.MustParseAddr("10.0.0.1"),
		IPv4DNS: []netip.Addr{netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("10.0.0.54")},
		IPv6:    netip.MustParsePrefix("2001:db8:64::2/64"), IPv6Gateway: netip.MustParseAddr("2001:db8:64::1"),
		IPv6DNS: []netip.Addr{netip.MustParseAddr("2001:db8:64::53")}, MTU: 1420, Family: qmi.IPv4}
	if got, err := qmi.ParseSettings(response(t, qmi.ServiceWDS, qmi.WDSGetCurrentSettings, st.TLVs())); err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("settings %+v, %v", got, err)
	}
	sn := qmi.StartNetwork{APN: "internet", User: "u", Password: "p", Auth: qmi.AuthPAP | qmi.AuthCHAP, Family: qmi.IPv6, Profile: 1}
	if got, err := qmi.ParseStartNetwork(sn.Request()); err != nil || got != sn {
		t.Errorf("start network %+v, %v", got, err)
	}
	ps := qmi.PacketStatus{Status: qmi.StatusDisconnected, End: qmi.CallEnd{HasReason: true, Reason: 2, HasVerbose: true, VerboseType: qmi.Verbose3GPP, Verbose: 36}, Family: qmi.IPv4}
	if got, err := qmi.ParsePacketStatus(ps.Indication(0x14)); err != nil || got != ps {
		t.Errorf("packet status %+v, %v", got, err)
	}
	b := qmi.BindMuxDataPort{Endpoint: qmi.PCIeEndpoint, MuxID: 0x81, ClientType: 1}
	if got, err := qmi.ParseBindMuxDataPort(b.Request()); err != nil || got != b {
		t.Errorf("bind mux %+v, %v", got, err)
	}
	_, err := qmi.ParseSettings(withTLVs(qmi.ServiceWDS, qmi.WDSGetCurrentSettings, qmi.TLV{Type: 0x21, Value: []byte{0, 0xff, 0, 0xff}}))
	wantMalformed(t, "settings mask not a prefix", err, "not a prefix")
	_, err = qmi.ParseSettings(withTLVs(qmi.ServiceWDS, qmi.WDSGetCurrentSettings, qmi.TLV{Type: 0x25, Value: append(make([]byte, 16), 129)}))
	wantMalformed(t, "settings IPv6 prefix > 128", err, "prefix length 129")
	_, err = qmi.ParseSettings(withTLVs(qmi.ServiceWDS, qmi.WDSGetCurrentSettings, qmi.TLV{Type: 0x29, Value: []byte{1, 2}}))
	wantMalformed(t, "settings MTU short", err, "MTU needs 4")
	_, err = qmi.ParseBindMuxDataPort(withTLVs(qmi.ServiceWDS, qmi.WDSBindMuxDataPort, qmi.TLV{Type: 0x10, Value: make([]byte, 8)}))
	wantMalformed(t, "bind mux without mux ID", err, "mux ID")
	_, err = qmi.ParseStartNetwork(withTLVs(qmi.ServiceWDS, qmi.WDSStartNetwork, qmi.TLV{Type: 0x19, Value: []byte{4, 6}}))
	wantMalformed(t, "start network family too long", err, "trailing")
}

// FuzzWDS: Start Network request and response, packet status, current
// settings, bind mux data port, IP family.
func FuzzWDS(f *testing.F) {
	seedTLVs(f, (&qmi.StartNetwork{APN: "internet", Family: qmi.IPv4}).Request(),
		reply(qmi.ServiceWDS, qmi.WDSStartNetwork, qmi.CallEnd{HasReason: true, Reason: 1}.TLVs()),
		(&qmi.PacketStatus{Status: qmi.StatusConnected}).Indication(1),
		(&qmi.BindMuxDataPort{Endpoint: qmi.PCIeEndpoint, MuxID: 1}).Request())
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceWDS, qmi.WDSStartNetwork, data)
		if s, err := qmi.ParseStartNetwork(m); err == nil && s.APN == string([]byte(s.APN)) {
			_, _ = qmi.ParseStartNetwork(s.Request())
		}
		_, _ = qmi.ParseCallEnd(m)
		_, _ = qmi.ParseHandle(m)
		_, _ = qmi.ParseConnectionStatus(m)
		if p, err := qmi.ParsePacketStatus(m); err == nil {
			if back, err := qmi.ParsePacketStatus(p.Indication(1)); err != nil || back != p {
				t.Fatalf("packet status %+v re-decodes to %+v, %v", p, back, err)
			}
		}
		if b, err := qmi.ParseBindMuxDataPort(m); err == nil {
			if back, err := qmi.ParseBindMuxDataPort(b.Request()); err != nil || back != b {
				t.Fatalf("bind mux %+v re-decodes to %+v, %v", b, back, err)
			}
		}
		_, _ = qmi.ParseIPFamily(m)
	})
}

// FuzzSettings: Get Current Settings (IPv4 little-endian u32s, masks,
// IPv6 with prefix, MTU). A decoded value re-encodes to the same value.
func FuzzSettings(f *testing.F) {
	seedTLVs(f, reply(qmi.ServiceWDS, qmi.WDSGetCurrentSettings, []qmi.TLV{
		{Type: 0x1E, Value: []byte{3, 2, 1, 10}}, {Type: 0x21, Value: []byte{0xfc, 0xff, 0xff, 0xff}},
		{Type: 0x25, Value: append(make([]byte, 16), 64)}, {Type: 0x29, Value: []byte{0xdc, 5, 0, 0}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceWDS, qmi.WDSGetCurrentSettings, data)
		s, err := qmi.ParseSettings(m)
		if err != nil {
			return
		}
		back, err := qmi.ParseSettings(reply(qmi.ServiceWDS, qmi.WDSGetCurrentSettings, s.TLVs()))
		if err != nil {
			t.Fatalf("settings %+v do not re-decode: %v", s, err)
		}
		// A gateway without an IPv6 prefix is re-encoded with /64, and
		// the DNS lists keep what they had; compare what survives.
		if back.IPv4 != s.IPv4 && s.IPv4.Addr().Is4() || back.MTU != s.MTU || back.IPv6 != s.IPv6 || back.Family != s.Family {
			t.Fatalf("settings %+v re-decode to %+v", s, back)
		}
	})
}
