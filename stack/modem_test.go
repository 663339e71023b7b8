package stack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// shaEchoSession sends n random bytes (from seed) to the host's echo server on
// port through s and checks the SHA-256 of what comes back; moved counts
// the bytes echoed so far. It is safe to run on any goroutine.
func shaEchoSession(ctx context.Context, s *stack.Stack, port uint16, n int, seed uint64, moved *atomic.Int64) error {
	c, err := s.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := sha256.Sum256(data)
	werr := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, bytes.NewReader(data))
		werr <- err
	}()
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for got := 0; got < n; {
		k, err := c.Read(buf[:min(len(buf), n-got)])
		h.Write(buf[:k])
		got += k
		if moved != nil {
			moved.Add(int64(k))
		}
		if err != nil {
			c.Close()
			<-werr
			return fmt.Errorf("read after %d bytes: %w", got, err)
		}
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		return fmt.Errorf("SHA-256 of the echo %x, want %x", got, want)
	}
	return nil
}

// twoSessions opens a modem of profile with two sessions, on the APNs
// "internet" and "ims", and checks that each has the addresses and DNS
// servers of its own APN.
func twoSessions(t *testing.T, ctx context.Context, profile, control string) (*stack.Modem, *stack.Stack, *stack.Stack) {
	t.Helper()
	m, err := stack.OpenModem(ctx, stack.Options{Profile: profile, Control: control, FCCUnlock: true, Sim: stack.SimOptions{
		Modem: sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	a, err := m.OpenSession(ctx, stack.SessionOptions{APN: "internet"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.OpenSession(ctx, stack.SessionOptions{APN: "ims"})
	if err != nil {
		t.Fatal(err)
	}
	if a.SessionID() == b.SessionID() || a.Modem() != m || b.Modem() != m {
		t.Fatalf("session IDs %d and %d, modems %p %p (want %p)", a.SessionID(), b.SessionID(), a.Modem(), b.Modem(), m)
	}
	apns := simnet.DefaultAPNs()
	for i, s := range []*stack.Stack{a, b} {
		// The k-th session of a function gets its APN pool's k-th
		// address (MBIM session ID k, QMAP mux ID k+1).
		k := s.SessionID()
		if control == "qmi" || m.QMI() != nil {
			k--
		}
		car := apns[i].Carrier.ForSession(k)
		addrs := s.Addresses()
		has := func(p netip.Prefix) bool {
			for _, a := range addrs {
				if a.Addr() == p.Addr() {
					return true
				}
			}
			return false
		}
		if !has(car.IPv4) || !has(car.IPv6) {
			t.Fatalf("session %d (%s): addresses %v, want %v and %v", s.SessionID(), apns[i].Name, addrs, car.IPv4, car.IPv6)
		}
		if dns := s.DNSServers(); len(dns) == 0 || dns[0] != car.IPv4DNS[0] {
			t.Fatalf("session %d (%s): DNS %v, want %v first", s.SessionID(), apns[i].Name, dns, car.IPv4DNS)
		}
	}
	if got := m.Sessions(); len(got) != 2 {
		t.Fatalf("Sessions() has %d stacks, want 2", len(got))
	}
	return m, a, b
}

// testTwoSessionsMoveDataAtOnce: two sessions of one modem move TCP at
// the same time, each checked by SHA-256, each counted in its own stack;
// then one is closed in the middle of a transfer while the other keeps
// moving to the end; Modem.Close then closes the survivor.
func testTwoSessionsMoveDataAtOnce(t *testing.T, profile, control string) {
	// Sizes: the race detector slows the emulated carrier so much that
	// UL transfers wait past the link's TXTimeout and whole GSO batches
	// are dropped; TCP then backs off for seconds at a time.
	n, big, moving := 8<<20, 32<<20, int64(1<<20)
	if raceOn {
		n, big, moving = 1<<20, 4<<20, 256<<10
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m, a, b := twoSessions(t, ctx, profile, control)
	port := hostEcho(t, "tcp4", "127.0.0.1:0")

	errs := make(chan error, 2)
	for i, s := range []*stack.Stack{a, b} {
		go func() { errs <- shaEchoSession(ctx, s, port, n, uint64(i+1), nil) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*stack.Stack{a, b} {
		st := s.Stats()
		if st.RXBytes < uint64(n) || st.TXBytes < uint64(n) {
			t.Errorf("session %d counted RX %d, TX %d bytes; want at least %d each", s.SessionID(), st.RXBytes, st.TXBytes, n)
		}
	}

	// Close a while b moves data: a's blocked read fails with
	// net.ErrClosed, b's transfer goes on to the end.
	var movedB atomic.Int64
	errA, errB := make(chan error, 1), make(chan error, 1)
	wait := func(moved *atomic.Int64, what string) {
		for moved.Load() < moving {
			select {
			case err := <-errA:
				t.Fatalf("session %d ended before the close: %v (%s)", a.SessionID(), err, what)
			case err := <-errB:
				t.Fatalf("session %d ended before the close: %v (%s)", b.SessionID(), err, what)
			case <-time.After(time.Millisecond):
			}
		}
	}
	// a has a connection open, idle, when it closes.
	ca, err := a.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := ca.Read(make([]byte, 1))
		errA <- err
	}()
	go func() { errB <- shaEchoSession(ctx, b, port, big, 4, &movedB) }()
	wait(&movedB, "waiting for the second to move")
	if err := a.Close(); err != nil {
		t.Fatalf("closing session %d: %v", a.SessionID(), err)
	}
	if err := <-errA; !errors.Is(err, net.ErrClosed) {
		t.Errorf("read on the closed session: %v, want net.ErrClosed", err)
	}
	atClose := movedB.Load()
	if err := <-errB; err != nil {
		t.Fatalf("the other session after the close: %v", err)
	}
	if movedB.Load()-atClose < moving {
		t.Errorf("only %d bytes moved on the survivor after the close", movedB.Load()-atClose)
	}
	if _, err := a.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("dial on the closed session: %v, want net.ErrClosed", err)
	}
	if got := m.Sessions(); len(got) != 1 || got[0] != b {
		t.Fatalf("Sessions() after one closed: %v", got)
	}
	// The survivor still works after the other closed, on a new
	// connection too.
	if err := shaEchoSession(ctx, b, port, 1<<20, 5, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("closing a session of a closed modem: %v, want net.ErrClosed", err)
	}
	if _, err := m.OpenSession(ctx, stack.SessionOptions{APN: "internet"}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("OpenSession on a closed modem: %v, want net.ErrClosed", err)
	}
	if err := m.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Modem.Close: %v, want net.ErrClosed", err)
	}
}

// TestModemTwoMBIMSessions: MBIM session IDs 0 and 1 on the NTBs of the
// Foxconn T99W175's IP_HW0_MBIM pair.
func TestModemTwoMBIMSessions(t *testing.T) {
	testTwoSessionsMoveDataAtOnce(t, "foxconn-t99w175", "")
}

// TestModemTwoQMISessions: QMAP mux IDs 1 and 2 on the Telit FN980 v1's
// IP_HW0 pair (QMI control, QMAPv5 as WDA agreed).
func TestModemTwoQMISessions(t *testing.T) {
	testTwoSessionsMoveDataAtOnce(t, "telit-fn980-hwv1", "")
}

// TestModemRefusesAnUnknownAPN: the emulated network refuses an APN it
// does not serve as a network does — MBIM CONNECT FAILURE with 3GPP cause
// 27 (missing or unknown APN), QMI WDS Start Network CALL_FAILED with
// that cause as the verbose call end reason — and the modem's sessions on
// the APNs it serves are not affected.
func TestModemRefusesAnUnknownAPN(t *testing.T) {
	for _, profile := range []string{"foxconn-t99w175", "telit-fn980-hwv1"} {
		t.Run(profile, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			m, err := stack.OpenModem(ctx, stack.Options{Profile: profile, FCCUnlock: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			s, err := m.OpenSession(ctx, stack.SessionOptions{APN: "corp.mhistack"})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := s.Addresses()[0].Addr(), simnet.DefaultAPNs()[2].Carrier.IPv4.Addr(); got != want {
				t.Errorf("corp.mhistack address %v, want %v", got, want)
			}
			_, err = m.OpenSession(ctx, stack.SessionOptions{APN: "no.such.apn"})
			if err == nil {
				t.Fatal("a session on an APN the network does not serve came up")
			}
			if !errors.Is(err, stack.ErrUnknownAPN) {
				t.Errorf("refusal %q: not errors.Is(err, stack.ErrUnknownAPN)", err)
			}
			if got := refusalCause(err); got != 27 {
				t.Errorf("refusal %q: 3GPP cause %d, want 27 (missing or unknown APN)", err, got)
			}

			t.Log(err)
			if got := m.Sessions(); len(got) != 1 || got[0] != s {
				t.Errorf("sessions after the refusal: %v", got)
			}
			port := hostEcho(t, "tcp4", "127.0.0.1:0")
			if err := shaEchoSession(ctx, s, port, 1<<20, 7, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// refusalCause is the 3GPP cause of a refused session, from the
// protocol's own error: the NwError of MBIM's CONNECT FAILURE (with the
// status it implies: mbim.ErrBadAPN for 27), or the verbose call end
// reason of QMI's Start Network CALL_FAILED; -1 if err carries neither.
func refusalCause(err error) int {
	var me *mbim.CommandError
	if errors.As(err, &me) && me.NwError != 0 {
		if me.NwError == 27 && !errors.Is(err, mbim.ErrBadAPN) {
			return -1
		}
		return int(me.NwError)
	}
	var qe *qmi.CallError
	if errors.As(err, &qe) && errors.Is(err, qmi.ErrCallFailed) {
		if cause, ok := qe.End.Cause3GPP(); ok {
			return cause
		}
	}
	return -1
}

// TestModemRefusalForCredentialsIsNotAnUnknownAPN: a session the
// network refuses for its credentials (3GPP cause 29, user
// authentication failed) is not errors.Is(err, stack.ErrUnknownAPN), on
// MBIM and on QMI.
func TestModemRefusalForCredentialsIsNotAnUnknownAPN(t *testing.T) {
	for _, profile := range []string{"foxconn-t99w175", "telit-fn980-hwv1"} {
		t.Run(profile, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			m, err := stack.OpenModem(ctx, stack.Options{Profile: profile, FCCUnlock: true,
				Sim: stack.SimOptions{NetworkConfig: simnet.NetworkConfig{APN: "internet", User: "user", Password: "secret"}}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			_, err = m.OpenSession(ctx, stack.SessionOptions{APN: "internet", User: "user", Password: "wrong"})
			if err == nil {
				t.Fatal("a session with the wrong password came up")
			}
			if errors.Is(err, stack.ErrUnknownAPN) {
				t.Errorf("refusal %q for credentials is errors.Is(err, stack.ErrUnknownAPN)", err)
			}
			if got := refusalCause(err); got != 29 {
				t.Errorf("refusal %q: 3GPP cause %d, want 29 (user authentication failed)", err, got)
			}
			t.Log(err)
		})
	}
}

// TestTwoModemsInOneProcess: an MBIM modem (Foxconn T99W175) and a
// QMI/QMAP one (Telit FN980 v1) emulated in one process, each with a
// session, move TCP at the same time, each checked by SHA-256.
func TestTwoModemsInOneProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stacks []*stack.Stack
	for _, profile := range []string{"foxconn-t99w175", "telit-fn980-hwv1"} {
		m, err := stack.OpenModem(ctx, stack.Options{Profile: profile, FCCUnlock: true, Sim: stack.SimOptions{
			Modem: sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s, err := m.OpenSession(ctx, stack.SessionOptions{APN: "internet"})
		if err != nil {
			t.Fatal(err)
		}
		stacks = append(stacks, s)
	}
	if stacks[0].MBIM() == nil || stacks[1].QMI() == nil {
		t.Fatalf("control clients: %v, %v", stacks[0].MBIM(), stacks[1].QMI())
	}
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	errs := make(chan error, len(stacks))
	for i, s := range stacks {
		go func() { errs <- shaEchoSession(ctx, s, port, 8<<20, uint64(10+i), nil) }()
	}
	for range stacks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
