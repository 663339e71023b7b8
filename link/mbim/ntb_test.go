package mbim_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
)

// kernelNTB16 is the NTB mhi_wwan_mbim's mbim_tx_fixup builds for a
// 4-byte datagram on session 3 with wSequence 0x1234 (docs/FRAMING.md
// §3.2): NTH16 at 0, NDP16 at 12 with one pointer and the terminator, the
// datagram at 0x1C.
var kernelNTB16 = []byte{
	'N', 'C', 'M', 'H', 0x0C, 0x00, 0x34, 0x12, 0x20, 0x00, 0x0C, 0x00, // NTH16
	'I', 'P', 'S', 0x03, 0x10, 0x00, 0x00, 0x00, // NDP16: IPS session 3, wLength 16, next 0
	0x1C, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, // {0x1C, 4}, {0, 0}
	0x45, 0x00, 0x00, 0x04,
}

func TestAppendNTBBuildsTheKernelLayout(t *testing.T) {
	got := mbim.AppendNTB(nil, 0x1234, 3, []byte{0x45, 0, 0, 4})
	if !bytes.Equal(got, kernelNTB16) {
		t.Fatalf("AppendNTB:\n got %x\nwant %x", got, kernelNTB16)
	}
	// The link encoder of the zero NTB builds the same bytes.
	enc := mbim.NTB{}.NewEncoder().(framing.SessionEncoder)
	buf := make([]byte, 64)
	enc.(*mbim.NTBBuilder).SetSequence(0x1234)
	enc.Begin(buf)
	enc.SetSession(3)
	copy(enc.Add(4), []byte{0x45, 0, 0, 4})
	if enc.Add(1) != nil {
		t.Fatal("one-datagram encoder took a second datagram")
	}
	n := enc.End()
	if !bytes.Equal(buf[:n], kernelNTB16) {
		t.Fatalf("encoder:\n got %x\nwant %x", buf[:n], kernelNTB16)
	}
	if (mbim.NTB{}).Overhead() != 0x1C {
		t.Fatalf("Overhead %d, want 28", mbim.NTB{}.Overhead())
	}
}

func TestDecodeNTBKernelLayout(t *testing.T) {
	spans, err := mbim.DecodeNTB(kernelNTB16, nil)
	if err != nil || len(spans) != 1 || spans[0] != (framing.Span{Off: 0x1C, Len: 4, ID: 3}) {
		t.Fatalf("DecodeNTB = %v, %v", spans, err)
	}
}

// multiNDP16 is a DL NTB16 as modems send it: two IPS NDPs (sessions 0
// and 5) and a DSS NDP in between, datagrams before the NDPs.
func multiNDP16() []byte {
	b := make([]byte, 0x60)
	le := binary.LittleEndian
	le.PutUint32(b[0:], mbim.NTH16Sig)
	le.PutUint16(b[4:], 12)
	le.PutUint16(b[8:], 0x60)
	le.PutUint16(b[10:], 0x30)
	for i := 12; i < 0x30; i++ {
		b[i] = byte(i)
	}
	// NDP at 0x30: session 0, datagrams {12,8} {20,8}, next 0x44.
	le.PutUint32(b[0x30:], mbim.NDP16IPS)
	le.PutUint16(b[0x34:], 8+3*4)
	le.PutUint16(b[0x36:], 0x44)
	le.PutUint32(b[0x38:], 12|8<<16)
	le.PutUint32(b[0x3C:], 20|8<<16)
	// DSS at 0x44 (skipped), next 0x54.
	le.PutUint32(b[0x44:], mbim.NDP16DSS)
	le.PutUint16(b[0x48:], 16)
	le.PutUint16(b[0x4A:], 0x54)
	le.PutUint32(b[0x4C:], 28|4<<16)
	// NDP at 0x54: session 5, datagram {32,16}, terminator at 0x60.
	le.PutUint32(b[0x54:], mbim.NDP16IPS|5<<24)
	le.PutUint16(b[0x58:], 16)
	le.PutUint16(b[0x5A:], 0)
	le.PutUint32(b[0x5C:], 32|16<<16)
	return append(b, 0, 0, 0, 0) // the terminator of the last NDP
}

