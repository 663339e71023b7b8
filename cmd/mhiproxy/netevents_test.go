package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
	"github.com/mhistack/mhistack/stack/proxy"
)

// netEventRig is mhiproxy running (as the binary does) on an emulated
// modem whose simnet.Network the test keeps, so that it can play the
// network while a SOCKS5 client holds connections through the proxy.
type netEventRig struct {
	nw     *simnet.Network
	st     *stack.Stack // the session mhiproxy serves, for its events
	proxy  string       // the SOCKS5 listener
	echo   netip.AddrPort
	stdout *syncBuffer
	stderr *syncBuffer
}

// startNetEventRig runs mhiproxy with args on profile over a network
// built from cfg. Once it is listening it returns the rig (stopped when
// the test ends) and 0; if mhiproxy exits first it returns the rig with
// proxy empty and the exit status, the output in stdout and stderr.
func startNetEventRig(t *testing.T, profile string, cfg simnet.NetworkConfig, args ...string) (*netEventRig, int) {
	t.Helper()
	return startNetEventRigRetrying(t, profile, cfg, 0, args...)
}

// startNetEventRigRetrying is startNetEventRig with the session's first
// back-off after a failed attempt at retry (0: the default).
func startNetEventRigRetrying(t *testing.T, profile string, cfg simnet.NetworkConfig, retry time.Duration, args ...string) (*netEventRig, int) {
	t.Helper()
	r := &netEventRig{nw: simnet.NewNetwork(cfg), stdout: new(syncBuffer), stderr: new(syncBuffer)}
	r.echo = hostEchoForTest(t)
	open := func(ctx context.Context, o openOptions) (network, error) {
		o.Stack.Sim.NetworkConfig = cfg
		o.Stack.Sim.Network = r.nw
		o.Stack.RetryInterval = retry
		n, err := openModem(ctx, o)
		if err == nil {
			// Read after the ready line, which mhiproxy prints after
			// this returns (syncBuffer orders the two).
			r.st = n.(*modem).Stack
		}
		return n, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"-listen", "127.0.0.1:0", "-profile", profile, "-apn", cfg.APN, "-log-level", "warn"}, args...),
			r.stdout, r.stderr, open)
	}()
	ready := make(chan []string, 1)
	exited := make(chan int, 1)
	go func() {
		// waitReady fails the test on an early exit; here an exit is
		// a result, so poll both ourselves.
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			select {
			case code := <-done:
				exited <- code
				return
			default:
			}
			if m := strings.Fields(r.stdout.String()); len(m) >= 3 && m[0] == "listening" {
				ready <- m
				return
			}
		}
		exited <- -1
	}()
	select {
	case m := <-ready:
		r.proxy = m[2]
		t.Cleanup(func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("mhiproxy exit %d; stderr %q", code, r.stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Error("mhiproxy did not exit 30 s after the signal")
			}
		})
		return r, 0
	case code := <-exited:
		cancel()
		if code == -1 {
			t.Fatalf("no ready line and no exit in 60 s; stdout %q stderr %q", r.stdout.String(), r.stderr.String())
		}
		return r, code
	}
}

// hostEchoForTest serves a TCP echo on the host's loopback until the test
// ends and returns its address as the carrier's 198.18.0.1.
func hostEchoForTest(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { defer c.Close(); io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port))
}

// hostEcho6ForTest serves a TCP echo on the host's ::1 until the test
// ends and returns its address as the carrier's 2001:2::1; it skips the
// test on a host without IPv6 loopback.
func hostEcho6ForTest(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback on the host: %v", err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				go func() { <-done; c.Close() }()
				io.Copy(c, c)
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		close(done)
		wg.Wait()
	})
	return netip.AddrPortFrom(simnet.TestAddr6, uint16(l.Addr().(*net.TCPAddr).Port))
}

// dial opens a SOCKS5 connection to the echo server through mhiproxy.
func (r *netEventRig) dial(t *testing.T) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := (&proxy.Client{Proxy: r.proxy}).DialContext(ctx, "tcp", r.echo.String())
	if err != nil {
		t.Fatalf("SOCKS5 CONNECT %v through %s: %v", r.echo, r.proxy, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitEvent reads the served session's events until one matches; it
// fails the test after 20 s (a bound, not a measurement).
func (r *netEventRig) waitEvent(t *testing.T, what string, match func(stack.Event) bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-r.st.Events():
			if !ok {
				t.Fatalf("events closed waiting for %s", what)
			}
			if match(e) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s in 20 s", what)
		}
	}
}

func kind(k stack.EventKind) func(stack.Event) bool {
	return func(e stack.Event) bool { return e.Kind == k }
}

// echoThrough writes msg on c and checks it comes back.
func echoThrough(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q: got %q, %v", msg, got, err)
	}
}

