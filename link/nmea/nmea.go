// Package nmea reads and writes NMEA 0183 sentences, what a modem's GNSS
// receiver streams on its NMEA channel: "$" + talker and type + ","-
// separated fields + "*" + two hex digits of checksum (the XOR of every
// byte between "$" and "*") + CR LF, at most 82 characters in all.
//
//	var sp nmea.Splitter
//	for _, line := range sp.Feed(chunk) {
//		s, err := nmea.Parse(line) // errors.Is(err, nmea.ErrChecksum)
//	}
package nmea

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxSentence is the longest sentence NMEA 0183 allows, "$" to LF.
const MaxSentence = 82

// Errors of Parse.
var (
	ErrChecksum = errors.New("nmea: checksum mismatch")
	ErrSyntax   = errors.New("nmea: malformed sentence")
)

// Sentence is one parsed sentence.
type Sentence struct {
	Talker string // "GP", "GN", "GL", …
	Type   string // "GGA", "RMC", "GSV", …
	Fields []string
}

// Checksum is the XOR of the bytes of body (what is between "$" and "*").
func Checksum(body string) byte {
	var c byte
	for i := 0; i < len(body); i++ {
		c ^= body[i]
	}
	return c
}

// Parse parses one sentence, with or without its CR LF. A sentence
// without a checksum is refused: the NMEA channel is a byte stream, and
// only the checksum tells a whole sentence from a garbled one.
func Parse(line string) (Sentence, error) {
	line = strings.TrimRight(line, "\r\n")
	if len(line) > MaxSentence-2 || len(line) < 1 || (line[0] != '$' && line[0] != '!') {
		return Sentence{}, fmt.Errorf("%w: %.90q", ErrSyntax, line)
	}
	star := strings.LastIndexByte(line, '*')
	if star < 0 || star != len(line)-3 {
		return Sentence{}, fmt.Errorf("%w: no checksum in %q", ErrSyntax, line)
	}
	body := line[1:star]
	want, err := strconv.ParseUint(line[star+1:], 16, 8)
	if err != nil {
		return Sentence{}, fmt.Errorf("%w: checksum %q", ErrSyntax, line[star+1:])
	}
	if got := Checksum(body); got != byte(want) {
		return Sentence{}, fmt.Errorf("%w: %q has %02X, its bytes give %02X", ErrChecksum, line, want, got)
	}
	for i := 0; i < len(body); i++ {
		if c := body[i]; c < 0x20 || c > 0x7E || c == '$' || c == '*' {
			return Sentence{}, fmt.Errorf("%w: byte %#02x in %q", ErrSyntax, c, line)
		}
	}
	f := strings.Split(body, ",")
	addr := f[0]
	if len(addr) < 3 {
		return Sentence{}, fmt.Errorf("%w: address %q", ErrSyntax, addr)
	}
	s := Sentence{Fields: f[1:]}
	if addr[0] == 'P' { // proprietary: "P" + maker, no talker
		s.Talker, s.Type = "P", addr[1:]
	} else {
		s.Talker, s.Type = addr[:2], addr[2:]
	}
	return s, nil
}

// Format writes a sentence with its checksum and CR LF.
func Format(address string, fields ...string) string {
	body := address
	if len(fields) > 0 {
		body += "," + strings.Join(fields, ",")
	}
	return fmt.Sprintf("$%s*%02X\r\n", body, Checksum(body))
}

// Splitter cuts a byte stream into lines (sentences, still to be
// parsed). Bytes before a "$" that are not part of a sentence, and a
// "line" longer than a sentence can be, are dropped and counted.
type Splitter struct {
	buf []byte
	// Dropped counts discarded bytes.
	Dropped uint64
}

// Feed adds b and returns the complete lines it ended.
func (s *Splitter) Feed(b []byte) []string {
	var out []string
	for _, c := range b {
		switch {
		case c == '$' || c == '!':
			s.Dropped += uint64(len(s.buf))
			s.buf = append(s.buf[:0], c)
		case c == '\n' || c == '\r':
			if len(s.buf) > 0 {
				out = append(out, string(s.buf))
			}
			s.buf = s.buf[:0]
		case len(s.buf) == 0:
			s.Dropped++
		case len(s.buf) >= MaxSentence:
			s.Dropped += uint64(len(s.buf)) + 1
			s.buf = s.buf[:0]
		default:
			s.buf = append(s.buf, c)
		}
	}
	return out
}

// LatLon formats a latitude or longitude (degrees, south and west
// negative) as NMEA does: ddmm.mmmm (dddmm.mmmm for a longitude) and the
// hemisphere letter.
func LatLon(deg float64, longitude bool) (value, hemi string) {
	hemi = "N"
	if longitude {
		hemi = "E"
	}
	if deg < 0 {
		deg = -deg
		hemi = map[bool]string{false: "S", true: "W"}[longitude]
	}
	d := math.Floor(deg)
	m := (deg - d) * 60
	if longitude {
		return fmt.Sprintf("%03d%07.4f", int(d), m), hemi
	}
	return fmt.Sprintf("%02d%07.4f", int(d), m), hemi
}

// ParseLatLon is LatLon's inverse.
func ParseLatLon(value, hemi string) (float64, error) {
	dot := strings.IndexByte(value, '.')
	if dot < 0 {
		dot = len(value)
	}
	if dot < 3 {
		return 0, fmt.Errorf("%w: coordinate %q", ErrSyntax, value)
	}
	d, err1 := strconv.Atoi(value[:dot-2])
	m, err2 := strconv.ParseFloat(value[dot-2:], 64)
	if err1 != nil || err2 != nil || m < 0 || m >= 60 || d < 0 || d > 180 {
		return 0, fmt.Errorf("%w: coordinate %q", ErrSyntax, value)
	}
	v := float64(d) + m/60
	switch hemi {
	case "N", "E":
	case "S", "W":
		v = -v
	default:
		return 0, fmt.Errorf("%w: hemisphere %q", ErrSyntax, hemi)
	}
	return v, nil
}

// Reader reads valid sentences from a port that delivers the stream in
// messages (mhi.ControlPort.Recv): it splits, parses and checks them,
// and counts what it skips.
type Reader struct {
	// Recv returns the next piece of the stream.
	Recv func(context.Context) ([]byte, error)

	sp      Splitter
	pending []string
	stats   ReaderStats
}

// ReaderStats counts what a Reader saw.
type ReaderStats struct {
	Sentences   uint64 // valid sentences returned
	BadChecksum uint64 // lines whose checksum did not match (ErrChecksum)
	Malformed   uint64 // lines that are not sentences (ErrSyntax)
	Stray       uint64 // bytes outside any line (Splitter.Dropped)
}

// Next returns the next valid sentence and its line (without CR LF);
// sentences with a bad checksum and malformed lines are counted and
// skipped. It fails with Recv's error.
func (r *Reader) Next(ctx context.Context) (string, Sentence, error) {
	for {
		for len(r.pending) > 0 {
			line := r.pending[0]
			r.pending = r.pending[1:]
			s, err := Parse(line)
			switch {
			case errors.Is(err, ErrChecksum):
				r.stats.BadChecksum++
			case err != nil:
				r.stats.Malformed++
			default:
				r.stats.Sentences++
				return line, s, nil
			}
		}
		b, err := r.Recv(ctx)
		if err != nil {
			return "", Sentence{}, err
		}
		r.pending = r.sp.Feed(b)
	}
}

// Stats returns the counts so far.
func (r *Reader) Stats() ReaderStats {
	st := r.stats
	st.Stray = r.sp.Dropped
	return st
}
