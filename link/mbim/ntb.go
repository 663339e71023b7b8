package mbim

import (
	"encoding/binary"
	"fmt"

	"github.com/mhistack/mhistack/link/framing"
)

// MBIM data framing: NCM Transfer Blocks (docs/FRAMING.md §3.1,
// docs/PROTOCOL.md §7.2). All fields are little-endian.
const (
	NTH16Sig = 0x484D434E // "NCMH"
	NTH32Sig = 0x686D636E // "ncmh"
	NDP16IPS = 0x00535049 // "IPS" + session id in the 4th byte
	NDP32IPS = 0x00737069 // "ips" + session id
	NDP16DSS = 0x00535344 // device service stream: skipped
	NDP32DSS = 0x00737364

	nth16Len    = 12 // sig, wHeaderLength, wSequence, wBlockLength, wNdpIndex
	nth32Len    = 16 // sig, wHeaderLength, wSequence, dwBlockLength, dwNdpIndex
	ndp16Header = 8  // sig, wLength, wNextNdpIndex
	ndp32Header = 16 // sig, wLength, wReserved6, dwNextNdpIndex, dwReserved12
	ndp16Entry  = 4  // wDatagramIndex, wDatagramLength
	ndp32Entry  = 8  // dwDatagramIndex, dwDatagramLength
	ndp16Min    = 0x10
	ndp32Min    = 0x20

	// NTB16Overhead is what mhi_wwan_mbim's TX adds to one datagram:
	// NTH16, the NDP16 header and two pointers (the datagram and the
	// {0,0} end), so the datagram starts at 0x1C (§3.2).
	NTB16Overhead = nth16Len + ndp16Header + 2*ndp16Entry
	// NTB32Overhead is the same layout in 32-bit structures.
	NTB32Overhead = nth32Len + ndp32Header + 2*ndp32Entry

	// maxNTB16 is the largest block a 16-bit wBlockLength describes.
	maxNTB16 = 0xFFFF
)

// DecodeNTB appends to spans the datagrams of every IPS NDP of the NTB16
// or NTB32 in b (chosen by the NTH signature), with the NDP's session in
// Span.ID, and returns it. DSS and other NDPs are skipped, as
// mhi_mbim_rx does (§3.2).
//
// Every index and length is checked against the block: wBlockLength
// (0 means "the whole transfer", as the kernel accepts), NDP indices
// (at or after the NTH, 4-byte aligned as NCM requires), NDP lengths, and
// every datagram. The NDP walk only goes forward: a wNextNdpIndex at or
// before the NDP it is in (an NDP that points at itself or back, which
// firmware has sent) ends the walk with an error, after the datagrams
// found so far, so no datagram is delivered twice and the walk takes at
// most block/min steps. An NDP's last entry is its
// terminator; datagram entries end at the first {0,0}. On damage DecodeNTB
// returns the datagrams found before it and an error wrapping
// framing.ErrBadFrame or framing.ErrRunt. It never allocates when spans has
// room and never panics.
func DecodeNTB(b []byte, spans []framing.Span) ([]framing.Span, error) {
	if len(b) < 4 {
		return spans, fmt.Errorf("%w: NTB of %d bytes", framing.ErrRunt, len(b))
	}
	switch le.Uint32(b) {
	case NTH16Sig:
		return decodeNTB(b, spans, false)
	case NTH32Sig:
		return decodeNTB(b, spans, true)
	}
	return spans, fmt.Errorf("%w: NTH signature %#08x", framing.ErrBadFrame, le.Uint32(b))
}

var le = binary.LittleEndian

// ntbLayout holds the sizes of one NTB flavour.
type ntbLayout struct {
	nth, ndpHeader, entry, ndpMin int
	ips                           uint32
}

var (
	layout16 = ntbLayout{nth16Len, ndp16Header, ndp16Entry, ndp16Min, NDP16IPS}
	layout32 = ntbLayout{nth32Len, ndp32Header, ndp32Entry, ndp32Min, NDP32IPS}
)

