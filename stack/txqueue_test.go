package stack_test

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/stack"
)

// stuckLink is a link whose transmitter hangs: WritePackets blocks until
// release is closed (a modem that stopped taking UL transfers); then it
// sends everything, or with refuse nothing, as link.Endpoint does when
// its TXTimeout passes with the UL ring full.
type stuckLink struct {
	*channel.Endpoint
	release chan struct{}
	refuse  bool
	writes  atomic.Int64
}

func (l *stuckLink) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	l.writes.Add(1)
	<-l.release
	if l.refuse {
		return 0, &tcpip.ErrNoBufferSpace{}
	}
	return pkts.Len(), nil
}

// TestCloseDropsTheTXQueueOnceTheLinkRefusesInsteadOfWaitingPerBatch: a
// full queue in front of a modem that takes nothing more would keep Close
// waiting one link TXTimeout per batch of 47 packets. Once Close has begun
// and the link has refused a batch, the rest is dropped without asking the
// link again.
func TestCloseDropsTheTXQueueOnceTheLinkRefusesInsteadOfWaitingPerBatch(t *testing.T) {
	l := &stuckLink{Endpoint: channel.New(16, 1500, ""), release: make(chan struct{}), refuse: true}
	s, err := stack.New(l, stack.Config{Addresses: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.DialUDP(context.Background(), netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.2:9"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	waitFor(t, func() bool { return l.writes.Load() > 0 })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	waitFor(t, s.ClosingForTest)
	close(l.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := l.writes.Load(); n != 1 {
		t.Errorf("the link was asked %d times; after its refusal during Close, want no more", n)
	}
}

// waitFor polls cond until it holds (no deadline of its own: the test's
// -timeout bounds it).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

// TestSendersDoNotWaitForAStuckLinkAndAFullTXQueueIsCounted: with the
// transmit queue in front of the link, a sender never waits on the link's
// transmitter. While the link hangs, writes return at once; what the full
// queue cannot take is dropped and counted in TXDroppedNoBufferSpace (the
// signal a stack user sees), and Close completes once the link lets go.
func TestSendersDoNotWaitForAStuckLinkAndAFullTXQueueIsCounted(t *testing.T) {
	const queue, datagrams = 4, 40
	l := &stuckLink{Endpoint: channel.New(16, 1500, ""), release: make(chan struct{})}
	s, err := stack.New(l, stack.Config{
		Addresses:  []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")},
		TXQueueLen: queue,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.DialUDP(context.Background(), netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.2:9"))
	if err != nil {
		t.Fatal(err)
	}
	// Without the queue the first Write would hang here, in the link.
	for i := range datagrams {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	// The dispatcher holds at most one queue's worth in the link, the
	// queue at most another.
	if got, want := s.Stats().TXDroppedNoBufferSpace, uint64(datagrams-2*queue); got < want {
		t.Errorf("TXDroppedNoBufferSpace = %d, want at least %d", got, want)
	}
	c.Close()
	close(l.release)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if l.writes.Load() == 0 {
		t.Error("the link was never written to")
	}
}
