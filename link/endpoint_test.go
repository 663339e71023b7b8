package link_test

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/experiment"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// checkIntact compares received packets with the sent ones, in order.
func checkIntact(t *testing.T, got, want [][]byte, ks []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("received %d packets, sent %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d (%s, %d bytes): received %d bytes that differ", i, ks[i], len(want[i]), len(got[i]))
		}
		checkDecodes(t, got[i], ks[i])
	}
}

func TestLoopbackDeliversEveryIPv4AndIPv6TCPAndUDPPacketIntact(t *testing.T) {
	for _, ch := range []string{"IP_HW0", "IP_SW0"} {
		t.Run(ch, func(t *testing.T) {
			r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{Channel: ch, NoGRO: true}})
			rng := rand.New(rand.NewPCG(1, 2))
			pkts, ks := mixed(t, rng, 2000, 1400)
			// Batches of various sizes: one doorbell each, and more
			// than a ring's worth in flight.
			for i := 0; i < len(pkts); {
				n := min(1+rng.IntN(40), len(pkts)-i)
				write(t, r.ep, pkts[i:i+n]...)
				i += n
			}
			got := r.snk.waitFor(t, len(pkts), 20*time.Second)
			checkIntact(t, got, pkts, ks)
			waitPublished(t, r, func(s link.Stats) bool { return s.RXPackets >= uint64(len(pkts)) })
			s := r.ep.Stats()
			if s.RXPackets != uint64(len(pkts)) || s.TXPackets != uint64(len(pkts)) {
				t.Errorf("stats: rx %d tx %d packets, want %d", s.RXPackets, s.TXPackets, len(pkts))
			}
			if s.TXDoorbells >= uint64(len(pkts)) {
				t.Errorf("%d UL doorbell batches for %d packets: not batched", s.TXDoorbells, len(pkts))
			}
			if s.MaxPassPackets > link.DefaultBudget {
				t.Errorf("a pass delivered %d packets, budget %d", s.MaxPassPackets, link.DefaultBudget)
			}
		})
	}
}

func TestBadChecksumsAndNonIPAreDroppedAndCounted(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true}})
	good := buildPacket(t, "ipv4-udp", 1, 100)
	badUDP := bytes.Clone(good)
	badUDP[len(badUDP)-1] ^= 0xff
	badHdr := bytes.Clone(good)
	badHdr[8] ^= 1 // TTL: IPv4 header checksum no longer matches
	notIP := bytes.Clone(good)
	notIP[0] = 0x20
	good6 := buildPacket(t, "ipv6-tcp", 2, 50)
	badTCP6 := bytes.Clone(good6)
	badTCP6[len(badTCP6)-3] ^= 0x10
	write(t, r.ep, good, badUDP, badHdr, notIP, badTCP6, good6)
	got := r.snk.waitFor(t, 2, 5*time.Second)
	waitUntil(t, 5*time.Second, "all frames", func() bool { return r.ep.Stats().RXFrames == 6 })
	s := r.ep.Stats()
	if len(r.snk.packets()) != 2 || !bytes.Equal(got[0], good) || !bytes.Equal(got[1], good6) {
		t.Fatalf("delivered %d packets, want the 2 good ones", r.snk.count())
	}
	if s.RXDrops.Checksum != 3 || s.RXDrops.Protocol != 1 {
		t.Errorf("drops %+v, want 3 checksum and 1 protocol", s.RXDrops)
	}
}

