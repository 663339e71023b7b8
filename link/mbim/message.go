package mbim

import (
	"encoding/binary"
	"fmt"
)

// MessageType is the first header field (docs/FRAMING.md §2.2). A
// response type is its request type | 0x80000000.
type MessageType uint32

// MBIM message types (MBIM 1.0 §9.1, libmbim mbim-message.h).
const (
	TypeOpen           MessageType = 0x00000001
	TypeClose          MessageType = 0x00000002
	TypeCommand        MessageType = 0x00000003
	TypeHostError      MessageType = 0x00000004
	TypeOpenDone       MessageType = 0x80000001
	TypeCloseDone      MessageType = 0x80000002
	TypeCommandDone    MessageType = 0x80000003
	TypeFunctionError  MessageType = 0x80000004
	TypeIndicateStatus MessageType = 0x80000007
)

func (t MessageType) String() string {
	switch t {
	case TypeOpen:
		return "OPEN"
	case TypeClose:
		return "CLOSE"
	case TypeCommand:
		return "COMMAND"
	case TypeHostError:
		return "HOST_ERROR"
	case TypeOpenDone:
		return "OPEN_DONE"
	case TypeCloseDone:
		return "CLOSE_DONE"
	case TypeCommandDone:
		return "COMMAND_DONE"
	case TypeFunctionError:
		return "FUNCTION_ERROR"
	case TypeIndicateStatus:
		return "INDICATE_STATUS"
	}
	return fmt.Sprintf("type %#x", uint32(t))
}

// fragmented reports whether messages of type t carry a fragment header.
func (t MessageType) fragmented() bool {
	return t == TypeCommand || t == TypeCommandDone || t == TypeIndicateStatus
}

// fixedLen is the size of the first (or only) fragment before the
// information buffer: header, fragment header and the type's fields; 0 for
// an unknown type (§2.2 table).
func (t MessageType) fixedLen() int {
	switch t {
	case TypeClose:
		return headerLen
	case TypeOpen, TypeHostError, TypeOpenDone, TypeCloseDone, TypeFunctionError:
		return headerLen + 4
	case TypeCommand, TypeCommandDone:
		return commandFixedLen
	case TypeIndicateStatus:
		return indicateFixedLen
	}
	return 0
}

// CommandType is the query/set field of COMMAND.
type CommandType uint32

// Command types.
const (
	Query CommandType = 0
	Set   CommandType = 1
)

const (
	headerLen        = 12 // MessageType, MessageLength, TransactionId
	fragHeaderLen    = 8  // TotalFragments, CurrentFragment
	commandFixedLen  = headerLen + fragHeaderLen + 16 + 4 + 4 + 4
	indicateFixedLen = headerLen + fragHeaderLen + 16 + 4 + 4

	// MinControlTransfer is the smallest MaxControlTransfer this package
	// accepts: a fragment must hold at least its fixed part and one byte.
	MinControlTransfer = 64
	// DefaultControlTransfer is what libmbim offers on wwan ports that
	// cannot report one, and thus what real modems are used to
	// (docs/FRAMING.md §2.1).
	DefaultControlTransfer = 4096
	// MaxControlTransfer is the largest fragment accepted or produced:
	// one MHI control transfer (Linux MHI_WWAN_MAX_MTU).
	MaxControlTransfer = 0x8000
	// MaxInformationBuffer bounds a reassembled information buffer; no
	// BASIC_CONNECT answer comes near it, and it keeps a hostile
	// TotalFragments from growing memory without limit.
	MaxInformationBuffer = 1 << 20
)

// Message is one MBIM message, reassembled from its fragments. Which
// fields are meaningful depends on Type:
//
//	OPEN                    MaxControlTransfer
//	OPEN_DONE, CLOSE_DONE   Status
//	HOST_ERROR, FUNCTION_ERROR  Error
//	COMMAND                 Service, CID, CommandType, Buffer
//	COMMAND_DONE            Service, CID, Status, Buffer
//	INDICATE_STATUS         Service, CID, Buffer
type Message struct {
	Type MessageType
	TID  uint32

	MaxControlTransfer uint32
	Status             Status
	Error              ProtocolError

	Service     UUID
	CID         uint32
	CommandType CommandType
	Buffer      []byte
}

