package sahara

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Cmd is a Sahara command id. Values and fixed packet lengths from Linux
// drivers/accel/qaic/sahara.c and qdl src/sahara.c; minimum protocol
// versions in brackets.
type Cmd uint32

// Commands (docs/FLASHING.md, "Sahara").
const (
	CmdHello         Cmd = 0x01 // T→H [1.0]
	CmdHelloResp     Cmd = 0x02 // H→T [1.0]
	CmdReadData      Cmd = 0x03 // T→H [1.0]
	CmdEndOfImage    Cmd = 0x04 // T→H [1.0]
	CmdDone          Cmd = 0x05 // H→T [1.0]
	CmdDoneResp      Cmd = 0x06 // T→H [1.0]
	CmdReset         Cmd = 0x07 // H→T [1.0]
	CmdResetResp     Cmd = 0x08 // T→H [1.0]
	CmdMemoryDebug   Cmd = 0x09 // T→H [2.0]
	CmdMemoryRead    Cmd = 0x0A // H→T [2.0]
	CmdMemoryDebug64 Cmd = 0x10 // T→H [2.5]
	CmdMemoryRead64  Cmd = 0x11 // H→T [2.5]
	CmdReadData64    Cmd = 0x12 // T→H [2.8]
)

// Mode is the HELLO mode field.
type Mode uint32

// Modes.
const (
	ModeImageTxPending  Mode = 0
	ModeImageTxComplete Mode = 1
	ModeMemoryDebug     Mode = 2
	ModeCommand         Mode = 3
)

// Status values (END_OF_IMAGE, HELLO_RESP); names as bkerler/edl
// sahara_defs.py.
const (
	StatusSuccess           uint32 = 0x00
	StatusInvalidCmd        uint32 = 0x01
	StatusProtocolMismatch  uint32 = 0x02
	StatusInvalidPacketSize uint32 = 0x05
	StatusUnexpectedImageID uint32 = 0x06
	StatusReadDataError     uint32 = 0x0D
)

// DONE_RESP image_tx_status.
const (
	DonePending  uint32 = 0 // more images follow
	DoneComplete uint32 = 1 // the target runs the image
)

// Version is what the host answers in HELLO_RESP (version 2, compatible 1,
// as qdl).
const (
	Version           = 2
	VersionCompatible = 1
)

// lengths is every command's fixed packet length (header included).
var lengths = map[Cmd]int{
	CmdHello: 0x30, CmdHelloResp: 0x30, CmdReadData: 0x14, CmdEndOfImage: 0x10,
	CmdDone: 0x08, CmdDoneResp: 0x0C, CmdReset: 0x08, CmdResetResp: 0x08,
	CmdMemoryDebug: 0x10, CmdMemoryRead: 0x10, CmdMemoryDebug64: 0x18,
	CmdMemoryRead64: 0x18, CmdReadData64: 0x20,
}

// MaxPacket is the longest command packet (HELLO).
const MaxPacket = 0x30

// Errors of Decode.
var (
	ErrShort     = errors.New("sahara: packet shorter than its header")
	ErrUnknown   = errors.New("sahara: unknown command")
	ErrLength    = errors.New("sahara: length field does not match the command")
	ErrTrailing  = errors.New("sahara: transfer longer than the packet's length field")
	ErrTableSize = errors.New("sahara: memory debug table length not a whole number of entries")
)

// Packet is one decoded command. Only the fields of Cmd are meaningful:
//
//	HELLO, HELLO_RESP: Version, Compatible, MaxLen (HELLO) or Status (RESP), Mode
//	READ_DATA(64):     Image, Offset, Length
//	END_OF_IMAGE:      Image, Status
//	DONE_RESP:         Status
//	MEMORY_DEBUG(64):  Offset (table address), Length (table length)
//	MEMORY_READ(64):   Offset (address), Length
type Packet struct {
	Cmd        Cmd
	Version    uint32
	Compatible uint32
	MaxLen     uint32
	Mode       Mode
	Status     uint32
	Image      uint64
	Offset     uint64
	Length     uint64
}

