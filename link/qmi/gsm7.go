package qmi

// Operator names as the network sends them (3GPP TS 24.008 §10.5.3.5a,
// Network Name IE): in the GSM 7-bit default alphabet, packed, or in UCS2
// (3GPP TS 23.038 §6.2.1 and §5). NAS Get Operator Name carries them as
// they came, with a byte that names the coding (QmiNasPlmnEncodingScheme:
// 0 GSM 7-bit packed, 1 UCS2 little-endian) and the count of spare bits in
// the last octet.

import (
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// gsm7Default is the GSM 7-bit default alphabet (TS 23.038 §6.2.1,
// table 1); 0x1B escapes to gsm7Extension.
var gsm7Default = [128]rune{
	'@', '£', '$', '¥', 'è', 'é', 'ù', 'ì', 'ò', 'Ç', '\n', 'Ø', 'ø', '\r', 'Å', 'å',
	'Δ', '_', 'Φ', 'Γ', 'Λ', 'Ω', 'Π', 'Ψ', 'Σ', 'Θ', 'Ξ', 0x1B, 'Æ', 'æ', 'ß', 'É',
	' ', '!', '"', '#', '¤', '%', '&', '\'', '(', ')', '*', '+', ',', '-', '.', '/',
	'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', ':', ';', '<', '=', '>', '?',
	'¡', 'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'N', 'O',
	'P', 'Q', 'R', 'S', 'T', 'U', 'V', 'W', 'X', 'Y', 'Z', 'Ä', 'Ö', 'Ñ', 'Ü', '§',
	'¿', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o',
	'p', 'q', 'r', 's', 't', 'u', 'v', 'w', 'x', 'y', 'z', 'ä', 'ö', 'ñ', 'ü', 'à',
}

// gsm7Escape is the escape to the extension table.
const gsm7Escape = 0x1B

// gsm7Extension is the default alphabet extension table (TS 23.038
// §6.2.1.1): the characters an escaped septet stands for.
var gsm7Extension = map[byte]rune{
	0x0A: '\f', 0x14: '^', 0x28: '{', 0x29: '}', 0x2F: '\\',
	0x3C: '[', 0x3D: '~', 0x3E: ']', 0x40: '|', 0x65: '€',
}

// gsm7Reverse maps a character to its septets (one, or escape + one).
var gsm7Reverse = func() map[rune][]byte {
	m := make(map[rune][]byte, 140)
	for i, r := range gsm7Default {
		if i != gsm7Escape {
			m[r] = []byte{byte(i)}
		}
	}
	for s, r := range gsm7Extension {
		m[r] = []byte{gsm7Escape, s}
	}
	return m
}()

// ErrNameCoding is returned for a name whose bytes do not decode in the
// coding they claim.
var ErrNameCoding = errors.New("qmi: operator name not valid in its coding")

// DecodeGSM7 decodes unpacked septets (one per byte, bit 8 zero) of the
// default alphabet. An escape followed by a septet the extension table
// lacks stands for that septet of the default table, and a lone trailing
// escape for a space (TS 23.038 §6.2.1.1).
func DecodeGSM7(septets []byte) (string, error) {
	var b strings.Builder
	b.Grow(len(septets))
	for i := 0; i < len(septets); i++ {
		s := septets[i]
		if s > 0x7F {
			return "", ErrNameCoding
		}
		if s != gsm7Escape {
			b.WriteRune(gsm7Default[s])
			continue
		}
		if i+1 == len(septets) {
			b.WriteByte(' ')
			break
		}
		i++
		n := septets[i]
		if n > 0x7F {
			return "", ErrNameCoding
		}
		if r, ok := gsm7Extension[n]; ok {
			b.WriteRune(r)
		} else if n != gsm7Escape {
			b.WriteRune(gsm7Default[n])
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String(), nil
}

// UnpackGSM7 returns the septets packed into b, the first septet in the
// low bits of the first octet (TS 23.038 §6.1.2.1.1). spare is the count
// of unused high bits of the last octet (0..7, 0 when unknown); when it is
// unknown and 7 bits are left over, a trailing zero septet is taken for
// padding, not '@'.
func UnpackGSM7(b []byte, spare int) ([]byte, error) {
	if spare < 0 || spare > 7 || (len(b) == 0 && spare != 0) {
		return nil, ErrNameCoding
	}
	n := (len(b)*8 - spare) / 7
	out := make([]byte, n)
	for i := range n {
		bit := i * 7
		v := uint16(b[bit/8])
		if bit/8+1 < len(b) {
			v |= uint16(b[bit/8+1]) << 8
		}
		out[i] = byte(v>>(bit%8)) & 0x7F
	}
	if spare == 0 && n > 0 && len(b)*8%7 == 0 && out[n-1] == 0 {
		out = out[:n-1]
	}
	return out, nil
}

// PackGSM7 encodes s in the default alphabet, packed, and returns the
// octets and the count of spare bits in the last one; ok is false when s
// has a character the alphabet lacks (then send it as UCS2).
func PackGSM7(s string) (b []byte, spare int, ok bool) {
	var septets []byte
	for _, r := range s {
		v, found := gsm7Reverse[r]
		if !found {
			return nil, 0, false
		}
		septets = append(septets, v...)
	}
	bits := len(septets) * 7
	b = make([]byte, (bits+7)/8)
	for i, s := range septets {
		bit := i * 7
		b[bit/8] |= s << (bit % 8)
		if bit%8 > 1 {
			b[bit/8+1] |= s >> (8 - bit%8)
		}
	}
	return b, len(b)*8 - bits, true
}

// DecodeUCS2 decodes UCS2 (read as UTF-16, so surrogate pairs survive) in
// little- or big-endian byte order. A trailing NUL ends the name.
func DecodeUCS2(b []byte, littleEndian bool) (string, error) {
	if len(b)%2 != 0 {
		return "", ErrNameCoding
	}
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		v := uint16(b[i])<<8 | uint16(b[i+1])
		if littleEndian {
			v = uint16(b[i]) | uint16(b[i+1])<<8
		}
		if v == 0 {
			break
		}
		u = append(u, v)
	}
	s := string(utf16.Decode(u))
	if !utf8.ValidString(s) {
		return "", ErrNameCoding
	}
	return s, nil
}

// EncodeUCS2LE encodes s as UTF-16 little-endian.
func EncodeUCS2LE(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 0, 2*len(u))
	for _, v := range u {
		b = append(b, byte(v), byte(v>>8))
	}
	return b
}
