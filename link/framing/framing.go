// Package framing is the contract between the link endpoint and the wire
// formats of a data channel: how IP packets are found in a received frame
// (Framing.Decode, Span) and packed into a sent one (Encoder,
// SessionEncoder), plus RawIP, the framing without headers. link/mbim
// (NTB16/32) and link/qmap (QMAP v1/v5) implement it; link's Endpoint and
// the emulated modem's network (link/simnet) use it. It imports nothing
// of the project, so both sides of a channel share it without depending
// on each other (docs/ARCHITECTURE.md).
package framing

import "errors"

// MaxFrame bounds one received frame after OVERFLOW reassembly: the MHI
// TRE length field is 16 bits and Linux caps raw-IP MTUs at 0xFFFF
// (docs/PROTOCOL.md §7.1), so a longer chain is a broken or hostile device.
const MaxFrame = 65535

// Span locates one IP packet inside a received frame.
type Span struct {
	Off, Len int
	// ID is the packet's session: the MBIM IP session of its NDP
	// (docs/FRAMING.md §3.1) or the QMAP mux ID (docs/FRAMING.md §4.1); 0 on raw IP.
	// The endpoint hands packets of other sessions than its own to the
	// Session endpoints made with NewSessionEndpoint.
	ID uint8
	// Ctrl marks an in-band control frame rather than an IP packet (a
	// QMAP command, docs/FRAMING.md §4.2): the endpoint passes it to the framing's
	// Controller instead of the stack.
	Ctrl bool
	// CsumValid says the modem validated the packet's TCP/UDP checksum
	// and found it good (the QMAPv5 checksum header's csum_valid bit,
	// docs/FRAMING.md §4.1; rmnet marks such packets CHECKSUM_UNNECESSARY). The endpoint
	// then checks only the IPv4 header checksum itself. Framings that
	// carry no such statement leave it false.
	CsumValid bool
}

// SessionEncoder is an Encoder whose frames carry a session (MBIM IP
// session, QMAP mux ID). The endpoint sets the session of every frame it
// begins to the writer's session.
type SessionEncoder interface {
	Encoder
	// SetSession selects the session of the packets added from now on.
	SetSession(id uint8)
}

// SessionLimit is a Framing that carries fewer than 256 sessions: IDs
// from Sessions() up have no place on the wire (an MBIM NTB whose session
// bytes are offset, mbim.NTB.SessionOffset). A packet decoded with such
// an ID belongs to no session: the endpoint drops and counts it.
type SessionLimit interface {
	Framing
	Sessions() int
}

// Sequenced is a Framing whose frames carry a 16-bit sequence number
// the device increments per frame (MBIM's NTH wSequence). Modems skip and
// repeat it (an SDX55 restarts it at 0 mid-stream: Linux
// drivers/net/wwan/mhi_wwan_mbim.c, "net: wwan: mhi_wwan_mbim: Silence
// sequence number glitch errors"), so it means nothing for delivery: the
// endpoint delivers every frame and counts those whose number is not the
// previous one's plus one (link.Stats.RXSequenceGlitches), without
// logging them.
type Sequenced interface {
	Framing
	// Sequence returns frame's sequence number, false if it has none.
	Sequence(frame []byte) (uint16, bool)
}

// Controller is a Framing with in-band control frames that the host
// answers (QMAP flow-control commands, docs/FRAMING.md §4.2).
type Controller interface {
	// Answer writes into dst the UL frame answering the control frame
	// ctrl (a span Decode marked Ctrl) and returns its length, or 0 when
	// there is nothing to send. It must not write more than len(dst).
	Answer(ctrl, dst []byte) int
}

// Framing is how IP packets travel in the frames of a data channel: raw IP
// (one packet per transfer, this package), QMAP or MBIM NTB (many packets
// per frame, link/qmap and link/mbim).
//
// Decode is a pure function of the frame, so framings are table-tested and
// fuzzed without a device. The endpoint decodes a frame once, then
// delivers its packets over as many poll passes as the budget needs.
type Framing interface {
	// Name is what logs and Stats call the framing ("raw-ip", "qmap").
	Name() string
	// Decode appends the location of every IP packet in frame to spans
	// and returns it. Spans must lie inside frame. On a malformed frame it
	// returns the packets found before the damage and an error; the
	// endpoint delivers those and counts the frame as an RX error.
	// Decode must not retain frame or allocate when spans has room.
	Decode(frame []byte, spans []Span) ([]Span, error)
	// NewEncoder returns an encoder for UL frames. Each endpoint keeps
	// one and uses it under its TX lock.
	NewEncoder() Encoder
	// Overhead is the most bytes a UL frame adds around one packet
	// (headers, padding): a TX buffer of MTU+Overhead bytes always
	// holds at least one packet.
	Overhead() int
}

// Aggregating is implemented by a Framing whose encoder packs several
// packets into one UL frame up to limits the modem gave (QMAP's UL
// aggregation size from QMI WDA, MBIM's NTB OUT size). ULFrameBytes is
// the largest UL frame those limits allow, or 0 when frames carry one
// packet; the link endpoint sizes its TX buffers to it unless told
// otherwise, so that a batch of packets queued together travels in as
// few frames (TREs, completions) as the limits permit.
type Aggregating interface {
	Framing
	ULFrameBytes() int
}

// Encoder builds one UL frame at a time in a TX buffer: Begin, then Add
// for each packet until it reports the frame full, then End.
type Encoder interface {
	// Begin starts a frame in buf (the whole TX buffer).
	Begin(buf []byte)
	// Add reserves room for an IP packet of n bytes and returns the
	// slice of the frame to copy it into, or nil when the frame cannot
	// take it (the caller ends the frame and begins another). A frame
	// that holds no packet yet must take any n up to len(buf)-Overhead.
	Add(n int) []byte
	// End finishes the frame (lengths, trailers) and returns its length
	// in bytes; 0 if no packet was added.
	End() int
}

// Errors of Decode.
var (
	// ErrRunt: the frame (or a packet in it) is shorter than its headers.
	ErrRunt = errors.New("framing: frame too short")
	// ErrBadFrame: the frame's headers are inconsistent.
	ErrBadFrame = errors.New("framing: malformed frame")
)

// RawIP is the framing of mhi_net's IP_HW0 and IP_SW0 channels: each
// transfer is exactly one IPv4 or IPv6 packet, no header
// (docs/PROTOCOL.md §7.1). The IP version is checked at delivery, not here.
type RawIP struct{}

// Name implements Framing.
func (RawIP) Name() string { return "raw-ip" }

// Decode implements Framing: the whole frame is one packet.
func (RawIP) Decode(frame []byte, spans []Span) ([]Span, error) {
	if len(frame) == 0 {
		return spans, ErrRunt
	}
	return append(spans, Span{Off: 0, Len: len(frame)}), nil
}

// NewEncoder implements Framing.
func (RawIP) NewEncoder() Encoder { return &rawEncoder{} }

// Overhead implements Framing: raw IP adds nothing.
func (RawIP) Overhead() int { return 0 }

// rawEncoder puts one packet in each frame.
type rawEncoder struct {
	buf []byte
	n   int
}

func (e *rawEncoder) Begin(buf []byte) { e.buf, e.n = buf, 0 }

func (e *rawEncoder) Add(n int) []byte {
	if e.n != 0 || n <= 0 || n > len(e.buf) {
		return nil
	}
	e.n = n
	return e.buf[:n]
}

func (e *rawEncoder) End() int {
	n := e.n
	e.buf, e.n = nil, 0
	return n
}
