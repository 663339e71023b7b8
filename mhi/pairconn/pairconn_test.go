package pairconn_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pairconn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMessagesLargerThanOneTRERoundTrip: over the emulated modem's
// LOOPBACK, a message of several TREs leaves as one chained transfer and
// comes back joined from OVERFLOW completions; one larger than the UL
// ring can carry is refused with ErrTooLarge; Close ends a waiting Recv.
func TestMessagesLargerThanOneTRERoundTrip(t *testing.T) {
	r := mhitest.New(t, mhitest.Options{ProfileName: "foxconn-sdx55"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pairconn.Open(ctx, r.Controller, r.Host.DMA(), "LOOPBACK", pairconn.Options{BufLen: 4096, RxBufs: 8, TxBufs: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.MaxSend() != 8*4096 {
		t.Fatalf("MaxSend %d", c.MaxSend())
	}
	for _, n := range []int{1, 4096, 4097, 3*4096 + 5, 8 * 4096} {
		msg := bytes.Repeat([]byte{byte(n)}, n)
		msg[0] = 0xAB
		if err := c.Send(ctx, msg); err != nil {
			t.Fatalf("Send(%d): %v", n, err)
		}
		got, err := c.Recv(ctx)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%d-byte message came back as %d bytes (%v)", n, len(got), err)
		}
	}
	if err := c.Send(ctx, make([]byte, 8*4096+1)); !errors.Is(err, pairconn.ErrTooLarge) {
		t.Errorf("oversized Send = %v, want ErrTooLarge", err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Recv(context.Background()); done <- err }()
	c.Close()
	if err := <-done; !errors.Is(err, pairconn.ErrClosed) {
		t.Errorf("Recv across Close = %v, want ErrClosed", err)
	}
}