func TestDecodeNTBWalksSeveralNDPsAndSkipsDSS(t *testing.T) {
	b := multiNDP16()
	binary.LittleEndian.PutUint16(b[8:], uint16(len(b)))
	spans, err := mbim.DecodeNTB(b, nil)
	want := []framing.Span{{Off: 12, Len: 8}, {Off: 20, Len: 8}, {Off: 32, Len: 16, ID: 5}}
	if err != nil || len(spans) != len(want) {
		t.Fatalf("DecodeNTB = %v, %v", spans, err)
	}
	for i := range want {
		if spans[i] != want[i] {
			t.Fatalf("span %d = %v, want %v", i, spans[i], want[i])
		}
	}
}

func TestDecodeNTB32(t *testing.T) {
	// NTH32 (16) + NDP32 at 16 (header 16 + 2 entries × 8) + datagram
	// at 0x30: the 32-bit twin of the kernel layout.
	b := make([]byte, 0x30+6)
	le := binary.LittleEndian
	le.PutUint32(b[0:], mbim.NTH32Sig)
	le.PutUint16(b[4:], 16)
	le.PutUint32(b[8:], uint32(len(b)))
	le.PutUint32(b[12:], 16)
	le.PutUint32(b[16:], mbim.NDP32IPS|7<<24)
	le.PutUint16(b[20:], 0x20)
	le.PutUint32(b[32:], 0x30)
	le.PutUint32(b[36:], 6)
	spans, err := mbim.DecodeNTB(b, nil)
	if err != nil || len(spans) != 1 || spans[0] != (framing.Span{Off: 0x30, Len: 6, ID: 7}) {
		t.Fatalf("DecodeNTB(NTB32) = %v, %v", spans, err)
	}
	// The NTB32 builder makes the same layout.
	enc := mbim.NewNTBBuilder(mbim.NTB{NTB32: true})
	out := make([]byte, 100)
	enc.Begin(out)
	enc.SetSession(7)
	copy(enc.Add(6), b[0x30:])
	n := enc.End()
	le.PutUint16(b[6:], 0) // wSequence of the first NTB
	if !bytes.Equal(out[:n], b) {
		t.Fatalf("NTB32 builder:\n got %x\nwant %x", out[:n], b)
	}
}

func TestDecodeNTBRejectsMalformedBlocks(t *testing.T) {
	le := binary.LittleEndian
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(kernelNTB16)
		f(b)
		return b
	}
	cases := map[string][]byte{
		"empty":                  nil,
		"runt":                   kernelNTB16[:19],
		"bad signature":          mod(func(b []byte) { b[0] = 'X' }),
		"wHeaderLength":          mod(func(b []byte) { b[4] = 16 }),
		"block beyond buffer":    mod(func(b []byte) { le.PutUint16(b[8:], 0x21) }),
		"block shorter than NTH": mod(func(b []byte) { le.PutUint16(b[8:], 12) }),
		"no NDP":                 mod(func(b []byte) { le.PutUint16(b[10:], 0) }),
		"NDP inside the NTH":     mod(func(b []byte) { le.PutUint16(b[10:], 8) }),
		"NDP unaligned":          mod(func(b []byte) { le.PutUint16(b[10:], 13) }),
		"NDP beyond block":       mod(func(b []byte) { le.PutUint16(b[10:], 28) }),
		"NDP wLength < 16":       mod(func(b []byte) { le.PutUint16(b[16:], 12) }),
		"NDP wLength odd":        mod(func(b []byte) { le.PutUint16(b[16:], 18) }),
		"NDP beyond block len":   mod(func(b []byte) { le.PutUint16(b[16:], 24) }),
		"NDP points at itself":   mod(func(b []byte) { le.PutUint16(b[18:], 12) }),
		"datagram beyond block":  mod(func(b []byte) { le.PutUint16(b[22:], 5) }),
		"datagram in the NTH":    mod(func(b []byte) { le.PutUint16(b[20:], 4) }),
		"missing terminator":     mod(func(b []byte) { le.PutUint32(b[24:], 0x1C|1<<16) }),
	}
	for name, b := range cases {
		if _, err := mbim.DecodeNTB(b, nil); !errors.Is(err, framing.ErrBadFrame) && !errors.Is(err, framing.ErrRunt) {
			t.Errorf("%s: err %v, want ErrBadFrame or ErrRunt", name, err)
		}
	}
	// wBlockLength 0 means the whole transfer (the kernel accepts it).
	if s, err := mbim.DecodeNTB(mod(func(b []byte) { le.PutUint16(b[8:], 0) }), nil); err != nil || len(s) != 1 {
		t.Errorf("wBlockLength 0: %v, %v", s, err)
	}
}

