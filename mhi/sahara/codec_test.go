package sahara_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/sahara"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestCodecRoundTripsEveryCommand(t *testing.T) {
	for _, p := range []sahara.Packet{
		{Cmd: sahara.CmdHello, Version: 2, Compatible: 1, MaxLen: 1024, Mode: sahara.ModeMemoryDebug},
		{Cmd: sahara.CmdHelloResp, Version: 2, Compatible: 1, Status: 0, Mode: sahara.ModeImageTxPending},
		{Cmd: sahara.CmdReadData, Image: 13, Offset: 0x1000, Length: 0x80000},
		{Cmd: sahara.CmdReadData64, Image: 13, Offset: 1 << 40, Length: 0x80000},
		{Cmd: sahara.CmdEndOfImage, Image: 13, Status: sahara.StatusReadDataError},
		{Cmd: sahara.CmdDone}, {Cmd: sahara.CmdDoneResp, Status: sahara.DoneComplete},
		{Cmd: sahara.CmdReset}, {Cmd: sahara.CmdResetResp},
		{Cmd: sahara.CmdMemoryDebug, Offset: 0x1000, Length: 52},
		{Cmd: sahara.CmdMemoryRead, Offset: 0x2000, Length: 0xFFF0},
		{Cmd: sahara.CmdMemoryDebug64, Offset: 1 << 35, Length: 64},
		{Cmd: sahara.CmdMemoryRead64, Offset: 1 << 35, Length: 0xFFF0},
	} {
		b, err := sahara.Append(nil, p)
		if err != nil {
			t.Fatalf("%v: %v", p.Cmd, err)
		}
		got, err := sahara.Decode(b)
		if err != nil || got != p {
			t.Errorf("%v: decoded %+v, %v; want %+v", p.Cmd, got, err, p)
		}
	}
}

