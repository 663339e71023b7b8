package mbim_test

import (
	"bytes"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
)

// Fuzz targets for every decoder of device or client input
// (docs/FRAMING.md §10). Each checks that the decoder never panics and,
// where an encoder exists, that what decodes re-encodes to the same value.

// seedMessages are well-formed messages of every type.
func seedMessages() []*mbim.Message {
	conn := mbim.ConnectRequest{Activate: true, APN: "internet", IPType: mbim.IPTypeIPv4v6, ContextType: mbim.ContextTypeInternet}
	ip := simnet.DefaultCarrier()
	ipc := mbim.IPConfig{IPv4: []netip.Prefix{ip.IPv4}, IPv4Gateway: ip.IPv4Gateway, IPv4DNS: ip.IPv4DNS, IPv4MTU: 1500}
	return []*mbim.Message{
		{Type: mbim.TypeOpen, TID: 1, MaxControlTransfer: 4096},
		{Type: mbim.TypeClose, TID: 2},
		{Type: mbim.TypeOpenDone, TID: 1},
		{Type: mbim.TypeCloseDone, TID: 2, Status: mbim.StatusFailure},
		{Type: mbim.TypeHostError, TID: 3, Error: mbim.ProtoLengthMismatch},
		{Type: mbim.TypeFunctionError, TID: 3, Error: mbim.ProtoNotOpened},
		{Type: mbim.TypeCommand, TID: 4, Service: mbim.ServiceBasicConnect, CID: mbim.CIDConnect, CommandType: mbim.Set, Buffer: conn.Encode()},
		{Type: mbim.TypeCommandDone, TID: 5, Service: mbim.ServiceBasicConnect, CID: mbim.CIDIPConfiguration, Buffer: ipc.Encode()},
		{Type: mbim.TypeIndicateStatus, Service: mbim.ServiceBasicConnect, CID: mbim.CIDSignalState, Buffer: make([]byte, 20)},
	}
}

// FuzzMBIMStream: a byte stream cut into reads of fuzzer-chosen sizes.
// Every message the decoder returns must re-encode (unfragmented) and
// decode to itself; the decoder's buffer stays bounded.
func FuzzMBIMStream(f *testing.F) {
	var all []byte
	for _, m := range seedMessages() {
		all = append(all, m.Encode()...)
	}
	f.Add(uint8(7), all)
	f.Add(uint8(0), []byte{1, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, step uint8, data []byte) {
		d := mbim.Decoder{MaxMessage: 4096}
		n := int(step%64) + 1
		for i := 0; i < len(data); i += n {
			d.Write(data[i:min(i+n, len(data))])
			for range len(data) + 1 {
				m, err := d.Next()
				if err == nil && m == nil {
					break
				}
				if m != nil {
					back, err := mbim.Decode(m.Encode())
					if err != nil || !reflect.DeepEqual(normal(back), normal(m)) {
						t.Fatalf("re-encoded %v decodes to %v, %v", m, back, err)
					}
				}
			}
			if d.Buffered() > 4096+n {
				t.Fatalf("decoder holds %d bytes", d.Buffered())
			}
		}
	})
}

// normal makes an empty and a nil buffer compare equal.
func normal(m *mbim.Message) *mbim.Message {
	c := *m
	if len(c.Buffer) == 0 {
		c.Buffer = nil
	}
	return &c
}

// FuzzMBIMMessageHeader: one complete message of any bytes.
func FuzzMBIMMessageHeader(f *testing.F) {
	for _, m := range seedMessages() {
		f.Add(m.Encode())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := mbim.Decode(data)
		if err != nil {
			return
		}
		back, err := mbim.Decode(m.Encode())
		if err != nil || !reflect.DeepEqual(normal(back), normal(m)) {
			t.Fatalf("%v re-encodes to %v, %v", m, back, err)
		}
	})
}

