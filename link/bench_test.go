package link_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/experiment"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// counter is a dispatcher that only counts: the benchmarks measure the
// link, not a stack.
// counter is the benchmarks' dispatcher. It parses the network header the
// way gVisor's network layer does first (PacketBuffer.NetworkHeader().
// Consume, a buffer.PullUp), so that a packet whose buffer makes that
// expensive (a chunk shared with other packets is cloned whole) costs
// here what it costs under a stack.
type counter struct{ n atomic.Int64 }

func (c *counter) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	n := header.IPv4MinimumSize
	if proto == header.IPv6ProtocolNumber {
		n = header.IPv6MinimumSize
	}
	pkt.NetworkHeader().Consume(n)
	c.n.Add(1)
}
func (c *counter) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// BenchmarkRX drives DL traffic from the emulated modem's generator on
// IP_HW0 (1 ms interrupt moderation, burst mode) through the endpoint to a
// counting dispatcher. One op is one IP packet. It reports packets per
// second (device and host together on the machine's cores) and host-ns/pkt,
// the poller's own time per packet. allocs/op covers both sides and is 0
// in steady state.
func BenchmarkRX(b *testing.B) {
	cases := []struct {
		name    string
		size    int // IP packet size
		perFrm  int // packets per frame (1: raw IP)
		options link.Options
	}{
		{"raw-64B", 64, 1, link.Options{}},
		{"raw-1400B", 1400, 1, link.Options{}},
		{"agg-32x64B", 64, 32, link.Options{Framing: lenFraming{}}},
		{"agg-16x1400B", 1400, 16, link.Options{Framing: lenFraming{}}},
		// The real framings: one packet per buffer (what a modem without
		// aggregation sends) vs aggregated as modems do (32 datagrams /
		// 32 KiB; 1400-byte packets fill 32 KiB at 23).
		{"mbim-1x64B", 64, 1, link.Options{Channel: "IP_HW0_MBIM", Framing: mbim.NTB{}}},
		{"mbim-32x64B", 64, 32, link.Options{Channel: "IP_HW0_MBIM", Framing: mbim.NTB{}}},
		{"mbim-1x1400B", 1400, 1, link.Options{Channel: "IP_HW0_MBIM", Framing: mbim.NTB{}}},
		{"mbim-23x1400B", 1400, 23, link.Options{Channel: "IP_HW0_MBIM", Framing: mbim.NTB{}}},
		{"qmap5-1x64B", 64, 1, link.Options{Framing: qmap.Framing{Version: 5}}},
		{"qmap5-32x64B", 64, 32, link.Options{Framing: qmap.Framing{Version: 5}}},
		{"qmap5-1x1400B", 1400, 1, link.Options{Framing: qmap.Framing{Version: 5}}},
		{"qmap5-23x1400B", 1400, 23, link.Options{Framing: qmap.Framing{Version: 5}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			benchRX(b, c.size, c.perFrm, c.options)
		})
	}
}

// BenchmarkRXOptions measures the switchable design choices side by side
// (the choices docs/BENCHMARKS.md compares) on 1400-byte raw IP packets.
func BenchmarkRXOptions(b *testing.B) {
	cases := []struct {
		name string
		o    link.Options
	}{
		{"default", link.Options{}},
		{"budget-8", link.Options{Budget: 8}},
		{"budget-256", link.Options{Budget: 256}},
		{"tx-in-budget", link.Options{Experiments: &experiment.Options{TXInBudget: true}}},
		{"refill-inline", link.Options{Experiments: &experiment.Options{Refill: experiment.RefillInline}}},
		{"refill-shared", link.Options{Experiments: &experiment.Options{Refill: experiment.RefillShared}}},
		{"refill-level-50pct", link.Options{Experiments: &experiment.Options{RefillLevel: 63}}},
		{"refill-level-1", link.Options{Experiments: &experiment.Options{RefillLevel: 1}}},
		{"inline-poll", link.Options{Experiments: &experiment.Options{InlinePoll: true}}},
		{"locked-thread", link.Options{Experiments: &experiment.Options{LockOSThread: true}}},
		{"mru-4096", link.Options{MRU: 4096}},
		{"no-gro-no-csum", link.Options{NoGRO: true, NoChecksumOffload: true}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			o := c.o
			if x := o.Experiments; x != nil && x.Refill == experiment.RefillShared {
				w := experiment.NewWorker(nil)
				defer w.Close()
				o.Experiments = &experiment.Options{Refill: experiment.RefillShared, Worker: w}
			}
			benchRX(b, 1400, 1, o)
		})
	}
}