func (m *Message) String() string {
	switch m.Type {
	case TypeOpen:
		return fmt.Sprintf("OPEN tid=%d max=%d", m.TID, m.MaxControlTransfer)
	case TypeOpenDone, TypeCloseDone:
		return fmt.Sprintf("%v tid=%d status=%q", m.Type, m.TID, m.Status)
	case TypeHostError, TypeFunctionError:
		return fmt.Sprintf("%v tid=%d %v", m.Type, m.TID, m.Error)
	case TypeCommand:
		op := "query"
		if m.CommandType == Set {
			op = "set"
		}
		return fmt.Sprintf("COMMAND tid=%d %s %s len=%d", m.TID, cidName(m.Service, m.CID), op, len(m.Buffer))
	case TypeCommandDone:
		return fmt.Sprintf("COMMAND_DONE tid=%d %s status=%q len=%d", m.TID, cidName(m.Service, m.CID), m.Status, len(m.Buffer))
	case TypeIndicateStatus:
		return fmt.Sprintf("INDICATE_STATUS tid=%d %s len=%d", m.TID, cidName(m.Service, m.CID), len(m.Buffer))
	}
	return fmt.Sprintf("%v tid=%d", m.Type, m.TID)
}

// Fragments encodes m as one or more fragments of at most max bytes
// (max ≤ 0: DefaultControlTransfer) and calls emit for each, in order; the
// slice passed to emit is reused for the next fragment. Only COMMAND,
// COMMAND_DONE and INDICATE_STATUS can be split; the others always fit.
func (m *Message) Fragments(max int, emit func(frag []byte) error) error {
	if max <= 0 {
		max = DefaultControlTransfer
	}
	max = min(max, MaxControlTransfer)
	fixed := m.Type.fixedLen()
	if fixed == 0 {
		return fmt.Errorf("mbim: cannot encode message type %v", m.Type)
	}
	if max < MinControlTransfer {
		return fmt.Errorf("mbim: max control transfer %d below %d", max, MinControlTransfer)
	}
	if !m.Type.fragmented() {
		return emit(m.appendFirst(make([]byte, 0, fixed), 1, 0, nil))
	}
	if len(m.Buffer) > MaxInformationBuffer {
		return fmt.Errorf("mbim: information buffer of %d bytes exceeds %d", len(m.Buffer), MaxInformationBuffer)
	}
	// Fragment 0 carries the fixed fields; the rest carry only the
	// header, the fragment header and continuation bytes (§2.3).
	first := max - fixed
	rest := max - headerLen - fragHeaderLen
	total := 1
	if len(m.Buffer) > first {
		total += (len(m.Buffer) - first + rest - 1) / rest
	}
	buf := make([]byte, 0, min(max, fixed+len(m.Buffer)))
	n := min(first, len(m.Buffer))
	if err := emit(m.appendFirst(buf, total, 0, m.Buffer[:n])); err != nil {
		return err
	}
	for cur, off := 1, n; cur < total; cur++ {
		k := min(rest, len(m.Buffer)-off)
		b := buf[:0]
		b = appendHeader(b, m.Type, headerLen+fragHeaderLen+k, m.TID)
		b = binary.LittleEndian.AppendUint32(b, uint32(total))
		b = binary.LittleEndian.AppendUint32(b, uint32(cur))
		b = append(b, m.Buffer[off:off+k]...)
		if err := emit(b); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// Append appends m unfragmented (as one message whatever its size).
func (m *Message) Append(b []byte) []byte {
	return m.appendFirst(b, 1, 0, m.Buffer)
}

// Encode returns m unfragmented.
func (m *Message) Encode() []byte { return m.Append(nil) }

// appendFirst appends the first (or only) fragment with part of the
// information buffer; InformationBufferLength is always the full length.
func (m *Message) appendFirst(b []byte, total, cur int, part []byte) []byte {
	le := binary.LittleEndian
	fixed := m.Type.fixedLen()
	b = appendHeader(b, m.Type, fixed+len(part), m.TID)
	switch m.Type {
	case TypeOpen:
		b = le.AppendUint32(b, m.MaxControlTransfer)
	case TypeOpenDone, TypeCloseDone:
		b = le.AppendUint32(b, uint32(m.Status))
	case TypeHostError, TypeFunctionError:
		b = le.AppendUint32(b, uint32(m.Error))
	case TypeCommand, TypeCommandDone, TypeIndicateStatus:
		b = le.AppendUint32(b, uint32(total))
		b = le.AppendUint32(b, uint32(cur))
		b = append(b, m.Service[:]...)
		b = le.AppendUint32(b, m.CID)
		switch m.Type {
		case TypeCommand:
			b = le.AppendUint32(b, uint32(m.CommandType))
		case TypeCommandDone:
			b = le.AppendUint32(b, uint32(m.Status))
		}
		b = le.AppendUint32(b, uint32(len(m.Buffer)))
		b = append(b, part...)
	}
	return b
}

func appendHeader(b []byte, t MessageType, length int, tid uint32) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(t))
	b = le.AppendUint32(b, uint32(length))
	return le.AppendUint32(b, tid)
}

