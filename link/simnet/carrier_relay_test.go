package simnet

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// TestCarrierIdleFlowsHoldNoRelayChunk: flows that have moved data both
// ways and then sit idle hold none of the 256 KiB relay chunks (each
// direction held one for the flow's life before), and they still work
// afterwards.
func TestCarrierIdleFlowsHoldNoRelayChunk(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Run("raw-ip", func(t *testing.T) {
		h := newCarrierHost(t, carrierPair{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, 0}, CarrierOptions{})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					io.Copy(c, c)
				}()
			}
		}()
		dst := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(TestAddr4.As4()), Port: uint16(l.Addr().(*net.TCPAddr).Port)}
		const flows = 8
		conns := make([]net.Conn, 0, flows)
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		echo := func(c net.Conn, msg string) {
			t.Helper()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
				t.Fatalf("echo: %q, %v; want %q", got, err, msg)
			}
		}
		for range flows {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := gonet.DialContextTCP(ctx, h.s, dst, ipv4.ProtocolNumber)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			echo(c, "ping")
		}
		waitFor(t, "idle flows to put their relay chunks back", func() bool { return h.cn.Stats().RelayChunks == 0 })
		for _, c := range conns {
			echo(c, "again")
		}
		waitFor(t, "idle flows to put their relay chunks back", func() bool { return h.cn.Stats().RelayChunks == 0 })
		if cs := h.cn.Stats(); cs.TCPFlows != flows {
			t.Errorf("%d flows forwarded, want %d", cs.TCPFlows, flows)
		}
	})
	goleak.VerifyNone(t, ignore)
}

// TestCarrierRelayReadsTheHostSocketWithoutAllocating: the relay's
// reads of a host socket, one that has data and one that waits for it
// (the chunk goes back to the pool and is taken again), allocate
// nothing.
func TestCarrierRelayReadsTheHostSocketWithoutAllocating(t *testing.T) {
	if underRace {
		t.Skip("sync.Pool drops Puts under the race detector")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	hc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var chunks relayChunks
	r := newHostReader(&chunks, hc)
	if r.raw == nil {
		t.Fatal("a TCP socket is not read through its descriptor")
	}
	msg := []byte("x")
	// Data already there: the chunk is held from one read to the next.
	// One run of 100 reads each: AllocsPerRun's average is an integer
	// division, which would read 99 allocations in 100 reads as 0.
	if a := testing.AllocsPerRun(1, func() {
		for range 100 {
			w.Write(msg)
			if b, err := r.read(); err != nil || len(b) != 1 {
				t.Fatalf("read %q, %v", b, err)
			}
		}
	}); a != 0 {
		t.Errorf("%.0f allocations in 100 reads of a readable socket, want 0", a)
	}
	// A reader that waits: it puts the chunk back each time.
	got := make(chan int)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			b, err := r.read()
			if err != nil {
				return
			}
			got <- len(b)
		}
	}()
	if a := testing.AllocsPerRun(1, func() {
		for range 100 {
			w.Write(msg)
			<-got
		}
	}); a != 0 {
		t.Errorf("%.0f allocations in 100 reads that waited, want 0", a)
	}
	hc.Close()
	<-done
	r.release()
	if n := chunks.held.Load(); n != 0 {
		t.Errorf("%d chunks held after release", n)
	}
}

// TestCarrierUDPFlowLastsWhileDatagramsComeAndEndsWhenIdle: the relay of
// a UDP flow does not move its read deadline per datagram, yet a flow
// whose datagrams and answers come every UDPIdle/3 for several UDPIdle
// stays one flow, and one silent for longer than UDPIdle ends (the next
// datagram makes a new one).
func TestCarrierUDPFlowLastsWhileDatagramsComeAndEndsWhenIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	h := newCarrierHost(t, carrierPair{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, 0}, CarrierOptions{UDPIdle: idle})
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	dst := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(TestAddr4.As4()), Port: uint16(peer.LocalAddr().(*net.UDPAddr).Port)}
	c, err := gonet.DialUDP(h.s, nil, &dst, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The peer answers each datagram: each direction of the relay sees
	// one every UDPIdle/3 (a one-way flow ends when its idle reverse
	// direction does).
	go func() {
		b := make([]byte, 64)
		for {
			n, from, err := peer.ReadFrom(b)
			if err != nil {
				return
			}
			peer.WriteTo(b[:n], from)
		}
	}()
	buf := make([]byte, 64)
	send := func(i int) {
		t.Helper()
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(buf); err != nil || n != 1 || buf[0] != byte(i) {
			t.Fatalf("datagram %d: answer %v, %v", i, buf[:n], err)
		}
	}
	for i := range 10 {
		send(i)
		time.Sleep(idle / 3) // the flow's pace
	}
	if n := h.cn.Stats().UDPFlows; n != 1 {
		t.Fatalf("%d flows for datagrams every %v with UDPIdle %v, want 1", n, idle/3, idle)
	}
	time.Sleep(2 * idle) // silence
	send(10)
	if n := h.cn.Stats().UDPFlows; n != 2 {
		t.Errorf("%d flows after %v of silence, want 2 (the first ended)", n, 2*idle)
	}
}
