package stack_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

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
