package stack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hostEcho is a TCP echo server on the host's loopback; it returns its
// port (reachable through the modem at simnet.TestAddr4).
func hostEcho(t *testing.T, network, addr string) uint16 {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestTCPEchoThroughTheModemToTheHost(t *testing.T) {
	forKinds(t, func(t *testing.T, k rigKind) {
		r := newRigOn(t, stack.Config{}, k)
		port := hostEcho(t, "tcp4", "127.0.0.1:0")
		c, err := r.s.DialContext(ctxT(t, 10*time.Second), "tcp", netip.AddrPortFrom(simnet.TestAddr4, port).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		msg := []byte("hello through the modem")
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("echo %q, want %q", got, msg)
		}
		if st := r.s.Stats(); st.Link == nil || st.Link.RXPackets == 0 || st.ActiveTCPConns != 1 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestTCPConnBufferedCountsWhatAReadReturnsAtOnce: Buffered is the
// received bytes not yet read, as FIONREAD on a host socket.
func TestTCPConnBufferedCountsWhatAReadReturnsAtOnce(t *testing.T) {
	r := newRig(t, stack.Config{})
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	c, err := r.s.DialTCP(ctxT(t, 10*time.Second), netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := c.Buffered(); n != 0 {
		t.Fatalf("Buffered %d before anything was sent, want 0", n)
	}
	msg := bytes.Repeat([]byte("x"), 3000)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Buffered() == len(msg) })
	got := make([]byte, 1000)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if n := c.Buffered(); n != len(msg)-len(got) {
		t.Errorf("Buffered %d after reading %d of %d, want %d", n, len(got), len(msg), len(msg)-len(got))
	}
	c.Close()
	if n := c.Buffered(); n != 0 {
		t.Errorf("Buffered %d after Close, want 0", n)
	}
}

func TestDialRefusedIsECONNREFUSED(t *testing.T) {
	r := newRig(t, stack.Config{})
	l, _ := net.Listen("tcp4", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	_, err := r.s.DialContext(ctxT(t, 10*time.Second), "tcp4", netip.AddrPortFrom(simnet.TestAddr4, uint16(port)).String())
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a closed port: %v, want ECONNREFUSED", err)
	}
	if n := r.s.Stats().ActiveTCPConns; n != 0 {
		t.Fatalf("%d active connections after a failed dial", n)
	}
}

func TestUDPRequestResponse(t *testing.T) {
	forKinds(t, func(t *testing.T, k rigKind) {
		r := newRigOn(t, stack.Config{}, k)
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			b := make([]byte, 2048)
			for {
				n, a, err := pc.ReadFrom(b)
				if err != nil {
					return
				}
				pc.WriteTo(append([]byte("re: "), b[:n]...), a)
			}
		}()
		port := pc.LocalAddr().(*net.UDPAddr).Port
		c, err := r.s.DialContext(ctxT(t, 5*time.Second), "udp", netip.AddrPortFrom(simnet.TestAddr4, uint16(port)).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 100)
		n, err := c.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		if string(b[:n]) != "re: ping" {
			t.Fatalf("got %q", b[:n])
		}
	})
}

func TestPing(t *testing.T) {
	forKinds(t, func(t *testing.T, k rigKind) {
		r := newRigOn(t, stack.Config{}, k)
		for _, dst := range []netip.Addr{simnet.DefaultCarrier().IPv4Gateway, simnet.TestAddr4, simnet.DefaultCarrier().IPv6Gateway} {
			rtt, err := r.s.Ping(ctxT(t, 5*time.Second), dst)
			if err != nil {
				t.Fatalf("ping %v: %v", dst, err)
			}
			t.Logf("ping %v: %v", dst, rtt)
		}
	})
}

func TestLookupThroughTheCarrierDNS(t *testing.T) {
	forKinds(t, func(t *testing.T, k rigKind) {
		r := newRigOn(t, stack.Config{}, k)
		addrs, err := r.s.LookupNetIP(ctxT(t, 5*time.Second), "ip", simnet.TestName)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 2 || addrs[0] != simnet.TestAddr6 || addrs[1] != simnet.TestAddr4 {
			t.Fatalf("LookupNetIP(%s) = %v", simnet.TestName, addrs)
		}
		if _, err := r.s.LookupHost(ctxT(t, 5*time.Second), "no-such-name.invalid"); err == nil {
			t.Fatal("lookup of an invalid name succeeded")
		}
		// The net.Resolver flavour goes to the same servers.
		hs, err := r.s.Resolver().LookupHost(ctxT(t, 5*time.Second), simnet.TestName)
		if err != nil || len(hs) == 0 {
			t.Fatalf("Resolver().LookupHost = %v, %v", hs, err)
		}
		if r.cn.Stats().DNSQueries < 3 {
			t.Fatalf("carrier answered %d queries", r.cn.Stats().DNSQueries)
		}
	})
}

func TestIPv6DialByName(t *testing.T) {
	r := newRig(t, stack.Config{})
	port := hostEcho(t, "tcp6", "[::1]:0")
	// The name has both families; the echo server listens on ::1 only,
	// so success means IPv6 was used (happy eyeballs tries it first).
	var pcap bytes.Buffer
	stop, _ := r.s.CapturePcap(&pcap, 128)
	start := time.Now()
	c, err := r.s.DialContext(ctxT(t, 10*time.Second), "tcp", net.JoinHostPort(simnet.TestName, itoa(port)))
	stop()
	if err != nil {
		os.WriteFile("/tmp/ipv6dial.pcap", pcap.Bytes(), 0o644)
		t.Fatalf("after %v: %v (stats %+v, carrier %+v)", time.Since(start), err, r.s.Stats(), r.cn.Stats())
	}
	defer c.Close()
	if ra := c.RemoteAddr().(*net.TCPAddr); !ra.IP.Equal(simnet.TestAddr6.AsSlice()) {
		t.Fatalf("connected to %v", ra)
	}
	var ll bool
	for _, p := range r.s.Addresses() {
		ll = ll || p.Addr().IsLinkLocalUnicast()
	}
	if !ll {
		t.Fatalf("no IPv6 link-local address in %v", r.s.Addresses())
	}
}

func itoa(p uint16) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), p).String()[len("0.0.0.0:"):]
}