// BenchmarkRXCost is the RX-cost target (link+mhi host cost per RX
// packet with 32-datagram aggregation) on the real framings: 64-byte
// packets 32 per frame, 1400-byte packets 23 per frame (what fits a 32 KiB
// buffer) and 1500-byte packets 32 per frame (48 KiB: an OVERFLOW chain of
// two buffers at the 32 KiB MRU, as hack/bench's MRU table sends). Besides
// host-ns/pkt (the poller's time inside passes) it reports poller-cpu-ns/pkt,
// the poller thread's CPU clock per packet as hack/bench measures it (the
// poller runs locked to its thread through Options.ThreadHook, so the
// clock is the poller's alone, wake-ups and yields included).
func BenchmarkRXCost(b *testing.B) {
	framings := []struct {
		name    string
		o       link.Options
		devCsum bool // the modem marks every checksum validated (MAPv5 csum_valid)
	}{
		// qmap5: the modem validated every checksum (csum_valid, DL
		// checksum offload on); qmap5sw: it did not say so.
		{"qmap5", link.Options{Framing: qmap.Framing{Version: 5}}, true},
		{"qmap5sw", link.Options{Framing: qmap.Framing{Version: 5}}, false},
		{"qmap1", link.Options{Framing: qmap.Framing{Version: 1}}, false},
		{"ntb16", link.Options{Channel: "IP_HW0_MBIM", Framing: mbim.NTB{}}, false},
	}
	sizes := []struct{ size, perFrame int }{{64, 32}, {1400, 23}, {1500, 32}}
	for _, f := range framings {
		for _, s := range sizes {
			b.Run(fmt.Sprintf("%s-%dx%dB", f.name, s.perFrame, s.size), func(b *testing.B) {
				o := f.o
				var tid atomic.Int64
				o.Experiments = &experiment.Options{ThreadHook: func(role string) func() {
					if role == experiment.RolePoller {
						tid.Store(int64(unix.Gettid()))
					}
					return nil
				}}
				benchRXClock(b, s.size, s.perFrame, o, f.devCsum, func() time.Duration {
					return threadCPU(int(tid.Load()))
				})
			})
		}
	}
	// The baseline: the same packets handed to gVisor's own
	// channel.Endpoint, one copied buffer per packet, with no device,
	// framing or checksum behind it.
	for _, s := range sizes {
		b.Run(fmt.Sprintf("inject-%dx%dB", s.perFrame, s.size), func(b *testing.B) {
			benchInject(b, s.size, s.perFrame)
		})
	}
}

// benchInject delivers frames' worth of UDP packets of size bytes through
// channel.Endpoint.InjectInbound, each in a PacketBuffer over a fresh
// copy (buffer.MakeWithData), to a counting dispatcher. It reports the
// metrics of BenchmarkRXCost that apply: poller-cpu-ns/pkt is this
// goroutine's thread CPU per packet (it runs locked to its thread).
func benchInject(b *testing.B, size, perFrame int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pkts := make([][]byte, 8*perFrame)
	for i := range pkts {
		pkts[i] = udp4(b, i, size)
	}
	ep := channel.New(1, 1500, "")
	defer ep.Close()
	cnt := &counter{}
	ep.Attach(cnt)
	inject := func(p []byte) {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(p)})
		ep.InjectInbound(header.IPv4ProtocolNumber, pkt)
		pkt.DecRef()
	}
	for i := range 20000 {
		inject(pkts[i%len(pkts)])
	}
	tid := unix.Gettid()
	cpu0 := threadCPU(tid)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		inject(pkts[i%len(pkts)])
	}
	el := time.Since(start)
	b.StopTimer()
	if cnt.n.Load() != int64(20000+b.N) {
		b.Fatalf("delivered %d of %d packets", cnt.n.Load(), 20000+b.N)
	}
	b.ReportMetric(float64(threadCPU(tid)-cpu0)/float64(b.N), "poller-cpu-ns/pkt")
	b.ReportMetric(float64(b.N)/el.Seconds(), "pkts/s")
}

// threadCPU reads the CPU clock of thread tid (Linux's
// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), what pthread_getcpuclockid
// returns), or 0 if tid is unknown.
func threadCPU(tid int) time.Duration {
	if tid == 0 {
		return 0
	}
	const cpuclockSched, perThread = 2, 4
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^uint32(tid)<<3|cpuclockSched|perThread), &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func benchRX(b *testing.B, size, perFrame int, o link.Options) {
	benchRXClock(b, size, perFrame, o, false, nil)
}