func decodeNTB(b []byte, spans []framing.Span, is32 bool) ([]framing.Span, error) {
	l := layout16
	if is32 {
		l = layout32
	}
	// The smallest NTB carrying anything: NTH and an NDP header (the
	// kernel's "12 + 8" check, §3.2).
	if len(b) < l.nth+l.ndpHeader {
		return spans, fmt.Errorf("%w: NTB of %d bytes", framing.ErrRunt, len(b))
	}
	if hl := int(le.Uint16(b[4:])); hl != l.nth {
		return spans, fmt.Errorf("%w: wHeaderLength %d", framing.ErrBadFrame, hl)
	}
	var block, ndp int
	if is32 {
		block, ndp = u32int(b[8:]), u32int(b[12:])
	} else {
		block, ndp = int(le.Uint16(b[8:])), int(le.Uint16(b[10:]))
	}
	if block != 0 {
		if block > len(b) || block < l.nth+l.ndpHeader {
			return spans, fmt.Errorf("%w: block length %d in a %d-byte transfer", framing.ErrBadFrame, block, len(b))
		}
		b = b[:block]
	}
	if ndp == 0 {
		return spans, fmt.Errorf("%w: no NDP", framing.ErrBadFrame)
	}
	for prev := 0; ndp != 0; {
		if ndp <= prev {
			return spans, fmt.Errorf("%w: NDP at %#x chains back to %#x", framing.ErrBadFrame, prev, ndp)
		}
		prev = ndp
		if ndp < l.nth || ndp%4 != 0 || ndp > len(b)-l.ndpHeader {
			return spans, fmt.Errorf("%w: NDP index %#x", framing.ErrBadFrame, ndp)
		}
		sig, n := le.Uint32(b[ndp:]), int(le.Uint16(b[ndp+4:]))
		if n < l.ndpMin || n > len(b)-ndp || (n-l.ndpHeader)%l.entry != 0 {
			return spans, fmt.Errorf("%w: NDP at %#x has wLength %d", framing.ErrBadFrame, ndp, n)
		}
		if sig&0x00FFFFFF == l.ips {
			var err error
			if spans, err = ndpDatagrams(b, ndp, n, uint8(sig>>24), l, spans); err != nil {
				return spans, err
			}
		}
		if is32 {
			ndp = u32int(b[ndp+8:])
		} else {
			ndp = int(le.Uint16(b[ndp+6:]))
		}
	}
	return spans, nil
}

// ndpDatagrams appends the datagrams of the NDP of n bytes at ndp.
func ndpDatagrams(b []byte, ndp, n int, session uint8, l ntbLayout, spans []framing.Span) ([]framing.Span, error) {
	last := ndp + n - l.entry // the terminator slot
	for e := ndp + l.ndpHeader; e <= last; e += l.entry {
		var idx, dl int
		if l.entry == ndp32Entry {
			idx, dl = u32int(b[e:]), u32int(b[e+4:])
		} else {
			idx, dl = int(le.Uint16(b[e:])), int(le.Uint16(b[e+2:]))
		}
		if idx == 0 || dl == 0 {
			return spans, nil
		}
		if e == last {
			return spans, fmt.Errorf("%w: NDP at %#x has no {0,0} terminator", framing.ErrBadFrame, ndp)
		}
		if idx < l.nth || idx > len(b) || dl > len(b)-idx {
			return spans, fmt.Errorf("%w: datagram [%#x,+%d) outside the %d-byte block", framing.ErrBadFrame, idx, dl, len(b))
		}
		spans = append(spans, framing.Span{Off: idx, Len: dl, ID: session})
	}
	return spans, nil
}

// u32int reads a little-endian u32 as an int that cannot be negative or
// overflow index arithmetic on 64-bit and 32-bit platforms alike.
func u32int(b []byte) int {
	v := le.Uint32(b)
	if v > 1<<30 {
		return 1 << 30 // beyond any buffer: fails the bounds checks
	}
	return int(v)
}