func TestListenerAcceptsFromTheCarrier(t *testing.T) {
	r := newRig(t, stack.Config{})
	l, err := r.s.Listen("tcp", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		done <- err
	}()
	c, err := r.cn.Dial(ctxT(t, 5*time.Second), "tcp", netip.AddrPortFrom(simnet.DefaultCarrier().IPv4.Addr(), 8080))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("inbound"))
	c.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "inbound" {
		t.Fatalf("echo from the modem's listener: %q, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestHalfClose(t *testing.T) {
	r := newRig(t, stack.Config{})
	// The host server reads to EOF, then answers: only a working
	// CloseWrite through the modem and the carrier lets it answer.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		c.Write([]byte("got " + string(b)))
	}()
	c, err := r.s.DialTCP(ctxT(t, 5*time.Second), netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("request"))
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "got request" {
		t.Fatalf("after CloseWrite: %q, %v", got, err)
	}
}

func TestConnectionLimit(t *testing.T) {
	r := newRig(t, stack.Config{Limits: stack.Limits{MaxTCPConns: 2}})
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	addr := netip.AddrPortFrom(simnet.TestAddr4, port).String()
	var conns []net.Conn
	for range 2 {
		c, err := r.s.DialContext(ctxT(t, 5*time.Second), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	_, err := r.s.DialContext(ctxT(t, 5*time.Second), "tcp", addr)
	if !errors.Is(err, stack.ErrTooManyConns) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("third dial: %v, want ErrTooManyConns", err)
	}
	conns[0].Close()
	c, err := r.s.DialContext(ctxT(t, 5*time.Second), "tcp", addr)
	if err != nil {
		t.Fatalf("dial after a close: %v", err)
	}
	c.Close()
	conns[1].Close()
	if st := r.s.Stats(); st.ConnLimitHits != 1 || st.ActiveTCPConns != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// bulk moves n bytes through the modem in both directions at once and
// checks SHA-256 of each.
func TestBulkSHA256BothDirections(t *testing.T) {
	forKinds(t, func(t *testing.T, k rigKind) {
		n := bulkSize()
		r := newRigOn(t, stack.Config{}, k)
		// Host side: receives n bytes and hashes them, while sending n
		// pseudo-random bytes of its own.
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		type res struct {
			sum [32]byte
			err error
		}
		hostGot := make(chan res, 1)
		hostSent := make(chan [32]byte, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				hostGot <- res{err: err}
				return
			}
			// Close only after both directions are done: closing when
			// the upload ends would cut the host's own send short.
			wrote := make(chan struct{})
			defer func() { <-wrote; c.Close() }()
			go func() {
				defer close(wrote)
				h := sha256.New()
				io.Copy(io.MultiWriter(c, h), io.LimitReader(newRand(2), n))
				c.(*net.TCPConn).CloseWrite()
				hostSent <- [32]byte(h.Sum(nil))
			}()
			h := sha256.New()
			_, err = io.Copy(h, c)
			hostGot <- res{[32]byte(h.Sum(nil)), err}
		}()
		c, err := r.s.DialTCP(ctxT(t, 5*time.Second), netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		sent := make(chan [32]byte, 1)
		go func() {
			h := sha256.New()
			io.CopyBuffer(io.MultiWriter(c, h), io.LimitReader(newRand(1), n), make([]byte, 256<<10))
			c.CloseWrite()
			sent <- [32]byte(h.Sum(nil))
		}()
		watch := time.AfterFunc(20*time.Second, func() {
			st := r.s.Stats()
			t.Logf("stalled? stack %+v\nlink %+v\ncarrier %+v", st, *st.Link, r.cn.Stats())
		})
		defer watch.Stop()
		h := sha256.New()
		got, err := io.CopyBuffer(h, c, make([]byte, 256<<10))
		if err != nil || got != n {
			t.Fatalf("received %d of %d bytes: %v", got, n, err)
		}
		el := time.Since(start)
		if [32]byte(h.Sum(nil)) != <-hostSent {
			t.Fatal("host → modem SHA-256 mismatch")
		}
		hg := <-hostGot
		if hg.err != nil || hg.sum != <-sent {
			t.Fatalf("modem → host SHA-256 mismatch (%v)", hg.err)
		}
		st := r.s.Stats()
		if cs := r.cn.Stats(); k.framing != nil {
			// Logged, not asserted: gVisor's TCP writes one segment per
			// call from one goroutine, so frames rarely fill (see dlAgg).
			t.Logf("DL aggregation: %d packets in %d frames (%.1f per frame)", cs.DLPackets, cs.DLFrames, float64(cs.DLPackets)/float64(cs.DLFrames))
		}
		t.Logf("%d MiB each way in %v: %.0f Mbit/s per direction; TCP retransmits %d, link %+v",
			n>>20, el, float64(n)*8/el.Seconds()/1e6, st.TCPRetransmits, *st.Link)
	})
}

// newRand is a fast deterministic byte stream.
type randReader struct{ r *rand.ChaCha8 }

func newRand(seed byte) io.Reader { return randReader{rand.NewChaCha8([32]byte{seed})} }

func (r randReader) Read(b []byte) (int, error) { return r.r.Read(b) }
