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
// bounded by the write deadline.
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
	// Now the deadline: the writer keeps the buffer full, so some write
	// waits when the deadline passes.
	pc.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	start := time.Now()
	for {
		_, err := pc.WriteTo(b, to)
		if err == nil {
			if time.Since(start) > 30*time.Second {
				t.Fatal("writes never waited past the deadline")
			}
			continue
		}
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("write past the deadline: %v, want os.ErrDeadlineExceeded", err)
		}
		break
	}
	if d := r.s.Stats().TXDroppedNoBufferSpace; d != 0 {
		t.Errorf("%d datagrams dropped by the transmit queue", d)
	}
}
