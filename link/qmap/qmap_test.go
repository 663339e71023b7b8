package qmap_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/qmap"
)

// dlV1 is a MAPv1 DL aggregate as docs/FRAMING.md §4.1/§4.3 lays it
// out: a 5-byte packet on mux 0x81 padded to 8 (PAD_LEN 3), an empty
// frame, a 4-byte packet on mux 1 without pad, a FLOW_DISABLE command on
// mux 0x81, and one trailing zero byte of alignment.
var dlV1 = []byte{
	0x03, 0x81, 0x00, 0x08, 0x45, 1, 2, 3, 4, 0, 0, 0, // MAP(pad 3, len 8) pkt pad
	0x00, 0x05, 0x00, 0x00, // PKT_LEN 0: skipped
	0x00, 0x01, 0x00, 0x04, 0x60, 9, 9, 9, // MAP(len 4) pkt
	0x80, 0x81, 0x00, 0x10, // MAP(CD, len 16)
	0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2A, // FLOW_DISABLE REQUEST txn 42
	0x03, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x01, // ip_family, seq 7, qos 1
	0x00,
}

// dlV5 is the same packets in MAPv5: NEXT_HDR and a checksum header
// (type 2, csum VALID) between the MAP header and each packet.
var dlV5 = []byte{
	0x43, 0x81, 0x00, 0x08, 0x04, 0x80, 0x00, 0x00, 0x45, 1, 2, 3, 4, 0, 0, 0,
	0x40, 0x01, 0x00, 0x04, 0x04, 0x00, 0x00, 0x00, 0x60, 9, 9, 9,
}

func TestDecodeV1(t *testing.T) {
	spans, err := qmap.Decode(dlV1, 1, nil)
	want := []framing.Span{{Off: 4, Len: 5, ID: 0x81}, {Off: 20, Len: 4, ID: 1}, {Off: 24, Len: 20, ID: 0x81, Ctrl: true}}
	if err != nil || len(spans) != len(want) {
		t.Fatalf("Decode = %v, %v", spans, err)
	}
	for i := range want {
		if spans[i] != want[i] {
			t.Fatalf("span %d = %+v, want %+v", i, spans[i], want[i])
		}
	}
}