// TestDecodeNTBChainsOnlyForward: an NDP chain that points back (A → B
// → A) or at the NDP itself ends the walk with ErrBadFrame after the
// datagrams found so far, each of them once.
func TestDecodeNTBChainsOnlyForward(t *testing.T) {
	le := binary.LittleEndian
	back := multiNDP16()
	le.PutUint16(back[8:], uint16(len(back)))
	le.PutUint16(back[0x5A:], 0x30) // last NDP points back at the first
	self := multiNDP16()
	le.PutUint16(self[8:], uint16(len(self)))
	le.PutUint16(self[0x36:], 0x30) // first NDP points at itself
	for name, tc := range map[string]struct {
		ntb  []byte
		want []framing.Span
	}{
		"back": {back, []framing.Span{{Off: 12, Len: 8}, {Off: 20, Len: 8}, {Off: 32, Len: 16, ID: 5}}},
		"self": {self, []framing.Span{{Off: 12, Len: 8}, {Off: 20, Len: 8}}},
		"kernel-self": {func() []byte {
			b := bytes.Clone(kernelNTB16)
			le.PutUint16(b[18:], 0x0C)
			return b
		}(), []framing.Span{{Off: 0x1C, Len: 4, ID: 3}}},
	} {
		spans, err := mbim.DecodeNTB(tc.ntb, nil)
		if !errors.Is(err, framing.ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", name, err)
		}
		if len(spans) != len(tc.want) {
			t.Fatalf("%s: %d spans %v, want each datagram once: %v", name, len(spans), spans, tc.want)
		}
		for i := range spans {
			if spans[i] != tc.want[i] {
				t.Errorf("%s: span %d = %v, want %v", name, i, spans[i], tc.want[i])
			}
		}
	}
}

// TestNTBSequence: NTB.Sequence reads wSequence of NTH16 and NTH32, and
// nothing from a frame without an NTH.
func TestNTBSequence(t *testing.T) {
	if seq, ok := (mbim.NTB{}).Sequence(kernelNTB16); !ok || seq != 0x1234 {
		t.Errorf("NTH16: %#x, %v", seq, ok)
	}
	b32 := buildNTBs(t, mbim.NTB{NTB32: true}, 512, []ntbPacket{{0, []byte{0x45, 0, 0, 4}}})[0]
	if _, ok := (mbim.NTB{}).Sequence(b32); !ok {
		t.Error("NTH32: no sequence")
	}
	for _, b := range [][]byte{nil, kernelNTB16[:8], bytes.Repeat([]byte{0x45}, 40)} {
		if _, ok := (mbim.NTB{}).Sequence(b); ok {
			t.Errorf("%x: a sequence", b)
		}
	}
}

