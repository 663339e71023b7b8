package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link/nmea"
)

func TestATSendsTheCommandOnTheDUNPortAndPrintsTheAnswer(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"at", "-profile", "quectel-em1xx", "AT+CSQ"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if out.String() != "+CSQ: 20,0\nOK\n" {
		t.Errorf("output %q", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"at", "-profile", "quectel-em1xx", "-json", "AT+COPS?"}, &out, &errb); code != 0 {
		t.Fatalf("-json exit %d: %s", code, errb.String())
	}
	var o atOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil || o.Final != "OK" || len(o.Lines) != 1 || o.Lines[0] != `+COPS: 0,0,"mhistack",7` {
		t.Errorf("-json: %+v, %v", o, err)
	}
}

func TestATFailsWithExitCode1OnERRORAndOnAProfileWithoutAnATPort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"at", "-profile", "quectel-em1xx", "AT+NOSUCH"}, "ERROR"},
		{[]string{"at", "AT+CSQ"}, "has no AT port"},
		{[]string{"gnss", "-profile", "foxconn-t99w175"}, "has no NMEA port"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &out); code != 1 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("mhictl %q: exit %d, output %q; want exit 1 and %q", tc.args, code, out.String(), tc.want)
		}
	}
	for _, args := range [][]string{{"at"}, {"at", "ATI", "ATI"}, {"at", "hello"}, {"at", "-reply", "0s", "ATI"}, {"gnss", "-n", "-1"}, {"gnss", "-sim-position", "91,0"}} {
		var out bytes.Buffer
		if code := run(context.Background(), args, &out, &out); code != 2 {
			t.Errorf("mhictl %q: exit %d, want 2: %s", args, code, out.String())
		}
	}
}

func TestGNSSStreamsCountSentencesFromTheNMEAPort(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"gnss", "-profile", "quectel-em1xx", "-n", "4", "-sim-position", "-33.8568,151.2153,12"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		s, err := nmea.Parse(l)
		if err != nil {
			t.Errorf("%q: %v", l, err)
		}
		if s.Type == "GGA" && (s.Fields[1] != "3351.4080" || s.Fields[2] != "S" || s.Fields[4] != "E") {
			t.Errorf("GGA at %v", s.Fields[:5])
		}
	}
	if !strings.Contains(errb.String(), "4 sentences, 0 with a bad checksum") {
		t.Errorf("summary %q", errb.String())
	}
}

// TestNMEAStreamCountsBadChecksumsAndStopsWhenInterrupted: sentences
// with a wrong checksum are counted, not printed; an interrupt ends the
// stream without an error.
func TestNMEAStreamCountsBadChecksumsAndStopsWhenInterrupted(t *testing.T) {
	good := nmea.Format("GPGGA", "1")
	chunks := []string{"xx" + good, "$GPGGA,1*00\r\n", "$GPGGA\r\n" + good[:5], good[5:]}
	ctx, cancel := context.WithCancel(context.Background())
	recv := func(context.Context) ([]byte, error) {
		if len(chunks) == 0 {
			cancel()
			return nil, errors.New("mhi: receive: context canceled")
		}
		c := chunks[0]
		chunks = chunks[1:]
		return []byte(c), nil
	}
	var out bytes.Buffer
	st, err := streamNMEA(ctx, recv, 0, &out)
	if err != nil || st != (nmea.ReaderStats{Sentences: 2, BadChecksum: 1, Malformed: 1, Stray: 2}) {
		t.Errorf("stats %+v, err %v", st, err)
	}
	if strings.Count(out.String(), "\n") != 2 || strings.Contains(out.String(), "*00") {
		t.Errorf("printed %q", out.String())
	}
}
