// Package at reads the answers of a modem's AT command port: the
// information lines a command produces up to its final result code (ITU-T
// V.250 §5.7: OK, ERROR, NO CARRIER, …; 3GPP TS 27.007 §9.2: +CME ERROR,
// TS 27.005 §3.2.5: +CMS ERROR), and the values of the few commands
// mhistack reads (+CSQ, TS 27.007 §8.5).
//
//	var r at.Reader
//	resp, err := at.Command(ctx, port, &r, "AT+CSQ") // or r.Feed(chunk) until done
//	rssi, ber, err := at.ParseCSQ(resp.Lines[0])
package at

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxResponse bounds the bytes of one response a Reader keeps: a modem
// that never ends its answer makes Feed fail instead of growing memory.
const MaxResponse = 64 << 10

// Errors of a response.
var (
	// ErrCommand is the modem's ERROR (or another failing final result
	// code: NO CARRIER, BUSY, NO ANSWER, NO DIALTONE).
	ErrCommand = errors.New("at: command failed")
	// ErrTooLong: the response exceeded MaxResponse.
	ErrTooLong = errors.New("at: response too long")
	// ErrSyntax: a value line did not have the command's syntax.
	ErrSyntax = errors.New("at: malformed response")
)

// MaxCommand bounds a command line Command sends (V.250 §5.2.1 asks a
// modem for at least 40 characters; TS 27.007 modems take a few hundred).
const MaxCommand = 512

// Port carries a command line and its answer: a modem's AT channel pair
// (mhi.ControlPort).
type Port interface {
	Send(ctx context.Context, b []byte) error
	Recv(ctx context.Context) ([]byte, error)
}

// CheckCommand returns an error unless cmd is one AT command line: AT…,
// no CR or LF, at most MaxCommand bytes.
func CheckCommand(cmd string) error {
	if !strings.HasPrefix(strings.ToUpper(cmd), "AT") || strings.ContainsAny(cmd, "\r\n") || len(cmd) > MaxCommand {
		return fmt.Errorf("at: %q is not an AT command line (AT…, one line, at most %d bytes)", cmd, MaxCommand)
	}
	return nil
}

// Command sends cmd (CheckCommand) on p, ended by CR as V.250 §6.2.1
// ends a command line, and reads its answer through r up to the final
// result code. r keeps what follows the answer for the next command on
// the same port, and bounds the answer (ErrTooLong). A failing final
// result code returns the response with an *Error; ctx bounds the whole.
func Command(ctx context.Context, p Port, r *Reader, cmd string) (Response, error) {
	if err := CheckCommand(cmd); err != nil {
		return Response{}, err
	}
	if err := p.Send(ctx, []byte(cmd+"\r")); err != nil {
		return Response{}, err
	}
	r.Echo = cmd
	for {
		b, err := p.Recv(ctx)
		if err != nil {
			return Response{}, err
		}
		if resp, done, err := r.Feed(b); done || err != nil {
			return resp, err
		}
	}
}

// Error is a failing final result code: ERROR, +CME ERROR: <err> (the
// mobile equipment's error, TS 27.007 §9.2) or +CMS ERROR: <err>. It
// matches ErrCommand with errors.Is.
type Error struct {
	Result string // the final result line as sent
	// CME and CMS are the numeric error codes, -1 when absent or
	// verbose.
	CME, CMS int
}

func (e *Error) Error() string { return "at: " + e.Result }

// Is makes errors.Is(err, ErrCommand) true.
func (e *Error) Is(target error) bool { return target == ErrCommand }

// Response is one command's answer: its information lines (without
// blank lines and the command's echo) and the final result code.
type Response struct {
	Lines []string
	Final string
}

// Reader assembles responses from the bytes a port delivers in arbitrary
// pieces. The zero value is ready.
type Reader struct {
	// Echo, when set, is the command sent: a line equal to it is its
	// echo (ATE1), not information.
	Echo string
	buf  []byte
	resp Response
	n    int
}

// Feed adds b. When a final result code completes the response it
// returns it with done set, and an *Error for a failing result; bytes of
// b after the final line are kept for the next response.
func (r *Reader) Feed(b []byte) (resp Response, done bool, err error) {
	r.n += len(b)
	if r.n > MaxResponse {
		return Response{}, false, ErrTooLong
	}
	r.buf = append(r.buf, b...)
	for {
		i := strings.IndexAny(string(r.buf), "\r\n")
		if i < 0 {
			return Response{}, false, nil
		}
		line := strings.TrimSpace(string(r.buf[:i]))
		r.buf = r.buf[i+1:]
		if line == "" || (r.Echo != "" && strings.EqualFold(line, r.Echo)) {
			continue
		}
		if final, ferr := finalResult(line); final {
			resp = r.resp
			resp.Final = line
			r.resp, r.n = Response{}, len(r.buf)
			return resp, true, ferr
		}
		r.resp.Lines = append(r.resp.Lines, line)
	}
}

// finalResult reports whether line is a final result code, and the error
// it stands for.
func finalResult(line string) (bool, error) {
	switch line {
	case "OK", "CONNECT":
		return true, nil
	case "ERROR", "NO CARRIER", "BUSY", "NO ANSWER", "NO DIALTONE":
		return true, &Error{Result: line, CME: -1, CMS: -1}
	}
	for _, p := range []string{"+CME ERROR:", "+CMS ERROR:"} {
		v, ok := strings.CutPrefix(line, p)
		if !ok {
			continue
		}
		e := &Error{Result: line, CME: -1, CMS: -1}
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			if p == "+CME ERROR:" {
				e.CME = n
			} else {
				e.CMS = n
			}
		}
		return true, e
	}
	return false, nil
}

// ParseCSQ reads a "+CSQ: <rssi>,<ber>" line (TS 27.007 §8.5): rssi
// 0..31 or 99 (unknown), ber 0..7 or 99.
func ParseCSQ(line string) (rssi, ber int, err error) {
	v, ok := strings.CutPrefix(line, "+CSQ:")
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q is not +CSQ", ErrSyntax, line)
	}
	a, b, ok := strings.Cut(strings.TrimSpace(v), ",")
	rssi, err1 := strconv.Atoi(strings.TrimSpace(a))
	ber, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || !(rssi >= 0 && rssi <= 31 || rssi == 99) || !(ber >= 0 && ber <= 7 || ber == 99) {
		return 0, 0, fmt.Errorf("%w: %q", ErrSyntax, line)
	}
	return rssi, ber, nil
}

// CSQdBm turns +CSQ's rssi into dBm: 0 is −113 dBm or less, 31 is −51
// dBm or more, 2 dB a step; ok is false for 99 (unknown).
func CSQdBm(rssi int) (dbm int, ok bool) {
	if rssi < 0 || rssi > 31 {
		return 0, false
	}
	return -113 + 2*rssi, true
}

// CSQOf is the inverse of CSQdBm, clamped to 0..31.
func CSQOf(dbm int) int { return max(0, min(31, (dbm+113)/2)) }
