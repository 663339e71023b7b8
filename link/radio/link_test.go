package radio

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLinkDeliversAfterTheDelayAndStopsOnClose runs the goroutines on the
// wall clock: only lower bounds are checked (a loaded machine delivers
// late, never early).
func TestLinkDeliversAfterTheDelayAndStopsOnClose(t *testing.T) {
	const delay = 20 * time.Millisecond
	var mu sync.Mutex
	sent := map[uint32]time.Time{}
	var late []time.Duration
	var ups int
	done := make(chan struct{})
	down := func(tag uint32, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		if len(p) != int(tag)+1 {
			t.Errorf("packet %d has %d bytes", tag, len(p))
		}
		late = append(late, time.Since(sent[tag]))
		if len(late) == 50 {
			close(done)
		}
	}
	up := func(uint32, []byte) { mu.Lock(); ups++; mu.Unlock() }
	l, err := New(Config{Down: Direction{Rate: 10e6, Delay: delay, Queue: Queue{Packets: 100}}}, down, up)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint32(50) {
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		if err := l.Send(Down, i, make([]byte, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("delivered %d of 50 in 30 s", len(late))
	}
	mu.Lock()
	for i, d := range late {
		if d < delay {
			t.Errorf("packet %d arrived after %v, before the %v delay", i, d, delay)
		}
	}
	mu.Unlock()
	if st := l.Stats(Down); st.Delivered != 50 || st.Enqueued != 50 {
		t.Errorf("stats %+v", st)
	}
	l.Close()
	if err := l.Send(Down, 0, []byte{1}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %v, want net.ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewRefusesBadConfigs(t *testing.T) {
	nop := func(uint32, []byte) {}
	for name, c := range map[string]Config{
		"rate without queue":     {Down: Direction{Rate: 1e6}},
		"loss above 1":           {Up: Direction{Loss: 1.5}},
		"gap longer than period": {Handover: Handover{Every: time.Second, Gap: time.Second}},
		"burst never ends":       {Down: Direction{Burst: GilbertElliott{P: 0.1}}},
		"negative delay":         {Down: Direction{Delay: -1}},
	} {
		if l, err := New(c, nop, nop); err == nil {
			l.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(Config{}, nil, nop); err == nil {
		t.Error("nil Deliver accepted")
	}
}

// BenchmarkLinkSend is Send on a running link without a bottleneck: the
// cost a carrier pays per packet, the hand-over to the goroutine
// included.
func BenchmarkLinkSend(b *testing.B) {
	var got atomic.Uint64
	deliver := func(uint32, []byte) { got.Add(1) }
	l, err := New(Config{Down: Direction{Delay: time.Millisecond}}, deliver, deliver)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	pkt := make([]byte, 1400)
	b.ReportAllocs()
	for b.Loop() {
		l.Send(Down, 0, pkt)
	}
}
