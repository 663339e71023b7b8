// Package qmap frames IP packets in QMAP (rmnet MAP), the multiplexing
// and aggregation protocol of QMI modems on the IP_HW0 channel
// (docs/FRAMING.md §4): MAPv1 and MAPv5 de-aggregation with padding and
// mux IDs, flow-control command frames answered with an ACK, and UL
// aggregation.
//
// A host uses it as the link endpoint's framing; mux IDs become sessions:
//
//	ep, err := link.New(ctx, ctrl, link.Options{Channel: mhi.ChannelIPHW0, Framing: qmap.Framing{Version: 5, MuxID: 1}})
//	other, err := ep.NewSessionEndpoint(2) // a second PDN on mux ID 2
//
// Decode, Aggregator and the command helpers are pure functions of
// their bytes, never panic on device input, and are fuzzed. Layouts are
// from include/linux/if_rmnet.h and rmnet.rst as summarised in the doc;
// no code was taken from Linux.
//
// Section numbers (§N.N) that name no document refer to docs/FRAMING.md.
package qmap

import (
	"encoding/binary"
	"fmt"

	"github.com/mhistack/mhistack/link/framing"
)

// MAP header, byte 0 (§4.1; the kernel doc numbers bits MSB first).
const (
	HeaderLen   = 4
	flagCD      = 0x80 // command (1) or data (0)
	flagNextHdr = 0x40 // MAPv5: a 4-byte header follows
	padMask     = 0x3F

	// V5HeaderLen is the MAPv5 checksum header between the MAP header
	// and the packet, not counted in PKT_LEN.
	V5HeaderLen = 4
	// v5 header_info: bit0 next header, bits 7..1 type.
	v5TypeCsum     = 2 // CSUM_OFFLOAD
	v5TypeCoalesce = 1 // never requested (§4.1)
	v5CsumValid    = 0x80
)

var be = binary.BigEndian

// Header is a decoded MAP header.
type Header struct {
	Cmd     bool  // CD: a command frame
	NextHdr bool  // MAPv5 header follows
	Pad     int   // PAD_LEN: trailing pad bytes counted in Len
	MuxID   uint8 // the PDN / rmnet link
	Len     int   // PKT_LEN: payload including pad, excluding headers
}

// ParseHeader decodes the MAP header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: MAP header of %d bytes", framing.ErrRunt, len(b))
	}
	return Header{
		Cmd:     b[0]&flagCD != 0,
		NextHdr: b[0]&flagNextHdr != 0,
		Pad:     int(b[0] & padMask),
		MuxID:   b[1],
		Len:     int(be.Uint16(b[2:])),
	}, nil
}

// PutHeader writes h at the start of b (4 bytes).
func PutHeader(b []byte, h Header) {
	b0 := byte(h.Pad) & padMask
	if h.Cmd {
		b0 |= flagCD
	}
	if h.NextHdr {
		b0 |= flagNextHdr
	}
	b[0], b[1] = b0, h.MuxID
	be.PutUint16(b[2:], uint16(h.Len))
}

