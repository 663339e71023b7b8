package sockstat_test

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/mhistack/mhistack/internal/sockstat"
)

// TestDropsCountsDatagramsAFullReceiveBufferRefused: datagrams sent to a
// socket nobody reads, well past its receive buffer, are dropped there,
// and Drops counts exactly what did not arrive.
func TestDropsCountsDatagramsAFullReceiveBufferRefused(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("per-socket drop counts need Linux")
	}
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := rx.SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if n, err := sockstat.Drops(rx); err != nil || n != 0 {
		t.Fatalf("fresh socket: Drops = %d, %v; want 0, nil", n, err)
	}
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	const sent = 200
	b := make([]byte, 1000)
	for range sent {
		if _, err := tx.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback delivers inline in the sender's write: all 200 are
	// queued or dropped by now.
	drops, err := sockstat.Drops(rx)
	if err != nil {
		t.Fatal(err)
	}
	if drops == 0 {
		t.Fatalf("%d datagrams into a 4 KiB receive buffer, none dropped", sent)
	}
	var got uint64
	buf := make([]byte, 2000)
	for got+drops < sent {
		rx.SetReadDeadline(timeoutSoon())
		if _, err := rx.Read(buf); err != nil {
			t.Fatalf("after %d read and %d dropped of %d: %v", got, drops, sent, err)
		}
		got++
	}
	if got+drops != sent {
		t.Fatalf("read %d + dropped %d != sent %d", got, drops, sent)
	}
}

func timeoutSoon() time.Time { return time.Now().Add(10 * time.Second) }
