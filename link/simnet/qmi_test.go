package simnet

import (
	"sync"
	"testing"

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
		cfg := QMIConfig{}
		if pinLocked {
			cfg.MBIM.PIN = "1234"
		}
		fn := NewQMIFunction(cfg)
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