func TestDecodeV5(t *testing.T) {
	spans, err := qmap.Decode(dlV5, 5, nil)
	// The first packet's checksum header says the modem validated it.
	want := []framing.Span{{Off: 8, Len: 5, ID: 0x81, CsumValid: true}, {Off: 24, Len: 4, ID: 1}}
	if err != nil || len(spans) != 2 || spans[0] != want[0] || spans[1] != want[1] {
		t.Fatalf("Decode = %v, %v", spans, err)
	}
	// The same frames are wrong for the other version.
	if _, err := qmap.Decode(dlV5, 1, nil); !errors.Is(err, framing.ErrBadFrame) {
		t.Fatalf("MAPv5 frames as v1: %v", err)
	}
	if _, err := qmap.Decode(dlV1, 5, nil); !errors.Is(err, framing.ErrBadFrame) {
		t.Fatalf("MAPv1 frames as v5: %v", err)
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	cases := map[string]struct {
		b []byte
		v int
	}{
		"PKT_LEN beyond the frame": {[]byte{0x00, 1, 0x00, 0x09, 0x45, 0, 0, 0, 0, 0, 0, 0}, 1},
		"pad ≥ PKT_LEN":            {[]byte{0x04, 1, 0x00, 0x04, 0x45, 0, 0, 0}, 1},
		"truncated header":         {[]byte{0x00, 1, 0x00, 0x04, 0x45, 0, 0, 0, 0x00, 1}, 1},
		"v5 header truncated":      {[]byte{0x40, 1, 0x00, 0x04, 0x04, 0x00}, 5},
		"v5 coalescing header":     {[]byte{0x40, 1, 0x00, 0x04, 0x02, 0, 0, 0, 0x45, 0, 0, 0}, 5},
		"v5 chained header":        {[]byte{0x40, 1, 0x00, 0x04, 0x05, 0, 0, 0, 0x45, 0, 0, 0}, 5},
		"command beyond the frame": {[]byte{0x80, 1, 0x00, 0x10, 1, 0, 0, 0}, 1},
	}
	for name, c := range cases {
		if _, err := qmap.Decode(c.b, c.v, nil); !errors.Is(err, framing.ErrBadFrame) && !errors.Is(err, framing.ErrRunt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFlowCommandIsAnsweredWithItsACK(t *testing.T) {
	req := dlV1[24:44]
	c, err := qmap.ParseCommand(req)
	if err != nil || c.Name != qmap.CmdFlowDisable || c.Type != qmap.TypeRequest || c.Transaction != 42 || c.MuxID != 0x81 {
		t.Fatalf("ParseCommand = %+v, %v", c, err)
	}
	dst := make([]byte, 64)
	n := qmap.Framing{}.Answer(req, dst)
	want := bytes.Clone(req)
	want[5] = qmap.TypeACK
	if !bytes.Equal(dst[:n], want) {
		t.Fatalf("ACK:\n got %x\nwant %x", dst[:n], want)
	}
	// An ACK is not answered again; a short dst gets nothing.
	if n := (qmap.Framing{}).Answer(want, dst); n != 0 {
		t.Fatalf("an ACK was answered with %d bytes", n)
	}
	if n := (qmap.Framing{}).Answer(req, dst[:10]); n != 0 {
		t.Fatalf("answer of %d bytes in a 10-byte buffer", n)
	}
	// FlowControl builds exactly the doc's request.
	got := qmap.AppendCommand(nil, qmap.FlowControl(0x81, false, 42, 7, 1))
	if !bytes.Equal(got, req) {
		t.Fatalf("FlowControl:\n got %x\nwant %x", got, req)
	}
}

func TestAggregatorBuildsV1AndV5(t *testing.T) {
	buf := make([]byte, 64)
	a := qmap.NewAggregator(qmap.Framing{Version: 1, MaxDatagrams: 8, Pad: true})
	a.Begin(buf)
	a.SetSession(0x81)
	copy(a.Add(5), []byte{0x45, 1, 2, 3, 4})
	a.SetSession(1)
	copy(a.Add(4), []byte{0x60, 9, 9, 9})
	n := a.End()
	want := append(bytes.Clone(dlV1[:12]), dlV1[16:24]...)
	if !bytes.Equal(buf[:n], want) {
		t.Fatalf("v1:\n got %x\nwant %x", buf[:n], want)
	}
	a = qmap.NewAggregator(qmap.Framing{Version: 5, MaxDatagrams: 8, Pad: true})
	a.Begin(buf)
	a.SetSession(0x81)
	copy(a.Add(5), []byte{0x45, 1, 2, 3, 4})
	n = a.End()
	// The host requests no checksum offload: csum_info 0.
	want = []byte{0x43, 0x81, 0x00, 0x08, 0x04, 0x00, 0x00, 0x00, 0x45, 1, 2, 3, 4, 0, 0, 0}
	if !bytes.Equal(buf[:n], want) {
		t.Fatalf("v5:\n got %x\nwant %x", buf[:n], want)
	}
}

func TestAggregatorLimits(t *testing.T) {
	a := qmap.NewAggregator(qmap.Framing{MaxDatagrams: 11, MaxBytes: 8192})
	buf := make([]byte, 32768)
	a.Begin(buf)
	k := 0
	for a.Add(100) != nil {
		k++
	}
	if k != 11 {
		t.Fatalf("%d datagrams, want 11", k)
	}
	a.End()
	a.Begin(buf)
	k = 0
	for a.Add(1500) != nil {
		k++
	}
	if n := a.End(); k != 5 || n > 8192 {
		t.Fatalf("%d datagrams in %d bytes, want 5 in ≤ 8192", k, n)
	}
	// CheckUL: what the aggregator built keeps the limits; a looser
	// aggregate breaks each of them.
	loose := qmap.NewAggregator(qmap.Framing{MaxDatagrams: 20})
	loose.Begin(buf)
	for loose.Add(1000) != nil {
	}
	frame := buf[:loose.End()]
	spans, err := qmap.Decode(frame, 1, nil)
	if err != nil || len(spans) != 20 {
		t.Fatalf("loose aggregate: %d packets, %v", len(spans), err)
	}
	for _, f := range []qmap.Framing{{MaxDatagrams: 11}, {MaxBytes: 8192}} {
		if err := f.CheckUL(frame, spans); !errors.Is(err, framing.ErrBadFrame) {
			t.Errorf("%+v accepts %d packets in %d bytes: %v", f, len(spans), len(frame), err)
		}
	}
	if err := (qmap.Framing{}).CheckUL(frame, spans); err != nil {
		t.Errorf("Framing{} checks limits it does not have: %v", err)
	}
	// ULFrameBytes: the TX buffer size an aggregating framing asks for.
	for _, c := range []struct {
		f    qmap.Framing
		want int
	}{{qmap.Framing{MaxDatagrams: 11, MaxBytes: 8192}, 8192}, {qmap.Framing{MaxBytes: 8192}, 0},
		{qmap.Framing{MaxDatagrams: 11}, 0}, {qmap.Framing{MaxDatagrams: 2, MaxBytes: 1 << 20}, framing.MaxFrame}} {
		if got := c.f.ULFrameBytes(); got != c.want {
			t.Errorf("%+v: ULFrameBytes %d, want %d", c.f, got, c.want)
		}
	}
	// Default: one packet per frame, as rmnet.
	a = qmap.NewAggregator(qmap.Framing{})
	a.Begin(buf)
	if a.Add(10) == nil || a.Add(10) != nil {
		t.Fatal("default aggregator is not one packet per frame")
	}
}

type muxPacket struct {
	mux  uint8
	data []byte
}

func roundTrip(t testing.TB, f qmap.Framing, size int, pkts []muxPacket) {
	a := qmap.NewAggregator(f)
	buf := make([]byte, size)
	var got []muxPacket
	flush := func() {
		n := a.End()
		spans, err := f.Decode(buf[:n], nil)
		if err != nil {
			t.Fatalf("%+v: aggregate does not decode: %v", f, err)
		}
		if err := f.CheckUL(buf[:n], spans); err != nil {
			t.Fatalf("%+v: aggregate breaks its own limits: %v", f, err)
		}
		for _, s := range spans {
			if s.Ctrl {
				t.Fatal("data decoded as a command")
			}
			got = append(got, muxPacket{s.ID, bytes.Clone(buf[s.Off : s.Off+s.Len])})
		}
	}
	a.Begin(buf)
	for i := 0; i < len(pkts); {
		a.SetSession(pkts[i].mux)
		dst := a.Add(len(pkts[i].data))
		if dst == nil {
			if a.Len() == 0 {
				t.Fatalf("an empty aggregate refused %d bytes", len(pkts[i].data))
			}
			flush()
			a.Begin(buf)
			continue
		}
		copy(dst, pkts[i].data)
		i++
	}
	flush()
	if len(got) != len(pkts) {
		t.Fatalf("%+v: %d packets in, %d out", f, len(pkts), len(got))
	}
	for i := range pkts {
		if got[i].mux != pkts[i].mux || !bytes.Equal(got[i].data, pkts[i].data) {
			t.Fatalf("%+v: packet %d differs", f, i)
		}
	}
}

func TestRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 300 {
		var pkts []muxPacket
		for range 1 + rng.IntN(60) {
			d := make([]byte, 1+rng.IntN(1500))
			for i := range d {
				d[i] = byte(rng.Uint32())
			}
			pkts = append(pkts, muxPacket{uint8(rng.IntN(4)), d})
		}
		f := qmap.Framing{Version: []int{1, 5}[iter%2], MaxDatagrams: rng.IntN(40), MaxBytes: rng.IntN(16384), Pad: iter%3 == 0}
		roundTrip(t, f, 1500+f.Overhead()+rng.IntN(32768), pkts)
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	spans := make([]framing.Span, 0, 8)
	// One run of 100 decodes: AllocsPerRun's average is an integer
	// division, which would read 99 allocations in 100 decodes as 0.
	if a := testing.AllocsPerRun(1, func() {
		for range 100 {
			spans, _ = qmap.Decode(dlV1, 1, spans[:0])
		}
	}); a != 0 {
		t.Fatalf("Decode allocates %v times in 100 frames, want 0", a)
	}
}

// FuzzQMAPDeaggregate: any bytes, either version. Never panics; spans lie
// inside the frame; data spans never overlap the next header.
func FuzzQMAPDeaggregate(f *testing.F) {
	f.Add(dlV1, true)
	f.Add(dlV5, false)
	f.Add([]byte{0x00, 0x01, 0xFF, 0xFF, 0x45}, true)
	f.Fuzz(func(t *testing.T, b []byte, v1 bool) {
		v := 5
		if v1 {
			v = 1
		}
		spans, err := qmap.Decode(b, v, nil)
		end := 0
		for _, s := range spans {
			if s.Off < end || s.Len <= 0 || s.Off+s.Len > len(b) {
				t.Fatalf("span %+v out of order or outside %d bytes", s, len(b))
			}
			end = s.Off + s.Len
		}
		if err != nil && !errors.Is(err, framing.ErrBadFrame) && !errors.Is(err, framing.ErrRunt) {
			t.Fatalf("error %v", err)
		}
	})
}

// FuzzQMAPCommand: any command frame. ParseCommand never reads outside
// it; an answer is only ever given to a request, is never longer than
// it, and parses back as its ACK (or UNSUPPORTED) with the same name,
// transaction and mux ID.
func FuzzQMAPCommand(f *testing.F) {
	f.Add(dlV1[24:44])
	f.Add(qmap.AppendCommand(nil, qmap.FlowControl(1, true, 7, 1, 0)))
	f.Add(qmap.AppendCommand(nil, qmap.Command{MuxID: 2, Name: qmap.CmdFlowStart, Transaction: 9}))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := qmap.ParseCommand(b)
		out, aerr := qmap.AppendACK(nil, b)
		if err != nil || req.Type != qmap.TypeRequest {
			if aerr == nil {
				t.Fatal("answered something that is not a request")
			}
			return
		}
		if aerr != nil || len(out) > len(b) {
			t.Fatalf("answer %d bytes to a %d-byte request: %v", len(out), len(b), aerr)
		}
		ack, err := qmap.ParseCommand(out)
		if err != nil || ack.Name != req.Name || ack.Transaction != req.Transaction || ack.MuxID != req.MuxID ||
			(ack.Type != qmap.TypeACK && ack.Type != qmap.TypeUnsupported) || !bytes.Equal(ack.Payload, req.Payload) {
			t.Fatalf("answer %+v to %+v (%v)", ack, req, err)
		}
	})
}

// FuzzQMAPRoundTrip: the aggregator's output (v1/v5, padding, limits,
// mux IDs) always de-aggregates to the same packets.
func FuzzQMAPRoundTrip(f *testing.F) {
	f.Add([]byte{0x81, 5, 1, 200, 0x81, 1}, uint8(11), uint16(8192), true, false)
	f.Add([]byte{1, 250, 1, 250, 1, 250}, uint8(32), uint16(32768), false, true)
	f.Fuzz(func(t *testing.T, spec []byte, maxd uint8, maxb uint16, v5, pad bool) {
		var pkts []muxPacket
		for i := 0; i+1 < len(spec) && len(pkts) < 200; i += 2 {
			pkts = append(pkts, muxPacket{spec[i], bytes.Repeat([]byte{spec[i]}, 1+int(spec[i+1])*6)})
		}
		if len(pkts) == 0 {
			return
		}
		fr := qmap.Framing{Version: 1, MaxDatagrams: int(maxd), MaxBytes: int(maxb), Pad: pad}
		if v5 {
			fr.Version = 5
		}
		roundTrip(t, fr, 1531+fr.Overhead(), pkts)
	})
}