// ntbPacket is one datagram of a round trip: its session and bytes.
type ntbPacket struct {
	session uint8
	data    []byte
}

// buildNTBs frames pkts with a builder of f into NTBs of at most size
// bytes, switching the session per packet, and returns the NTBs.
func buildNTBs(t testing.TB, f mbim.NTB, size int, pkts []ntbPacket) [][]byte {
	b := mbim.NewNTBBuilder(f)
	var out [][]byte
	buf := make([]byte, size)
	b.Begin(buf)
	for i := 0; i < len(pkts); {
		p := pkts[i]
		b.SetSession(p.session)
		dst := b.Add(len(p.data))
		if dst == nil {
			if b.Len() == 0 {
				t.Fatalf("an empty NTB of %d bytes refused a %d-byte datagram", size, len(p.data))
			}
			n := b.End()
			out = append(out, bytes.Clone(buf[:n]))
			b.Begin(buf)
			continue
		}
		copy(dst, p.data)
		i++
	}
	if n := b.End(); n > 0 {
		out = append(out, bytes.Clone(buf[:n]))
	}
	return out
}

// checkRoundTrip builds pkts into NTBs of f in size-byte buffers and
// checks that they parse back to the same datagrams in order per session
// and, when f aggregates, keep f's limits (CheckUL; one datagram per NTB
// is Linux's layout, which the NTB OUT parameters do not shape).
func checkRoundTrip(t testing.TB, f mbim.NTB, size int, pkts []ntbPacket) {
	var got []ntbPacket
	for _, ntb := range buildNTBs(t, f, size, pkts) {
		spans, err := f.Decode(ntb, nil)
		if err != nil {
			t.Fatalf("%+v: builder output does not parse: %v (%x)", f, err, ntb)
		}
		if err := f.CheckUL(ntb, spans); err != nil && f.MaxDatagrams > 1 {
			t.Fatalf("%+v: builder output breaks its own limits: %v", f, err)
		}
		for _, s := range spans {
			got = append(got, ntbPacket{s.ID, ntb[s.Off : s.Off+s.Len]})
		}
	}
	// NDPs group datagrams by session: compare per session, in order.
	for s := range 256 {
		var a, b [][]byte
		for _, p := range pkts {
			if int(p.session) == s {
				a = append(a, p.data)
			}
		}
		for _, p := range got {
			if int(p.session) == s {
				b = append(b, p.data)
			}
		}
		if len(a) != len(b) {
			t.Fatalf("%+v: session %d: %d datagrams in, %d out", f, s, len(a), len(b))
		}
		for i := range a {
			if !bytes.Equal(a[i], b[i]) {
				t.Fatalf("%+v: session %d datagram %d differs", f, s, i)
			}
		}
	}
}

// FuzzNTBSessionOffsetRoundTrip: with any session offset, every session
// the framing carries (below Sessions()) comes back as itself, aggregated
// or not.
func FuzzNTBSessionOffsetRoundTrip(f *testing.F) {
	f.Add([]byte{0, 40, 1, 200, 31, 1}, uint8(112), uint8(0))
	f.Add([]byte{0, 60, 143, 60, 9, 20}, uint8(112), uint8(16))
	f.Add([]byte{255, 10, 0, 10}, uint8(0), uint8(4))
	f.Fuzz(func(t *testing.T, spec []byte, offset, maxd uint8) {
		fr := mbim.NTB{SessionOffset: offset, MaxDatagrams: int(maxd)}
		var pkts []ntbPacket
		for i := 0; i+1 < len(spec) && len(pkts) < 200; i += 2 {
			s := uint8(int(spec[i]) % fr.Sessions())
			pkts = append(pkts, ntbPacket{s, bytes.Repeat([]byte{spec[i]}, 1+int(spec[i+1])*6)})
		}
		checkRoundTrip(t, fr, 1531+fr.Overhead(), pkts)
	})
}

func TestNTBRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		var pkts []ntbPacket
		for range 1 + rng.IntN(80) {
			d := make([]byte, 1+rng.IntN(1500))
			for i := range d {
				d[i] = byte(rng.Uint32())
			}
			pkts = append(pkts, ntbPacket{uint8(rng.IntN(3) * 7), d})
		}
		f := mbim.NTB{MaxDatagrams: []int{0, 1, 32, 5}[iter%4], NTB32: iter%3 == 0}
		checkRoundTrip(t, f, 1500+f.Overhead()+rng.IntN(32768), pkts)
	}
}

// TestNTBBuilderAggregatesUpToTheLimits: 32 datagrams per NTB, never more
// bytes than the buffer.
func TestNTBBuilderAggregatesUpToTheLimits(t *testing.T) {
	var pkts []ntbPacket
	for range 100 {
		pkts = append(pkts, ntbPacket{0, make([]byte, 64)})
	}
	ntbs := buildNTBs(t, mbim.NTB{MaxDatagrams: 32}, 32768, pkts)
	if len(ntbs) != 4 {
		t.Fatalf("100 datagrams in %d NTBs, want 4 (32 each)", len(ntbs))
	}
	pkts = pkts[:0]
	for range 40 {
		pkts = append(pkts, ntbPacket{1, make([]byte, 1400)})
	}
	for _, ntb := range buildNTBs(t, mbim.NTB{MaxDatagrams: 32}, 32768, pkts) {
		if len(ntb) > 32768 {
			t.Fatalf("NTB of %d bytes in a 32 KiB buffer", len(ntb))
		}
	}
}