// benchRXClock is benchRX that also reports the poller's CPU clock per
// packet when pollerCPU is set. With devCsum, MAPv5 frames say that the
// modem validated every checksum (csum_valid), as with DL checksum offload.
func benchRXClock(b *testing.B, size, perFrame int, o link.Options, devCsum bool, pollerCPU func() time.Duration) {
	r, run := rxTraffic(b, size, perFrame, o, devCsum)
	run(20000) // warm the pools (gVisor buffers, modem queues)
	s0 := r.ep.Stats()
	var cpu0 time.Duration
	if pollerCPU != nil {
		cpu0 = pollerCPU()
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(b.N)
	el := time.Since(start)
	b.StopTimer()
	s := r.ep.Stats()
	rx := float64(s.RXPackets - s0.RXPackets)
	if pollerCPU != nil {
		b.ReportMetric(float64(pollerCPU()-cpu0)/rx, "poller-cpu-ns/pkt")
	}
	b.ReportMetric(rx/el.Seconds(), "pkts/s")
	b.ReportMetric(float64(s.PollNanos-s0.PollNanos)/rx, "host-ns/pkt")
	b.ReportMetric(float64(s.Polls-s0.Polls)/rx*float64(perFrame), "polls/frame")
	if s.MaxPassPackets > uint64(max(o.Budget, 0)) && o.Budget > 0 {
		b.Fatalf("pass of %d packets, budget %d", s.MaxPassPackets, o.Budget)
	}
}

// rxTraffic opens an endpoint on the emulated modem whose generator sends
// frames of perFrame UDP packets of size bytes (framed by o.Framing, with
// csum_valid on MAPv5 when devCsum) to a counting dispatcher. run(n) has
// the modem send at least n packets and waits until they are delivered.
func rxTraffic(t testing.TB, size, perFrame int, o link.Options, devCsum bool) (*rig, func(pkts int)) {
	t.Helper()
	g := &sim.Generator{}
	for f := range 8 {
		var pkts [][]byte
		for i := range perFrame {
			pkts = append(pkts, udp4(t, f*perFrame+i, size))
		}
		switch fr := o.Framing.(type) {
		case nil:
			g.Frames = append(g.Frames, pkts[0])
		case mbim.NTB:
			g.Frames = append(g.Frames, encodeFrame(mbim.NewNTBBuilder(mbim.NTB{MaxDatagrams: perFrame}), pkts))
		case qmap.Framing:
			fr.MaxDatagrams = perFrame
			frame := encodeFrame(qmap.NewAggregator(fr), pkts)
			if devCsum {
				markCsumValid(t, frame, seq(perFrame)...)
			}
			g.Frames = append(g.Frames, frame)
		default:
			g.Frames = append(g.Frames, aggregate(pkts...))
		}
	}
	profile := ""
	if o.Channel == "IP_HW0_MBIM" {
		profile = "quectel-rm5xx"
	}
	r := newRig(t, rigOptions{profile: profile, fn: g, link: o, noAttach: true})
	cnt := &counter{}
	r.ep.Attach(cnt)
	run := func(pkts int) {
		frames := (pkts + perFrame - 1) / perFrame
		want := cnt.n.Load() + int64(frames*perFrame)
		g.Add(frames)
		deadline := time.Now().Add(2 * time.Minute)
		for cnt.n.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d packets", cnt.n.Load(), want)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return r, run
}

// BenchmarkLoopbackTXRX writes 1400-byte packets in batches of 32 and
// receives them back through the modem's loopback: one op is one packet
// out and back.
func BenchmarkLoopbackTXRX(b *testing.B) {
	r := newRig(b, rigOptions{fn: &sim.Loopback{}, noAttach: true})
	cnt := &counter{}
	r.ep.Attach(cnt)
	var l stack.PacketBufferList
	pkt := udp4(b, 1, 1400)
	batch := make([][]byte, 32)
	for i := range batch {
		batch[i] = pkt
	}
	run := func(n int) {
		want := cnt.n.Load() + int64(n)
		for sent := 0; sent < n; {
			k := min(32, n-sent)
			m, err := writeN(r.ep, batch[:k]...)
			if m == 0 {
				b.Fatalf("WritePackets: %v", err)
			}
			sent += m
		}
		for cnt.n.Load() < want {
			time.Sleep(20 * time.Microsecond)
		}
	}
	_ = l
	run(5000)
	b.SetBytes(1400)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(b.N)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pkts/s")
}

// encodeFrame builds one DL frame holding all of pkts with enc (a modem's
// aggregator), failing if they do not fit 64 KiB.
func encodeFrame(enc framing.Encoder, pkts [][]byte) []byte {
	buf := make([]byte, framing.MaxFrame)
	enc.Begin(buf)
	for _, p := range pkts {
		dst := enc.Add(len(p))
		if dst == nil {
			panic("bench: packets do not fit one 64 KiB frame")
		}
		copy(dst, p)
	}
	return buf[:enc.End()]
}

// seq returns 0, 1, …, n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// markCsumValid sets csum_valid in the MAPv5 checksum header of the
// packets numbered which (from 0) of the MAPv5 frame b, as a modem with
// DL checksum offload does for packets it validated.
func markCsumValid(t testing.TB, b []byte, which ...int) {
	t.Helper()
	spans, err := qmap.Decode(b, 5, nil)
	if err != nil {
		t.Fatalf("MAPv5 frame: %v", err)
	}
	for _, i := range which {
		b[spans[i].Off-qmap.V5HeaderLen+1] |= 0x80
	}
}