// TestNetworkEventsThroughTheProxy plays each network event of
// docs/STACK.md "When the network changes" under a SOCKS5 client holding
// a TCP connection through mhiproxy, on an MBIM and a QMI modem.
func TestNetworkEventsThroughTheProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	home := simnet.NetworkConfig{APN: "internet", Carrier: simnet.DefaultCarrier()}
	events := []struct {
		name string
		play func(t *testing.T, profile string)
	}{
		{"out-of-coverage", func(t *testing.T, profile string) {
			r, _ := startNetEventRig(t, profile, home)
			c := r.dial(t)
			echoThrough(t, c, "before")
			r.nw.OutOfCoverage(time.Second)
			r.waitEvent(t, "link-down", kind(stack.EventLinkDown))
			// Written while the network carries nothing: held, sent
			// when it is back.
			if _, err := c.Write([]byte("during")); err != nil {
				t.Fatal(err)
			}
			r.waitEvent(t, "link-up", kind(stack.EventLinkUp))
			got := make([]byte, len("during"))
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "during" {
				t.Fatalf("echo of what was written out of coverage: %q, %v", got, err)
			}
			echoThrough(t, c, "after")
		}},
		{"readdressed-on-reconnect", func(t *testing.T, profile string) {
			r, _ := startNetEventRig(t, profile, home)
			old := r.dial(t)
			echoThrough(t, old, "before")
			r.nw.Configure(func(c *simnet.NetworkConfig) { c.NotRegistered = true })
			r.nw.NetworkLost()
			r.waitEvent(t, "link-down", kind(stack.EventLinkDown))
			next := home.Carrier
			next.IPv4 = netip.MustParsePrefix("10.0.0.6/30")
			next.IPv6 = netip.MustParsePrefix("2001:db8:64:1::2/64")
			r.nw.SetCarrier(next)
			r.nw.Configure(func(c *simnet.NetworkConfig) { c.NotRegistered = false })
			r.nw.Reregister()
			r.waitEvent(t, "link-up", kind(stack.EventLinkUp))
			// The relay's target was aborted with the old address:
			// the client's connection is reset, not ended as if the
			// server had finished.
			old.SetDeadline(time.Now().Add(20 * time.Second))
			_, err := old.Read(make([]byte, 1))
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("read on the connection from the old address: %v, want ECONNRESET", err)
			}
			c := r.dial(t)
			echoThrough(t, c, "after")
		}},
		{"ipv6-renumbered", func(t *testing.T, profile string) {
			// The network moves the session to another /64 while it
			// stays up (Router Advertisements): a client's connection
			// on the old address carries on until the old prefix's
			// valid lifetime ends, then is reset; new requests go
			// out from the new address meanwhile.
			r, _ := startNetEventRig(t, profile, home)
			echo6 := hostEcho6ForTest(t)
			dial6 := func() net.Conn {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				c, err := (&proxy.Client{Proxy: r.proxy}).DialContext(ctx, "tcp", echo6.String())
				if err != nil {
					t.Fatalf("SOCKS5 CONNECT %v: %v", echo6, err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			old := dial6()
			echoThrough(t, old, "before")
			oldAddr := home.Carrier.IPv6.Addr()
			next := r.nw.RenumberIPv6(3 * time.Second)
			if len(next) != 1 {
				t.Fatalf("renumbered %v, want the one session", next)
			}
			r.waitEvent(t, "the new prefix's address", func(e stack.Event) bool {
				return e.Kind == stack.EventAddressAdded && next[0].Contains(e.Prefix.Addr())
			})
			echoThrough(t, old, "during")
			echoThrough(t, dial6(), "a new connection")
			r.waitEvent(t, "the old address removed", func(e stack.Event) bool {
				return e.Kind == stack.EventAddressRemoved && e.Prefix.Addr() == oldAddr
			})
			old.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := old.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("read on the connection from the old address after its end: %v, want ECONNRESET", err)
			}
			echoThrough(t, dial6(), "after")
		}},
		{"mtu-changed", func(t *testing.T, profile string) {
			// One connection carries 2 MiB each way at each MTU the
			// network gives the session in turn: raised, then lowered
			// below the MSS the connection agreed on (the carrier does
			// not drop packets above the MTU, so the last step shows
			// the relay and the session carry on, not that segments
			// shrink).
			low := home
			low.Carrier.MTU = 1280
			r, _ := startNetEventRig(t, profile, low)
			c := r.dial(t)
			rng := rand.NewChaCha8([32]byte{1})
			for i, mtu := range []uint32{1280, 1400, 1280} {
				if i > 0 {
					car := low.Carrier
					car.MTU = mtu
					r.nw.SetCarrier(car)
					r.waitEvent(t, fmt.Sprintf("mtu-changed to %d", mtu), func(e stack.Event) bool { return e.Kind == stack.EventMTUChanged && e.MTU == mtu })
				}
				if got := r.st.MTU(); got != mtu {
					t.Fatalf("the session's MTU is %d, the network's %d", got, mtu)
				}
				msg := make([]byte, 2<<20)
				rng.Read(msg)
				c.SetDeadline(time.Now().Add(60 * time.Second))
				werr := make(chan error, 1)
				go func() { _, err := c.Write(msg); werr <- err }()
				got := make([]byte, len(msg))
				_, err := io.ReadFull(c, got)
				if err := errors.Join(err, <-werr); err != nil {
					t.Fatalf("2 MiB echo at MTU %d: %v", mtu, err)
				}
				if !bytes.Equal(got, msg) {
					t.Fatalf("2 MiB echo at MTU %d: the bytes differ", mtu)
				}
			}
			echoThrough(t, r.dial(t), "a new connection after the changes")
		}},
		{"pdn-refused-for-a-while", func(t *testing.T, profile string) {
			// mhiproxy starts on a network that refuses the session
			// twice (3GPP cause 26): it waits and serves.
			busy := home
			busy.ConnectReject, busy.ConnectRejectCalls = 26, 2
			r, code := startNetEventRigRetrying(t, profile, busy, 50*time.Millisecond)
			if r.proxy == "" {
				t.Fatalf("mhiproxy on a network refusing the session twice: exit %d; stderr %q", code, r.stderr.String())
			}
			if n := r.nw.RefusedCalls(); n != 2 {
				t.Errorf("the network refused %d attempts, want 2", n)
			}
			c := r.dial(t)
			echoThrough(t, c, "before")
			// The network deactivates the session and refuses it
			// until told otherwise: a new request fails with a SOCKS5
			// reply (network unreachable), the held connection waits.
			r.nw.RefuseCalls(26, 0, 0)
			r.nw.DeactivateCalls(26)
			r.waitEvent(t, "link-down", kind(stack.EventLinkDown))
			r.waitEvent(t, "a refused attempt", func(e stack.Event) bool {
				cause, ok := stack.RefusalCause(e.Err)
				return e.Kind == stack.EventSession && ok && cause == 26
			})
			if _, err := c.Write([]byte("during")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := (&proxy.Client{Proxy: r.proxy}).DialContext(ctx, "tcp", r.echo.String())
			var re *proxy.ReplyError
			if !errors.As(err, &re) || re.Reply != proxy.ReplyNetworkUnreachable {
				t.Errorf("SOCKS5 CONNECT while the network refuses the session: %v, want the reply network unreachable", err)
			}
			r.nw.RefuseCalls(0, 0, 0)
			r.waitEvent(t, "link-up", kind(stack.EventLinkUp))
			got := make([]byte, len("during"))
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "during" {
				t.Fatalf("echo of what was written during the refusal: %q, %v", got, err)
			}
			echoThrough(t, c, "after")
			echoThrough(t, r.dial(t), "a new connection after the refusal")
		}},
		{"pdn-refused-for-good", func(t *testing.T, profile string) {
			// A refusal for good (3GPP cause 33) fails mhiproxy at
			// once, saying so.
			unsub := home
			unsub.ConnectReject = 33
			r, code := startNetEventRig(t, profile, unsub)
			if r.proxy != "" || code != 1 {
				t.Fatalf("mhiproxy on a network refusing the session for good: exit %d, listening at %q; want exit 1", code, r.proxy)
			}
			if !strings.Contains(r.stderr.String(), "cause 33") || !strings.Contains(r.stderr.String(), "for good") {
				t.Errorf("the error does not name the cause: %q", r.stderr.String())
			}
			if n := r.nw.RefusedCalls(); n != 1 {
				t.Errorf("the network refused %d attempts, want 1", n)
			}
		}},
		{"roaming-refused", func(t *testing.T, profile string) {
			roam := home
			roam.Roaming = true
			r, code := startNetEventRig(t, profile, roam)
			if r.proxy != "" || code != 1 {
				t.Fatalf("mhiproxy on a roaming modem: exit %d, listening at %q; want exit 1", code, r.proxy)
			}
			if !strings.Contains(r.stderr.String(), "-allow-roaming") {
				t.Errorf("the error does not name -allow-roaming: %q", r.stderr.String())
			}
			t.Log(strings.TrimSpace(r.stderr.String()))
		}},
		{"roaming-allowed", func(t *testing.T, profile string) {
			roam := home
			roam.Roaming = true
			r, code := startNetEventRig(t, profile, roam, "-allow-roaming")
			if r.proxy == "" {
				t.Fatalf("mhiproxy -allow-roaming on a roaming modem: exit %d; stderr %q", code, r.stderr.String())
			}
			echoThrough(t, r.dial(t), "roaming")
		}},
	}
	for _, e := range events {
		for _, p := range []struct{ name, profile string }{{"mbim", "quectel-rm5xx"}, {"qmi", "telit-fn980-hwv1"}} {
			t.Run(e.name+"/"+p.name, func(t *testing.T) { e.play(t, p.profile) })
		}
	}
}