// Decode appends to spans every data packet (Span.ID = mux ID) and every
// command frame (Span.Ctrl, the whole frame from its MAP header) of the
// aggregate frame b, walking 4 + PKT_LEN (+4 for a MAPv5 header) as rmnet
// does (§4.3). PKT_LEN 0 frames are skipped ("some hardware can send us
// empty frames"). The walk stops at the end of b; up to 3 trailing zero
// bytes are tolerated as alignment. version 5 requires the NEXT_HDR
// checksum header on data packets (rmnet rejects v5 data without it) and
// refuses any other v5 header type (coalescing is never requested);
// version 1 refuses NEXT_HDR. A v5 packet whose csum_info has the VALID
// bit (the modem validated its TCP/UDP checksum) gets Span.CsumValid. On damage it returns the packets found
// before it and an error wrapping framing.ErrBadFrame or framing.ErrRunt. The
// loop advances at least 4 bytes per step, so it ends; it never
// allocates when spans has room.
func Decode(b []byte, version int, spans []framing.Span) ([]framing.Span, error) {
	off := 0
	for off < len(b) {
		rest := b[off:]
		if len(rest) < HeaderLen {
			if allZero(rest) {
				return spans, nil
			}
			return spans, fmt.Errorf("%w: %d trailing bytes at %d", framing.ErrRunt, len(rest), off)
		}
		h, _ := ParseHeader(rest)
		hdr := HeaderLen
		if h.Len == 0 {
			off += HeaderLen
			continue
		}
		if h.Cmd {
			// Commands carry no v5 header (§4.1).
			if h.Len > len(rest)-hdr {
				return spans, fmt.Errorf("%w: command of %d bytes at %d, %d left", framing.ErrBadFrame, h.Len, off, len(rest)-hdr)
			}
			spans = append(spans, framing.Span{Off: off, Len: hdr + h.Len, ID: h.MuxID, Ctrl: true})
			off += hdr + h.Len
			continue
		}
		csumValid := false
		switch {
		case h.NextHdr && version == 5:
			if len(rest) < hdr+V5HeaderLen {
				return spans, fmt.Errorf("%w: MAPv5 header at %d", framing.ErrRunt, off)
			}
			info := rest[hdr]
			if info>>1 != v5TypeCsum || info&1 != 0 {
				return spans, fmt.Errorf("%w: MAPv5 header type %d at %d", framing.ErrBadFrame, info>>1, off)
			}
			csumValid = rest[hdr+1]&v5CsumValid != 0
			hdr += V5HeaderLen
		case h.NextHdr:
			return spans, fmt.Errorf("%w: NEXT_HDR on a MAPv%d frame at %d", framing.ErrBadFrame, version, off)
		case version == 5:
			return spans, fmt.Errorf("%w: MAPv5 data without its checksum header at %d", framing.ErrBadFrame, off)
		}
		if h.Len > len(rest)-hdr {
			return spans, fmt.Errorf("%w: PKT_LEN %d at %d, %d bytes left", framing.ErrBadFrame, h.Len, off, len(rest)-hdr)
		}
		if h.Pad >= h.Len {
			return spans, fmt.Errorf("%w: pad %d of PKT_LEN %d at %d", framing.ErrBadFrame, h.Pad, h.Len, off)
		}
		spans = append(spans, framing.Span{Off: off + hdr, Len: h.Len - h.Pad, ID: h.MuxID, CsumValid: csumValid})
		off += hdr + h.Len
	}
	return spans, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Framing is the framing.Framing of QMAP on IP_HW0: Version 1 (WDA
// aggregation protocol 5) or 5 (protocol 9, the checksum header), the UL
// mux ID of the endpoint's own session, and UL aggregation limits. The
// modem says in its WDA answer what it accepts on UL (Quectel: 11
// datagrams / 8192 bytes, §7); the zero values send one packet per
// frame, as rmnet does by default (§4.3).
type Framing struct {
	Version int // 1 or 5 (0 means 1)
	// MaxDatagrams and MaxBytes bound one UL aggregate (0: one packet
	// per frame; MaxBytes 0: the TX buffer).
	MaxDatagrams, MaxBytes int
	// Pad pads each UL packet to 4 bytes and says so in PAD_LEN, as
	// Quectel's driver does; rmnet adds no padding.
	Pad bool
}

func (f Framing) version() int {
	if f.Version == 5 {
		return 5
	}
	return 1
}

// Name implements framing.Framing.
func (f Framing) Name() string { return fmt.Sprintf("qmap-v%d", f.version()) }

// Decode implements framing.Framing with Decode.
func (f Framing) Decode(frame []byte, spans []framing.Span) ([]framing.Span, error) {
	return Decode(frame, f.version(), spans)
}

// NewEncoder implements framing.Framing: an *Aggregator.
func (f Framing) NewEncoder() framing.Encoder { return NewAggregator(f) }

// Overhead implements framing.Framing: MAP header, MAPv5 header, pad.
func (f Framing) Overhead() int {
	o := HeaderLen + 3
	if f.version() == 5 {
		o += V5HeaderLen
	}
	return o
}

// ULFrameBytes implements framing.Aggregating: MaxBytes when the
// aggregator puts more than one packet in a frame (MaxDatagrams > 1),
// capped at the 64 KiB a transfer holds; else 0.
func (f Framing) ULFrameBytes() int {
	if f.MaxDatagrams <= 1 || f.MaxBytes <= 0 {
		return 0
	}
	return min(f.MaxBytes, framing.MaxFrame)
}

// CheckUL reports how a UL aggregate that Decode parsed into spans
// without error breaks f's limits, as a modem enforcing what it answered
// in WDA Set Data Format would: more than MaxDatagrams frames, or more
// than MaxBytes bytes with more than one frame. Zero limits are not
// checked. It returns nil when frame keeps them.
func (f Framing) CheckUL(frame []byte, spans []framing.Span) error {
	if f.MaxDatagrams > 0 && len(spans) > f.MaxDatagrams {
		return fmt.Errorf("%w: %d frames in a UL aggregate, the modem takes %d", framing.ErrBadFrame, len(spans), f.MaxDatagrams)
	}
	if f.MaxBytes > 0 && len(spans) > 1 && len(frame) > f.MaxBytes {
		return fmt.Errorf("%w: UL aggregate of %d bytes, the modem takes %d", framing.ErrBadFrame, len(frame), f.MaxBytes)
	}
	return nil
}

// Answer implements framing.Controller: a command REQUEST is answered with
// its ACK (rmnet echoes the command with cmd_type ACK, §4.2); other
// frames get no answer.
func (f Framing) Answer(ctrl, dst []byte) int {
	n, err := AppendACK(dst[:0], ctrl)
	if err != nil || len(n) > len(dst) {
		return 0
	}
	return len(n)
}

var (
	_ framing.Aggregating = Framing{}
	_ framing.Controller  = Framing{}
)

// Aggregator builds UL QMAP aggregates in a caller's buffer: MAP header
// (+ MAPv5 checksum header, "no offload requested") + packet (+ pad) for
// each packet, up to the limits. It is the UL encoder of Framing
// (framing.SessionEncoder: the session is the mux ID) and the emulated
// modem's DL aggregator.
type Aggregator struct {
	f     Framing
	buf   []byte
	off   int
	n     int
	mux   uint8
	last  int // offset of the last packet's MAP header
	limit int
}

// NewAggregator returns an aggregator for f.
func NewAggregator(f Framing) *Aggregator { return &Aggregator{f: f} }

// SetSession implements framing.SessionEncoder: the mux ID of the packets
// added from now on.
func (a *Aggregator) SetSession(id uint8) { a.mux = id }

// Begin implements framing.Encoder.
func (a *Aggregator) Begin(buf []byte) {
	a.buf, a.off, a.n = buf, 0, 0
	a.limit = len(buf)
	if a.f.MaxBytes > 0 && a.f.MaxBytes < a.limit {
		a.limit = a.f.MaxBytes
	}
}

// Len returns the number of packets in the aggregate.
func (a *Aggregator) Len() int { return a.n }

// Add implements framing.Encoder. The first packet of a frame is limited
// by the buffer only, so that MaxBytes below the MTU cannot wedge a
// writer.
func (a *Aggregator) Add(n int) []byte {
	if n <= 0 || n > 0xFFFF-3 || a.buf == nil {
		return nil
	}
	if a.n > 0 && a.n >= max(a.f.MaxDatagrams, 1) {
		return nil
	}
	hdr := HeaderLen
	if a.f.version() == 5 {
		hdr += V5HeaderLen
	}
	pad := 0
	if a.f.Pad {
		pad = -n & 3
	}
	limit := a.limit
	if a.n == 0 {
		limit = len(a.buf)
	}
	end := a.off + hdr + n + pad
	if end > limit {
		return nil
	}
	h := a.buf[a.off:]
	PutHeader(h, Header{NextHdr: hdr > HeaderLen, Pad: pad, MuxID: a.mux, Len: n + pad})
	if hdr > HeaderLen {
		h[4], h[5], h[6], h[7] = v5TypeCsum<<1, 0, 0, 0
	}
	clear(a.buf[end-pad : end])
	a.last = a.off
	a.off = end
	a.n++
	return h[hdr : hdr+n : hdr+n]
}

// End implements framing.Encoder: the aggregate's length.
func (a *Aggregator) End() int {
	n := a.off
	a.buf, a.off, a.n = nil, 0, 0
	return n
}

// Command names and types (§4.2, rmnet_map.h).
const (
	CmdFlowDisable = 1
	CmdFlowEnable  = 2
	CmdFlowStart   = 7 // downstream DL marker
	CmdFlowEnd     = 8

	TypeRequest     = 0
	TypeACK         = 1
	TypeUnsupported = 2
	TypeInvalid     = 3

	// cmdHeaderLen: command_name, cmd_type, reserved u16, transaction u32.
	cmdHeaderLen = 8
)

// Command is a decoded QMAP command frame.
type Command struct {
	MuxID       uint8
	Name        uint8
	Type        uint8 // low 2 bits of cmd_type
	Transaction uint32
	Payload     []byte // aliases the frame
}

// ParseCommand decodes the command frame b (MAP header with CD set, then
// the command).
func ParseCommand(b []byte) (Command, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Command{}, err
	}
	if !h.Cmd {
		return Command{}, fmt.Errorf("%w: not a command frame", framing.ErrBadFrame)
	}
	if h.Len < cmdHeaderLen || h.Len > len(b)-HeaderLen {
		return Command{}, fmt.Errorf("%w: command PKT_LEN %d in %d bytes", framing.ErrBadFrame, h.Len, len(b))
	}
	c := b[HeaderLen : HeaderLen+h.Len]
	return Command{
		MuxID:       h.MuxID,
		Name:        c[0],
		Type:        c[1] & 3,
		Transaction: be.Uint32(c[4:]),
		Payload:     c[cmdHeaderLen:],
	}, nil
}

// AppendCommand appends the command frame of c to dst.
func AppendCommand(dst []byte, c Command) []byte {
	n := cmdHeaderLen + len(c.Payload)
	start := len(dst)
	dst = append(dst, make([]byte, HeaderLen+cmdHeaderLen)...)
	PutHeader(dst[start:], Header{Cmd: true, MuxID: c.MuxID, Len: n})
	b := dst[start+HeaderLen:]
	b[0], b[1] = c.Name, c.Type&3
	be.PutUint32(b[4:], c.Transaction)
	return append(dst, c.Payload...)
}

// AppendACK appends to dst the answer to the command frame req: the
// request echoed with cmd_type ACK for FLOW_DISABLE/FLOW_ENABLE,
// UNSUPPORTED for other requests (Quectel counts them; answering lets an
// emulator see it). ACKs and other non-requests get no answer (an
// error), so two hosts never ping-pong. The answer is never longer than
// the request.
func AppendACK(dst, req []byte) ([]byte, error) {
	c, err := ParseCommand(req)
	if err != nil {
		return dst, err
	}
	if c.Type != TypeRequest {
		return dst, fmt.Errorf("%w: command %d of type %d is not a request", framing.ErrBadFrame, c.Name, c.Type)
	}
	if c.Name == CmdFlowDisable || c.Name == CmdFlowEnable {
		c.Type = TypeACK
	} else {
		c.Type = TypeUnsupported
	}
	return AppendCommand(dst, c), nil
}

// FlowControl builds a FLOW_DISABLE (enable false) or FLOW_ENABLE request
// payload: ip_family in the low 2 bits of the first byte, a reserved
// byte, be16 sequence number and be32 QoS ID (§4.2).
func FlowControl(mux uint8, enable bool, txn uint32, seq uint16, qos uint32) Command {
	p := make([]byte, 8)
	p[0] = 3 // IPv4 and IPv6
	be.PutUint16(p[2:], seq)
	be.PutUint32(p[4:], qos)
	name := uint8(CmdFlowDisable)
	if enable {
		name = CmdFlowEnable
	}
	return Command{MuxID: mux, Name: name, Type: TypeRequest, Transaction: txn, Payload: p}
}