// TestQMAPv5ChecksumValidSkipsOnlyTheTransportChecksum: a MAPv5 packet
// whose checksum header says the modem validated it (csum_valid) is
// delivered without the endpoint checking its TCP/UDP checksum, as rmnet
// marks it CHECKSUM_UNNECESSARY; its IPv4 header checksum is still
// checked; packets without the bit are checked in full.
func TestQMAPv5ChecksumValidSkipsOnlyTheTransportChecksum(t *testing.T) {
	good := udp4(t, 1, 200)
	badUDP := bytes.Clone(good)
	badUDP[len(badUDP)-1] ^= 0xff // the modem would not have called it valid; the host trusts it
	badHdr := bytes.Clone(good)
	badHdr[8] ^= 1 // TTL: the IPv4 header checksum no longer matches
	good6 := buildPacket(t, "ipv6-udp", 2, 80)
	frame := encodeFrame(qmap.NewAggregator(qmap.Framing{Version: 5, MaxDatagrams: 5}),
		[][]byte{badUDP, badHdr, good6, badUDP, good})
	markCsumValid(t, frame, 0, 1, 2) // not the 4th (bad UDP) nor the 5th
	g := &sim.Generator{Frames: [][]byte{frame}}
	r := newRig(t, rigOptions{fn: g, link: link.Options{Framing: qmap.Framing{Version: 5}, NoGRO: true}})
	g.Add(1)
	got := r.snk.waitFor(t, 3, 5*time.Second)
	waitUntil(t, 5*time.Second, "the frame", func() bool { return r.ep.Stats().RXFrames == 1 })
	s := r.ep.Stats()
	if len(r.snk.packets()) != 3 || !bytes.Equal(got[0], badUDP) || !bytes.Equal(got[1], good6) || !bytes.Equal(got[2], good) {
		t.Fatalf("delivered %d packets, want the device-validated two and the good one", r.snk.count())
	}
	if s.RXDrops.Checksum != 2 || s.RXChecksumDevice != 2 {
		t.Errorf("checksum drops %d, device-validated %d; want 2 and 2", s.RXDrops.Checksum, s.RXChecksumDevice)
	}
}

func TestGROMergesAFlowAndFlushesEveryBucketEachPass(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}})
	// One TCP flow of 20 in-order segments (mergeable), then 40 flows of
	// one segment each: several flows share each of GRO's 8 buckets,
	// which one gro.Flush call does not empty at the pinned gVisor.
	var pkts [][]byte
	var want []byte
	for i := range 20 {
		p := tcpSegment(t, 40000, uint32(1000+i*1000), bytes.Repeat([]byte{byte(i)}, 1000))
		pkts = append(pkts, p)
		want = append(want, bytes.Repeat([]byte{byte(i)}, 1000)...)
	}
	for i := range 40 {
		pkts = append(pkts, tcpSegment(t, uint16(41000+i), 1, []byte{byte(i)}))
	}
	write(t, r.ep, pkts...)
	waitUntil(t, 5*time.Second, "every frame", func() bool { return r.ep.Stats().RXFrames == 60 })
	// Everything received must be delivered by the end of the pass that
	// received it, with no further traffic.
	var payload []byte
	flows := map[uint16]bool{}
	waitUntil(t, 2*time.Second, "all 40 single-segment flows", func() bool {
		payload, flows = payload[:0], map[uint16]bool{}
		for _, p := range r.snk.packets() {
			port := uint16(p[20])<<8 | uint16(p[21])
			if port == 40000 {
				payload = append(payload, p[40:]...)
			} else {
				flows[port] = true
			}
		}
		return len(flows) == 40
	})
	if !bytes.Equal(payload, want) {
		t.Fatalf("flow payload: %d bytes, want %d, equal=%v", len(payload), len(want), bytes.Equal(payload, want))
	}
	s := r.ep.Stats()
	if s.GROMerges == 0 {
		t.Errorf("no GRO merges: %s", fmtStats(s))
	}
	t.Logf("GRO: %d packets in, %d merges, %d delivered", s.RXPackets, s.GROMerges, r.snk.count())
}

// tcpSegment is an IPv4 TCP segment with only ACK set (mergeable by GRO).
func tcpSegment(t testing.TB, sport uint16, seq uint32, payload []byte) []byte {
	t.Helper()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: addr4a, DstIP: addr4b}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 80, Seq: seq, Ack: 1, ACK: true, Window: 65535}
	_ = tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