// FuzzMBIMFragments: a message split at a fuzzer-chosen size reassembles
// exactly; then the fragments are reordered, dropped or corrupted as the
// fuzzer says, and the decoder must either rebuild the message or report
// an error, never something else.
func FuzzMBIMFragments(f *testing.F) {
	f.Add(uint16(64), uint32(7), []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), []byte{0, 2, 1})
	f.Add(uint16(100), uint32(0), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, max uint16, tid uint32, buf, mutate []byte) {
		if len(buf) > 8192 {
			return
		}
		m := &mbim.Message{Type: mbim.TypeIndicateStatus, TID: tid, Service: mbim.ServiceBasicConnect, CID: 12, Buffer: buf}
		if tid%2 == 1 {
			m.Type, m.Status = mbim.TypeCommandDone, mbim.Status(tid%40)
		}
		size := int(max%2048) + mbim.MinControlTransfer
		var frags [][]byte
		if err := m.Fragments(size, func(b []byte) error {
			frags = append(frags, append([]byte(nil), b...))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var d mbim.Decoder
		for _, fr := range frags {
			d.Write(fr)
		}
		got, err := d.Next()
		if err != nil || got == nil || !reflect.DeepEqual(normal(got), normal(m)) {
			t.Fatalf("reassembled %v, %v; want %v", got, err, m)
		}
		// Mutations: each byte picks a fragment to send next, or
		// (high bit) flips a byte of it.
		var d2 mbim.Decoder
		corrupted := false
		for _, op := range mutate {
			fr := append([]byte(nil), frags[int(op&0x3f)%len(frags)]...)
			if op&0x80 != 0 {
				fr[int(op)%len(fr)] ^= 0x5a
				corrupted = true
			}
			d2.Write(fr)
			for range 64 {
				out, err := d2.Next()
				if out == nil && err == nil {
					break
				}
				if out != nil && out.Type == m.Type && out.TID == m.TID && !bytes.Equal(out.Buffer, m.Buffer) && !corrupted {
					t.Fatalf("wrong reassembly without corruption: %x", out.Buffer)
				}
			}
		}
	})
}

// roundTrip checks parse → encode → parse for one information buffer.
func roundTrip[T any](t *testing.T, data []byte, parse func([]byte) (T, error), encode func(*T) []byte) {
	v, err := parse(data)
	if err != nil {
		return
	}
	w, err := parse(encode(&v))
	if err != nil || !reflect.DeepEqual(w, v) {
		t.Fatalf("%+v re-encodes to %+v, %v", v, w, err)
	}
}

func FuzzDeviceCaps(f *testing.F) {
	d := mbim.DeviceCaps{DataClass: mbim.DataClassLTE, DeviceID: "867929060000017", FirmwareInfo: "fw"}
	f.Add(d.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseDeviceCaps, (*mbim.DeviceCaps).Encode)
	})
}

func FuzzSubscriberReady(f *testing.F) {
	s := mbim.SubscriberReadyStatus{ReadyState: 1, SubscriberID: "001", SIMICCID: "89", TelephoneNumbers: []string{"+1", "+22"}}
	f.Add(s.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseSubscriberReadyStatus, (*mbim.SubscriberReadyStatus).Encode)
	})
}

func FuzzRegisterState(f *testing.F) {
	r := mbim.RegisterState{State: mbim.RegisterHome, ProviderID: "00101", ProviderName: "x", RoamingText: "y"}
	f.Add(r.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseRegisterState, (*mbim.RegisterState).Encode)
	})
}

func FuzzPacketService(f *testing.F) {
	p := mbim.PacketService{State: 2, UplinkSpeed: 1 << 33, DownlinkSpeed: 5}
	f.Add(p.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParsePacketService, (*mbim.PacketService).Encode)
	})
}

func FuzzSignalAndRadioAndPIN(f *testing.F) {
	s := mbim.SignalState{RSSI: 20}
	f.Add(s.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseSignalState, (*mbim.SignalState).Encode)
		roundTrip(t, data, mbim.ParseRadioState, (*mbim.RadioState).Encode)
		roundTrip(t, data, mbim.ParsePINInfo, (*mbim.PINInfo).Encode)
		if s, err := mbim.ParseQuectelRadioState(data); err == nil {
			if back := mbim.EncodeQuectelRadioState(s); !bytes.Equal(back, data) {
				t.Fatalf("Quectel RADIO_STATE %x re-encodes to %x", data, back)
			}
		}
	})
}

func FuzzSignalStateV2(f *testing.F) {
	s := mbim.SignalState{RSSI: 20, RSRPSNR: []mbim.RSRPSNR{{RSRP: 64, SNR: 73, SystemType: mbim.DataClassLTE},
		{RSRP: 56, SNR: 60, SystemType: mbim.DataClass5GNSA}}}
	f.Add(s.EncodeV2())
	f.Add((&mbim.SignalState{RSSI: 99}).EncodeV2())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseSignalStateV2, (*mbim.SignalState).EncodeV2)
	})
}

func FuzzBaseStationsInfo(f *testing.F) {
	b := mbim.BaseStationsInfo{SystemType: mbim.DataClassLTE, LTE: &mbim.LTEServingCell{ProviderID: "00101", CellID: 1,
		EARFCN: 1300, PCI: 101, TAC: 7, RSRP: -95, RSRQ: -11, TimingAdvance: mbim.Unknown}}
	f.Add(b.Encode())
	f.Add((&mbim.BaseStationsInfo{}).Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseBaseStationsInfo, (*mbim.BaseStationsInfo).Encode)
	})
}

