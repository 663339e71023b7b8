package mbim_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link/mbim"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The bytes mbimcli 1.28.2 sent (docs/FRAMING.md §2.9).
func TestEncodingMatchesMbimcliOnTheWire(t *testing.T) {
	open := &mbim.Message{Type: mbim.TypeOpen, TID: 2, MaxControlTransfer: 4096}
	if got, want := open.Encode(), unhex(t, "01000000 10000000 02000000 00100000"); !bytes.Equal(got, want) {
		t.Errorf("OPEN\n got %x\nwant %x", got, want)
	}
	req := mbim.ConnectRequest{Activate: true, APN: "internet", IPType: mbim.IPTypeIPv4v6, ContextType: mbim.ContextTypeInternet}
	connect := &mbim.Message{Type: mbim.TypeCommand, TID: 3, Service: mbim.ServiceBasicConnect,
		CID: mbim.CIDConnect, CommandType: mbim.Set, Buffer: req.Encode()}
	want := unhex(t, `03000000 7c000000 03000000 01000000 00000000
		a289cc33 bcbb8b4f b6b0133e c2aae6df 0c000000 01000000 4c000000
		00000000 01000000 3c000000 10000000 00000000 00000000 00000000 00000000
		00000000 00000000 03000000 7e5e2a7e 4e6f7272 736b656e 7e5e2a7e
		69006e00 74006500 72006e00 65007400`)
	if got := connect.Encode(); !bytes.Equal(got, want) {
		t.Errorf("CONNECT set\n got %x\nwant %x", got, want)
	}
	m, err := mbim.Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	back, err := mbim.ParseConnectRequest(m.Buffer)
	if err != nil || back.APN != "internet" || !back.Activate || back.IPType != mbim.IPTypeIPv4v6 || back.ContextType != mbim.ContextTypeInternet {
		t.Errorf("decoded CONNECT %+v, %v", back, err)
	}
	if q := mbim.EncodeIPConfigurationQuery(0); len(q) != 60 {
		t.Errorf("IP_CONFIGURATION query of %d bytes, want 60", len(q))
	}
}

func TestFragmentsSplitAtMaxAndReassembleInOrder(t *testing.T) {
	buf := make([]byte, 1000)
	for i := range buf {
		buf[i] = byte(i)
	}
	m := &mbim.Message{Type: mbim.TypeIndicateStatus, Service: mbim.ServiceBasicConnect, CID: 9, Buffer: buf}
	var frags [][]byte
	if err := m.Fragments(128, func(f []byte) error {
		if len(f) > 128 {
			t.Errorf("fragment of %d bytes", len(f))
		}
		frags = append(frags, append([]byte(nil), f...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// (1000 - 84) / 108 rounded up, plus the first.
	if len(frags) != 1+9 {
		t.Errorf("%d fragments, want 10", len(frags))
	}
	var d mbim.Decoder
	var stream []byte
	for _, f := range frags {
		stream = append(stream, f...)
	}
	// Feed the stream in odd-sized pieces: boundaries need not match.
	var got *mbim.Message
	for i := 0; i < len(stream); i += 7 {
		d.Write(stream[i:min(i+7, len(stream))])
		for {
			msg, err := d.Next()
			if err != nil {
				t.Fatal(err)
			}
			if msg == nil {
				break
			}
			got = msg
		}
	}
	if got == nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("reassembled %v, want %v", got, m)
	}
	// Out of order: fragment 2 before 1.
	d = mbim.Decoder{}
	d.Write(frags[0])
	d.Write(frags[2])
	if _, err := d.Next(); !errors.Is(err, mbim.ProtoFragmentOutOfSequence) {
		t.Errorf("out-of-order fragment: %v", err)
	}
}

func TestDecoderRejectsBadLengthsWithoutPanicking(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"length below header", unhex(t, "01000000 08000000 01000000")},
		{"OPEN too short", unhex(t, "01000000 0c000000 01000000")},
		{"unknown type", unhex(t, "05000000 10000000 01000000 00000000")},
		{"info length beyond message", unhex(t, `03000080 30000000 01000000 01000000 00000000
			a289cc33 bcbb8b4f b6b0133e c2aae6df 01000000 00000000 ffffffff`)},
		{"current >= total", unhex(t, "07000080 14000000 00000000 02000000 02000000")},
		{"continuation without start", unhex(t, "07000080 18000000 00000000 02000000 01000000 00000000")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d mbim.Decoder
			d.Write(tc.b)
			m, err := d.Next()
			if m != nil || !errors.Is(err, mbim.ErrMalformed) {
				t.Errorf("Next = %v, %v; want ErrMalformed", m, err)
			}
		})
	}
}