func (c Cmd) String() string {
	switch c {
	case CmdHello:
		return "HELLO"
	case CmdHelloResp:
		return "HELLO_RESP"
	case CmdReadData:
		return "READ_DATA"
	case CmdEndOfImage:
		return "END_OF_IMAGE"
	case CmdDone:
		return "DONE"
	case CmdDoneResp:
		return "DONE_RESP"
	case CmdReset:
		return "RESET"
	case CmdResetResp:
		return "RESET_RESP"
	case CmdMemoryDebug:
		return "MEMORY_DEBUG"
	case CmdMemoryRead:
		return "MEMORY_READ"
	case CmdMemoryDebug64:
		return "MEMORY_DEBUG64"
	case CmdMemoryRead64:
		return "MEMORY_READ64"
	case CmdReadData64:
		return "READ_DATA64"
	}
	return fmt.Sprintf("command %#x", uint32(c))
}

// Decode parses one command packet. The transfer must be exactly the
// command's fixed length, and the length field must say so: a device (or
// host) that writes anything else is refused, as qdl and qaic answer such
// packets with RESET.
func Decode(b []byte) (Packet, error) {
	if len(b) < 8 {
		return Packet{}, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	p := Packet{Cmd: Cmd(le32(b, 0))}
	want, ok := lengths[p.Cmd]
	if !ok {
		return Packet{}, fmt.Errorf("%w %#x", ErrUnknown, uint32(p.Cmd))
	}
	if n := le32(b, 4); n != uint32(want) || len(b) < want {
		return Packet{}, fmt.Errorf("%w: %v says %d bytes in a %d-byte transfer, want %d", ErrLength, p.Cmd, n, len(b), want)
	}
	if len(b) > want {
		return Packet{}, fmt.Errorf("%w: %v in %d bytes", ErrTrailing, p.Cmd, len(b))
	}
	switch p.Cmd {
	case CmdHello:
		p.Version, p.Compatible, p.MaxLen, p.Mode = le32(b, 8), le32(b, 12), le32(b, 16), Mode(le32(b, 20))
	case CmdHelloResp:
		p.Version, p.Compatible, p.Status, p.Mode = le32(b, 8), le32(b, 12), le32(b, 16), Mode(le32(b, 20))
	case CmdReadData:
		p.Image, p.Offset, p.Length = uint64(le32(b, 8)), uint64(le32(b, 12)), uint64(le32(b, 16))
	case CmdReadData64:
		p.Image, p.Offset, p.Length = le64(b, 8), le64(b, 16), le64(b, 24)
	case CmdEndOfImage:
		p.Image, p.Status = uint64(le32(b, 8)), le32(b, 12)
	case CmdDoneResp:
		p.Status = le32(b, 8)
	case CmdMemoryDebug, CmdMemoryRead:
		p.Offset, p.Length = uint64(le32(b, 8)), uint64(le32(b, 12))
	case CmdMemoryDebug64, CmdMemoryRead64:
		p.Offset, p.Length = le64(b, 8), le64(b, 16)
	}
	return p, nil
}

// Append encodes p after dst. Fields that do not fit a 32-bit command are
// an error, not truncated.
func Append(dst []byte, p Packet) ([]byte, error) {
	n, ok := lengths[p.Cmd]
	if !ok {
		return dst, fmt.Errorf("%w %#x", ErrUnknown, uint32(p.Cmd))
	}
	b := make([]byte, n)
	put32 := func(off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
	put64 := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	fits := func(vs ...uint64) error {
		for _, v := range vs {
			if v > 0xFFFFFFFF {
				return fmt.Errorf("sahara: %v: value %#x does not fit 32 bits", p.Cmd, v)
			}
		}
		return nil
	}
	put32(0, uint32(p.Cmd))
	put32(4, uint32(n))
	switch p.Cmd {
	case CmdHello:
		put32(8, p.Version)
		put32(12, p.Compatible)
		put32(16, p.MaxLen)
		put32(20, uint32(p.Mode))
	case CmdHelloResp:
		put32(8, p.Version)
		put32(12, p.Compatible)
		put32(16, p.Status)
		put32(20, uint32(p.Mode))
	case CmdReadData:
		if err := fits(p.Image, p.Offset, p.Length); err != nil {
			return dst, err
		}
		put32(8, uint32(p.Image))
		put32(12, uint32(p.Offset))
		put32(16, uint32(p.Length))
	case CmdReadData64:
		put64(8, p.Image)
		put64(16, p.Offset)
		put64(24, p.Length)
	case CmdEndOfImage:
		if err := fits(p.Image); err != nil {
			return dst, err
		}
		put32(8, uint32(p.Image))
		put32(12, p.Status)
	case CmdDoneResp:
		put32(8, p.Status)
	case CmdMemoryDebug, CmdMemoryRead:
		if err := fits(p.Offset, p.Length); err != nil {
			return dst, err
		}
		put32(8, uint32(p.Offset))
		put32(12, uint32(p.Length))
	case CmdMemoryDebug64, CmdMemoryRead64:
		put64(8, p.Offset)
		put64(16, p.Length)
	}
	return append(dst, b...), nil
}

// Region is one entry of the memory debug table: a piece of the target's
// RAM the host may read with MEMORY_READ(64).
type Region struct {
	Type        uint64 // save preference
	Address     uint64
	Length      uint64
	Description string
	Filename    string
}

// Debug table entry sizes: three u32 or u64 fields, then description[20]
// and filename[20] (qaic struct sahara_debug_table_entry64).
const (
	strLen       = 20
	EntrySize32  = 3*4 + 2*strLen // 52
	EntrySize64  = 3*8 + 2*strLen // 64
	MaxTableSize = 64 << 10
)

// DecodeTable parses a memory debug table. Strings are cut at their first
// NUL (the device need not terminate them) and filenames are sanitised to
// a base name of [A-Za-z0-9._-].
func DecodeTable(b []byte, wide bool) ([]Region, error) {
	size := EntrySize32
	if wide {
		size = EntrySize64
	}
	if len(b)%size != 0 || len(b) > MaxTableSize {
		return nil, fmt.Errorf("%w: %d bytes, entry %d", ErrTableSize, len(b), size)
	}
	rs := make([]Region, 0, len(b)/size)
	for off := 0; off < len(b); off += size {
		e := b[off : off+size]
		var r Region
		if wide {
			r.Type, r.Address, r.Length = le64(e, 0), le64(e, 8), le64(e, 16)
		} else {
			r.Type, r.Address, r.Length = uint64(le32(e, 0)), uint64(le32(e, 4)), uint64(le32(e, 8))
		}
		s := size - 2*strLen
		r.Description = cstring(e[s : s+strLen])
		r.Filename = SanitizeFilename(cstring(e[s+strLen : s+2*strLen]))
		rs = append(rs, r)
	}
	return rs, nil
}

// AppendTable encodes regions as a memory debug table (the target's side).
func AppendTable(dst []byte, rs []Region, wide bool) []byte {
	for _, r := range rs {
		if wide {
			dst = binary.LittleEndian.AppendUint64(dst, r.Type)
			dst = binary.LittleEndian.AppendUint64(dst, r.Address)
			dst = binary.LittleEndian.AppendUint64(dst, r.Length)
		} else {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Type))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Address))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Length))
		}
		var s [2 * strLen]byte
		copy(s[:strLen-1], r.Description)
		copy(s[strLen:2*strLen-1], r.Filename)
		dst = append(dst, s[:]...)
	}
	return dst
}

// SanitizeFilename keeps a device-given name from leaving the dump
// directory or being empty: path separators and other bytes outside
// [A-Za-z0-9._-] become '_', and a name of only dots becomes "region".
func SanitizeFilename(s string) string {
	b := []byte(s)
	dots := true
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
		if b[i] != '.' {
			dots = false
		}
	}
	if dots {
		return "region"
	}
	return string(b)
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func le32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
func le64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
