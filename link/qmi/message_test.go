package qmi_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func marshal(t testing.TB, m *qmi.Message) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVectors: byte-exact frames derived from the QMUX/QMI layout (I/F
// type, u16 length without the I/F byte, flags, service, client; CTL
// SDU with an 8-bit transaction, service SDUs with 16 bits; TLVs), and
// the WDS Start Network qmicli 1.32.2 sent through a fake qmi-proxy.
// Each must encode to the bytes and decode back to the message.
func TestVectors(t *testing.T) {
	settings := qmi.Settings{
		IPv4:        netip.MustParsePrefix("10.1.2.3/30"),
		IPv4Gateway: netip.MustParseAddr("10.1.2.4"),
		MTU:         1500,
	}
	tests := []struct {
		name string
		msg  *qmi.Message
		wire string
	}{
		{"CTL Allocate CID request (WDS), tid 1",
			func() *qmi.Message { m := qmi.AllocateCIDRequest(qmi.ServiceWDS); m.TID = 1; return m }(),
			"01 0f00 00 00 00 | 00 01 2200 0400 | 01 0100 01"},
		{"CTL Allocate CID response: WDS client 0x14",
			(&qmi.Message{Service: qmi.ServiceCTL, Kind: qmi.Request, TID: 1, ID: qmi.CTLAllocateCID}).
				Reply(0, qmi.ClientID{Service: qmi.ServiceWDS, Client: 0x14}.TLV()),
			"01 1700 80 00 00 | 01 01 2200 0c00 | 02 0400 0000 0000 | 01 0200 01 14"},
		{"CTL Sync indication",
			&qmi.Message{Service: qmi.ServiceCTL, FromModem: true, Kind: qmi.Indication, ID: qmi.CTLSync},
			"01 0b00 80 00 00 | 02 00 2700 0000"},
		{"WDS Start Network, qmicli capture (family first, then APN)",
			&qmi.Message{Service: qmi.ServiceWDS, Client: 0x14, TID: 1, ID: qmi.WDSStartNetwork,
				TLVs: []qmi.TLV{{Type: 0x19, Value: []byte{4}}, {Type: 0x14, Value: []byte("internet")}}},
			"01 1b00 00 01 14 | 00 0100 2000 0f00 | 19 0100 04 | 14 0800 696e7465726e6574"},
		{"WDS Start Network failure: call failed, 3GPP cause 27",
			(&qmi.Message{Service: qmi.ServiceWDS, Client: 0x14, TID: 0x0102, ID: qmi.WDSStartNetwork}).
				Reply(qmi.ErrCallFailed, qmi.CallEnd{HasVerbose: true, VerboseType: qmi.Verbose3GPP, Verbose: 27}.TLVs()...),
			"01 1a00 80 01 14 | 02 0201 2000 0e00 | 02 0400 0100 0e00 | 11 0400 0600 1b00"},
		{"WDS Get Current Settings response: IPv4 little-endian, /30 mask, MTU",
			(&qmi.Message{Service: qmi.ServiceWDS, Client: 0x14, TID: 2, ID: qmi.WDSGetCurrentSettings}).
				Reply(0, settings.TLVs()...),
			"01 2f00 80 01 14 | 02 0200 2d00 2300 | 02 0400 0000 0000 | 1e 0400 0302010a | 20 0400 0402010a | 21 0400 fcffffff | 29 0400 dc050000"},
		{"WDA Set Data Format request: raw IP, QMAPv5 both ways, 32 datagrams / 32 KiB, PCIe endpoint 4",
			func() *qmi.Message {
				d := qmi.DataFormat{LinkLayer: qmi.LinkLayerRawIP, ULAggregation: qmi.AggregationQMAPv5,
					DLAggregation: qmi.AggregationQMAPv5, DLMaxDatagrams: 32, DLMaxSize: 32768, Endpoint: qmi.PCIeEndpoint}
				m := d.SetRequest()
				m.Client, m.TID = 2, 3
				return m
			}(),
			"01 3a00 00 1a 02 | 00 0300 2000 2e00 | 11 0400 02000000 | 12 0400 09000000 | 13 0400 09000000 | 15 0400 20000000 | 16 0400 00800000 | 17 0800 03000000 04000000"},
		{"WDS Bind Mux Data Port: PCIe endpoint 4, mux 1, tethered",
			func() *qmi.Message {
				m := (&qmi.BindMuxDataPort{Endpoint: qmi.PCIeEndpoint, MuxID: 1, ClientType: qmi.ClientTypeTethered}).Request()
				m.Client, m.TID = 0x15, 4
				return m
			}(),
			"01 2200 00 01 15 | 00 0400 a200 1600 | 10 0800 03000000 04000000 | 11 0100 01 | 13 0400 01000000"},
		{"UIM Verify PIN: primary GW session, PIN1 1234",
			func() *qmi.Message {
				m := (&qmi.VerifyPIN{SessionType: qmi.SessionPrimaryGW, ID: qmi.PIN1, PIN: "1234"}).Request()
				m.Client, m.TID = 1, 5
				return m
			}(),
			"01 1a00 00 0b 01 | 00 0500 2600 0e00 | 01 0200 00 00 | 02 0600 01 04 31323334"},
		{"NAS Serving System indication: registered, PS attached, 3GPP, LTE, PLMN 001/01",
			&qmi.Message{Service: qmi.ServiceNAS, Client: qmi.BroadcastClient, FromModem: true, Kind: qmi.Indication, ID: qmi.NASGetServingSystem,
				TLVs: (&qmi.ServingSystem{Registration: qmi.Registered, CSAttach: qmi.Attached, PSAttach: qmi.Attached,
					Network: qmi.NetworkType3GPP, RadioInterfaces: []qmi.RadioInterface{qmi.RadioLTE},
					PLMN: &qmi.PLMN{MCC: 1, MNC: 1, Description: "sim"}}).TLVs()},
			"01 2000 80 03 ff | 04 0000 2400 1400 | 01 0600 01 01 01 02 01 08 | 12 0800 0100 0100 03 73696d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.wire)
			got := marshal(t, tc.msg)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded\n%x\nwant\n%x", got, want)
			}
			back, err := qmi.Parse(want)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normal(back), normal(tc.msg)) {
				t.Fatalf("decoded %+v, want %+v", back, tc.msg)
			}
		})
	}
}