func TestInformationBuffersRoundTrip(t *testing.T) {
	caps := mbim.DeviceCaps{DeviceType: 1, DataClass: mbim.DataClassLTE, MaxSessions: 8, DeviceID: "3569", FirmwareInfo: "fw ü"}
	if got, err := mbim.ParseDeviceCaps(caps.Encode()); err != nil || !reflect.DeepEqual(got, caps) {
		t.Errorf("DeviceCaps %+v, %v", got, err)
	}
	rs := mbim.SubscriberReadyStatus{ReadyState: mbim.ReadyInitialized, SubscriberID: "001", SIMICCID: "89", TelephoneNumbers: []string{"+1", "+2"}}
	if got, err := mbim.ParseSubscriberReadyStatus(rs.Encode()); err != nil || !reflect.DeepEqual(got, rs) {
		t.Errorf("SubscriberReadyStatus %+v, %v", got, err)
	}
	ps := mbim.PacketService{State: mbim.PacketServiceAttached, UplinkSpeed: 1 << 40, DownlinkSpeed: 3}
	if got, err := mbim.ParsePacketService(ps.Encode()); err != nil || got != ps {
		t.Errorf("PacketService %+v, %v", got, err)
	}
	ip := mbim.IPConfig{SessionID: 1,
		IPv4:        []netip.Prefix{netip.MustParsePrefix("10.1.2.3/30")},
		IPv6:        []netip.Prefix{netip.MustParsePrefix("2001:db8::5/64")},
		IPv4Gateway: netip.MustParseAddr("10.1.2.1"), IPv6Gateway: netip.MustParseAddr("fe80::1"),
		IPv4DNS: []netip.Addr{netip.MustParseAddr("8.8.8.8")}, IPv6DNS: []netip.Addr{netip.MustParseAddr("2001:4860::8888")},
		IPv4MTU: 1420, IPv6MTU: 1280}
	if got, err := mbim.ParseIPConfig(ip.Encode()); err != nil || !got.Equal(&ip) {
		t.Errorf("IPConfig %v, %v", got, err)
	}
	ds := mbim.DeviceServices{MaxDSSSessions: 1, Services: []mbim.DeviceService{{ID: mbim.ServiceBasicConnect, CIDs: []uint32{1, 2}}, {ID: mbim.ServiceQMI, CIDs: []uint32{}}}}
	if got, err := mbim.ParseDeviceServices(ds.Encode()); err != nil || !reflect.DeepEqual(got, ds) {
		t.Errorf("DeviceServices %+v, %v", got, err)
	}
	pr := mbim.PINRequest{Type: mbim.PINTypePIN1, PIN: "1234"}
	if got, err := mbim.ParsePINRequest(pr.Encode()); err != nil || got != pr {
		t.Errorf("PINRequest %+v, %v", got, err)
	}
}

func TestIPConfigRejectsArraysOutsideTheBuffer(t *testing.T) {
	ip := mbim.IPConfig{IPv4: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/30")}}
	b := ip.Encode()
	b[12] = 200 // IPv4AddressCount far beyond the buffer
	if _, err := mbim.ParseIPConfig(b); !errors.Is(err, mbim.ErrMalformed) {
		t.Errorf("count 200: %v, want ErrMalformed", err)
	}
	b = ip.Encode()
	b[16], b[17], b[18], b[19] = 0xfc, 0xff, 0xff, 0xff // offset near 4 GiB
	if _, err := mbim.ParseIPConfig(b); !errors.Is(err, mbim.ErrMalformed) {
		t.Errorf("huge offset: %v, want ErrMalformed", err)
	}
}

func TestStatusErrorsNameTheCondition(t *testing.T) {
	err := &mbim.CommandError{Service: mbim.ServiceBasicConnect, CID: mbim.CIDConnect, Set: true, Status: mbim.StatusFailure, NwError: 27}
	if !errors.Is(err, mbim.ErrBadAPN) || !errors.Is(err, mbim.StatusFailure) || errors.Is(err, mbim.ErrNoService) {
		t.Errorf("errors.Is on %v", err)
	}
	if !strings.Contains(err.Error(), "bad APN") || !strings.Contains(err.Error(), "CONNECT") {
		t.Errorf("error text %q", err)
	}
	if mbim.StatusSIMNotInserted.Error() != "SIM not inserted" || mbim.StatusPINRequired.Error() != "PIN required" {
		t.Error("status texts")
	}
}