func FuzzBasicConnectV3(f *testing.F) {
	s := mbim.SubscriberReadyStatus{ReadyState: 1, Flags: 2, SubscriberID: "001", SIMICCID: "89", TelephoneNumbers: []string{"+1"}}
	p := mbim.PacketService{State: 2, HighestAvailableDataClass: mbim.DataClass5GNSA, DownlinkSpeed: 5, FrequencyRange: 1,
		DataSubclass: mbim.DataSubclass5GENDC, TAI: mbim.TAI{MCC: 1, MNC: 1, TAC: 7}}
	c := mbim.ConnectRequest{Activate: true, APN: "internet", User: "u", Password: "pw", IPType: 3, ContextType: mbim.ContextTypeInternet}
	cs := mbim.ContextState{SessionID: 1, ActivationState: 1, IPType: 3, ContextType: mbim.ContextTypeInternet, APN: "ims"}
	for _, b := range [][]byte{s.EncodeV3(), p.EncodeV3(), c.EncodeV3(), cs.EncodeV3()} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseSubscriberReadyStatusV3, (*mbim.SubscriberReadyStatus).EncodeV3)
		roundTrip(t, data, mbim.ParsePacketServiceV3, (*mbim.PacketService).EncodeV3)
		roundTrip(t, data, mbim.ParseConnectRequestV3, (*mbim.ConnectRequest).EncodeV3)
		roundTrip(t, data, mbim.ParseContextStateV3, (*mbim.ContextState).EncodeV3)
	})
}

func FuzzBaseStationsInfoV3(f *testing.F) {
	f.Add(nrBaseStations().EncodeV3())
	f.Add((&mbim.BaseStationsInfo{}).EncodeV3())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseBaseStationsInfoV3, (*mbim.BaseStationsInfo).EncodeV3)
	})
}

func FuzzVersionInfo(f *testing.F) {
	f.Add((&mbim.VersionInfo{MBIM: mbim.MBIMVersion1, Extended: mbim.MBIMEx2}).Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := mbim.ParseVersionInfo(data)
		if err != nil {
			return
		}
		if back := v.Encode(); !bytes.Equal(back, data[:4]) {
			t.Fatalf("VERSION %x re-encodes to %x", data, back)
		}
	})
}

func FuzzConnectState(f *testing.F) {
	c := mbim.ContextState{SessionID: 1, ActivationState: 1, IPType: 3, ContextType: mbim.ContextTypeInternet, NwError: 27}
	f.Add(c.Encode())
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseContextState, (*mbim.ContextState).Encode)
	})
}

func FuzzIPConfiguration(f *testing.F) {
	car := simnet.DefaultCarrier()
	ip := mbim.IPConfig{SessionID: 0, IPv4: []netip.Prefix{car.IPv4}, IPv6: []netip.Prefix{car.IPv6},
		IPv4Gateway: car.IPv4Gateway, IPv6Gateway: car.IPv6Gateway, IPv4DNS: car.IPv4DNS, IPv6DNS: car.IPv6DNS,
		IPv4MTU: 1500, IPv6MTU: 1280}
	f.Add(ip.Encode())
	f.Add(mbim.EncodeIPConfigurationQuery(3))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := mbim.ParseIPConfig(data)
		if err != nil {
			return
		}
		w, err := mbim.ParseIPConfig(v.Encode())
		if err != nil || !w.Equal(&v) {
			t.Fatalf("%v re-encodes to %v, %v", v, w, err)
		}
	})
}

func FuzzDeviceServices(f *testing.F) {
	d := mbim.DeviceServices{Services: []mbim.DeviceService{{ID: mbim.ServiceBasicConnect, CIDs: []uint32{1, 2, 3}}}}
	f.Add(d.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseDeviceServices, (*mbim.DeviceServices).Encode)
	})
}

func FuzzSubscribeList(f *testing.F) {
	f.Add(mbim.EncodeSubscribeList([]mbim.EventSubscription{{Service: mbim.ServiceBasicConnect, CIDs: []uint32{2, 9}}, {Service: mbim.ServiceQMI}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := mbim.ParseSubscribeList(data)
		if err != nil {
			return
		}
		w, err := mbim.ParseSubscribeList(mbim.EncodeSubscribeList(l))
		if err != nil || !reflect.DeepEqual(normList(w), normList(l)) {
			t.Fatalf("%+v re-encodes to %+v, %v", l, w, err)
		}
	})
}

func normList(l []mbim.EventSubscription) []mbim.EventSubscription {
	out := make([]mbim.EventSubscription, len(l))
	for i, s := range l {
		out[i] = s
		if len(s.CIDs) == 0 {
			out[i].CIDs = nil
		}
	}
	return out
}

// The requests the emulated modem and the proxy decode.

func FuzzConnectSet(f *testing.F) {
	c := mbim.ConnectRequest{Activate: true, APN: "internet", User: "u", Password: "p", Auth: mbim.AuthCHAP, IPType: 3}
	f.Add(c.Encode()) // ContextType zero: MBIMContextTypeNone must survive the round trip
	c.ContextType = mbim.ContextTypeInternet
	f.Add(c.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseConnectRequest, (*mbim.ConnectRequest).Encode)
	})
}

