package mbim

import (
	"testing"
	"unicode/utf8"
)

// FuzzMBIMString: an (offset, size) pair and UTF-16LE data anywhere in a
// buffer, top-level or struct-relative. Reading must stay inside the
// buffer whatever the pair says (offset+size overflow, offsets into the
// fixed part, odd sizes, unpaired surrogates); a string that decodes
// re-encodes to the same text.
func FuzzMBIMString(f *testing.F) {
	w := newWriter(8)
	w.str(0, "internet")
	f.Add(w.bytes(), uint8(0), uint8(0))
	f.Add([]byte{8, 0, 0, 0, 3, 0, 0, 0, 0xd8, 0x00, 0x41}, uint8(0), uint8(0))
	f.Add([]byte{0xf8, 0xff, 0xff, 0xff, 16, 0, 0, 0}, uint8(0), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, off, base uint8) {
		r := newReader(data, "fuzz", 0)
		s := r.str(int(off), int(base), "string")
		if r.err != nil {
			return
		}
		if !utf8.ValidString(s) {
			t.Fatalf("decoded string %q is not valid UTF-8", s)
		}
		if back := decodeUTF16(encodeUTF16(s)); back != s {
			t.Fatalf("%q re-encodes to %q", s, back)
		}
	})
}
