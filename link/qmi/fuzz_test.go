package qmi_test

import (
	"bytes"
	"context"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/qmi"
)

// Fuzz targets for every decoder of modem or host input. Each checks
// that the decoder never panics and, where an encoder exists, that what
// decodes re-encodes to the same value.

// tlvArea turns fuzz data into the TLVs of a message of service s, ID
// id: the data is read as TLVs, the last one cut to what is left.
func tlvArea(s qmi.Service, id uint16, data []byte) *qmi.Message {
	m := &qmi.Message{Service: s, ID: id, Kind: qmi.Response, FromModem: true}
	for len(data) >= 3 {
		n := min(int(data[1])|int(data[2])<<8, len(data)-3)
		m.TLVs = append(m.TLVs, qmi.TLV{Type: data[0], Value: data[3 : 3+n]})
		data = data[3+n:]
	}
	return m
}

// seedTLVs adds the TLV area of each message as a seed.
func seedTLVs(f *testing.F, ms ...*qmi.Message) {
	for _, m := range ms {
		var b []byte
		for _, t := range m.TLVs {
			b = append(b, t.Type, byte(len(t.Value)), byte(len(t.Value)>>8))
			b = append(b, t.Value...)
		}
		f.Add(b)
	}
}

func reply(s qmi.Service, id uint16, tlvs []qmi.TLV) *qmi.Message {
	return (&qmi.Message{Service: s, ID: id}).Reply(0, tlvs...)
}

// FuzzQMUXStream: a byte stream cut into reads of fuzzer-chosen sizes.
// Every message the decoder returns re-encodes to a frame that decodes
// to itself; the decoder never holds more than one frame of input.
func FuzzQMUXStream(f *testing.F) {
	var all []byte
	for _, m := range []*qmi.Message{qmi.AllocateCIDRequest(qmi.ServiceWDS), qmi.StopNetworkRequest(1),
		reply(qmi.ServiceWDS, qmi.WDSStartNetwork, []qmi.TLV{{Type: 1, Value: []byte{1, 2, 3, 4}}})} {
		b, _ := m.Marshal()
		all = append(all, b...)
	}
	f.Add(uint8(5), all)
	f.Add(uint8(0), []byte{1, 0xff, 0xff, 0, 1, 2})
	f.Fuzz(func(t *testing.T, step uint8, data []byte) {
		var d qmi.Decoder
		n := int(step%64) + 1
		for i := 0; i < len(data); i += n {
			d.Write(data[i:min(i+n, len(data))])
			for range len(data) + 1 {
				m, err := d.Next()
				if err == nil && m == nil {
					break
				}
				if m == nil {
					continue
				}
				b, err := m.Marshal()
				if err != nil {
					t.Fatalf("decoded %v does not encode: %v", m, err)
				}
				back, err := qmi.Parse(b)
				if err != nil || !reflect.DeepEqual(normal(back), normal(m)) {
					t.Fatalf("re-encoded %v decodes to %v, %v", m, back, err)
				}
			}
			if d.Buffered() > qmi.MaxFrame+n {
				t.Fatalf("decoder holds %d bytes", d.Buffered())
			}
		}
	})
}

// FuzzParse: one frame; a frame that parses re-encodes byte for byte
// (the encoding is canonical but for the compound bit, which Parse
// refuses).
func FuzzParse(f *testing.F) {
	b, _ := qmi.AllocateCIDRequest(qmi.ServiceWDS).Marshal()
	f.Add(b)
	b, _ = (&qmi.StartNetwork{APN: "internet", Family: qmi.IPv4}).Request().Marshal()
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := qmi.Parse(data)
		if err != nil {
			return
		}
		b, err := m.Marshal()
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("%x parses to %v, re-encodes to %x, %v", data, m, b, err)
		}
		_ = m.Result()
	})
}

// FuzzQmiProxyServer feeds a client byte stream to the qmi-proxy, which
// serves an emulated modem. The proxy must not crash or hang, must drop
// the client's goroutines when it leaves, must forward nothing to the
// modem unless the stream holds an Internal Proxy Open with a path, and
// must never let the client use, release or sync away the client ID
// mhistack holds.
func FuzzQmiProxyServer(f *testing.F) {
	frame := func(m *qmi.Message, tid uint16) []byte {
		m.TID = tid
		b, err := m.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	open := frame(qmi.NewRequest(qmi.ServiceCTL, qmi.CTLInternalProxyOpen).AddString(0x01, "/dev/cdc-wdm0"), 1)
	var s []byte
	s = append(s, open...)
	s = append(s, frame(qmi.AllocateCIDRequest(qmi.ServiceDMS), 2)...)
	s = append(s, frame(&qmi.Message{Service: qmi.ServiceDMS, Client: 1, ID: qmi.DMSGetIDs}, 3)...)
	s = append(s, frame(qmi.ReleaseCIDRequest(qmi.ClientID{Service: qmi.ServiceDMS, Client: 1}), 4)...)
	s = append(s, frame(qmi.NewRequest(qmi.ServiceCTL, qmi.CTLSync), 5)...)
	f.Add(s)
	f.Add(append(append([]byte(nil), open...), frame(&qmi.Message{Service: qmi.ServiceWDS, Client: 1, ID: qmi.WDSGetPacketServiceStatus}, 6)...))
	f.Add(frame(qmi.AllocateCIDRequest(qmi.ServiceNAS), 2))
	r := newProxyRig(f, qmi.ProxyOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	own, err := r.host.AllocateCID(ctx, qmi.ServiceWDS)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		before := r.fn.Stats().Requests
		a, b := net.Pipe()
		r.p.ServeConn(b)
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
		for r.p.Clients() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("proxy client did not go away")
			}
			time.Sleep(time.Millisecond)
		}
		if !opensProxy(data) && r.fn.Stats().Requests != before {
			t.Fatal("a stream without Internal Proxy Open reached the modem")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := r.host.Service(qmi.ServiceWDS, own).Do(ctx, qmi.NewRequest(qmi.ServiceWDS, qmi.WDSGetPacketServiceStatus)); err != nil {
			t.Fatalf("mhistack's client ID after the stream: %v", err)
		}
		r.takeViolations() // fuzzed requests may name any client ID
	})
}

// opensProxy reports whether a stream holds an Internal Proxy Open
// request with a device path.
func opensProxy(data []byte) bool {
	var d qmi.Decoder
	d.Write(data)
	for range len(data) + 1 {
		m, err := d.Next()
		if m == nil && err == nil {
			return false
		}
		if m != nil && m.Service == qmi.ServiceCTL && m.ID == qmi.CTLInternalProxyOpen && !m.FromModem && m.Kind == qmi.Request {
			if v, ok := m.Get(0x01); ok && len(v) > 0 {
				return true
			}
		}
	}
	return false
}
