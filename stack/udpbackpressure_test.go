package stack_test

import (
	"context"
	"errors"
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
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var delivered atomic.Uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
			delivered.Add(1)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.s.DialUDP(ctx, netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(peer.LocalAddr().(*net.UDPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	drops := func() (carrier, receiver uint64) {
		cs := r.cn.Stats()
		carrier = cs.BadChecksums + cs.UDPReceiveBufferErrors + cs.UDPRelayErrors
		receiver, err := sockstat.Drops(peer)
		if err != nil {
			t.Fatal(err)
		}
		return carrier, receiver
	}
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
	peer.Close()
	<-done
}