// NTB is the framing.Framing of the IP_HW0_MBIM channel: NTB16 (or NTB32)
// transfer blocks whose IPS NDPs carry the IP packets of up to 256
// sessions (§3). Decode accepts both NTB16 and NTB32 and reports each
// datagram's session; the encoder builds what the zero value says:
// mhi_wwan_mbim's one datagram per NTB16 (datagram at 0x1C).
//
// MaxDatagrams, MaxBytes, Divisor, Remainder and NDPAlign are the modem's
// NTB OUT parameters (NCM 1.0 §6.2.1: wNtbOutMaxDatagrams,
// dwNtbOutMaxSize, wNdpOutDivisor, wNdpOutPayloadRemainder,
// wNdpOutAlignment). MHI has no request that reads them from the device
// (§3.2), so they come from the caller (link.Options.Framing).
type NTB struct {
	// MaxDatagrams > 1 puts up to that many datagrams in one UL NTB
	// (the NDPs then follow the datagrams). Whether firmware accepts
	// this on MHI is unverified (§3.2: the kernel never aggregates UL);
	// leave it 0 for what Linux sends.
	MaxDatagrams int
	// MaxBytes bounds an aggregated UL NTB (0: the TX buffer, at most
	// 64 KiB for NTB16). The link endpoint sizes its TX buffers to it
	// (ULFrameBytes). The first datagram of an NTB is bounded by the
	// buffer only, so a MaxBytes below the MTU cannot wedge a writer.
	MaxBytes int
	// Divisor and Remainder place each datagram of an aggregated NTB at
	// an offset with offset % Divisor == Remainder (0: Divisor 4,
	// Remainder 0; Divisor must be 1..4096, Remainder below it, or both
	// fall back to that). NDPAlign aligns every NDP (0 or anything but a
	// power of two from 4 to 4096: 4, what NCM requires at least).
	// With MaxDatagrams ≤ 1 none of these apply: the NTB has Linux's
	// fixed layout.
	Divisor, Remainder, NDPAlign int
	// NTB32 builds NTB32 instead of NTB16 (no MHI modem is known to
	// want it; NCM hosts on USB can).
	NTB32 bool
	// SessionOffset is added to every session on the wire: MBIM session
	// n travels in NDPs whose session byte is SessionOffset+n, and Decode
	// reports such a datagram as session n. SDX72/SDX75-based Foxconn
	// modems take 112 (mhi.Profile.MBIMSessionOffset: Linux
	// drivers/net/wwan/mhi_wwan_mbim.c, "net: wwan: mhi_wwan_mbim: use
	// correct mux_id for multiplexing"). The mapping is modulo 256, so a
	// datagram whose session byte is below the offset decodes as a
	// session of Sessions() or above, which no endpoint serves: it is
	// dropped and counted as an unknown session, never given to
	// session 0.
	SessionOffset uint8
}

// Sessions implements framing.SessionLimit: the sessions f carries,
// 0 to Sessions()-1 (256 - SessionOffset: a session byte is 8 bits).
func (f NTB) Sessions() int { return 256 - int(f.SessionOffset) }

// ulLayout returns f's datagram divisor and remainder and NDP alignment,
// with the defaults and fallbacks of NTB applied.
func (f NTB) ulLayout() (div, rem, align int) {
	div, rem, align = f.Divisor, f.Remainder, f.NDPAlign
	if div < 1 || div > 4096 || rem < 0 || rem >= div {
		div, rem = 4, 0
	}
	if align < 4 || align > 4096 || align&(align-1) != 0 {
		align = 4
	}
	return div, rem, align
}

// Sequence implements framing.Sequenced: the NTH's wSequence (at the same
// place in NTH16 and NTH32), or false when frame has no NTH.
func (f NTB) Sequence(frame []byte) (uint16, bool) {
	if len(frame) < nth16Len {
		return 0, false
	}
	if sig := le.Uint32(frame); sig != NTH16Sig && sig != NTH32Sig {
		return 0, false
	}
	return le.Uint16(frame[6:]), true
}