// TestDecodeRefusesWrongLengths: a length field other than the command's,
// a transfer shorter or longer than it, an unknown command.
func TestDecodeRefusesWrongLengths(t *testing.T) {
	good, _ := sahara.Append(nil, sahara.Packet{Cmd: sahara.CmdReadData, Image: 1, Length: 8})
	lie := bytes.Clone(good)
	lie[4] = 0x30
	for name, c := range map[string]struct {
		b    []byte
		want error
	}{
		"short header":   {good[:7], sahara.ErrShort},
		"length lies":    {lie, sahara.ErrLength},
		"truncated":      {good[:0x10], sahara.ErrLength},
		"trailing bytes": {append(bytes.Clone(good), 0), sahara.ErrTrailing},
		"unknown":        {[]byte{0x99, 0, 0, 0, 8, 0, 0, 0}, sahara.ErrUnknown},
	} {
		if _, err := sahara.Decode(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if _, err := sahara.Append(nil, sahara.Packet{Cmd: sahara.CmdReadData, Offset: 1 << 32}); err == nil {
		t.Error("a 33-bit offset in a 32-bit READ_DATA was encoded")
	}
}

// TestHostRefusesOutOfRangeRead: READ_DATA past the image's end or above
// MaxRead is refused before any byte is read.
func TestHostRefusesOutOfRangeRead(t *testing.T) {
	name, _ := writeImage(t, 9, 1000)
	for _, rd := range []sahara.Packet{
		{Cmd: sahara.CmdReadData, Image: 1, Offset: 900, Length: 101},
		{Cmd: sahara.CmdReadData64, Image: 1, Offset: 1<<64 - 1, Length: 2},
		{Cmd: sahara.CmdReadData, Image: 1, Offset: 0, Length: 0},
		{Cmd: sahara.CmdReadData, Image: 1, Offset: 0, Length: 1000}, // above MaxRead
	} {
		tr := &script{}
		tr.push(sahara.Packet{Cmd: sahara.CmdHello, Version: 2, Mode: sahara.ModeImageTxPending})
		tr.push(rd)
		_, err := (&sahara.Host{Images: map[uint32]string{1: name}, MaxRead: 999, Timeout: time.Second}).Run(context.Background(), tr)
		if !errors.Is(err, sahara.ErrBadRange) {
			t.Errorf("%+v: %v, want ErrBadRange", rd, err)
		}
		if len(tr.sent) != 2 || len(tr.sent[1]) != 8 {
			t.Errorf("%+v: host sent %d messages, want HELLO_RESP and RESET", rd, len(tr.sent))
		}
	}
}

// script is a Transport that plays recorded target messages and records
// what the host sends; it ends with a timeout-like error.
type script struct {
	in   [][]byte
	sent [][]byte
}

var errScriptOver = errors.New("script over")

func (s *script) push(p sahara.Packet) {
	b, err := sahara.Append(nil, p)
	if err != nil {
		panic(err)
	}
	s.in = append(s.in, b)
}

func (s *script) Send(_ context.Context, b []byte) error {
	if len(s.sent) < 1000 {
		s.sent = append(s.sent, bytes.Clone(b))
	}
	return nil
}

func (s *script) Recv(context.Context) ([]byte, error) {
	if len(s.in) == 0 {
		return nil, errScriptOver
	}
	b := s.in[0]
	s.in = s.in[1:]
	return b, nil
}

func FuzzDecode(f *testing.F) {
	for _, p := range []sahara.Packet{{Cmd: sahara.CmdHello, Version: 2}, {Cmd: sahara.CmdReadData64, Length: 5}, {Cmd: sahara.CmdMemoryDebug, Length: 52}} {
		b, _ := sahara.Append(nil, p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := sahara.Decode(b)
		if err != nil {
			return
		}
		// Reserved words are not kept; everything else is.
		out, err := sahara.Append(nil, p)
		if err != nil || len(out) != len(b) {
			t.Fatalf("decoded %+v re-encodes to %x (%v), was %x", p, out, err, b)
		}
		if q, err := sahara.Decode(out); err != nil || q != p {
			t.Fatalf("decoded %+v, re-encoded and decoded %+v (%v)", p, q, err)
		}
	})
}

func FuzzDecodeTable(f *testing.F) {
	f.Add(sahara.AppendTable(nil, []sahara.Region{{Address: 1, Length: 2, Description: "x", Filename: "a/b"}}, true), true)
	f.Add(sahara.AppendTable(nil, []sahara.Region{{Address: 1, Length: 2, Description: "x", Filename: ".."}}, false), false)
	f.Fuzz(func(t *testing.T, b []byte, wide bool) {
		rs, err := sahara.DecodeTable(b, wide)
		if err != nil {
			return
		}
		for _, r := range rs {
			if bytes.ContainsAny([]byte(r.Filename), "/\\\x00") || r.Filename == "." || r.Filename == ".." {
				t.Fatalf("unsafe filename %q", r.Filename)
			}
		}
	})
}

// FuzzHostAgainstHostileTarget: the host direction. Any sequence of
// target messages (split from the fuzz input) ends Run with a result or an
// error, never a panic or a hang, and never more host messages than the
// script has target messages plus the final RESET.
func FuzzHostAgainstHostileTarget(f *testing.F) {
	hello, _ := sahara.Append(nil, sahara.Packet{Cmd: sahara.CmdHello, Version: 2, Mode: sahara.ModeMemoryDebug})
	dbg, _ := sahara.Append(nil, sahara.Packet{Cmd: sahara.CmdMemoryDebug, Offset: 0, Length: 52})
	f.Add(append(append(hello, 0xFF), dbg...), uint8(1))
	rd, _ := sahara.Append(nil, sahara.Packet{Cmd: sahara.CmdReadData, Image: 1, Offset: 2, Length: 10})
	f.Add(append(append(hello[:0:0], hello...), rd...), uint8(2))
	name := f.TempDir() + "/img"
	if err := writeFile(name, make([]byte, 64)); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte, sep uint8) {
		tr := &script{}
		for _, m := range bytes.Split(in, []byte{0xFF, sep}) {
			tr.in = append(tr.in, m)
		}
		n := len(tr.in)
		h := &sahara.Host{Images: map[uint32]string{1: name}, OnRegion: func(sahara.Region, []byte) error { return nil }, MaxDump: 1 << 20}
		_, _ = h.Run(context.Background(), tr)
		if len(tr.sent) > n+1 {
			t.Fatalf("host sent %d messages for %d target messages", len(tr.sent), n)
		}
	})
}

