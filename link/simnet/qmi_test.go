package simnet

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/qmi"
)

type qmiCapture struct {
	mu  sync.Mutex
	out [][]byte
}

func (c *qmiCapture) send(b []byte) error {
	c.mu.Lock()
	c.out = append(c.out, append([]byte(nil), b...))
	c.mu.Unlock()
	return nil
}

// TestQMIFunctionAnswersAMalformedRequestAndTheRest: one UL transfer
// holds a request, a CTL request whose TLV length is wrong and a request:
// the run answers the first, reports the broken one as a host violation
// and answers it MALFORMED_MESSAGE, then answers the last.
func TestQMIFunctionAnswersAMalformedRequestAndTheRest(t *testing.T) {
	fn := NewQMIFunction(QMIConfig{})
	c := &qmiCapture{}
	var violations atomic.Int32
	fn.startWith(c.send, func(rule, detail string) { violations.Add(1) }, 0, false)
	defer fn.Stop()
	var td []byte
	for i, m := range []*qmi.Message{
		qmi.NewRequest(qmi.ServiceCTL, qmi.CTLGetVersionInfo),
		qmi.AllocateCIDRequest(qmi.ServiceWDS), // broken below
		qmi.NewRequest(qmi.ServiceCTL, qmi.CTLGetVersionInfo),
	} {
		m.TID = uint16(i + 1)
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			b[qmi.QMUXHeaderLen+4]++ // the CTL header's TLV length
		}
		td = append(td, b...)
	}
	fn.Receive(td)
	var out [][]byte
	for deadline := time.Now().Add(5 * time.Second); len(out) < 3 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c.mu.Lock()
		out = slices.Clone(c.out)
		c.mu.Unlock()
	}
	if len(out) != 3 {
		t.Fatalf("%d answers, want 3", len(out))
	}
	for i, want := range []qmi.ErrorCode{qmi.ErrNone, qmi.ErrMalformedMessage, qmi.ErrNone} {
		m, err := qmi.Parse(out[i])
		if err != nil || m.TID != uint16(i+1) || qmi.ErrorCodeOf(m.Result()) != want {
			t.Errorf("answer %d: %v, %v; want TID %d, %v", i, m, err, i+1, want)
		}
	}
	if n, s := violations.Load(), fn.Stats(); n != 1 || s.Violations != 1 {
		t.Errorf("%d violations reported, %d counted; want 1", n, s.Violations)
	}
}

// FuzzQMIFunction feeds an arbitrary host byte stream to the emulated QMI
// function (after a valid client allocation): whatever the host sends,
// the function must not panic, must answer only with well-formed frames
// from the modem side, and must still answer a valid request afterwards.
func FuzzQMIFunction(f *testing.F) {
	var seed []byte
	for _, m := range []*qmi.Message{
		qmi.AllocateCIDRequest(qmi.ServiceWDS),
		func() *qmi.Message {
			d := qmi.DataFormat{LinkLayer: 2, ULAggregation: 9, DLAggregation: 9, Endpoint: qmi.PCIeEndpoint}
			m := d.SetRequest()
			m.Client = 1
			return m
		}(),
		func() *qmi.Message {
			m := (&qmi.BindMuxDataPort{Endpoint: qmi.PCIeEndpoint, MuxID: 1}).Request()
			m.Client, m.TID = 1, 2
			return m
		}(),
		func() *qmi.Message {
			m := (&qmi.StartNetwork{APN: "internet", Family: qmi.IPv4}).Request()
			m.Client, m.TID = 1, 3
			return m
		}(),
		func() *qmi.Message {
			m := qmi.GetCurrentSettingsRequest(qmi.SettingsDataPath)
			m.Client, m.TID = 1, 4
			return m
		}(),
		func() *qmi.Message {
			m := (&qmi.VerifyPIN{ID: qmi.PIN1, PIN: "1234"}).Request()
			m.Client, m.TID = 1, 5
			return m
		}(),
	} {
		b, _ := m.Marshal()
		seed = append(seed, b...)
	}
	f.Add(seed, false)
	f.Add(seed, true)
	f.Fuzz(func(t *testing.T, data []byte, pinLocked bool) {
		var nc NetworkConfig
		if pinLocked {
			nc.PIN = "1234"
		}
		fn := NewQMIFunction(QMIConfig{Network: NewNetwork(nc)})
		c := &qmiCapture{}
		fn.startWith(c.send, func(rule, detail string) {}, 0, false)
		defer fn.Stop()
		handle := func(m *qmi.Message, err error) {
			fn.net.mu.Lock()
			defer fn.net.mu.Unlock()
			if err != nil {
				fn.malformedLocked(err)
				return
			}
			fn.handleLocked(m)
		}
		var d qmi.Decoder
		d.Write(data)
		for range len(data) + 1 {
			m, err := d.Next()
			if err == nil && m == nil {
				break
			}
			handle(m, err)
		}
		c.mu.Lock()
		for _, b := range c.out {
			m, err := qmi.Parse(b)
			if err != nil || !m.FromModem || m.Kind == qmi.Request {
				t.Fatalf("the function sent %x: %v", b, err)
			}
		}
		c.out = nil
		c.mu.Unlock()
		// A valid request still gets its answer.
		req := qmi.NewRequest(qmi.ServiceCTL, qmi.CTLGetVersionInfo)
		req.TID = 200
		handle(req, nil)
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.out) != 1 {
			t.Fatalf("version info answered with %d frames", len(c.out))
		}
		if m, err := qmi.Parse(c.out[0]); err != nil || m.TID != 200 || m.Result() != nil {
			t.Fatalf("version info answer %v, %v", m, err)
		}
	})
}