// normal clears aliasing differences (nil vs empty TLV lists/values).
func normal(m *qmi.Message) *qmi.Message {
	c := *m
	c.TLVs = nil
	for _, t := range m.TLVs {
		c.TLVs = append(c.TLVs, qmi.TLV{Type: t.Type, Value: append([]byte{}, t.Value...)})
	}
	return &c
}

// TestParseRejects: every malformed frame is refused with the reason,
// and the header is reported when it could be read.
func TestParseRejects(t *testing.T) {
	tests := []struct {
		name, wire, reason string
		header             bool
	}{
		{"wrong I/F type", "02 0b00 00 00 00 00 00 2700 0000", "I/F type", false},
		{"QMUX length beyond the frame", "01 0c00 00 00 00 00 00 2700 0000", "QMUX length 12", false},
		{"QMUX length below the smallest message", "01 0400 00 00 00", "below the smallest", false},
		{"unknown QMUX flag", "01 0b00 40 00 00 00 00 2700 0000", "QMUX flags", false},
		{"CTL TLV length too long", "01 0b00 00 00 00 00 07 2700 0100", "TLV length 1", true},
		{"TLV overruns", "01 0f00 00 00 00 00 01 2200 0400 01 0200 01", "TLV 0x01 of 2 bytes", true},
		{"TLV header cut", "01 0d00 00 00 00 00 01 2200 0200 01 02", "TLV 0x01: 2 trailing bytes, shorter than a TLV header", true},
		{"service SDU too short", "01 0b00 00 01 14 00 0100 2000 00", "shorter than its header", false},
		{"service flags unknown", "01 0c00 00 01 14 08 0100 2000 0000", "SDU flags", true},
		{"compound", "01 0c00 00 01 14 01 0100 2000 0000", "compound", true},
		{"CTL flags unknown", "01 0b00 00 00 00 04 09 2200 0000", "CTL flags", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := qmi.Parse(unhex(t, tc.wire))
			var fe *qmi.FormatError
			if !errors.As(err, &fe) || !errors.Is(err, qmi.ErrMalformed) {
				t.Fatalf("Parse = %v, want a FormatError", err)
			}
			if !strings.Contains(fe.Reason, tc.reason) || fe.Header != tc.header {
				t.Fatalf("error %q (header %v), want reason containing %q (header %v)", err, fe.Header, tc.reason, tc.header)
			}
		})
	}
}

// TestEncodeRejects: what QMUX cannot carry is refused, not truncated.
func TestEncodeRejects(t *testing.T) {
	if _, err := (&qmi.Message{Service: qmi.ServiceCTL, TID: 256}).Marshal(); err == nil {
		t.Fatal("CTL TID 256 encoded")
	}
	big := &qmi.Message{Service: qmi.ServiceWDS, TLVs: []qmi.TLV{{Type: 1, Value: make([]byte, 0xFFFF)}}}
	if _, err := big.Marshal(); err == nil {
		t.Fatal("a frame over 65536 bytes encoded")
	}
}

