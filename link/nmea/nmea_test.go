package nmea

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func TestNMEAParseVerifiesTheChecksum(t *testing.T) {
	// A GGA sentence as receivers print it; its checksum is 0x47.
	const gga = "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47"
	s, err := Parse(gga + "\r\n")
	if err != nil || s.Talker != "GP" || s.Type != "GGA" || len(s.Fields) != 14 || s.Fields[1] != "4807.038" {
		t.Fatalf("Parse: %+v, %v", s, err)
	}
	if _, err := Parse(gga[:len(gga)-1] + "8"); !errors.Is(err, ErrChecksum) {
		t.Errorf("wrong checksum: %v", err)
	}
	for _, bad := range []string{"GPGGA,1*00", "$GPGGA,1", "$GP*17", "$" + string(make([]byte, 90)) + "*00"} {
		if _, err := Parse(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%.20q): %v", bad, err)
		}
	}
}

func TestNMEAFormatRoundTripsAndTheSplitterCutsAStream(t *testing.T) {
	a := Format("GNRMC", "093000.00", "A", "4807.0380", "N")
	b := Format("GPGSV", "1", "1", "01")
	var sp Splitter
	lines := sp.Feed([]byte("junk" + a[:10]))
	lines = append(lines, sp.Feed([]byte(a[10:]+b))...)
	if len(lines) != 2 || sp.Dropped != 4 {
		t.Fatalf("lines %q dropped %d", lines, sp.Dropped)
	}
	for _, l := range lines {
		if _, err := Parse(l); err != nil {
			t.Errorf("%q: %v", l, err)
		}
	}
}

// The Reader returns the valid sentences of a stream cut at any byte,
// skips and counts a bad checksum, a malformed line and stray bytes, and
// ends with the source's error.
func TestNMEAReaderReturnsValidSentencesAndCountsTheRest(t *testing.T) {
	a := Format("GNRMC", "093000.00", "A")
	b := Format("GPGSV", "1", "1", "01")
	bad := a[:len(a)-4] + "00\r\n" // checksum replaced
	stream := "xx" + a + bad + "$GP*17\r\n" + b
	pieces := []string{stream[:5], stream[5:31], stream[31:]}
	r := Reader{Recv: func(context.Context) ([]byte, error) {
		if len(pieces) == 0 {
			return nil, io.EOF
		}
		p := pieces[0]
		pieces = pieces[1:]
		return []byte(p), nil
	}}
	ctx := context.Background()
	for _, want := range []string{a, b} {
		line, s, err := r.Next(ctx)
		if err != nil || line+"\r\n" != want || s.Talker == "" {
			t.Fatalf("Next = %q, %+v, %v; want %q", line, s, err, want)
		}
	}
	if _, _, err := r.Next(ctx); err != io.EOF {
		t.Fatalf("Next at the end = %v, want io.EOF", err)
	}
	if st := r.Stats(); st != (ReaderStats{Sentences: 2, BadChecksum: 1, Malformed: 1, Stray: 2}) {
		t.Errorf("stats %+v", st)
	}
}

func TestNMEALatLon(t *testing.T) {
	v, h := LatLon(48.1173, false)
	if v != "4807.0380" || h != "N" {
		t.Errorf("LatLon = %s %s", v, h)
	}
	v, h = LatLon(-11.5166667, true)
	if v != "01131.0000" || h != "W" {
		t.Errorf("LatLon = %s %s", v, h)
	}
	if x, err := ParseLatLon(v, h); err != nil || math.Abs(x+11.5166667) > 1e-6 {
		t.Errorf("ParseLatLon = %v, %v", x, err)
	}
}

func FuzzNMEA(f *testing.F) {
	f.Add([]byte("$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47\r\n$GPGSV,1,1,01*7A\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var sp Splitter
		for _, l := range sp.Feed(b) {
			if len(l) > MaxSentence {
				t.Fatalf("a %d-byte line", len(l))
			}
			s, err := Parse(l)
			if err != nil {
				continue
			}
			addr := s.Talker + s.Type
			if s.Talker == "P" {
				addr = "P" + s.Type
			}
			// "!" (encapsulation) and lower-case checksum digits come
			// back as "$" and upper case.
			if again := Format(addr, s.Fields...); !strings.EqualFold(again[1:len(again)-2], l[1:]) {
				t.Fatalf("%q re-formats as %q", l, again)
			}
			if len(s.Fields) > 1 {
				ParseLatLon(s.Fields[0], s.Fields[1])
			}
		}
	})
}
