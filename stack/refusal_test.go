package stack_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// refusalRetry is the session's back-off in these tests: short, so that
// a few refused attempts take well under a second.
const refusalRetry = 50 * time.Millisecond

// openRefusing opens profile on nw with the session's back-off at retry,
// bounded by ctx.
func openRefusing(t *testing.T, ctx context.Context, profile string, nw *simnet.Network, retry time.Duration) (*stack.Stack, error) {
	t.Helper()
	s, err := stack.Open(ctx, stack.Options{APN: "internet", Profile: profile, FCCUnlock: true, RetryInterval: retry, Sim: stack.SimOptions{
		Modem:         sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
		NetworkConfig: simnet.NetworkConfig{APN: "internet"},
		Network:       nw,
	}})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// noTightLoop fails the test if the network saw more attempts than a
// session backing off at least 3/4 of retry between them could make in
// elapsed (its back-off after the n-th failure is at least
// 3/4·retry·2^n: sessionloop's retryDelay).
func noTightLoop(t *testing.T, attempts int, elapsed, retry time.Duration) {
	t.Helper()
	if most := 1 + int(elapsed/(retry*3/4)); attempts > most {
		t.Errorf("%d refused attempts in %v: more than %d, the most a back-off from %v allows", attempts, elapsed, most, retry)
	}
}

// A network that refuses the data session for now (3GPP cause 26
// insufficient resources for three attempts; cause 38 network failure
// for a while) does not fail Open: the session tries again after its
// back-off, never in a tight loop, and Open returns the stack once the
// network accepts.
func TestOpenWaitsThroughARefusalForNow(t *testing.T) {
	for _, p := range netProfiles {
		for _, r := range []struct {
			name  string
			cause int
			calls int
			d     time.Duration
		}{{"three-attempts", 26, 3, 0}, {"for-a-while", 38, 0, 400 * time.Millisecond}} {
			t.Run(p.name+"/"+r.name, func(t *testing.T) {
				nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet"})
				nw.RefuseCalls(mbim.NwError(r.cause), r.calls, r.d)
				start := time.Now()
				s, err := openRefusing(t, ctxT(t, 60*time.Second), p.profile, nw, refusalRetry)
				elapsed := time.Since(start)
				if err != nil {
					t.Fatalf("Open on a network refusing with cause %d for now: %v", r.cause, err)
				}
				got := nw.RefusedCalls()
				switch {
				case r.calls > 0 && got != r.calls:
					t.Errorf("the network refused %d attempts, want %d", got, r.calls)
				case got == 0:
					t.Error("the network refused no attempt")
				}
				// After the n-th refusal the session waits at least
				// 3/4·retry·2^n (more, unless an indication cuts it
				// short after retry): a lower bound, whatever the load.
				if least := time.Duration(got) * refusalRetry * 3 / 4; elapsed < least {
					t.Errorf("Open took %v over %d refused attempts: less than the back-off's %v", elapsed, got, least)
				}
				noTightLoop(t, got, elapsed, refusalRetry)
				bulkEcho(t, s, 4<<10)
			})
		}
	}
}

// A refusal for good fails Open at once with a typed error: cause 33
// (option not subscribed) matches ErrActivationRefused and not
// ErrUnknownAPN, cause 27 both; the error names the cause, and the
// network saw one attempt. A refusal for now that outlasts Open's
// context fails it with the context's error and the last refusal.
func TestOpenFailsOnARefusalForGoodAndWhenItsContextEnds(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			for _, c := range []struct {
				cause      int
				unknownAPN bool
				text       string
			}{{33, false, "for good"}, {27, true, "unknown APN"}} {
				nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", ConnectReject: mbim.NwError(c.cause)})
				// The default back-off (5 s): Open must not wait for
				// a second attempt.
				_, err := openRefusing(t, ctxT(t, 60*time.Second), p.profile, nw, 0)
				if !errors.Is(err, stack.ErrActivationRefused) || errors.Is(err, stack.ErrUnknownAPN) != c.unknownAPN {
					t.Fatalf("Open refused with cause %d: %v; want ErrActivationRefused, ErrUnknownAPN %v", c.cause, err, c.unknownAPN)
				}
				if got, ok := stack.RefusalCause(err); !ok || got != c.cause {
					t.Errorf("RefusalCause(%q) = %d, %v; want %d", err, got, ok, c.cause)
				}
				if !strings.Contains(err.Error(), c.text) {
					t.Errorf("error %q does not say %q", err, c.text)
				}
				if n := nw.RefusedCalls(); n != 1 {
					t.Errorf("cause %d: the network saw %d refused attempts, want 1", c.cause, n)
				}
				t.Log(err)
			}

			nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet", ConnectReject: 26})
			m, err := stack.OpenModem(ctxT(t, 60*time.Second), stack.Options{Profile: p.profile, FCCUnlock: true, RetryInterval: refusalRetry,
				Sim: stack.SimOptions{NetworkConfig: simnet.NetworkConfig{APN: "internet"}, Network: nw}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			_, err = m.OpenSession(ctx, stack.SessionOptions{APN: "internet"})
			elapsed := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, stack.ErrActivationRefused) {
				t.Fatalf("OpenSession on a network refusing for longer than its context: %v; want the deadline and ErrActivationRefused", err)
			}
			if got, ok := stack.RefusalCause(err); !ok || got != 26 || !strings.Contains(err.Error(), "give it longer") {
				t.Errorf("error %q: cause %d, %v; want 26 and a hint", err, got, ok)
			}
			got := nw.RefusedCalls()
			if got < 2 {
				t.Errorf("%d refused attempts in %v: the session did not try again", got, elapsed)
			}
			noTightLoop(t, got, elapsed, refusalRetry)
			t.Log(err)
		})
	}
}