// fragment is one decoded message or fragment.
type fragment struct {
	typ        MessageType
	tid        uint32
	total, cur uint32
	msg        Message // fixed fields; only in fragment 0
	infoLen    uint32  // InformationBufferLength, fragment 0 only
	data       []byte  // information buffer bytes in this fragment (aliases the input)
}

// decodeFragment decodes one message or fragment whose MessageLength is
// len(b). It checks every length against the type's fixed size (§2.2,
// docs/FRAMING.md §10 item 2) and never reads outside b.
func decodeFragment(b []byte) (fragment, error) {
	var f fragment
	if len(b) < headerLen {
		return f, fmt.Errorf("%w: %d bytes, shorter than a header", ErrMalformed, len(b))
	}
	le := binary.LittleEndian
	f.typ = MessageType(le.Uint32(b))
	if n := le.Uint32(b[4:]); uint64(n) != uint64(len(b)) {
		return f, fmt.Errorf("%w: MessageLength %d but %d bytes", ErrMalformed, n, len(b))
	}
	f.tid = le.Uint32(b[8:])
	fixed := f.typ.fixedLen()
	if fixed == 0 {
		return f, fmt.Errorf("%w: unknown message type %#x", ErrMalformed, uint32(f.typ))
	}
	f.msg.Type, f.msg.TID = f.typ, f.tid
	f.total, f.cur = 1, 0
	if !f.typ.fragmented() {
		if len(b) < fixed {
			return f, fmt.Errorf("%w: %v of %d bytes, want %d", ErrMalformed, f.typ, len(b), fixed)
		}
		switch f.typ {
		case TypeOpen:
			f.msg.MaxControlTransfer = le.Uint32(b[12:])
		case TypeOpenDone, TypeCloseDone:
			f.msg.Status = Status(le.Uint32(b[12:]))
		case TypeHostError, TypeFunctionError:
			f.msg.Error = ProtocolError(le.Uint32(b[12:]))
		}
		return f, nil
	}
	if len(b) < headerLen+fragHeaderLen {
		return f, fmt.Errorf("%w: %v of %d bytes, no fragment header", ErrMalformed, f.typ, len(b))
	}
	f.total, f.cur = le.Uint32(b[12:]), le.Uint32(b[16:])
	if f.total == 0 || f.cur >= f.total {
		return f, fmt.Errorf("%w: %v fragment %d of %d", ErrMalformed, f.typ, f.cur, f.total)
	}
	if f.cur > 0 {
		f.data = b[headerLen+fragHeaderLen:]
		return f, nil
	}
	if len(b) < fixed {
		return f, fmt.Errorf("%w: %v of %d bytes, want at least %d", ErrMalformed, f.typ, len(b), fixed)
	}
	p := headerLen + fragHeaderLen
	copy(f.msg.Service[:], b[p:p+16])
	p += 16
	f.msg.CID = le.Uint32(b[p:])
	p += 4
	switch f.typ {
	case TypeCommand:
		f.msg.CommandType = CommandType(le.Uint32(b[p:]))
		p += 4
	case TypeCommandDone:
		f.msg.Status = Status(le.Uint32(b[p:]))
		p += 4
	}
	f.infoLen = le.Uint32(b[p:])
	f.data = b[fixed:]
	// A complete message must hold its whole buffer; trailing bytes are
	// tolerated as libmbim does (it only checks ≥).
	if uint64(len(f.data)) > uint64(f.infoLen) {
		f.data = f.data[:f.infoLen]
	}
	if f.total == 1 && uint64(len(f.data)) < uint64(f.infoLen) {
		return f, fmt.Errorf("%w: %v carries %d of %d information bytes", ErrMalformed, f.typ, len(f.data), f.infoLen)
	}
	if f.infoLen > MaxInformationBuffer {
		return f, fmt.Errorf("%w: %v information buffer of %d bytes", ErrMalformed, f.typ, f.infoLen)
	}
	return f, nil
}

// Decode decodes one complete, unfragmented message (len(b) must equal
// its MessageLength). Use a Decoder for a stream or fragments.
func Decode(b []byte) (*Message, error) {
	f, err := decodeFragment(b)
	if err != nil {
		return nil, err
	}
	if f.total != 1 {
		return nil, fmt.Errorf("%w: %v is fragment %d of %d", ErrMalformed, f.typ, f.cur, f.total)
	}
	m := f.msg
	if f.typ.fragmented() {
		m.Buffer = append([]byte(nil), f.data...)
	}
	return &m, nil
}