func TestRXStormNeverExceedsBudgetAndTXCompletionsKeepBeingReaped(t *testing.T) {
	for _, budget := range []int{8, 64} {
		t.Run(strconv.Itoa(budget), func(t *testing.T) {
			g := &sim.Generator{}
			for i := range 16 {
				g.Frames = append(g.Frames, udp4(t, i, 64+i*50))
			}
			r := newRig(t, rigOptions{fn: g, link: link.Options{Budget: budget, NoGRO: true}})
			const storm = 30000
			g.Add(storm)
			// A writer keeps the UL busy during the storm.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			var written atomic.Int64
			go func() {
				defer wg.Done()
				pkt := udp4(t, 1, 200)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if n, _ := writeN(r.ep, pkt, pkt, pkt, pkt); n > 0 {
						written.Add(int64(n))
					}
				}
			}()
			// Mid-storm, TX completions must advance.
			waitUntil(t, 10*time.Second, "storm under way", func() bool { return r.ep.Stats().RXPackets > storm/4 })
			c0 := r.ep.Stats().TXCompletions
			waitUntil(t, 10*time.Second, "TX completions during the storm", func() bool {
				s := r.ep.Stats()
				return s.TXCompletions > c0+50 || s.RXPackets >= storm
			})
			mid := r.ep.Stats()
			r.snk.waitFor(t, storm, 60*time.Second)
			close(stop)
			wg.Wait()
			s := r.ep.Stats()
			t.Logf("budget %d: %d polls, %d exhausted, max pass %d, TX completions %d→%d (end %d), written %d",
				budget, s.Polls, s.BudgetExhausted, s.MaxPassPackets, c0, mid.TXCompletions, s.TXCompletions, written.Load())
			if s.MaxPassPackets > uint64(budget) {
				t.Errorf("a pass delivered %d packets, budget %d", s.MaxPassPackets, budget)
			}
			if s.BudgetExhausted == 0 {
				t.Errorf("no pass exhausted the budget during a storm")
			}
			if mid.RXPackets < storm && mid.TXCompletions <= c0 {
				t.Errorf("TX completions stalled during the RX storm")
			}
			if r.snk.count() != storm {
				t.Errorf("received %d, want %d", r.snk.count(), storm)
			}
		})
	}
}

func TestWritePacketsFromInsideDeliveryWithFullULRingDoesNotDeadlock(t *testing.T) {
	// The modem consumes UL without looping it back (a loopback would
	// hold UL until the blocked poller takes DL, a dependency no real
	// network has), and slowly: the 127-slot UL ring fills long before it
	// drains, while the writer is the poller itself.
	g := &sim.Generator{Frames: [][]byte{udp4(t, 0, 100)}}
	r := newRig(t, rigOptions{fn: g, link: link.Options{NoGRO: true, TXTimeout: 10 * time.Second}})
	r.m.SetSlow(20 * time.Microsecond)
	const burst = 400
	replies := make([][]byte, burst)
	for i := range replies {
		replies[i] = udp4(t, 1000+i, 100)
	}
	var once sync.Once
	done := make(chan struct{})
	var n int
	var werr tcpip.Error
	r.snk.onPacket = func([]byte) {
		// On the poller, like an ICMP echo reply or a RST.
		once.Do(func() {
			n, werr = writeN(r.ep, replies...)
			close(done)
		})
	}
	g.Add(1)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("WritePackets from the poller did not return: deadlock")
	}
	if n != burst {
		t.Fatalf("WritePackets from the poller = %d, %v; want %d", n, werr, burst)
	}
	r.m.SetSlow(0)
	waitUntil(t, 10*time.Second, "the modem to receive every reply", func() bool {
		tds, _ := g.Received()
		return tds == burst
	})
	if s := r.ep.Stats(); s.TXFull == 0 {
		t.Errorf("the UL ring never filled (TXFull 0): the test did not test backpressure")
	}
	// RX still works afterwards.
	g.Add(10)
	r.snk.waitFor(t, 11, 5*time.Second)
}

func TestWritePacketsTimesOutWithErrorNotSilentLoss(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true, TXTimeout: 20 * time.Millisecond}})
	// A modem that takes 100 ms per TRE: the 127-slot UL ring stays full.
	r.m.SetSlow(100 * time.Millisecond)
	defer r.m.SetSlow(0)
	pkts := make([][]byte, 300)
	for i := range pkts {
		pkts[i] = udp4(t, i, 60)
	}
	n, err := writeN(r.ep, pkts...)
	if n == 0 || n == len(pkts) {
		t.Fatalf("first call queued %d of 300 packets (%v), want the ring's worth", n, err)
	}
	if r.ep.Stats().TXDrops.Timeout == 0 {
		t.Errorf("timeout drops not counted")
	}
	// Now the ring is full: a call fails with an error, never (0, nil).
	for range 5 {
		n, err = writeN(r.ep, pkts[:10]...)
		if n == 0 {
			break
		}
	}
	if n != 0 || err == nil {
		t.Fatalf("WritePackets on a full, stalled ring = %d, %v; want 0 and an error", n, err)
	}
	if _, ok := err.(*tcpip.ErrNoBufferSpace); !ok {
		t.Errorf("error %v, want ErrNoBufferSpace", err)
	}
}