// FuzzTargetAgainstHostileHost: the other direction. The emulated SBL,
// loading an image or offering a dump, with 32- or 64-bit commands, takes
// any sequence of host messages (split from the fuzz input) without
// panicking and without claiming a finished load it did not get whole.
func FuzzTargetAgainstHostileHost(f *testing.F) {
	join := func(ms ...[]byte) []byte { return bytes.Join(ms, []byte{0xFF, 0}) }
	pkt := func(p sahara.Packet) []byte { b, _ := sahara.Append(nil, p); return b }
	resp := pkt(sahara.Packet{Cmd: sahara.CmdHelloResp, Version: 2})
	done := pkt(sahara.Packet{Cmd: sahara.CmdDone})
	// Each seed is a whole session the target finishes (Chunk 5: the
	// image in two reads; the table, then the region).
	f.Add(join(resp, []byte("01234"), []byte("56789"), done), uint8(0), false, false)
	f.Add(join(resp, []byte("01234"), []byte("56789"), done), uint8(0), false, true)
	f.Add(join(resp, pkt(sahara.Packet{Cmd: sahara.CmdMemoryRead, Offset: 0x1000, Length: 52}),
		pkt(sahara.Packet{Cmd: sahara.CmdMemoryRead, Offset: 0x10, Length: 4}), pkt(sahara.Packet{Cmd: sahara.CmdReset})), uint8(0), true, false)
	f.Add(join(resp, pkt(sahara.Packet{Cmd: sahara.CmdMemoryRead64, Offset: 0x1000, Length: 64}),
		pkt(sahara.Packet{Cmd: sahara.CmdMemoryRead64, Offset: 0x12, Length: 2}), pkt(sahara.Packet{Cmd: sahara.CmdReset})), uint8(0), true, true)
	f.Fuzz(func(t *testing.T, in []byte, sep uint8, dump, wide bool) {
		s := &sim.Sahara{Images: []sim.SaharaImage{{ID: 1, Size: 10}}, Wide: wide, Chunk: 5}
		if dump {
			s = &sim.Sahara{Wide: wide, TableAddress: 0x1000,
				Dump: []sim.SaharaRegion{{Region: sahara.Region{Address: 0x10, Length: 4, Description: "r", Filename: "r.bin"}, Data: []byte("abcd")}}}
		}
		s.Start(nil)
		msgs := bytes.Split(in, []byte{0xFF, sep})
		for _, m := range msgs[:min(len(msgs), 64)] {
			s.Receive(m)
		}
		if s.Finished() && !dump && len(s.Received(1)) != 10 {
			t.Fatalf("finished with %d of 10 bytes", len(s.Received(1)))
		}
	})
}

func writeFile(name string, b []byte) error { return os.WriteFile(name, b, 0o600) }

// endless is a target that repeats one valid READ_DATA forever.
type endless struct {
	hello, read []byte
	n           int
}

func (e *endless) Send(context.Context, []byte) error { return nil }
func (e *endless) Recv(context.Context) ([]byte, error) {
	e.n++
	if e.n == 1 {
		return e.hello, nil
	}
	return e.read, nil
}

// TestSessionIsBoundedAgainstEndlessReads: a target that never ends the
// image cannot keep the host serving forever.
func TestSessionIsBoundedAgainstEndlessReads(t *testing.T) {
	name, _ := writeImage(t, 4, 16)
	e := &endless{}
	e.hello, _ = sahara.Append(nil, sahara.Packet{Cmd: sahara.CmdHello, Version: 2})
	e.read, _ = sahara.Append(nil, sahara.Packet{Cmd: sahara.CmdReadData, Image: 1, Length: 1})
	_, err := (&sahara.Host{Images: map[uint32]string{1: name}}).Run(context.Background(), e)
	if !errors.Is(err, sahara.ErrUnexpected) {
		t.Fatalf("Run = %v, want ErrUnexpected after the command bound", err)
	}
}
