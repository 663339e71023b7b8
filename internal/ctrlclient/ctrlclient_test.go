package ctrlclient

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/internal/ctrlstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errClosed = errors.New("test: closed")

// chars decodes one-byte messages.
type chars struct{ buf []byte }

func (d *chars) Write(b []byte) { d.buf = append(d.buf, b...) }

func (d *chars) Next() (*string, error) {
	if len(d.buf) == 0 {
		return nil, nil
	}
	s := string(d.buf[:1])
	d.buf = d.buf[1:]
	return &s, nil
}

// newConn is a Conn whose answers are the bytes the peer writes; each
// completes the request keyed by the byte, if it waits for want "ok".
func newConn(t *testing.T) (*Conn[string, string, *string], net.Conn) {
	a, b := net.Pipe()
	var c *Conn[string, string, *string]
	c = New(ctrlstream.New(a, 64), Config[string, string, *string]{
		Proto: "test", Logger: slog.New(slog.DiscardHandler), ErrClosed: errClosed, Decoder: &chars{},
		Dispatch: func(m *string) {
			if !c.Complete(*m, Result[*string]{M: m}, func(want string) bool { return want == "ok" }) {
				c.Indicate(m)
			}
		},
		Malformed: func(error) {},
	})
	c.Start()
	return c, b
}

func TestConnMatchesAnswersAndHandsTheRestToSubscribers(t *testing.T) {
	c, peer := newConn(t)
	defer peer.Close()
	ind := make(chan string, 2)
	c.Subscribe(func(m *string) { ind <- *m })
	c.Mu.Lock()
	ch := c.AddLocked("a", "ok")
	other := c.AddLocked("b", "not ok")
	c.Mu.Unlock()
	go peer.Write([]byte("ba"))
	r, err := c.Wait(context.Background(), "a", ch)
	if err != nil || r.M == nil || *r.M != "a" {
		t.Fatalf("Wait = %v, %v", r, err)
	}
	if got := <-ind; got != "b" {
		t.Errorf("indication %q, want b (its request waits for another answer)", got)
	}
	// Close fails what still waits with ErrClosed, after closing runs.
	ran := false
	if err := c.Close(func() func() { return func() { ran = true } }); err != nil {
		t.Fatal(err)
	}
	if r := <-other; !errors.Is(r.Err, errClosed) || !ran {
		t.Errorf("after Close: %v, closing ran %v", r.Err, ran)
	}
	if err := c.Close(func() func() { t.Error("closing ran twice"); return nil }); err != nil {
		t.Error(err)
	}
	c.Mu.Lock()
	err = c.UsableLocked()
	c.Mu.Unlock()
	if !errors.Is(err, errClosed) {
		t.Errorf("UsableLocked after Close = %v", err)
	}
}

func TestConnTransportFailureFailsRequestsAndTellsResetListeners(t *testing.T) {
	c, peer := newConn(t)
	reset := make(chan struct{})
	c.OnReset(func() { close(reset) })
	c.Mu.Lock()
	ch := c.AddLocked("a", "ok")
	c.Mu.Unlock()
	peer.Close()
	r, _ := c.Wait(context.Background(), "a", ch)
	if r.Err == nil || !strings.HasPrefix(r.Err.Error(), "test: transport: ") {
		t.Errorf("request failed with %v, want the transport's failure", r.Err)
	}
	<-reset
	c.Mu.Lock()
	dead := c.DeadLocked()
	c.Mu.Unlock()
	if !dead {
		t.Error("not dead after the transport failed")
	}
	c.Close(func() func() { return nil })
}

func TestConnWaitForgetsOnContextEnd(t *testing.T) {
	c, peer := newConn(t)
	defer peer.Close()
	defer c.Close(func() func() { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Mu.Lock()
	ch := c.AddLocked("a", "ok")
	c.Mu.Unlock()
	if _, err := c.Wait(ctx, "a", ch); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
	c.Mu.Lock()
	waiting := c.WaitingLocked("a")
	c.Mu.Unlock()
	if waiting {
		t.Error("request still waiting after its context ended")
	}
}

func TestNextIDWrapsAndSkipsIDsInUse(t *testing.T) {
	used := map[uint16]bool{1: true, 3: true}
	free := func(id uint16) bool { return !used[id] }
	if got := NextID(uint16(0xFE), 0xFF, free); got != 0xFF {
		t.Errorf("NextID(0xFE) = %#x, want 0xFF", got)
	}
	if got := NextID(uint16(0xFF), 0xFF, free); got != 2 {
		t.Errorf("NextID(0xFF) = %d, want 2 (wraps to 1, which is in use)", got)
	}
	if got := NextID(uint32(0xFFFFFFFF), 0xFFFFFFFF, func(id uint32) bool { return id != 1 }); got != 2 {
		t.Errorf("NextID(MaxUint32) = %d, want 2", got)
	}
}