// TestWritePacketsKeptLeavesWhatFindsNoRoomToTheCaller: on a ring that
// stays full past TXTimeout, WritePacketsKept returns the count it queued
// and ErrWouldBlock, and counts no drop (the caller, the stack's transmit
// queue, offers the rest again); once the modem takes transfers again the
// rest goes out.
func TestWritePacketsKeptLeavesWhatFindsNoRoomToTheCaller(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true, TXTimeout: 20 * time.Millisecond}})
	r.m.SetSlow(100 * time.Millisecond)
	pkts := make([][]byte, 300)
	for i := range pkts {
		pkts[i] = udp4(t, i, 60)
	}
	var l stack.PacketBufferList
	for _, p := range pkts {
		l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(p)}))
	}
	defer l.DecRef()
	n, err := r.ep.WritePacketsKept(l)
	if n == len(pkts) {
		t.Fatalf("all %d packets queued on a stalled modem: the test did not fill the ring", n)
	}
	if _, ok := err.(*tcpip.ErrWouldBlock); !ok {
		t.Fatalf("WritePacketsKept on a full, stalled ring = %d, %v; want ErrWouldBlock", n, err)
	}
	if d := r.ep.Stats().TXDrops; d != (link.TXDrops{}) {
		t.Errorf("drops counted for packets the caller keeps: %+v", d)
	}
	r.m.SetSlow(0)
	rest := l
	for range n {
		rest.PopFront()
	}
	for rest.Len() > 0 {
		n, err := r.ep.WritePacketsKept(rest)
		if _, ok := err.(*tcpip.ErrWouldBlock); err != nil && !ok {
			t.Fatalf("WritePacketsKept after the stall: %d, %v", n, err)
		}
		for range n {
			rest.PopFront()
		}
	}
	r.snk.waitFor(t, len(pkts), 30*time.Second)
	if d := r.ep.Stats().TXDrops; d != (link.TXDrops{}) {
		t.Errorf("drops counted: %+v", d)
	}
}

func TestRefillerKeepsRingAtLevelAndRecoversFromPoolExhaustion(t *testing.T) {
	g := &sim.Generator{Frames: [][]byte{udp4(t, 1, 500)}}
	r := newRig(t, rigOptions{fn: g, link: link.Options{NoGRO: true}})
	_, dl := r.ep.Channels()
	level := r.ep.RefillLevel()
	waitUntil(t, 2*time.Second, "initial refill", func() bool { return dl.FreeCount() == 0 })

	g.Add(5000)
	r.snk.waitFor(t, 5000, 20*time.Second)
	// Idle again: the ring is kept at its level (fewer free descriptors
	// than wake the refiller).
	waitUntil(t, 2*time.Second, "ring at level", func() bool { return dl.FreeCount() < level })

	// Exhaust the pool: hold back every buffer, then drain the ring.
	release := r.ep.StarveRX()
	g.Add(dl.Elements() + 50)
	waitUntil(t, 10*time.Second, "ring drained", func() bool { return dl.FreeCount() == dl.Elements()-1 })
	waitUntil(t, 5*time.Second, "allocation failure counted", func() bool { return r.ep.Stats().RXAllocFail > 0 })
	fails := r.ep.Stats().RXAllocFail
	time.Sleep(30 * time.Millisecond)
	if r.ep.Stats().RXAllocFail == fails {
		t.Errorf("refiller stopped retrying while starved")
	}
	// Give them back: the refiller refills on its own (back-off retry),
	// and the queued traffic arrives.
	held := release()
	r.snk.waitFor(t, 5000+dl.Elements()+50, 10*time.Second)
	waitUntil(t, 2*time.Second, "ring refilled", func() bool { return dl.FreeCount() < level })
	t.Logf("held %d buffers; stats %s", held, fmtStats(r.ep.Stats()))
}

