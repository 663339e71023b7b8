package at

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestATReaderAssemblesAResponseFromPiecesUpToOK(t *testing.T) {
	r := Reader{Echo: "AT+CSQ"}
	var resp Response
	var done bool
	var err error
	for _, piece := range []string{"AT+C", "SQ\r\r\n+CSQ: 2", "0,99\r\n", "\r\nO", "K\r\n"} {
		if done {
			t.Fatal("done before OK")
		}
		resp, done, err = r.Feed([]byte(piece))
	}
	if !done || err != nil || resp.Final != "OK" || len(resp.Lines) != 1 || resp.Lines[0] != "+CSQ: 20,99" {
		t.Fatalf("%+v done %v err %v", resp, done, err)
	}
	rssi, ber, err := ParseCSQ(resp.Lines[0])
	if dbm, ok := CSQdBm(rssi); err != nil || ber != 99 || !ok || dbm != -73 {
		t.Errorf("+CSQ: %d, %d (%d dBm), %v", rssi, ber, dbm, err)
	}
}

func TestATReaderReportsERRORAndCMEErrorsAsErrCommand(t *testing.T) {
	for _, tc := range []struct {
		in  string
		cme int
	}{{"\r\nERROR\r\n", -1}, {"\r\n+CME ERROR: 10\r\n", 10}, {"\r\n+CME ERROR: SIM not inserted\r\n", -1}} {
		var r Reader
		_, done, err := r.Feed([]byte(tc.in))
		var e *Error
		if !done || !errors.Is(err, ErrCommand) || !errors.As(err, &e) || e.CME != tc.cme {
			t.Errorf("%q: done %v err %v", tc.in, done, err)
		}
	}
}

func TestATReaderBoundsAResponseThatNeverEnds(t *testing.T) {
	var r Reader
	line := []byte(strings.Repeat("x", 1000) + "\r\n")
	for i := 0; ; i++ {
		_, done, err := r.Feed(line)
		if errors.Is(err, ErrTooLong) {
			break
		}
		if done || i > MaxResponse/len(line)+1 {
			t.Fatalf("after %d lines: done %v err %v", i, done, err)
		}
	}
}

func TestATParseCSQRefusesOutOfRangeValues(t *testing.T) {
	for _, l := range []string{"+CSQ: 32,0", "+CSQ: 20", "+CSQ: a,b", "+COPS: 0", "+CSQ: 20,8"} {
		if _, _, err := ParseCSQ(l); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseCSQ(%q): %v", l, err)
		}
	}
	if CSQOf(-73) != 20 || CSQOf(-200) != 0 || CSQOf(0) != 31 {
		t.Error("CSQOf")
	}
}

func FuzzATResponse(f *testing.F) {
	f.Add([]byte("AT+CSQ\r\r\n+CSQ: 20,99\r\n\r\nOK\r\n"), 3)
	f.Add([]byte("\r\n+CME ERROR: 10\r\n"), 1)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		r := Reader{Echo: "AT+CSQ"}
		if cut < 0 || cut > len(b) {
			cut = len(b) / 2
		}
		for _, p := range [][]byte{b[:cut], b[cut:]} {
			resp, done, err := r.Feed(p)
			if done {
				if resp.Final == "" || (err != nil) != (resp.Final != "OK" && resp.Final != "CONNECT") {
					t.Fatalf("final %q with err %v", resp.Final, err)
				}
				for _, l := range resp.Lines {
					if rssi, ber, err := ParseCSQ(l); err == nil && (rssi > 31 && rssi != 99 || ber > 7 && ber != 99) {
						t.Fatalf("ParseCSQ(%q) = %d, %d", l, rssi, ber)
					}
				}
			}
		}
	})
}

// chunkPort answers every command with the chunks in order.
type chunkPort struct {
	sent   []string
	chunks []string
}

func (p *chunkPort) Send(_ context.Context, b []byte) error {
	p.sent = append(p.sent, string(b))
	return nil
}

func (p *chunkPort) Recv(ctx context.Context) ([]byte, error) {
	if len(p.chunks) == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := p.chunks[0]
	p.chunks = p.chunks[1:]
	return []byte(c), nil
}

// Command sends the line ended by CR, reads the answer in whatever
// pieces it comes, keeps what follows it for the next command, fails on
// ERROR with the response, refuses what is not one command line before
// sending, and ends with ctx when no final result code comes.
func TestCommandSendsALineAndReadsItsAnswerInPieces(t *testing.T) {
	p := &chunkPort{chunks: []string{"AT+CSQ\r\r\n+CS", "Q: 20,0\r\n\r\nOK\r\n+CREG: 1\r", "\n", "ERROR\r\n"}}
	var r Reader
	resp, err := Command(context.Background(), p, &r, "AT+CSQ")
	if err != nil || resp.Final != "OK" || len(resp.Lines) != 1 || resp.Lines[0] != "+CSQ: 20,0" || p.sent[0] != "AT+CSQ\r" {
		t.Fatalf("AT+CSQ: %+v, %v (sent %q)", resp, err, p.sent)
	}
	resp, err = Command(context.Background(), p, &r, "AT+NOSUCH")
	if !errors.Is(err, ErrCommand) || resp.Final != "ERROR" || len(resp.Lines) != 1 || resp.Lines[0] != "+CREG: 1" {
		t.Fatalf("AT+NOSUCH after an unsolicited line: %+v, %v", resp, err)
	}
	for _, bad := range []string{"hello", "AT\rATI", strings.Repeat("A", MaxCommand+1)} {
		if _, err := Command(context.Background(), p, &r, bad); err == nil || len(p.sent) != 2 {
			t.Errorf("Command(%.20q): %v, sent %d lines", bad, err, len(p.sent))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := Command(ctx, p, &r, "ATI"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Command with no answer: %v", err)
	}
}
