package stack_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

type keepAlive struct {
	on             bool
	idle, interval time.Duration
	count          int
	delay          bool
}

// socketOptions reads back from gVisor what the stack set on c.
func socketOptions(t *testing.T, c *stack.TCPConn) keepAlive {
	t.Helper()
	ep := stack.TCPEndpointForTest(c)
	so := ep.SocketOptions()
	var idle tcpip.KeepaliveIdleOption
	var intvl tcpip.KeepaliveIntervalOption
	if err := ep.GetSockOpt(&idle); err != nil {
		t.Fatal(err)
	}
	if err := ep.GetSockOpt(&intvl); err != nil {
		t.Fatal(err)
	}
	n, err := ep.GetSockOptInt(tcpip.KeepaliveCountOption)
	if err != nil {
		t.Fatal(err)
	}
	return keepAlive{so.GetKeepAlive(), time.Duration(idle), time.Duration(intvl), n, so.GetDelayOption()}
}

func TestKeepAliveAndNoDelayReachTheSocket(t *testing.T) {
	ka := net.KeepAliveConfig{Enable: true, Idle: 7 * time.Second, Interval: 3 * time.Second, Count: 4}
	r := newRig(t, stack.Config{TCP: stack.TCPOptions{KeepAlive: ka}})
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	c, err := r.s.DialTCP(ctxT(t, 5*time.Second), netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := keepAlive{true, 7 * time.Second, 3 * time.Second, 4, false}
	if got := socketOptions(t, c); got != want {
		t.Fatalf("dialed connection: %+v, want %+v", got, want)
	}

	// An accepted connection gets the same configuration.
	l, err := r.s.ListenTCP(netip.AddrPortFrom(netip.IPv4Unspecified(), 8081))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	in, err := r.cn.Dial(ctxT(t, 5*time.Second), "tcp", netip.AddrPortFrom(simnet.DefaultCarrier().IPv4.Addr(), 8081))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	a, err := l.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := socketOptions(t, a); got != want {
		t.Fatalf("accepted connection: %+v, want %+v", got, want)
	}

	// The net.TCPConn methods change them.
	c.SetNoDelay(false)
	want.delay = true
	if got := socketOptions(t, c); got != want {
		t.Fatalf("after SetNoDelay(false): %+v, want %+v", got, want)
	}
	c.SetNoDelay(true)
	if err := c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	want = keepAlive{true, 30 * time.Second, 3 * time.Second, 4, false} // zero fields keep their value
	if got := socketOptions(t, c); got != want {
		t.Fatalf("after SetKeepAliveConfig: %+v, want %+v", got, want)
	}
	c.SetKeepAlivePeriod(20 * time.Second)
	want.idle, want.interval = 20*time.Second, 20*time.Second
	if got := socketOptions(t, c); got != want {
		t.Fatalf("after SetKeepAlivePeriod: %+v, want %+v", got, want)
	}
	c.SetKeepAlive(false)
	want.on = false
	if got := socketOptions(t, c); got != want {
		t.Fatalf("after SetKeepAlive(false): %+v, want %+v", got, want)
	}
	echoOnce(t, c, "still a working connection")
}

func TestKeepAliveDefaultsAndOptOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		tcp  stack.TCPOptions
		want keepAlive
	}{
		{"defaults (Go's)", stack.TCPOptions{}, keepAlive{true, 15 * time.Second, 15 * time.Second, 9, false}},
		{"disabled, Nagle on", stack.TCPOptions{KeepAlive: net.KeepAliveConfig{Idle: -1}, Delay: true},
			keepAlive{false, 15 * time.Second, 15 * time.Second, 9, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, stack.Config{TCP: tc.tcp})
			port := hostEcho(t, "tcp4", "127.0.0.1:0")
			c, err := r.s.DialTCP(ctxT(t, 5*time.Second), netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := socketOptions(t, c)
			if !tc.want.on {
				// With keepalive off only on/off and Nagle matter.
				got.idle, got.interval, got.count = tc.want.idle, tc.want.interval, tc.want.count
			}
			if got != tc.want {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
		})
	}
}