func TestOverflowChainsReassembleAndOversizeChainsAreDropped(t *testing.T) {
	g := &sim.Generator{}
	r := newRig(t, rigOptions{fn: g, link: link.Options{MRU: 4096, MTU: 16384, NoGRO: true}})
	// 16 KiB packets in 4 KiB buffers: four pieces each (3 OVERFLOW + EOT).
	var want [][]byte
	var ks []string
	for i := range 50 {
		k := kinds[i%len(kinds)]
		ks = append(ks, k)
		want = append(want, buildPacket(t, k, i, 16384-60))
	}
	g.SetFrames(want)
	g.Add(len(want))
	got := r.snk.waitFor(t, len(want), 10*time.Second)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("reassembled packet %d differs (%d vs %d bytes)", i, len(got[i]), len(want[i]))
		}
	}
	// A 70000-byte frame: longer than any IP packet; dropped, counted,
	// and the next packet is intact.
	huge := make([]byte, 70000)
	copy(huge, want[0])
	g.SetFrames([][]byte{huge, want[1]})
	g.Add(2)
	got = r.snk.waitFor(t, len(want)+1, 10*time.Second)
	if !bytes.Equal(got[len(want)], want[1]) {
		t.Fatalf("packet after the oversize chain differs")
	}
	waitPublished(t, r, func(s link.Stats) bool { return s.RXDrops.Oversize > 0 })
	if s := r.ep.Stats(); s.RXDrops.Oversize != 1 {
		t.Errorf("oversize drops %d, want 1", s.RXDrops.Oversize)
	}
	// And the packets go out too: 16 KiB UL transfers.
	r2 := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{MRU: 4096, MTU: 16384, NoGRO: true}})
	write(t, r2.ep, want[:20]...)
	got = r2.snk.waitFor(t, 20, 10*time.Second)
	checkIntact(t, got, want[:20], ks[:20])
}

func TestAggregatedFramesAreSplitAcrossPassesWithinBudget(t *testing.T) {
	g := &sim.Generator{}
	var want [][]byte
	for f := range 20 {
		var pkts [][]byte
		for i := range 50 {
			pkts = append(pkts, udp4(t, f*50+i, 60+i))
		}
		want = append(want, pkts...)
		g.Frames = append(g.Frames, aggregate(pkts...))
	}
	r := newRig(t, rigOptions{fn: g, link: link.Options{Framing: lenFraming{}, Budget: 16, NoGRO: true}})
	g.Add(len(g.Frames))
	got := r.snk.waitFor(t, len(want), 10*time.Second)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
	waitPublished(t, r, func(s link.Stats) bool { return s.RXFrames >= 20 })
	s := r.ep.Stats()
	if s.MaxPassPackets > 16 {
		t.Errorf("a pass delivered %d packets, budget 16", s.MaxPassPackets)
	}
	if s.RXFrames != 20 {
		t.Errorf("%d frames, want 20", s.RXFrames)
	}
	// TX aggregates too: 100 packets in far fewer UL transfers.
	r2 := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{Framing: lenFraming{}, TXBufferSize: 16384, NoGRO: true}})
	write(t, r2.ep, want[:100]...)
	got = r2.snk.waitFor(t, 100, 10*time.Second)
	for i := range 100 {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("aggregated TX packet %d differs", i)
		}
	}
	if s := r2.ep.Stats(); s.TXFrames >= 20 {
		t.Errorf("100 small packets took %d UL frames", s.TXFrames)
	}
}