// Name implements framing.Framing.
func (f NTB) Name() string {
	if f.NTB32 {
		return "mbim-ntb32"
	}
	return "mbim-ntb16"
}

// Decode implements framing.Framing with DecodeNTB, each datagram's
// session less SessionOffset.
func (f NTB) Decode(frame []byte, spans []framing.Span) ([]framing.Span, error) {
	start := len(spans)
	spans, err := DecodeNTB(frame, spans)
	if f.SessionOffset != 0 {
		for i := start; i < len(spans); i++ {
			spans[i].ID -= f.SessionOffset
		}
	}
	return spans, err
}

// NewEncoder implements framing.Framing: a *NTBBuilder.
func (f NTB) NewEncoder() framing.Encoder { return NewNTBBuilder(f) }

// Overhead implements framing.Framing: the headers around one datagram,
// plus, when NDPs follow the datagrams, the padding before the datagram
// (Divisor, Remainder) and before the NDP (NDPAlign).
func (f NTB) Overhead() int {
	o := NTB16Overhead
	if f.NTB32 {
		o = NTB32Overhead
	}
	if f.MaxDatagrams > 1 {
		div, _, align := f.ulLayout()
		o += div - 1 + align - 1
	}
	return o
}

// ULFrameBytes implements framing.Aggregating: MaxBytes when the encoder
// aggregates (MaxDatagrams > 1), capped at what wBlockLength describes;
// else 0.
func (f NTB) ULFrameBytes() int {
	if f.MaxDatagrams <= 1 || f.MaxBytes <= 0 {
		return 0
	}
	if !f.NTB32 {
		return min(f.MaxBytes, maxNTB16)
	}
	return f.MaxBytes
}

// CheckUL reports how an NTB that DecodeNTB parsed into spans without
// error breaks f's NTB OUT parameters, as a modem enforcing them would:
// more than MaxDatagrams datagrams, more than MaxBytes bytes with more
// than one datagram, a datagram off Divisor/Remainder or an NDP off
// NDPAlign. Zero parameters are not checked (so NTB{} accepts any
// well-formed NTB). It returns nil when frame keeps them.
func (f NTB) CheckUL(frame []byte, spans []framing.Span) error {
	if f.MaxDatagrams > 0 && len(spans) > f.MaxDatagrams {
		return fmt.Errorf("%w: %d datagrams in a UL NTB, the modem takes %d", framing.ErrBadFrame, len(spans), f.MaxDatagrams)
	}
	if f.MaxBytes > 0 && len(spans) > 1 && len(frame) > f.MaxBytes {
		return fmt.Errorf("%w: UL NTB of %d bytes, the modem takes %d", framing.ErrBadFrame, len(frame), f.MaxBytes)
	}
	div, rem, align := f.ulLayout()
	if f.Divisor > 0 && len(spans) > 1 {
		for i, s := range spans {
			if s.Off%div != rem {
				return fmt.Errorf("%w: datagram %d at %d, not %d mod %d", framing.ErrBadFrame, i, s.Off, rem, div)
			}
		}
	}
	if f.NDPAlign > 0 && len(frame) >= nth16Len {
		l, is32 := layout16, le.Uint32(frame) == NTH32Sig
		next := func(ndp int) int { return int(le.Uint16(frame[ndp+6:])) }
		idx := int(le.Uint16(frame[10:]))
		if is32 {
			l = layout32
			next = func(ndp int) int { return u32int(frame[ndp+8:]) }
			if len(frame) < nth32Len {
				return nil
			}
			idx = u32int(frame[12:])
		}
		for range len(frame)/l.ndpMin + 1 {
			if idx == 0 || idx+l.ndpHeader > len(frame) {
				break
			}
			if idx%align != 0 {
				return fmt.Errorf("%w: NDP at %d, not aligned to %d", framing.ErrBadFrame, idx, align)
			}
			idx = next(idx)
		}
	}
	return nil
}