// TestNTBBuilderKeepsTheNTBOutParameters: aggregated NTBs hold at most
// MaxDatagrams datagrams and MaxBytes bytes (the first datagram is bounded
// by the buffer only), every datagram at Divisor/Remainder and every NDP
// at NDPAlign; CheckUL accepts them and refuses NTBs that break each
// limit; the datagrams decode back in order.
func TestNTBBuilderKeepsTheNTBOutParameters(t *testing.T) {
	f := mbim.NTB{MaxDatagrams: 5, MaxBytes: 4096, Divisor: 32, Remainder: 2, NDPAlign: 16}
	var pkts []ntbPacket
	for i := range 40 {
		d := bytes.Repeat([]byte{byte(i)}, 100+i*37)
		pkts = append(pkts, ntbPacket{uint8(i % 2), d})
	}
	ntbs := buildNTBs(t, f, 16384, pkts)
	n := 0
	for _, ntb := range ntbs {
		if len(ntb) > f.MaxBytes {
			t.Fatalf("NTB of %d bytes, MaxBytes %d", len(ntb), f.MaxBytes)
		}
		spans, err := mbim.DecodeNTB(ntb, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) > f.MaxDatagrams {
			t.Fatalf("%d datagrams, MaxDatagrams %d", len(spans), f.MaxDatagrams)
		}
		for _, s := range spans {
			if s.Off%32 != 2 {
				t.Fatalf("datagram at %d, not 2 mod 32", s.Off)
			}
		}
		if ndp := binary.LittleEndian.Uint16(ntb[10:]); ndp%16 != 0 {
			t.Fatalf("first NDP at %d, not 16-aligned", ndp)
		}
		if err := f.CheckUL(ntb, spans); err != nil {
			t.Fatal(err)
		}
		n += len(spans)
	}
	if n != len(pkts) || len(ntbs) < len(pkts)/f.MaxDatagrams {
		t.Fatalf("%d datagrams in %d NTBs", n, len(ntbs))
	}
	checkRoundTrip(t, f, 16384, pkts)

	// Each limit, broken by an NTB built with a looser one, is refused.
	loose := buildNTBs(t, mbim.NTB{MaxDatagrams: 40}, 65535, pkts)[0]
	spans, err := mbim.DecodeNTB(loose, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, strict := range []mbim.NTB{{MaxDatagrams: 5}, {MaxBytes: 4096}, {Divisor: 32, Remainder: 2}, {NDPAlign: 64}} {
		if err := strict.CheckUL(loose, spans); !errors.Is(err, framing.ErrBadFrame) {
			t.Errorf("%+v accepts an NTB of %d datagrams, %d bytes, 4-byte aligned: %v", strict, len(spans), len(loose), err)
		}
	}
	if err := (mbim.NTB{}).CheckUL(loose, spans); err != nil {
		t.Errorf("NTB{} checks limits it does not have: %v", err)
	}
	// A datagram larger than MaxBytes still travels, alone.
	big := buildNTBs(t, mbim.NTB{MaxDatagrams: 4, MaxBytes: 1000}, 4096, []ntbPacket{{0, make([]byte, 1500)}, {0, make([]byte, 10)}})
	if len(big) != 2 {
		t.Fatalf("a datagram over MaxBytes and a small one: %d NTBs, want 2", len(big))
	}
}

func TestNTBDecodeDoesNotAllocate(t *testing.T) {
	var pkts []ntbPacket
	for i := range 32 {
		pkts = append(pkts, ntbPacket{uint8(i % 2), make([]byte, 100)})
	}
	ntb := buildNTBs(t, mbim.NTB{MaxDatagrams: 32}, 32768, pkts)[0]
	spans := make([]framing.Span, 0, 64)
	// One run of 100 decodes: AllocsPerRun's average is an integer
	// division, which would read 99 allocations in 100 decodes as 0.
	if a := testing.AllocsPerRun(1, func() {
		for range 100 {
			spans, _ = mbim.DecodeNTB(ntb, spans[:0])
		}
	}); a != 0 {
		t.Fatalf("DecodeNTB allocates %v times in 100 NTBs, want 0", a)
	}
}

// FuzzNTB16Parse and FuzzNTB32Parse: any bytes. Decode never panics,
// every span lies in the block and after the NTH, and the same input
// decodes the same way twice (no hidden state).
func FuzzNTB16Parse(f *testing.F) {
	f.Add(kernelNTB16)
	b := multiNDP16()
	binary.LittleEndian.PutUint16(b[8:], uint16(len(b)))
	f.Add(b)
	// The oddities modems send (docs/QUIRKS.md): an NDP chain that goes
	// back, one that points at itself, a wSequence of 0 mid-stream, a
	// non-IP datagram, and NDP session 112 (an offset session).
	back := bytes.Clone(b)
	binary.LittleEndian.PutUint16(back[0x5A:], 0x30)
	f.Add(back)
	self := bytes.Clone(kernelNTB16)
	binary.LittleEndian.PutUint16(self[18:], 0x0C)
	f.Add(self)
	f.Add(mbim.AppendNTB(nil, 0, 0, []byte{0x00, 0x01, 0x08, 0x00, 6, 4, 0, 1}))
	f.Add(mbim.AppendNTB(nil, 7, 112, []byte{0x45, 0, 0, 20}))
	fuzzParse(f)
}

func FuzzNTB32Parse(f *testing.F) {
	var pkts []ntbPacket
	for i := range 5 {
		pkts = append(pkts, ntbPacket{uint8(i), []byte{0x45, byte(i), 0, 20}})
	}
	f.Add(buildNTBs(f, mbim.NTB{NTB32: true, MaxDatagrams: 8}, 512, pkts)[0])
	f.Add(buildNTBs(f, mbim.NTB{NTB32: true}, 512, pkts)[0])
	fuzzParse(f)
}

func fuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, err := mbim.DecodeNTB(b, nil)
		for _, s := range spans {
			if s.Off < 12 || s.Len <= 0 || s.Off+s.Len > len(b) {
				t.Fatalf("span %+v outside a %d-byte NTB", s, len(b))
			}
		}
		again, err2 := mbim.DecodeNTB(b, nil)
		if len(again) != len(spans) || (err == nil) != (err2 == nil) {
			t.Fatal("decoding is not deterministic")
		}
		if err != nil && !errors.Is(err, framing.ErrBadFrame) && !errors.Is(err, framing.ErrRunt) {
			t.Fatalf("error %v wraps neither ErrBadFrame nor ErrRunt", err)
		}
	})
}