func TestOptionsMatrixMovesTrafficIntact(t *testing.T) {
	w := experiment.NewWorker(nil)
	defer w.Close()
	cases := map[string]link.Options{
		"refill-shared":   {Experiments: &experiment.Options{Refill: experiment.RefillShared, Worker: w}},
		"refill-inline":   {Experiments: &experiment.Options{Refill: experiment.RefillInline}},
		"inline-poll":     {Experiments: &experiment.Options{InlinePoll: true}},
		"tx-in-budget":    {Experiments: &experiment.Options{TXInBudget: true}},
		"locked-thread":   {Experiments: &experiment.Options{LockOSThread: true}},
		"no-offloads":     {NoGRO: true, NoChecksumOffload: true, GSO: link.GSOOff},
		"refill-level-1":  {Experiments: &experiment.Options{RefillLevel: 1}},
		"mru-1500-budget": {MRU: 1500, Budget: 4},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			o.NoGRO = true
			r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: o})
			rng := rand.New(rand.NewPCG(3, 4))
			pkts, ks := mixed(t, rng, 600, 1400)
			for i := 0; i < len(pkts); i += 30 {
				write(t, r.ep, pkts[i:min(i+30, len(pkts))]...)
			}
			got := r.snk.waitFor(t, len(pkts), 20*time.Second)
			checkIntact(t, got, pkts, ks)
		})
	}
}

func TestPacketsBeforeAttachAreCountedDrops(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, noAttach: true, link: link.Options{NoGRO: true}})
	write(t, r.ep, udp4(t, 1, 100), udp4(t, 2, 100))
	waitUntil(t, 5*time.Second, "drops counted", func() bool { return r.ep.Stats().RXDrops.NotAttached == 2 })
	r.ep.Attach(r.snk)
	write(t, r.ep, udp4(t, 3, 100))
	r.snk.waitFor(t, 1, 5*time.Second)
}

// After a SYS_ERR the endpoint refills and traffic resumes, whether the
// modem recovers through MHI reset or, hung (sim.Modem.Hang), only through
// the function-level reset that follows (docs/RELIABILITY.md "When
// recovery fails"): the buffers come back after the reset either way.
func TestSysErrRecoveryRefillsAndTrafficResumes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   func(*sim.Modem) error
		timeout time.Duration // bounds the MHI reset a hung modem never completes
	}{
		{"mhi-reset", (*sim.Modem).TriggerSysErr, 0},
		{"function-level-reset", (*sim.Modem).Hang, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true}, timeout: tc.timeout})
			write(t, r.ep, udp4(t, 1, 100))
			r.snk.waitFor(t, 1, 5*time.Second)
			if err := tc.fault(r.m); err != nil {
				t.Fatal(err)
			}
			ul, dl := r.ep.Channels()
			waitUntil(t, 15*time.Second, "recovery", func() bool {
				return r.c.Stats().Recoveries == 1 && dl.FreeCount() == 0 && ul.Outstanding() == 0
			})
			write(t, r.ep, udp4(t, 2, 100))
			got := r.snk.waitFor(t, 2, 5*time.Second)
			if !bytes.Equal(got[1], udp4(t, 2, 100)) {
				t.Fatal("packet after recovery differs")
			}
		})
	}
}

func TestCloseStopsEveryGoroutineAndReturnsEveryBuffer(t *testing.T) {
	g := &sim.Generator{Frames: [][]byte{udp4(t, 1, 1000)}}
	r := newRig(t, rigOptions{fn: g, link: link.Options{MRU: 4096}})
	g.Add(1 << 30) // still storming when Close comes
	waitUntil(t, 5*time.Second, "traffic", func() bool { return r.ep.Stats().RXPackets > 1000 })
	// A writer blocked on backpressure when Close comes.
	r.m.SetSlow(time.Millisecond)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		pkts := make([][]byte, 300)
		for i := range pkts {
			pkts[i] = udp4(t, i, 100)
		}
		writeN(r.ep, pkts...)
	}()
	time.Sleep(20 * time.Millisecond)
	r.ep.Close()
	r.ep.Wait()
	<-wdone
	if n, err := writeN(r.ep, udp4(t, 1, 100)); n != 0 || err == nil {
		t.Errorf("WritePackets after Close = %d, %v", n, err)
	}
	if rx, rxAll, tx, txAll := link.BuffersHomeForTest(r.ep); rx != rxAll || tx != txAll {
		t.Errorf("after Close: %d/%d RX and %d/%d TX buffers back", rx, rxAll, tx, txAll)
	}
	r.m.SetSlow(0)
	r.close()
	goleak.VerifyNone(t)
}