var _ framing.Aggregating = NTB{}

// maxNTBDatagrams bounds NTB.MaxDatagrams: the builder keeps one entry
// per datagram in a fixed array.
const maxNTBDatagrams = 1024

// NTBBuilder builds NTBs one at a time in a caller's buffer. It is the
// UL encoder of NTB (framing.SessionEncoder) and the emulated modem's DL
// aggregator. With MaxDatagrams ≤ 1 it writes mhi_wwan_mbim's layout
// (§3.2): NTH, one NDP at the NTH's end, the datagram at 0x1C (0x30 for
// NTB32). Otherwise datagrams follow the NTH, each 4-byte aligned, and at
// End one NDP per session follows them, chained in order of first use;
// an NTB may then mix sessions. wSequence counts NTBs.
type NTBBuilder struct {
	l     ntbLayout
	is32  bool
	max   int
	bytes int // MaxBytes (0: the buffer)
	div   int // datagram offset % div == rem
	rem   int
	align int // NDP alignment
	buf   []byte
	end   int   // end of the datagrams
	off   uint8 // NTB.SessionOffset
	sess  uint8
	seq   uint16
	ents  []ntbEntry
	order []uint8 // sessions in order of first use
	seen  [256]bool
}

type ntbEntry struct {
	off, n  int
	session uint8
}

// NewNTBBuilder returns a builder of f's layout.
func NewNTBBuilder(f NTB) *NTBBuilder {
	b := &NTBBuilder{l: layout16, is32: f.NTB32, max: min(max(f.MaxDatagrams, 1), maxNTBDatagrams), bytes: max(f.MaxBytes, 0), off: f.SessionOffset}
	b.div, b.rem, b.align = f.ulLayout()
	if f.NTB32 {
		b.l = layout32
	}
	b.ents = make([]ntbEntry, 0, b.max)
	b.order = make([]uint8, 0, 4)
	return b
}

// SetSession implements framing.SessionEncoder: id is the session
// index; the NDP carries it plus NTB.SessionOffset.
func (b *NTBBuilder) SetSession(id uint8) { b.sess = id + b.off }

// SetSequence sets the wSequence of the next NTB.
func (b *NTBBuilder) SetSequence(seq uint16) { b.seq = seq }

// Begin implements framing.Encoder.
func (b *NTBBuilder) Begin(buf []byte) {
	if !b.is32 && len(buf) > maxNTB16 {
		buf = buf[:maxNTB16]
	}
	b.buf = buf
	b.ents = b.ents[:0]
	for _, s := range b.order {
		b.seen[s] = false
	}
	b.order = b.order[:0]
	b.end = b.l.nth
	if b.max == 1 {
		b.end = b.l.nth + b.l.ndpHeader + 2*b.l.entry
	}
}

// Len returns the number of datagrams in the NTB being built.
func (b *NTBBuilder) Len() int { return len(b.ents) }

// ndpBytes is the room the NDPs need with one more datagram for session
// s, with the padding between NDPs that NDPAlign may need.
func (b *NTBBuilder) ndpBytes(s uint8) int {
	nsess := len(b.order)
	if !b.seen[s] {
		nsess++
	}
	// Each NDP: header + terminator; each datagram: one entry.
	return nsess*(b.l.ndpHeader+b.l.entry) + (len(b.ents)+1)*b.l.entry + (nsess-1)*(b.align-1)
}

// alignUp returns the first offset at or after off that is a multiple of a.
func alignUp(off, a int) int { return (off + a - 1) / a * a }