// FuzzNTBRoundTrip: the builder's output always parses back to the same
// datagrams and sessions, for any datagram sizes, sessions, aggregation
// limit, flavour and buffer size.
func FuzzNTBRoundTrip(f *testing.F) {
	f.Add([]byte{0, 40, 3, 200, 0, 1}, uint8(0), false, uint16(1600), uint16(0), uint8(0), uint8(0), uint8(0))
	f.Add([]byte{5, 60, 5, 60, 9, 20}, uint8(32), false, uint16(32768), uint16(0), uint8(0), uint8(0), uint8(0))
	f.Add([]byte{1, 255, 2, 255, 1, 1}, uint8(3), true, uint16(300), uint16(0), uint8(0), uint8(0), uint8(0))
	f.Add([]byte{1, 100, 1, 100, 2, 7, 2, 7}, uint8(16), false, uint16(4000), uint16(8192), uint8(32), uint8(2), uint8(64))
	f.Fuzz(func(t *testing.T, spec []byte, maxd uint8, is32 bool, size, maxBytes uint16, div, rem, align uint8) {
		// spec: (session, length/…) pairs; lengths scale to 1..1530.
		var pkts []ntbPacket
		for i := 0; i+1 < len(spec) && len(pkts) < 200; i += 2 {
			n := 1 + int(spec[i+1])*6
			d := bytes.Repeat([]byte{spec[i]}, n)
			pkts = append(pkts, ntbPacket{spec[i], d})
		}
		f := mbim.NTB{MaxDatagrams: int(maxd), NTB32: is32, MaxBytes: int(maxBytes),
			Divisor: int(div), Remainder: int(rem), NDPAlign: int(align)}
		checkRoundTrip(t, f, max(int(size), 1531+f.Overhead()), pkts)
	})
}

// TestNTBSessionOffsetOnTheWire: with SessionOffset 112 (Foxconn
// SDX72/SDX75), session n is NDP session 112+n on the wire and decodes
// back to n; an NDP session below the offset decodes to a session the
// framing cannot carry (Sessions()), never to session 0.
func TestNTBSessionOffsetOnTheWire(t *testing.T) {
	f := mbim.NTB{SessionOffset: 112}
	if f.Sessions() != 144 {
		t.Fatalf("Sessions() = %d, want 144", f.Sessions())
	}
	for _, session := range []uint8{0, 1, 31, 143} {
		buf := make([]byte, 256)
		enc := f.NewEncoder().(framing.SessionEncoder)
		enc.Begin(buf)
		enc.SetSession(session)
		copy(enc.Add(20), bytes.Repeat([]byte{0x45}, 20))
		ntb := buf[:enc.End()]
		wire, err := mbim.DecodeNTB(ntb, nil)
		if err != nil || len(wire) != 1 || wire[0].ID != 112+session {
			t.Fatalf("session %d: wire %+v, %v; want NDP session %d", session, wire, err, 112+session)
		}
		got, err := f.Decode(ntb, nil)
		if err != nil || len(got) != 1 || got[0].ID != session {
			t.Fatalf("session %d: decoded %+v, %v", session, got, err)
		}
	}
	got, err := f.Decode(mbim.AppendNTB(nil, 0, 0, bytes.Repeat([]byte{0x45}, 20)), nil)
	if err != nil || len(got) != 1 || int(got[0].ID) < f.Sessions() {
		t.Fatalf("NDP session 0 with offset 112 decoded as %+v, %v; want a session of %d or above", got, err, f.Sessions())
	}
}
