package stack_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/internal/sockstat"
	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// TestUDPWriterWaitsForItsSendBuffer: a UDP writer faster than the modem
// is paced by its send buffer (its datagrams in the transmit queue count
// against it), not dropped by the queue, and a write that waits is
// bounded by the write deadline: with the modem slowed to one TRE per
// 200 ms, the write that fails with os.ErrDeadlineExceeded began before
// the deadline and returned at it, so it waited for it.
func TestUDPWriterWaitsForItsSendBuffer(t *testing.T) {
	// A queue far shorter than the default send buffer (212 KiB, ~150
	// datagrams of 1400 bytes): with the default buffer the queue drops
	// most of a burst; with 16 KiB no datagram is dropped.
	r := newRig(t, stack.Config{TXQueueLen: 64})
	pc, err := r.s.ListenUDP(netip.AddrPortFrom(netip.IPv4Unspecified(), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := pc.SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	to := &net.UDPAddr{IP: simnet.TestAddr4.AsSlice(), Port: 9}
	b := make([]byte, 1400)
	const n = 5000
	pc.SetWriteDeadline(time.Now().Add(time.Minute))
	for i := range n {
		if _, err := pc.WriteTo(b, to); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if d := r.s.Stats().TXDroppedNoBufferSpace; d != 0 {
		t.Errorf("%d of %d datagrams dropped by the transmit queue: the writer was not paced by its send buffer", d, n)
	}
	// Now the deadline: the modem takes 200 ms per TRE, the writer
	// keeps the buffer full, so every write waits and the one in
	// progress at the deadline fails there. A write that began after the
	// deadline, or less than 1 ms before it (it may have failed at once,
	// which proves nothing), sends the loop round again with a new
	// deadline.
	r.modem.SetSlow(200 * time.Millisecond)
	defer r.modem.SetSlow(0)
	waited := false
	for attempt := 0; attempt < 10 && !waited; attempt++ {
		deadline := time.Now().Add(100 * time.Millisecond)
		pc.SetWriteDeadline(deadline)
		for {
			start := time.Now()
			_, err := pc.WriteTo(b, to)
			end := time.Now()
			if err == nil {
				if end.Sub(deadline) > 30*time.Second {
					t.Fatal("writes went on 30 s past the deadline")
				}
				continue
			}
			var ne net.Error
			if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("write past the deadline: %v, want os.ErrDeadlineExceeded", err)
			}
			if end.Before(deadline) {
				t.Fatalf("a write failed %v before its deadline", deadline.Sub(end))
			}
			if deadline.Sub(start) >= time.Millisecond {
				waited = true
				t.Logf("the failing write waited %v, from %v before the deadline", end.Sub(start), deadline.Sub(start))
			}
			break
		}
	}
	if !waited {
		t.Fatal("in 10 tries no write was waiting when its deadline passed: each failing write began at it or after")
	}
	if d := r.s.Stats().TXDroppedNoBufferSpace; d != 0 {
		t.Errorf("%d datagrams dropped by the transmit queue", d)
	}
}

// udpSink is a host UDP socket that counts the datagrams it receives, and
// c, a socket of a rig's stack connected to it (closed at the test's end).
type udpSink struct {
	peer      *net.UDPConn
	c         *stack.UDPConn
	delivered atomic.Uint64
	done      chan struct{}
}

func newUDPSink(t *testing.T, r *rig) *udpSink {
	t.Helper()
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	k := &udpSink{peer: peer, done: make(chan struct{})}
	t.Cleanup(k.stop)
	go func() {
		defer close(k.done)
		buf := make([]byte, 2048)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
			k.delivered.Add(1)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k.c, err = r.s.DialUDP(ctx, netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(peer.LocalAddr().(*net.UDPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.c.Close() })
	return k
}

// drops are the datagrams the rig's carrier network and the host socket
// dropped.
func (k *udpSink) drops(t *testing.T, r *rig) (carrier, receiver uint64) {
	cs := r.cn.Stats()
	carrier = cs.BadChecksums + cs.UDPReceiveBufferErrors + cs.UDPRelayErrors
	receiver, err := sockstat.Drops(k.peer)
	if err != nil {
		t.Fatal(err)
	}
	return carrier, receiver
}

// stop closes the host socket and waits for its reader (idempotent).
func (k *udpSink) stop() {
	k.peer.Close()
	<-k.done
}

// TestUDPDatagramsAreDeliveredOrCountedWhereDropped: a writer sends
// datagrams as fast as writes return, through the stack, the link, the
// emulated modem and the carrier network to a host socket. Every datagram
// a write accepted is delivered or counted at the stage that dropped it;
// the host's stages (the socket, the transmit queue, the link) drop
// nothing the writer was not told about (a write error), and the modem
// drops nothing.
func TestUDPDatagramsAreDeliveredOrCountedWhereDropped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the receiving socket's drops are counted by Linux only (SO_MEMINFO)")
	}
	r := newRig(t, stack.Config{})
	k := newUDPSink(t, r)
	c, delivered := k.c, &k.delivered
	const n = 4000
	var sent, told uint64
	b := make([]byte, 1400-28)
	c.SetWriteDeadline(time.Now().Add(time.Minute))
	for range n {
		if _, err := c.Write(b); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			told++
			continue
		}
		sent++
	}
	drops := func() (carrier, receiver uint64) { return k.drops(t, r) }
	deadline := time.Now().Add(30 * time.Second)
	for {
		cd, rd := drops()
		if delivered.Load()+cd+rd == sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sent %d, after 30 s delivered %d + dropped by the carrier %d + by the receiving socket %d: %d unaccounted",
				sent, delivered.Load(), cd, rd, int64(sent)-int64(delivered.Load()+cd+rd))
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := r.s.Stats()
	if st.UDPPacketsSent != sent || st.UDPSendErrors != told {
		t.Errorf("the stack sent %d datagrams and refused %d; the writer was told %d sent, %d failed",
			st.UDPPacketsSent, st.UDPSendErrors, sent, told)
	}
	if st.TXDroppedNoBufferSpace != told {
		t.Errorf("the transmit queue dropped %d, the writer was told of %d", st.TXDroppedNoBufferSpace, told)
	}
	if d := st.Link.TXDrops; d != (link.TXDrops{}) {
		t.Errorf("the link dropped silently: %+v", d)
	}
	if d := r.modem.Stats().ULDrops; d != 0 {
		t.Errorf("the modem dropped %d UL transfers", d)
	}
	cd, rd := drops()
	t.Logf("written %d: sent %d, refused %d; delivered %d, dropped by the carrier %d (%d in its receive buffer), by the receiving socket %d",
		n, sent, told, delivered.Load(), cd, r.cn.Stats().UDPReceiveBufferErrors, rd)
	k.stop()
}

// stallUL makes the rig's modem stop taking UL transfers for longer than
// the link's TXTimeout while traffic runs, then lets it go: once the link
// has carried some of it (started), the modem sleeps 200 ms per TRE; once
// a writer has found the UL ring full, the stall is held for four
// TXTimeouts more. Before the transmit queue held what the link had no
// room for, each batch waiting there past TXTimeout was dropped
// (Link.TXDrops.Timeout).
func stallUL(t *testing.T, r *rig, started func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !started() {
		if time.Now().After(deadline) {
			t.Fatal("no traffic within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	full := r.s.Stats().Link.TXFull
	r.modem.SetSlow(200 * time.Millisecond)
	defer r.modem.SetSlow(0)
	// A TCP writer whose sender is in RTO back-off by then adds a
	// segment per timeout only: the ring can take seconds to fill (12 s
	// seen under -race on an idle machine), so the bound is generous.
	deadline = time.Now().Add(2 * time.Minute)
	for r.s.Stats().Link.TXFull == full {
		if time.Now().After(deadline) {
			t.Fatal("the UL ring was not found full within 2 minutes of the stall")
		}
		time.Sleep(time.Millisecond)
	}
	// The fault's length, not a wait for something.
	time.Sleep(4 * link.DefaultTXTimeout)
}

// TestAStalledModemLosesNoDatagram: a UDP writer sends as fast as writes
// return while the modem stops taking UL transfers for several
// TXTimeouts. The transmit queue holds what the link has no room for
// (as Linux's qdisc holds packets while the driver's queue is stopped):
// the link drops nothing, the queue refuses only what a writer is told
// of, and every datagram sent is delivered or counted where the network
// dropped it.
func TestAStalledModemLosesNoDatagram(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the receiving socket's drops are counted by Linux only (SO_MEMINFO)")
	}
	r := newRig(t, stack.Config{})
	k := newUDPSink(t, r)
	c, delivered := k.c, &k.delivered
	// A send buffer of 4 MiB (~3,000 datagrams) lets the writer keep
	// more in flight than the UL ring holds.
	if err := c.SetWriteBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	var sent, told atomic.Uint64
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		b := make([]byte, 1400-28)
		for {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			c.SetWriteDeadline(time.Now().Add(time.Minute))
			if _, err := c.Write(b); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					wrote <- err
					return
				}
				told.Add(1)
				continue
			}
			sent.Add(1)
		}
	}()
	stallUL(t, r, func() bool { return r.s.Stats().Link.TXPackets > 1000 })
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	drops := func() (carrier, receiver uint64) { return k.drops(t, r) }
	// The link's drops are in the sum so that a link that drops fails
	// below, on its count, rather than here at the deadline.
	linkDrops := func() uint64 {
		d := r.s.Stats().Link.TXDrops
		return d.TooBig + d.Timeout + d.LinkDown + d.Closed + d.Held
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		cd, rd := drops()
		if delivered.Load()+cd+rd+linkDrops() == sent.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sent %d, after 60 s delivered %d + dropped by the carrier %d + by the receiving socket %d + by the link %d: %d unaccounted",
				sent.Load(), delivered.Load(), cd, rd, linkDrops(), int64(sent.Load())-int64(delivered.Load()+cd+rd+linkDrops()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := r.s.Stats()
	if d := st.Link.TXDrops; d != (link.TXDrops{}) {
		t.Errorf("the link dropped while the modem stalled: %+v", d)
	}
	if st.TXDroppedNoBufferSpace != told.Load() || st.UDPSendErrors != told.Load() {
		t.Errorf("the transmit queue dropped %d and the stack refused %d; the writer was told of %d",
			st.TXDroppedNoBufferSpace, st.UDPSendErrors, told.Load())
	}
	if d := r.modem.Stats().ULDrops; d != 0 {
		t.Errorf("the modem dropped %d UL transfers", d)
	}
	cd, rd := drops()
	t.Logf("sent %d, refused %d; delivered %d, dropped by the carrier %d, by the receiving socket %d; UL ring found full %d times",
		sent.Load(), told.Load(), delivered.Load(), cd, rd, st.Link.TXFull)
	k.stop()
}

// TestAStalledModemLosesNoTCPSegment: a TCP upload runs while the modem
// stops taking UL transfers for several TXTimeouts; the transmit queue
// holds the segments the link has no room for, so none is dropped on the
// host (the link's TXDrops and the queue's drops stay 0) and every byte
// arrives.
func TestAStalledModemLosesNoTCPSegment(t *testing.T) {
	r := newRig(t, stack.Config{})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.s.DialTCP(ctx, netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		b := make([]byte, 64<<10)
		c.SetWriteDeadline(time.Now().Add(5 * time.Minute))
		for {
			select {
			case <-stop:
				wrote <- c.Close()
				return
			default:
			}
			n, err := c.Write(b)
			written.Add(int64(n))
			if err != nil {
				wrote <- err
				return
			}
		}
	}()
	stallUL(t, r, func() bool { return written.Load() > 4<<20 })
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != written.Load() {
		t.Errorf("wrote %d bytes, the peer read %d", written.Load(), n)
	}
	st := r.s.Stats()
	if d := st.Link.TXDrops; d != (link.TXDrops{}) {
		t.Errorf("the link dropped TCP segments while the modem stalled: %+v", d)
	}
	if d := st.TXDroppedNoBufferSpace; d != 0 {
		t.Errorf("the transmit queue dropped %d TCP segments", d)
	}
	t.Logf("wrote %d bytes; UL ring found full %d times, %d TCP retransmits", written.Load(), st.Link.TXFull, st.TCPRetransmits)
}