// TestDecoderStream: frames split and joined across writes, with garbage
// between them, come out whole and in order.
func TestDecoderStream(t *testing.T) {
	a := marshal(t, qmi.AllocateCIDRequest(qmi.ServiceWDA))
	b := marshal(t, qmi.StopNetworkRequest(7))
	stream := append(append(append([]byte{0x55, 0x66}, a...), 0x02), b...)
	for step := 1; step <= len(stream); step++ {
		var d qmi.Decoder
		var got []*qmi.Message
		errs := 0
		for i := 0; i < len(stream); i += step {
			d.Write(stream[i:min(i+step, len(stream))])
			for {
				m, err := d.Next()
				if err != nil {
					errs++
					continue
				}
				if m == nil {
					break
				}
				got = append(got, m)
			}
		}
		if len(got) != 2 || got[0].ID != qmi.CTLAllocateCID || got[1].ID != qmi.WDSStopNetwork || errs == 0 {
			t.Fatalf("step %d: got %v (%d errors)", step, got, errs)
		}
	}
}

// TestResult: the result TLV maps to nil, an *Error wrapping the code,
// or a FormatError when missing.
func TestResult(t *testing.T) {
	req := &qmi.Message{Service: qmi.ServiceWDS, ID: qmi.WDSStartNetwork}
	if err := req.Reply(0).Result(); err != nil {
		t.Fatal(err)
	}
	err := req.Reply(qmi.ErrCallFailed).Result()
	var qe *qmi.Error
	if !errors.As(err, &qe) || !errors.Is(err, qmi.ErrCallFailed) || qmi.ErrorCodeOf(err) != qmi.ErrCallFailed {
		t.Fatalf("failure result = %v", err)
	}
	if s := err.Error(); s != "qmi: WDS Start Network: call failed (QMI error 14)" {
		t.Fatalf("error text %q", s)
	}
	if err := req.Result(); !errors.Is(err, qmi.ErrMalformed) {
		t.Fatalf("missing result TLV = %v", err)
	}
	bad := &qmi.Message{TLVs: []qmi.TLV{{Type: qmi.TLVResult, Value: []byte{1, 0}}}}
	if err := bad.Result(); !errors.Is(err, qmi.ErrMalformed) {
		t.Fatalf("short result TLV = %v", err)
	}
	// Status FAILURE with code 0 is still a failure.
	zero := &qmi.Message{TLVs: []qmi.TLV{{Type: qmi.TLVResult, Value: []byte{1, 0, 0, 0}}}}
	if err := zero.Result(); !errors.Is(err, qmi.ErrUnknownError) {
		t.Fatalf("failure without code = %v", err)
	}
	for _, c := range []qmi.ErrorCode{qmi.ErrMalformedMessage, qmi.ErrClientIDsExhausted, qmi.ErrInvalidClientID,
		qmi.ErrCallFailed, qmi.ErrOutOfCall, qmi.ErrMissingArgument, qmi.ErrNoEffect, qmi.ErrInvalidArgument,
		qmi.ErrDeviceNotReady, qmi.ErrInvalidQMICommand, qmi.ErrNotSupported, qmi.ErrIncorrectPIN} {
		if strings.HasPrefix(c.String(), "QMI error") {
			t.Errorf("code %d has no name", c)
		}
	}
}

// response returns a response of service s to message id carrying tlvs,
// as the client gets it: marshalled and parsed.
func response(t testing.TB, s qmi.Service, id uint16, tlvs []qmi.TLV) *qmi.Message {
	t.Helper()
	back, err := qmi.Parse(marshal(t, (&qmi.Message{Service: s, ID: id}).Reply(0, tlvs...)))
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// withTLVs returns a response of service s to message id with tlvs, not
// marshalled (for decoders fed malformed TLVs).
func withTLVs(s qmi.Service, id uint16, tlvs ...qmi.TLV) *qmi.Message {
	return &qmi.Message{Service: s, ID: id, Kind: qmi.Response, TLVs: tlvs}
}

// wantMalformed checks that a decoder refused malformed input with an
// error that matches qmi.ErrMalformed and names the field (want).
func wantMalformed(t *testing.T, name string, err error, want string) {
	t.Helper()
	if err == nil || !errors.Is(err, qmi.ErrMalformed) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %v, want one containing %q", name, err, want)
	}
}