// The network deactivates the session (the modem staying attached) and
// refuses it for a few attempts (cause 26): the stack reports the loss and each refusal, and
// the session comes back with the same addresses, so an established TCP
// connection (what it wrote meanwhile included), a listener and a UDP
// socket all carry on.
func TestRefusalMidSessionKeepsConnectionsListenersAndUDPSockets(t *testing.T) {
	for _, p := range netProfiles {
		t.Run(p.name, func(t *testing.T) {
			nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet"})
			s, err := openRefusing(t, ctxT(t, 60*time.Second), p.profile, nw, refusalRetry)
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 30*time.Second)
			port := hostEcho(t, "tcp4", "127.0.0.1:0")
			c, err := s.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			echoOnce(t, c, "before")
			ln, err := s.Listen("tcp", ":7008")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go serveEcho(ln)
			u := hostUDPEcho(t)
			uc, err := s.DialContext(ctx, "udp4", netip.AddrPortFrom(simnet.TestAddr4, u).String())
			if err != nil {
				t.Fatal(err)
			}
			defer uc.Close()
			udpRoundTrip(t, uc, "before")

			nw.RefuseCalls(26, 3, 0)
			nw.DeactivateCalls(26)
			waitEvent(t, s.Events(), "link-down", kindIs(stack.EventLinkDown))
			if _, err := c.Write([]byte("during")); err != nil {
				t.Fatalf("write while the network refuses the session: %v", err)
			}
			seen := waitEvent(t, s.Events(), "link-up", kindIs(stack.EventLinkUp))
			refused := 0
			for _, e := range seen {
				if cause, ok := stack.RefusalCause(e.Err); e.Kind == stack.EventSession && e.Session == "failed" && ok && cause == 26 {
					refused++
				}
			}
			if n := nw.RefusedCalls(); n != 3 || refused != 3 {
				t.Errorf("the network refused %d attempts, the stack reported %d failed with cause 26; want 3 (events %v)", n, refused, seen)
			}

			got := make([]byte, len("during"))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "during" {
				t.Fatalf("echo of what was written during the refusal: %q, %v", got, err)
			}
			echoOnce(t, c, "after")
			udpRoundTrip(t, uc, "after")
			lc, err := stack.CarrierForTest(s).Dial(ctx, "tcp", netip.AddrPortFrom(simnet.DefaultCarrier().IPv4.Addr(), 7008))
			if err != nil {
				t.Fatalf("dial the listener from the network after the refusal: %v", err)
			}
			defer lc.Close()
			echoOnce(t, lc, "to the listener")
		})
	}
}

// hostUDPEcho answers every datagram on the host's loopback until the
// test ends and returns its port.
func hostUDPEcho(t *testing.T) uint16 {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 2048)
		for {
			n, a, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			pc.WriteTo(b[:n], a)
		}
	}()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// udpRoundTrip sends msg on c until its echo comes back (a datagram may
// be lost; at most 20 tries of 500 ms).
func udpRoundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	b := make([]byte, 2048)
	for range 20 {
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatalf("UDP write %q: %v", msg, err)
		}
		n, err := c.Read(b)
		if err == nil && string(b[:n]) == msg {
			c.SetDeadline(time.Time{})
			return
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
			t.Fatalf("UDP read: %v", err)
		}
	}
	t.Fatalf("no UDP echo of %q in 20 tries", msg)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