// Add implements framing.Encoder: room for an n-byte datagram of the current
// session, or nil when the NTB is full (datagram count or bytes).
func (b *NTBBuilder) Add(n int) []byte {
	if n <= 0 || len(b.ents) == b.max || b.buf == nil {
		return nil
	}
	off := b.end
	if b.max == 1 {
		if off+n > len(b.buf) {
			return nil
		}
	} else {
		off += ((b.rem-off%b.div)%b.div + b.div) % b.div
		limit := len(b.buf)
		if len(b.ents) > 0 && b.bytes > 0 {
			limit = min(limit, b.bytes)
		}
		if alignUp(off+n, b.align)+b.ndpBytes(b.sess) > limit {
			return nil
		}
		clear(b.buf[b.end:off])
	}
	if !b.seen[b.sess] {
		b.seen[b.sess] = true
		b.order = append(b.order, b.sess)
	}
	b.ents = append(b.ents, ntbEntry{off, n, b.sess})
	b.end = off + n
	return b.buf[off : off+n : off+n]
}

// End implements framing.Encoder: it writes the NTH and the NDPs and returns
// the NTB's length (0 when empty).
func (b *NTBBuilder) End() int {
	if len(b.ents) == 0 {
		b.buf = nil
		return 0
	}
	buf := b.buf
	total := b.end
	first := b.l.nth
	if b.max == 1 {
		b.putNDP(buf, b.l.nth, b.ents[0].session, b.ents, 0)
	} else {
		// One NDP per session after the datagrams, chained in order,
		// each at NDPAlign.
		pos := alignUp(b.end, b.align)
		first = pos
		for i, s := range b.order {
			cnt := 0
			for _, e := range b.ents {
				if e.session == s {
					cnt++
				}
			}
			size := b.l.ndpHeader + (cnt+1)*b.l.entry
			next := 0
			if i+1 < len(b.order) {
				next = alignUp(pos+size, b.align)
			}
			clear(buf[b.end:pos])
			b.putNDP(buf, pos, s, b.ents, next)
			b.end = pos + size
			pos = next
		}
		total = b.end
	}
	le.PutUint32(buf[0:], b.nthSig())
	le.PutUint16(buf[4:], uint16(b.l.nth))
	le.PutUint16(buf[6:], b.seq)
	if b.is32 {
		le.PutUint32(buf[8:], uint32(total))
		le.PutUint32(buf[12:], uint32(first))
	} else {
		le.PutUint16(buf[8:], uint16(total))
		le.PutUint16(buf[10:], uint16(first))
	}
	b.seq++
	b.buf = nil
	return total
}

func (b *NTBBuilder) nthSig() uint32 {
	if b.is32 {
		return NTH32Sig
	}
	return NTH16Sig
}

// putNDP writes at pos the NDP of session s listing its datagrams of
// ents, then the {0,0} terminator, and returns its length.
func (b *NTBBuilder) putNDP(buf []byte, pos int, s uint8, ents []ntbEntry, next int) {
	l := b.l
	h := buf[pos:]
	e := l.ndpHeader
	for _, d := range ents {
		if d.session != s {
			continue
		}
		if b.is32 {
			le.PutUint32(h[e:], uint32(d.off))
			le.PutUint32(h[e+4:], uint32(d.n))
		} else {
			le.PutUint16(h[e:], uint16(d.off))
			le.PutUint16(h[e+2:], uint16(d.n))
		}
		e += l.entry
	}
	clear(h[e : e+l.entry])
	e += l.entry
	le.PutUint32(h[0:], l.ips|uint32(s)<<24)
	le.PutUint16(h[4:], uint16(e))
	if b.is32 {
		le.PutUint16(h[6:], 0)
		le.PutUint32(h[8:], uint32(next))
		le.PutUint32(h[12:], 0)
	} else {
		le.PutUint16(h[6:], uint16(next))
	}
}

// AppendNTB appends to dst an NTB16 holding one datagram for session,
// exactly as mhi_wwan_mbim's TX lays it out (§3.2), with wSequence seq.
func AppendNTB(dst []byte, seq uint16, session uint8, dgram []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, NTB16Overhead+len(dgram))...)
	var b NTBBuilder
	b.l, b.max = layout16, 1
	b.seq = seq
	b.sess = session
	b.Begin(dst[start:])
	copy(b.Add(len(dgram)), dgram)
	b.End()
	return dst
}
