package stack_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mhistack/mhistack/internal/chanpair"
	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// benchBytes is the size of one single-stream transfer.
const benchBytes = 64 << 20

// BenchmarkSingleStreamTCP moves benchBytes over one TCP connection
// through the emulated modem (stack → link → MHI → sim → carrier network
// → host socket) and, in the same run, between two stacks joined by
// gVisor's channel.Endpoint with goroutine pumps (the wireguard-go
// tun/netstack construction), and reports both and their ratio.
func BenchmarkSingleStreamTCP(b *testing.B) {
	var modem, pumps time.Duration
	for b.Loop() {
		d, _ := modemTransfer(b, rawIP, stack.Config{}, link.Options{})
		modem += d
		pumps += channelTransfer(b)
	}
	mbps := func(d time.Duration) float64 { return float64(benchBytes) * 8 * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(modem), "modem-Mbit/s")
	b.ReportMetric(mbps(pumps), "channel-Mbit/s")
	b.ReportMetric(mbps(modem)/mbps(pumps), "modem/channel")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkModemTCPOptions runs the modem half of
// BenchmarkSingleStreamTCP with the choices that decide it switched one
// at a time, side by side in one run, and reports TCP retransmissions
// per transfer with the throughput.
func BenchmarkModemTCPOptions(b *testing.B) {
	// UL aggregation: a GSO batch goes out in NTBs of up to 16
	// datagrams (what Linux never sends; firmware support unverified).
	mbimAgg := rigKind{name: "mbim-ntb-ul-agg", profile: "quectel-rm5xx", channel: "IP_HW0_MBIM", framing: mbim.NTB{}, link: mbim.NTB{MaxDatagrams: 16}}
	for _, c := range []struct {
		name string
		kind rigKind
		cfg  stack.Config
		lo   link.Options
	}{
		{"default", rawIP, stack.Config{}, link.Options{}},
		{"txqueue=none", rawIP, stack.Config{TXQueueLen: -1}, link.Options{}},
		{"txqueue=1000", rawIP, stack.Config{TXQueueLen: 1000}, link.Options{}},
		{"txqueue=10000", rawIP, stack.Config{TXQueueLen: 10000}, link.Options{}},
		{"gso=gvisor", rawIP, stack.Config{}, link.Options{GSO: link.GSOGVisor}},
		{"gso=off", rawIP, stack.Config{}, link.Options{GSO: link.GSOOff}},
		{"defer=off", rawIP, stack.Config{}, link.Options{DeferPoll: -1}},
		{"rack=on", rawIP, stack.Config{TCP: stack.TCPOptions{RACK: true}}, link.Options{}},
		{"cc=reno", rawIP, stack.Config{TCP: stack.TCPOptions{CongestionControl: "reno"}}, link.Options{}},
		{"mbim-ntb", mbimNTB, stack.Config{}, link.Options{}},
		{"mbim-ntb-ul-agg", mbimAgg, stack.Config{}, link.Options{TXBufferSize: 24 << 10}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var d time.Duration
			var rtx uint64
			for b.Loop() {
				el, r := modemTransfer(b, c.kind, c.cfg, c.lo)
				d += el
				rtx += r
			}
			b.ReportMetric(float64(benchBytes)*8*float64(b.N)/d.Seconds()/1e6, "Mbit/s")
			b.ReportMetric(float64(rtx)/float64(b.N), "retransmits/op")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// modemTransfer moves benchBytes from a stack on the emulated modem to a
// host socket and returns the time and the TCP retransmissions it took.
func modemTransfer(b *testing.B, k rigKind, cfg stack.Config, lo link.Options) (time.Duration, uint64) {
	rigLink = lo
	defer func() { rigLink = link.Options{} }()
	r := newRigOn(b, cfg, k)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	done := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- 0
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		done <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := r.s.DialTCP(ctx, netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		b.Fatal(err)
	}
	rtx := r.s.Stats().TCPRetransmits
	start := time.Now()
	write(b, c)
	c.CloseWrite()
	if n := <-done; n != benchBytes {
		b.Fatalf("host received %d bytes", n)
	}
	el := time.Since(start)
	rtx = r.s.Stats().TCPRetransmits - rtx
	c.Close()
	r.s.Close()
	return el, rtx
}

// write writes benchBytes in 256 KiB chunks.
func write(b *testing.B, w io.Writer) {
	buf := make([]byte, 256<<10)
	for n := 0; n < benchBytes; n += len(buf) {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func channelTransfer(b *testing.B) time.Duration {
	pair := chanpair.New(1024, 1500)
	pa := netip.MustParsePrefix("192.168.4.1/24")
	pb := netip.MustParsePrefix("192.168.4.2/24")
	sa, err := stack.New(pair.A, stack.Config{Addresses: []netip.Prefix{pa}})
	if err != nil {
		pair.Close()
		b.Fatal(err)
	}
	sb, err := stack.New(pair.B, stack.Config{Addresses: []netip.Prefix{pb}})
	if err != nil {
		pair.Close()
		sa.Close()
		b.Fatal(err)
	}
	defer func() {
		pair.Close()
		sa.Close()
		sb.Close()
	}()
	ctx := context.Background()
	l, err := sb.ListenTCP(netip.AddrPortFrom(pb.Addr(), 5001))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	done := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- 0
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		done <- n
	}()
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c, err := sa.DialTCP(dctx, netip.AddrPort{}, netip.AddrPortFrom(pb.Addr(), 5001))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	write(b, c)
	c.CloseWrite()
	if n := <-done; n != benchBytes {
		b.Fatalf("received %d bytes", n)
	}
	el := time.Since(start)
	c.Close()
	return el
}

// BenchmarkModemTCPDownload moves benchBytes the other way: a host socket
// writes, the carrier network sends it down the modem, the stack reads
// (RX path: DL ring, GRO, checksum offload).
func BenchmarkModemTCPDownload(b *testing.B) {
	for _, c := range []struct {
		name string
		kind rigKind
		lo   link.Options
	}{
		{"default", rawIP, link.Options{}},
		{"defer=off", rawIP, link.Options{DeferPoll: -1}},
		{"defer=200us", rawIP, link.Options{DeferPoll: 200 * time.Microsecond}},
		{"mbim-ntb", mbimNTB, link.Options{}},
		{"mbim-ntb,defer=off", mbimNTB, link.Options{DeferPoll: -1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var d time.Duration
			for b.Loop() {
				d += modemDownload(b, c.kind, c.lo)
			}
			b.ReportMetric(float64(benchBytes)*8*float64(b.N)/d.Seconds()/1e6, "Mbit/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func modemDownload(b *testing.B, k rigKind, lo link.Options) time.Duration {
	rigLink = lo
	defer func() { rigLink = link.Options{} }()
	r := newRigOn(b, stack.Config{}, k)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 256<<10)
		for n := 0; n < benchBytes; n += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	c, err := r.s.DialTCP(ctx, netip.AddrPort{}, netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, c)
	if n != benchBytes {
		b.Fatalf("received %d bytes: %v", n, err)
	}
	el := time.Since(start)
	c.Close()
	r.s.Close()
	return el
}
