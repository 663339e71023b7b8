package mhi

import "encoding/binary"

// Ring elements (§3): every transfer, command and event element is 16
// bytes: a 64-bit pointer and two 32-bit words; the type is dword1 23:16.
const ElementSize = 16

// Element types (§3.1).
const (
	TypeInvalid     = 0x00
	TypeNoopCmd     = 0x01
	TypeTransfer    = 0x02
	TypeCoalescing  = 0x08
	TypeResetCmd    = 0x10
	TypeStopCmd     = 0x11
	TypeStartCmd    = 0x12
	TypeStateChange = 0x20
	TypeCmdComplete = 0x21
	TypeTxEvent     = 0x22
	TypeRSCTxEvent  = 0x28
	TypeEEEvent     = 0x40
	TypeTsyncEvent  = 0x48
	TypeBWReqEvent  = 0x50
)

// TRE flags in dword1 (§3.2).
const (
	TREChain = 1 << 0
	TREIEOB  = 1 << 8
	TREIEOT  = 1 << 9
	TREBEI   = 1 << 10

	// MaxTRELen is the largest length a TRE can carry (16 bits).
	MaxTRELen = 0xFFFF
)

// Completion codes (§3.5).
type Code uint8

const (
	CodeInvalid  Code = 0x00
	CodeSuccess  Code = 0x01
	CodeEOT      Code = 0x02
	CodeOverflow Code = 0x03
	CodeEOB      Code = 0x04
	CodeOOB      Code = 0x05
	CodeDBMode   Code = 0x06
	CodeUndefErr Code = 0x10
	CodeBadTRE   Code = 0x11
)

func (c Code) String() string {
	switch c {
	case CodeInvalid:
		return "INVALID"
	case CodeSuccess:
		return "SUCCESS"
	case CodeEOT:
		return "EOT"
	case CodeOverflow:
		return "OVERFLOW"
	case CodeEOB:
		return "EOB"
	case CodeOOB:
		return "OOB"
	case CodeDBMode:
		return "DB_MODE"
	case CodeUndefErr:
		return "UNDEFINED_ERR"
	case CodeBadTRE:
		return "BAD_TRE"
	}
	return "CODE(" + hex8(uint8(c)) + ")"
}

func hex8(v uint8) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[v>>4], digits[v&15]})
}

// Element is one decoded ring element.
type Element struct {
	Ptr    uint64
	D0, D1 uint32
}

// DecodeElement decodes 16 bytes.
func DecodeElement(b []byte) Element {
	_ = b[ElementSize-1]
	le := binary.LittleEndian
	return Element{Ptr: le.Uint64(b), D0: le.Uint32(b[8:]), D1: le.Uint32(b[12:])}
}

// Encode writes e into b (at least 16 bytes).
func (e Element) Encode(b []byte) {
	_ = b[ElementSize-1]
	le := binary.LittleEndian
	le.PutUint64(b, e.Ptr)
	le.PutUint32(b[8:], e.D0)
	le.PutUint32(b[12:], e.D1)
}

// Type returns the element type (dword1 23:16).
func (e Element) Type() uint8 { return uint8(e.D1 >> 16) }

// Chan returns the channel id (dword1 31:24) of a command or TX event.
func (e Element) Chan() uint8 { return uint8(e.D1 >> 24) }

// Code returns the completion code (dword0 31:24) of a TX or command
// completion event.
func (e Element) Code() Code { return Code(e.D0 >> 24) }

// Len returns the length field (dword0 15:0) of a TRE or TX event.
func (e Element) Len() int { return int(e.D0 & 0xFFFF) }

// State returns the new MHI state of a STATE_CHANGE event (dword0 31:24).
func (e Element) State() State { return State(e.D0 >> 24) }

// EE returns the new execution environment of an EE event (dword0 31:24).
func (e Element) EE() EE { return EE(e.D0 >> 24) }

// Flags returns the TRE flag bits (CHAIN, IEOB, IEOT, BEI).
func (e Element) Flags() uint32 { return e.D1 & (TREChain | TREIEOB | TREIEOT | TREBEI) }

// TRE builds a transfer ring element. length is truncated to 16 bits by
// the format; callers split larger buffers.
func TRE(buf uint64, length int, flags uint32) Element {
	return Element{Ptr: buf, D0: uint32(length) & 0xFFFF, D1: TypeTransfer<<16 | flags&(TREChain|TREIEOB|TREIEOT|TREBEI)}
}

// Command builds a command ring element (§3.3).
func Command(typ uint8, ch int) Element {
	return Element{D1: uint32(ch&0xFF)<<24 | uint32(typ)<<16}
}

// TxEvent builds a transfer completion event (§3.4).
func TxEvent(tre uint64, length int, code Code, ch int) Element {
	return Element{Ptr: tre, D0: uint32(code)<<24 | uint32(length)&0xFFFF, D1: uint32(ch&0xFF)<<24 | TypeTxEvent<<16}
}

// CmdCompletionEvent builds a command completion event.
func CmdCompletionEvent(cmd uint64, code Code) Element {
	return Element{Ptr: cmd, D0: uint32(code) << 24, D1: TypeCmdComplete << 16}
}

// StateChangeEvent builds an MHI state change event.
func StateChangeEvent(s State) Element {
	return Element{D0: uint32(s) << 24, D1: TypeStateChange << 16}
}

// EEEvent builds an execution environment change event.
func EEEvent(e EE) Element {
	return Element{D0: uint32(e) << 24, D1: TypeEEEvent << 16}
}
