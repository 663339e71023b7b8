package simnet

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
)

// mbimCapture runs an MBIM function without MHI and collects its output.
type mbimCapture struct {
	mu  sync.Mutex
	out []byte
}

func (c *mbimCapture) send(b []byte) error {
	c.mu.Lock()
	c.out = append(c.out, b...)
	c.mu.Unlock()
	return nil
}

func (c *mbimCapture) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.out...)
}

// exchange sends msgs to f and returns its decoded answers once n have
// arrived (or the wait ends).
func exchange(t testing.TB, f *MBIMFunction, c *mbimCapture, n int, msgs ...*mbim.Message) []*mbim.Message {
	t.Helper()
	for _, m := range msgs {
		f.Receive(m.Encode())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var d mbim.Decoder
		d.Write(c.bytes())
		var got []*mbim.Message
		for {
			m, err := d.Next()
			if err != nil {
				t.Fatalf("function sent a malformed message: %v", err)
			}
			if m == nil {
				break
			}
			got = append(got, m)
		}
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMBIMFunctionAnswersCommandsOnlyWhenOpen(t *testing.T) {
	f := NewMBIMFunction(MBIMConfig{})
	c := &mbimCapture{}
	f.startWith(c.send)
	defer f.Stop()
	caps := &mbim.Message{Type: mbim.TypeCommand, TID: 1, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceCaps}
	got := exchange(t, f, c, 1, caps)
	if len(got) != 1 || got[0].Type != mbim.TypeFunctionError || got[0].Error != mbim.ProtoNotOpened || got[0].TID != 1 {
		t.Fatalf("command before OPEN answered %v", got)
	}
	open := &mbim.Message{Type: mbim.TypeOpen, TID: 2, MaxControlTransfer: 4096}
	caps.TID = 3
	unknown := &mbim.Message{Type: mbim.TypeCommand, TID: 4, Service: mbim.ServiceQMI, CID: 1}
	got = exchange(t, f, c, 4, open, caps, unknown)
	if len(got) != 4 || got[1].Type != mbim.TypeOpenDone || got[2].Type != mbim.TypeCommandDone || got[2].Status != mbim.StatusNone ||
		got[3].Status != mbim.StatusNoDeviceSupport {
		t.Fatalf("answers %v", got)
	}
}

// TestMBIMFunctionReportsAMalformedMessageAndAnswersTheRest: one UL
// transfer holds OPEN, a command whose fragment header is broken and a
// command: the run answers OPEN, answers the broken one FUNCTION_ERROR
// for its transaction (counted as malformed) and answers the last.
func TestMBIMFunctionReportsAMalformedMessageAndAnswersTheRest(t *testing.T) {
	f := NewMBIMFunction(MBIMConfig{})
	c := &mbimCapture{}
	f.startWith(c.send)
	defer f.Stop()
	f.Receive(brokenTransfer())
	got := exchange(t, f, c, 3)
	if len(got) != 3 || got[0].Type != mbim.TypeOpenDone || got[0].TID != 1 ||
		got[1].Type != mbim.TypeFunctionError || got[1].TID != 2 || got[1].Error != mbim.ProtoLengthMismatch ||
		got[2].Type != mbim.TypeCommandDone || got[2].TID != 3 || got[2].Status != mbim.StatusNone {
		t.Fatalf("answers %v", got)
	}
	if s := f.Stats(); s.Malformed != 1 || s.FunctionErrors != 1 {
		t.Errorf("stats %+v: want 1 malformed, 1 FUNCTION_ERROR", s)
	}
}

// brokenTransfer is OPEN (TID 1), a DEVICE_CAPS command whose
// TotalFragments is 0 (TID 2) and a DEVICE_CAPS command (TID 3), in one
// UL transfer.
func brokenTransfer() []byte {
	b := (&mbim.Message{Type: mbim.TypeOpen, TID: 1, MaxControlTransfer: 4096}).Encode()
	bad := (&mbim.Message{Type: mbim.TypeCommand, TID: 2, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceCaps}).Encode()
	binary.LittleEndian.PutUint32(bad[12:], 0)
	b = append(b, bad...)
	return append(b, (&mbim.Message{Type: mbim.TypeCommand, TID: 3, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceCaps}).Encode()...)
}

// TestMBIMFunctionStopDuringADelayEndsTheTransfer: Stop while an answer
// is held back (Delay) ends the run at once; the rest of the transfer,
// a malformed message included, is neither answered nor counted.
func TestMBIMFunctionStopDuringADelayEndsTheTransfer(t *testing.T) {
	f := NewMBIMFunction(MBIMConfig{Delay: time.Hour})
	c := &mbimCapture{}
	f.startWith(c.send)
	f.Receive(brokenTransfer())
	// Once the run took the transfer, it waits out the Delay of OPEN.
	for {
		f.q.mu.Lock()
		n := len(f.q.in)
		f.q.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	f.Stop() // returns once the run ended: not after an hour
	if s := f.Stats(); s.Commands != 0 || s.Malformed != 0 || s.Dropped != 0 || len(c.bytes()) != 0 {
		t.Errorf("after Stop during the Delay: stats %+v, %d bytes sent; want nothing", s, len(c.bytes()))
	}
}

func TestMBIMFunctionStopEndsItsGoroutineAndTimers(t *testing.T) {
	f := NewMBIMFunction(MBIMConfig{SignalInterval: time.Millisecond, Network: NewNetwork(NetworkConfig{RegisterDelay: time.Hour})})
	c := &mbimCapture{}
	f.startWith(c.send)
	exchange(t, f, c, 1, &mbim.Message{Type: mbim.TypeOpen, TID: 1, MaxControlTransfer: 4096})
	time.Sleep(10 * time.Millisecond)
	f.Stop()
	n := len(c.bytes())
	time.Sleep(20 * time.Millisecond)
	if len(c.bytes()) != n {
		t.Error("the function sent after Stop")
	}
	f.Stop() // idempotent
}

// FuzzMBIMFunction feeds an arbitrary host byte stream (after a valid
// OPEN) to the emulated MBIM function: whatever the host sends, the
// function must not panic, must answer only with well-formed messages,
// and must keep answering a valid request afterwards.
func FuzzMBIMFunction(f *testing.F) {
	conn := mbim.ConnectRequest{Activate: true, APN: "internet", IPType: mbim.IPTypeIPv4v6, ContextType: mbim.ContextTypeInternet}
	pin := mbim.PINRequest{Type: mbim.PINTypePIN1, PIN: "1234"}
	var seed []byte
	for _, m := range []*mbim.Message{
		{Type: mbim.TypeCommand, TID: 2, Service: mbim.ServiceBasicConnect, CID: mbim.CIDConnect, CommandType: mbim.Set, Buffer: conn.Encode()},
		{Type: mbim.TypeCommand, TID: 3, Service: mbim.ServiceBasicConnect, CID: mbim.CIDPIN, CommandType: mbim.Set, Buffer: pin.Encode()},
		{Type: mbim.TypeCommand, TID: 4, Service: mbim.ServiceBasicConnect, CID: mbim.CIDRadioState, CommandType: mbim.Set, Buffer: mbim.EncodeRadioStateSet(false)},
		{Type: mbim.TypeCommand, TID: 5, Service: mbim.ServiceBasicConnect, CID: mbim.CIDIPConfiguration, Buffer: mbim.EncodeIPConfigurationQuery(0)},
		{Type: mbim.TypeCommand, TID: 6, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceServiceSubscribeList, CommandType: mbim.Set,
			Buffer: mbim.EncodeSubscribeList([]mbim.EventSubscription{{Service: mbim.ServiceBasicConnect}})},
		{Type: mbim.TypeClose, TID: 7},
	} {
		seed = append(seed, m.Encode()...)
	}
	f.Add(seed, false)
	f.Add(seed, true)
	f.Fuzz(func(t *testing.T, data []byte, pinLocked bool) {
		var nc NetworkConfig
		if pinLocked {
			nc.PIN = "1234"
		}
		fn := NewMBIMFunction(MBIMConfig{Fragment: 64, Network: NewNetwork(nc)})
		c := &mbimCapture{}
		fn.startWith(c.send)
		defer fn.Stop()
		open := &mbim.Message{Type: mbim.TypeOpen, TID: 1, MaxControlTransfer: 4096}
		// Messages are handled synchronously here, under the lock as
		// the function's goroutine does, so that an input replays
		// deterministically.
		fn.net.mu.Lock()
		fn.handleLocked(open)
		fn.net.mu.Unlock()
		var d mbim.Decoder
		d.Write(data)
		for range len(data) + 1 {
			m, err := d.Next()
			if err != nil {
				fn.malformed(err)
				continue
			}
			if m == nil {
				break
			}
			fn.net.mu.Lock()
			fn.handleLocked(m)
			fn.net.mu.Unlock()
		}
		fn.net.mu.Lock()
		fn.handleLocked(open)
		fn.handleLocked(&mbim.Message{Type: mbim.TypeCommand, TID: 99, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceCaps})
		fn.net.mu.Unlock()
		var out mbim.Decoder
		out.MaxMessage = 64
		out.Write(c.bytes())
		last := (*mbim.Message)(nil)
		for {
			m, err := out.Next()
			if err != nil {
				t.Fatalf("function sent a malformed message: %v", err)
			}
			if m == nil {
				break
			}
			last = m
		}
		if last == nil || last.TID != 99 || last.Status != mbim.StatusNone {
			t.Fatalf("function no longer answers DEVICE_CAPS: last message %v", last)
		}
	})
}