func FuzzPinSet(f *testing.F) {
	p := mbim.PINRequest{Type: mbim.PINTypePIN1, PIN: "1234"}
	f.Add(p.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParsePINRequest, (*mbim.PINRequest).Encode)
	})
}

func FuzzRadioAndPacketServiceSet(f *testing.F) {
	f.Add(mbim.EncodeRadioStateSet(true))
	f.Add(mbim.EncodePacketServiceSet(mbim.Detach))
	f.Fuzz(func(t *testing.T, data []byte) {
		if on, err := mbim.ParseRadioStateSet(data); err == nil {
			if back, err := mbim.ParseRadioStateSet(mbim.EncodeRadioStateSet(on)); err != nil || back != on {
				t.Fatalf("radio %v re-encodes to %v, %v", on, back, err)
			}
		}
		if a, err := mbim.ParsePacketServiceSet(data); err == nil {
			if back, err := mbim.ParsePacketServiceSet(mbim.EncodePacketServiceSet(a)); err != nil || back != a {
				t.Fatalf("action %v re-encodes to %v, %v", a, back, err)
			}
		}
		mbim.ParseSessionQuery(data)
	})
}

func FuzzProxyConfiguration(f *testing.F) {
	p := mbim.ProxyConfiguration{DevicePath: "/dev/wwan0mbim0", Timeout: 30}
	f.Add(p.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, mbim.ParseProxyConfiguration, (*mbim.ProxyConfiguration).Encode)
	})
}

// FuzzMbimProxyServer feeds a client byte stream to the proxy, which
// serves an emulated modem. The proxy must not crash or hang, must drop
// the client's goroutines when it leaves, and must forward nothing to the
// modem unless the stream holds a CONFIGURATION.
func FuzzMbimProxyServer(f *testing.F) {
	cfg := mbim.ProxyConfiguration{DevicePath: "/dev/x", Timeout: 30}
	var s []byte
	for _, m := range []*mbim.Message{
		{Type: mbim.TypeCommand, TID: 1, Service: mbim.ServiceProxyControl, CID: mbim.CIDProxyConfiguration, CommandType: mbim.Set, Buffer: cfg.Encode()},
		{Type: mbim.TypeOpen, TID: 2, MaxControlTransfer: 4096},
		{Type: mbim.TypeCommand, TID: 3, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceCaps},
		{Type: mbim.TypeCommand, TID: 4, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceServiceSubscribeList, CommandType: mbim.Set,
			Buffer: mbim.EncodeSubscribeList([]mbim.EventSubscription{{Service: mbim.ServiceBasicConnect}})},
		{Type: mbim.TypeClose, TID: 5},
	} {
		s = append(s, m.Encode()...)
	}
	f.Add(s)
	f.Add(seedMessages()[6].Encode())
	host, fn := openPipe(f, simnet.MBIMConfig{}, mbim.Options{Timeout: time.Second})
	p := mbim.NewProxy(host, mbim.ProxyOptions{})
	f.Cleanup(func() { p.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		before := fn.Stats().Commands
		a, b := net.Pipe()
		p.ServeConn(b)
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := a.Read(buf); err != nil {
					return
				}
			}
		}()
		a.SetWriteDeadline(time.Now().Add(2 * time.Second))
		a.Write(data)
		a.Close()
		deadline := time.Now().Add(5 * time.Second)
		for p.Clients() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("proxy client did not go away")
			}
			time.Sleep(time.Millisecond)
		}
		if !configures(data) && fn.Stats().Commands != before {
			t.Fatalf("a stream without CONFIGURATION reached the modem")
		}
	})
}

// configures reports whether a stream holds a proxy CONFIGURATION.
func configures(data []byte) bool {
	var d mbim.Decoder
	d.Write(data)
	for range len(data) + 1 {
		m, err := d.Next()
		if m == nil && err == nil {
			return false
		}
		if m != nil && m.Type == mbim.TypeCommand && m.Service == mbim.ServiceProxyControl && m.CID == mbim.CIDProxyConfiguration {
			return true
		}
	}
	return false
}