// blackHole is a stack whose link takes packets and never answers:
// dials stay in SYN-SENT until their context ends.
func blackHole(t *testing.T, cfg stack.Config) *stack.Stack {
	t.Helper()
	cfg.Addresses = []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")}
	s, err := stack.New(channel.New(64, 1500, ""), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitInFlight waits until n dials are in progress (bounded).
func waitInFlight(t *testing.T, s *stack.Stack, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.Stats().InFlightDials != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d dials in flight, want %d", s.Stats().InFlightDials, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestInFlightDialLimit(t *testing.T) {
	s := blackHole(t, stack.Config{Limits: stack.Limits{MaxInFlightDials: 2}})
	dst := netip.MustParseAddrPort("192.0.2.2:80")
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.DialTCP(ctx, netip.AddrPort{}, dst)
			errs <- err
		}()
	}
	waitInFlight(t, s, 2)
	_, err := s.DialTCP(context.Background(), netip.AddrPort{}, dst)
	if !errors.Is(err, stack.ErrTooManyDials) || !errors.Is(err, syscall.EAGAIN) {
		cancel()
		t.Fatalf("third dial: %v, want ErrTooManyDials (EAGAIN)", err)
	}
	if ne, ok := err.(net.Error); !ok || ne.Timeout() {
		t.Errorf("limit error %v: want a net.Error that is not a timeout", err)
	}
	cancel()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled dial: %v", err)
		}
	}
	st := s.Stats()
	if st.DialLimitHits != 1 || st.InFlightDials != 0 || st.ActiveTCPConns != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The slots are free again: a dial now fails by its own deadline.
	dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer dcancel()
	if _, err := s.DialTCP(dctx, netip.AddrPort{}, dst); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("dial after the others ended: %v, want a timeout", err)
	}
}

func TestDialFailsWhenItsAddressIsRemoved(t *testing.T) {
	s := blackHole(t, stack.Config{})
	errs := make(chan error, 1)
	go func() {
		_, err := s.DialTCP(context.Background(), netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.2:80"))
		errs <- err
	}()
	waitInFlight(t, s, 1)
	if err := s.SetAddresses([]netip.Prefix{netip.MustParsePrefix("192.0.2.7/24")}); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, syscall.ECONNABORTED) {
		t.Fatalf("dial from a removed address: %v, want ECONNABORTED", err)
	}
	if st := s.Stats(); st.AddressAborts != 1 || st.InFlightDials != 0 || st.ActiveTCPConns != 0 || st.DialFailed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCloseReadEndsReadsAndKeepsWriting(t *testing.T) {
	r := newRig(t, stack.Config{})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- string(b)
	}()
	c, err := r.s.DialTCP(ctxT(t, 5*time.Second), netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CloseRead(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after CloseRead: %d, %v; want 0, EOF", n, err)
	}
	if _, err := c.Write([]byte("still sending")); err != nil {
		t.Fatalf("write after CloseRead: %v", err)
	}
	c.CloseWrite()
	if s := <-got; s != "still sending" {
		t.Fatalf("host received %q", s)
	}
}

// TestDefaultBuffersCoverEveryRadioPreset: the default TCP buffer maxima,
// as gVisor holds them, let one connection keep every link/radio
// preset's bandwidth-delay product in flight, both ways: a send buffer of
// at least the BDP and a receive buffer of twice it (gVisor advertises
// half of the free receive buffer). Tailscale's 8 MiB / 6 MiB held a third
// of nr-mmwave-far's 10 MB.
func TestDefaultBuffersCoverEveryRadioPreset(t *testing.T) {
	s := blackHole(t, stack.Config{})
	var rcv tcpip.TCPReceiveBufferSizeRangeOption
	var snd tcpip.TCPSendBufferSizeRangeOption
	if err := s.GVisor().TransportProtocolOption(tcp.ProtocolNumber, &rcv); err != nil {
		t.Fatal(err)
	}
	if err := s.GVisor().TransportProtocolOption(tcp.ProtocolNumber, &snd); err != nil {
		t.Fatal(err)
	}
	if name, bdp := radio.LargestPresetBDP(); int64(rcv.Max/2) < bdp || int64(snd.Max) < bdp {
		t.Errorf("%s: BDP %d bytes, receive buffer max %d (window %d), send buffer max %d",
			name, bdp, rcv.Max, rcv.Max/2, snd.Max)
	}
}
