package mbim

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
)

// Information buffers (docs/FRAMING.md §2.7): a fixed part of
// little-endian fields, then a variable part holding strings and arrays,
// each item padded to 4 bytes and referenced from the fixed part by an
// (offset, size) pair. Offsets are relative to the start of the buffer
// for top-level fields and to the start of the enclosing struct for fields
// of nested structs.

// reader reads one information buffer with a sticky error: the first
// out-of-range access records what was wrong and every later read returns
// zero, so a decoder reads all its fields and checks err once.
type reader struct {
	b   []byte
	err error
	cid string
}

func newReader(b []byte, cid string, fixed int) *reader {
	r := &reader{b: b, cid: cid}
	if len(b) < fixed {
		r.failf("%d bytes, want at least %d", len(b), fixed)
	}
	return r
}

func (r *reader) failf(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %s", ErrMalformed, r.cid, fmt.Sprintf(format, args...))
	}
}

// span checks [off, off+n) against the buffer without overflowing.
func (r *reader) span(off, n uint64, what string) bool {
	if r.err != nil {
		return false
	}
	if off > uint64(len(r.b)) || n > uint64(len(r.b))-off {
		r.failf("%s at %d+%d outside %d bytes", what, off, n, len(r.b))
		return false
	}
	return true
}

func (r *reader) u32(off int) uint32 {
	if !r.span(uint64(off), 4, "field") {
		return 0
	}
	return binary.LittleEndian.Uint32(r.b[off:])
}

func (r *reader) u64(off int) uint64 {
	if !r.span(uint64(off), 8, "field") {
		return 0
	}
	return binary.LittleEndian.Uint64(r.b[off:])
}

func (r *reader) uuid(off int) (u UUID) {
	if r.span(uint64(off), 16, "uuid") {
		copy(u[:], r.b[off:])
	}
	return u
}

// bytesAt returns n bytes at base+offset.
func (r *reader) bytesAt(base int, offset, n uint64, what string) []byte {
	if !r.span(uint64(base)+offset, n, what) {
		return nil
	}
	s := uint64(base) + offset
	return r.b[s : s+n]
}

// str reads the (offset, size) pair at field off; the data is at
// base+offset. An empty string is (0, 0).
func (r *reader) str(off, base int, what string) string {
	o, n := r.u32(off), r.u32(off+4)
	if r.err != nil || n == 0 {
		return ""
	}
	if n%2 != 0 {
		r.failf("%s: odd UTF-16 size %d", what, n)
		return ""
	}
	b := r.bytesAt(base, uint64(o), uint64(n), what)
	if b == nil {
		return ""
	}
	return decodeUTF16(b)
}

// decodeUTF16 decodes UTF-16LE; unpaired surrogates become U+FFFD.
func decodeUTF16(b []byte) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

// writer builds one information buffer: the fixed part is allocated up
// front, items appended to the variable part get top-level offsets.
type writer struct {
	b     []byte
	fixed int
}

func newWriter(fixed int) *writer { return &writer{b: make([]byte, fixed, fixed+64), fixed: fixed} }

func (w *writer) u32(off int, v uint32) { binary.LittleEndian.PutUint32(w.b[off:], v) }
func (w *writer) u64(off int, v uint64) { binary.LittleEndian.PutUint64(w.b[off:], v) }
func (w *writer) uuid(off int, u UUID)  { copy(w.b[off:], u[:]) }

// data appends p, padded to 4 bytes, and returns its offset.
func (w *writer) data(p []byte) uint32 {
	off := uint32(len(w.b))
	w.b = append(w.b, p...)
	for len(w.b)%4 != 0 {
		w.b = append(w.b, 0)
	}
	return off
}

// ol appends p and writes its (offset, size) pair at off; empty p is (0, 0).
func (w *writer) ol(off int, p []byte) {
	if len(p) == 0 {
		w.u32(off, 0)
		w.u32(off+4, 0)
		return
	}
	w.u32(off, w.data(p))
	w.u32(off+4, uint32(len(p)))
}

func (w *writer) str(off int, s string) { w.ol(off, encodeUTF16(s)) }

func encodeUTF16(s string) []byte {
	if s == "" {
		return nil
	}
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}

func (w *writer) bytes() []byte { return w.b }
