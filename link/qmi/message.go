package qmi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

var le = binary.LittleEndian

// Kind says whether a message is a request, a response or an indication.
type Kind uint8

// Message kinds.
const (
	Request Kind = iota
	Response
	Indication
)

func (k Kind) String() string {
	switch k {
	case Request:
		return "request"
	case Response:
		return "response"
	case Indication:
		return "indication"
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// Wire constants of QMUX framing and the QMI SDU headers.
const (
	// IfType is the first byte of every QMUX frame.
	IfType = 0x01
	// QMUXHeaderLen is the QMUX header: I/F type, u16 length, flags,
	// service, client ID.
	QMUXHeaderLen = 6
	// CTLHeaderLen is the CTL SDU header: flags, u8 transaction, u16
	// message ID, u16 TLV length.
	CTLHeaderLen = 6
	// ServiceHeaderLen is the header of every other service's SDU:
	// flags, u16 transaction, u16 message ID, u16 TLV length.
	ServiceHeaderLen = 7
	// TLVHeaderLen is a TLV's type and u16 length.
	TLVHeaderLen = 3
	// MaxFrame is the largest QMUX frame: the length field counts
	// everything but the I/F type byte.
	MaxFrame = 1 + 0xFFFF

	// BroadcastClient is the client ID of indications for every client.
	BroadcastClient = 0xFF

	qmuxFromService = 0x80 // QMUX flags: sent by the modem

	ctlFlagResponse   = 0x01
	ctlFlagIndication = 0x02

	svcFlagCompound   = 0x01
	svcFlagResponse   = 0x02
	svcFlagIndication = 0x04
)

// TLV is one type-length-value item of a message. Value aliases the
// decoded frame.
type TLV struct {
	Type  uint8
	Value []byte
}

// Message is one QMUX frame: its service, client and SDU.
type Message struct {
	Service Service
	// Client is the client ID (0 for CTL, BroadcastClient for
	// indications to every client of the service).
	Client uint8
	// FromModem is the QMUX sender bit (0x80): set on everything the
	// modem sends.
	FromModem bool
	Kind      Kind
	// TID is the transaction ID: 8 bits on CTL, 16 bits otherwise.
	// Indications carry 0.
	TID uint16
	// ID is the message ID (per service).
	ID   uint16
	TLVs []TLV
}

// ErrMalformed matches (errors.Is) every *FormatError.
var ErrMalformed = errors.New("qmi: malformed message")

// FormatError is a frame that does not follow QMUX/QMI framing. The
// header fields are set as far as they could be read (Header says
// whether the SDU header was), so that a receiver can answer or fail the
// transaction the frame belonged to.
type FormatError struct {
	Reason string
	// Missing says a mandatory TLV is absent (a modem answers
	// MISSING_ARGUMENT rather than MALFORMED_MESSAGE).
	Missing bool
	Header  bool
	Service Service
	Client  uint8
	Kind    Kind
	TID     uint16
	ID      uint16
}

func (e *FormatError) Error() string {
	if e.Header {
		return fmt.Sprintf("qmi: malformed %s %s (tid %d): %s", MessageName(e.Service, e.ID), e.Kind, e.TID, e.Reason)
	}
	return "qmi: malformed frame: " + e.Reason
}

// Is makes errors.Is(err, ErrMalformed) hold.
func (e *FormatError) Is(target error) bool { return target == ErrMalformed }

// Len returns the encoded size of m.
func (m *Message) Len() int {
	n := QMUXHeaderLen + ServiceHeaderLen
	if m.Service == ServiceCTL {
		n = QMUXHeaderLen + CTLHeaderLen
	}
	for _, t := range m.TLVs {
		n += TLVHeaderLen + len(t.Value)
	}
	return n
}

// Append encodes m after dst. It fails if m does not fit QMUX (a frame
// over MaxFrame bytes, a TLV over 65535 bytes, a CTL TID over 255, an
// unknown Kind).
func (m *Message) Append(dst []byte) ([]byte, error) {
	n := m.Len()
	if n > MaxFrame {
		return dst, fmt.Errorf("qmi: %s of %d bytes exceeds a QMUX frame (%d)", MessageName(m.Service, m.ID), n, MaxFrame)
	}
	if m.Kind > Indication {
		return dst, fmt.Errorf("qmi: unknown message kind %d", m.Kind)
	}
	var qflags uint8
	if m.FromModem {
		qflags = qmuxFromService
	}
	dst = append(dst, IfType, byte(n-1), byte((n-1)>>8), qflags, byte(m.Service), m.Client)
	tlvLen := n - QMUXHeaderLen - ServiceHeaderLen
	if m.Service == ServiceCTL {
		if m.TID > 0xFF {
			return dst, fmt.Errorf("qmi: CTL transaction ID %d exceeds 8 bits", m.TID)
		}
		tlvLen = n - QMUXHeaderLen - CTLHeaderLen
		flags := [...]uint8{0, ctlFlagResponse, ctlFlagIndication}[m.Kind]
		dst = append(dst, flags, byte(m.TID))
	} else {
		flags := [...]uint8{0, svcFlagResponse, svcFlagIndication}[m.Kind]
		dst = append(dst, flags, byte(m.TID), byte(m.TID>>8))
	}
	dst = append(dst, byte(m.ID), byte(m.ID>>8), byte(tlvLen), byte(tlvLen>>8))
	for _, t := range m.TLVs {
		// n <= MaxFrame bounds every value below 65535.
		dst = append(dst, t.Type, byte(len(t.Value)), byte(len(t.Value)>>8))
		dst = append(dst, t.Value...)
	}
	return dst, nil
}

// Marshal encodes m.
func (m *Message) Marshal() ([]byte, error) { return m.Append(make([]byte, 0, m.Len())) }

// FrameLen reports the length of the QMUX frame at the start of b: 0 if
// b is too short to tell, an error if b does not start a frame.
func FrameLen(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if b[0] != IfType {
		return 0, &FormatError{Reason: fmt.Sprintf("I/F type %#02x, want %#02x", b[0], IfType)}
	}
	if len(b) < 3 {
		return 0, nil
	}
	n := int(le.Uint16(b[1:])) + 1
	if n < QMUXHeaderLen+CTLHeaderLen {
		return 0, &FormatError{Reason: fmt.Sprintf("QMUX length %d below the smallest message", n-1)}
	}
	return n, nil
}

// Parse decodes exactly one QMUX frame. TLV values alias b. Every length
// is checked: the QMUX length must be len(b)-1, the SDU's TLV length must
// be what follows its header, and the TLVs must fill it exactly (libqmi
// qmi-message.c applies the same checks).
func Parse(b []byte) (*Message, error) {
	n, err := FrameLen(b)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, &FormatError{Reason: fmt.Sprintf("%d bytes: shorter than a QMUX header", len(b))}
	}
	if n != len(b) {
		return nil, &FormatError{Reason: fmt.Sprintf("QMUX length %d, frame has %d bytes after the I/F type", n-1, len(b)-1)}
	}
	qflags := b[3]
	m := &Message{Service: Service(b[4]), Client: b[5], FromModem: qflags&qmuxFromService != 0}
	e := &FormatError{Service: m.Service, Client: m.Client}
	if qflags&^qmuxFromService != 0 {
		e.Reason = fmt.Sprintf("QMUX flags %#02x: unknown bits", qflags)
		return nil, e
	}
	sdu := b[QMUXHeaderLen:]
	var tlvs []byte
	if m.Service == ServiceCTL {
		f := sdu[0]
		m.TID = uint16(sdu[1])
		m.ID = le.Uint16(sdu[2:])
		switch f {
		case 0:
			m.Kind = Request
		case ctlFlagResponse:
			m.Kind = Response
		case ctlFlagIndication:
			m.Kind = Indication
		default:
			e.Header, e.TID, e.ID = true, m.TID, m.ID
			e.Reason = fmt.Sprintf("CTL flags %#02x", f)
			return nil, e
		}
		tlvs = sdu[CTLHeaderLen:]
		e.Header, e.Kind, e.TID, e.ID = true, m.Kind, m.TID, m.ID
		if l := int(le.Uint16(sdu[4:])); l != len(tlvs) {
			e.Reason = fmt.Sprintf("TLV length %d, %d bytes follow the header", l, len(tlvs))
			return nil, e
		}
	} else {
		if len(sdu) < ServiceHeaderLen {
			e.Reason = fmt.Sprintf("%s SDU of %d bytes: shorter than its header", m.Service, len(sdu))
			return nil, e
		}
		f := sdu[0]
		m.TID = le.Uint16(sdu[1:])
		m.ID = le.Uint16(sdu[3:])
		switch f &^ svcFlagCompound {
		case 0:
			m.Kind = Request
		case svcFlagResponse:
			m.Kind = Response
		case svcFlagIndication:
			m.Kind = Indication
		default:
			e.Header, e.TID, e.ID = true, m.TID, m.ID
			e.Reason = fmt.Sprintf("SDU flags %#02x", f)
			return nil, e
		}
		e.Header, e.Kind, e.TID, e.ID = true, m.Kind, m.TID, m.ID
		if f&svcFlagCompound != 0 {
			e.Reason = "compound messages are not supported"
			return nil, e
		}
		tlvs = sdu[ServiceHeaderLen:]
		if l := int(le.Uint16(sdu[5:])); l != len(tlvs) {
			e.Reason = fmt.Sprintf("TLV length %d, %d bytes follow the header", l, len(tlvs))
			return nil, e
		}
	}
	for len(tlvs) > 0 {
		if len(tlvs) < TLVHeaderLen {
			// A TLV whose size is missing or cut: name it.
			e.Reason = fmt.Sprintf("TLV %#02x: %d trailing bytes, shorter than a TLV header", tlvs[0], len(tlvs))
			return nil, e
		}
		t, l := tlvs[0], int(le.Uint16(tlvs[1:]))
		if l > len(tlvs)-TLVHeaderLen {
			e.Reason = fmt.Sprintf("TLV %#02x of %d bytes, %d left", t, l, len(tlvs)-TLVHeaderLen)
			return nil, e
		}
		m.TLVs = append(m.TLVs, TLV{Type: t, Value: tlvs[TLVHeaderLen : TLVHeaderLen+l : TLVHeaderLen+l]})
		tlvs = tlvs[TLVHeaderLen+l:]
	}
	return m, nil
}

// Decoder splits a byte stream into QMUX frames (libqmi reads its port
// as a stream too: frames need not match reads).
type Decoder struct {
	buf []byte
}

// Write appends input.
func (d *Decoder) Write(b []byte) { d.buf = append(d.buf, b...) }

// Buffered reports the bytes held.
func (d *Decoder) Buffered() int { return len(d.buf) }

// Reset drops buffered input.
func (d *Decoder) Reset() { d.buf = d.buf[:0] }

// Next returns the next message, nil (and nil error) if more input is
// needed, or an error for a malformed frame, which is dropped. Input
// that does not start with the I/F type is skipped up to the next
// candidate byte, so one bad frame does not lose the rest of the stream.
func (d *Decoder) Next() (*Message, error) {
	n, err := FrameLen(d.buf)
	if err != nil {
		skip := 1
		if d.buf[0] == IfType {
			skip = 3 // a frame header with an impossible length
		}
		for skip < len(d.buf) && d.buf[skip] != IfType {
			skip++
		}
		d.consume(skip)
		return nil, err
	}
	if n == 0 || n > len(d.buf) {
		return nil, nil
	}
	frame := append([]byte(nil), d.buf[:n]...)
	d.consume(n)
	return Parse(frame)
}

func (d *Decoder) consume(n int) {
	rest := copy(d.buf, d.buf[n:])
	d.buf = d.buf[:rest]
	if rest == 0 && cap(d.buf) > 4*MaxFrame {
		d.buf = nil
	}
}

// Get returns the value of the first TLV of type t.
func (m *Message) Get(t uint8) ([]byte, bool) {
	for _, v := range m.TLVs {
		if v.Type == t {
			return v.Value, true
		}
	}
	return nil, false
}

// Add appends a TLV.
func (m *Message) Add(t uint8, v []byte) *Message {
	m.TLVs = append(m.TLVs, TLV{Type: t, Value: v})
	return m
}

// AddU8, AddU16 and AddU32 append little-endian integer TLVs.
func (m *Message) AddU8(t uint8, v uint8) *Message { return m.Add(t, []byte{v}) }

// AddU16 appends a u16 TLV.
func (m *Message) AddU16(t uint8, v uint16) *Message { return m.Add(t, le.AppendUint16(nil, v)) }

// AddU32 appends a u32 TLV.
func (m *Message) AddU32(t uint8, v uint32) *Message { return m.Add(t, le.AppendUint32(nil, v)) }

// AddString appends a string TLV (no length prefix: the TLV's length is
// the string's, as libqmi encodes a string that is a whole TLV).
func (m *Message) AddString(t uint8, s string) *Message { return m.Add(t, []byte(s)) }

// String is a one-line description for logs.
func (m *Message) String() string {
	return fmt.Sprintf("%s %s tid %d client %d (%d TLVs)", MessageName(m.Service, m.ID), m.Kind, m.TID, m.Client, len(m.TLVs))
}

// Reply returns the response to request m: same service, client,
// transaction and message ID, sent by the modem, with a result TLV for
// code (0: success) and then tlvs.
func (m *Message) Reply(code ErrorCode, tlvs ...TLV) *Message {
	r := &Message{Service: m.Service, Client: m.Client, FromModem: true, Kind: Response, TID: m.TID, ID: m.ID}
	r.TLVs = append(r.TLVs, ResultTLV(code))
	r.TLVs = append(r.TLVs, tlvs...)
	return r
}

// reader reads the fields of one TLV value with bounds checks; the first
// failure sticks and names the field.
type reader struct {
	b   []byte
	err error
	ctx string
}

func newReader(b []byte, ctx string) *reader { return &reader{b: b, ctx: ctx} }

func (r *reader) fail(field string, need int) {
	if r.err == nil {
		r.err = &FormatError{Reason: fmt.Sprintf("%s: %s needs %d bytes, %d left", r.ctx, field, need, len(r.b))}
	}
	r.b = nil
}

func (r *reader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail(field, n)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8(field string) uint8 {
	if v := r.take(1, field); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16(field string) uint16 {
	if v := r.take(2, field); v != nil {
		return le.Uint16(v)
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if v := r.take(4, field); v != nil {
		return le.Uint32(v)
	}
	return 0
}

// str8 reads a string with a u8 length prefix.
func (r *reader) str8(field string) string {
	n := int(r.u8(field + " length"))
	return tlvString(r.take(n, field))
}

// tlvString decodes a string field, dropping trailing NUL, tab, CR and
// LF bytes: QMI strings are counted, not terminated, but real modems send
// C strings copied with their NUL and AT-style values ending in CRLF or a
// tab (docs/QUIRKS.md). Every codec decodes strings through it, so the
// padding is dropped in one place.
func tlvString(b []byte) string {
	end := len(b)
	for end > 0 {
		switch b[end-1] {
		case 0, '\t', '\r', '\n':
			end--
			continue
		}
		break
	}
	return string(b[:end])
}

// bytes8 reads a byte array with a u8 count prefix.
func (r *reader) bytes8(field string) []byte {
	n := int(r.u8(field + " count"))
	return r.take(n, field)
}

// done fails if bytes are left over when exact is set.
func (r *reader) done(exact bool) error {
	if r.err == nil && exact && len(r.b) != 0 {
		r.err = &FormatError{Reason: fmt.Sprintf("%s: %d unexpected trailing bytes", r.ctx, len(r.b))}
	}
	return r.err
}
