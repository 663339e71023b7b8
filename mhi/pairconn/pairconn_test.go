package pairconn_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/mhi/firehose"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pairconn"
	"github.com/mhistack/mhistack/mhi/sim"
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

// TestSlowReaderHoldsTheDeviceBackWithoutLoss: the emulated flash
// programmer streams an 8 MiB Firehose read (128 messages of 64 KiB, two
// TREs each) to a reader that stops after the first piece until the
// device has run out of DL buffers. The connection keeps every message
// and holds its buffers back instead of dropping what its queue cannot
// take, so the device waits; the read then completes byte-exact with
// nothing dropped.
func TestSlowReaderHoldsTheDeviceBackWithoutLoss(t *testing.T) {
	const sectors = 2048
	st, err := sim.NewStorage(sim.StorageUFS, sectors)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, sectors*st.SectorSize())
	rand.NewChaCha8([32]byte{1}).Read(want)
	if err := st.WriteSectors(0, 0, want); err != nil {
		t.Fatal(err)
	}
	r := mhitest.New(t, mhitest.Options{ProfileName: "qcom-sdx55m", Functions: map[string]sim.Function{"FIREHOSE": &sim.Firehose{Storage: st}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Controller.EnterEDL(ctx, []byte("emulated prog_firehose")); err != nil {
		t.Fatal(err)
	}
	conn, err := pairconn.Open(ctx, r.Controller, r.Host.DMA(), "FIREHOSE", pairconn.Options{RxBufs: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := firehose.NewClient(conn, firehose.Options{MaxMessage: conn.MaxSend(), Timeout: 10 * time.Second, RawTimeout: 10 * time.Second})
	var got bytes.Buffer
	w := writerFunc(func(b []byte) (int, error) {
		for deadline := time.Now().Add(10 * time.Second); got.Len() == 0 && r.Modem.Stats().DLDrops == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return 0, errors.New("the device never ran out of DL buffers while the reader waited")
			}
		}
		return got.Write(b)
	})
	if err := c.Read(ctx, firehose.Sectors{SectorSize: st.SectorSize(), StartSector: "0", NumSectors: sectors}, w, nil); err != nil {
		t.Fatalf("Read: %v (dropped %d)", err, conn.Dropped())
	}
	if !bytes.Equal(got.Bytes(), want) || conn.Dropped() != 0 {
		t.Errorf("read %d of %d bytes, equal %v, dropped %d", got.Len(), len(want), bytes.Equal(got.Bytes(), want), conn.Dropped())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
