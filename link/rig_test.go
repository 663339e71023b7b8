package link_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/linktest"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// rig is linktest's rig (a host controller in mission mode on a strict
// emulated qcom-sdx55m with fn behind the data channel pair, and a link
// endpoint on that pair) with a sink attached: a host protocol violation
// or a DMA fault fails the test.
type rig struct {
	t   testing.TB
	lr  *linktest.Rig
	dev *vpci.Device
	m   *sim.Modem
	c   *mhi.Controller
	ep  *link.Endpoint
	snk *sink

	closed bool
}

type rigOptions struct {
	profile  string       // default qcom-sdx55m
	custom   *mhi.Profile // instead of profile
	fn       sim.Function
	sim      sim.Options
	link     link.Options
	noAttach bool
	timeout  time.Duration // the controller's command timeout (default 3 s)
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	lr, err := linktest.Start(linktest.Options{
		Options:  mhitest.Options{ProfileName: o.profile, Profile: o.custom, Sim: o.sim, Controller: mhi.Options{Timeout: o.timeout}},
		Link:     o.link,
		Function: o.fn,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, lr: lr, dev: lr.Device, m: lr.Modem, c: lr.Controller, ep: lr.Endpoint, snk: newSink()}
	if !o.noAttach {
		r.ep.Attach(r.snk)
	}
	t.Cleanup(r.close)
	return r
}

// close tears everything down in order and reports what went wrong.
func (r *rig) close() {
	if r.closed {
		return
	}
	r.closed = true
	// A test may have replaced the rig's endpoint (a new one after the
	// old one closed itself): close the current one too.
	r.ep.Close()
	r.ep.Wait()
	mhitest.ReportClose(r.t, r.lr.Close)
}

// sink is a NetworkDispatcher that keeps a copy of every packet.
type sink struct {
	mu   sync.Mutex
	pkts [][]byte
	// onPacket, when set, runs on the poller for every packet (after it
	// is recorded).
	onPacket func(b []byte)
	more     chan struct{}
}

func newSink() *sink { return &sink{more: make(chan struct{}, 1)} }

func (s *sink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	buf := pkt.ToBuffer()
	b := buf.Flatten()
	buf.Release()
	s.mu.Lock()
	s.pkts = append(s.pkts, b)
	fn := s.onPacket
	s.mu.Unlock()
	select {
	case s.more <- struct{}{}:
	default:
	}
	if fn != nil {
		fn(b)
	}
}

func (s *sink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pkts)
}

func (s *sink) packets() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.pkts...)
}

// waitFor waits until the sink holds n packets.
func (s *sink) waitFor(t testing.TB, n int, d time.Duration) [][]byte {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if got := s.count(); got >= n {
			return s.packets()
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d packets within %v", s.count(), n, d)
		}
		select {
		case <-s.more:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// write sends packets in one WritePackets call and checks they were all
// taken.
// write sends every packet, retrying what the endpoint refused with its
// backpressure error (a full UL ring that did not drain within the TX
// timeout, which a loaded CI machine can cause), as a stack's queue would.
func write(t testing.TB, ep *link.Endpoint, pkts ...[]byte) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(pkts) > 0 {
		n, err := writeN(ep, pkts...)
		pkts = pkts[n:]
		if len(pkts) == 0 {
			return
		}
		// A short count is backpressure too: the rest timed out
		// waiting for UL space (a loaded machine, -race), and
		// WritePackets reports the error only when it sent nothing.
		if _, busy := err.(*tcpip.ErrNoBufferSpace); !(busy || n > 0 && err == nil) || time.Now().After(deadline) {
			t.Fatalf("WritePackets(%d packets) = %d, %v", len(pkts)+n, n, err)
		}
	}
}

func writeN(ep *link.Endpoint, pkts ...[]byte) (int, tcpip.Error) {
	var l stack.PacketBufferList
	for _, p := range pkts {
		l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(p)}))
	}
	defer l.DecRef()
	return ep.WritePackets(l)
}

// --- packets ---------------------------------------------------------------

var (
	addr4a = net.IP{10, 0, 0, 1}
	addr4b = net.IP{10, 0, 0, 2}
	addr6a = net.ParseIP("fd00::1")
	addr6b = net.ParseIP("fd00::2")
)

// kinds of test packet: IPv4/IPv6 × TCP/UDP.
var kinds = []string{"ipv4-tcp", "ipv4-udp", "ipv6-tcp", "ipv6-udp"}

// buildPacket serialises an IP packet with valid checksums and a payload
// of n bytes derived from seq.
func buildPacket(t testing.TB, kind string, seq, n int) []byte {
	t.Helper()
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(seq*31 + i)
	}
	var nl gopacket.NetworkLayer
	var ip gopacket.SerializableLayer
	switch kind[:4] {
	case "ipv4":
		v4 := &layers.IPv4{Version: 4, TTL: 64, Id: uint16(seq), SrcIP: addr4a, DstIP: addr4b}
		nl, ip = v4, v4
	default:
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: addr6a, DstIP: addr6b}
		nl, ip = v6, v6
	}
	var tl gopacket.SerializableLayer
	switch kind[5:] {
	case "tcp":
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, Seq: uint32(seq) * 100000, ACK: true, PSH: true, Window: 65535}
		_ = tcp.SetNetworkLayerForChecksum(nl)
		if v4, ok := ip.(*layers.IPv4); ok {
			v4.Protocol = layers.IPProtocolTCP
		} else {
			ip.(*layers.IPv6).NextHeader = layers.IPProtocolTCP
		}
		tl = tcp
	default:
		udp := &layers.UDP{SrcPort: 5353, DstPort: layers.UDPPort(1000 + seq%1000)}
		_ = udp.SetNetworkLayerForChecksum(nl)
		if v4, ok := ip.(*layers.IPv4); ok {
			v4.Protocol = layers.IPProtocolUDP
		} else {
			ip.(*layers.IPv6).NextHeader = layers.IPProtocolUDP
		}
		tl = udp
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ip, tl, gopacket.Payload(payload)); err != nil {
		t.Fatalf("serialise %s: %v", kind, err)
	}
	return bytes.Clone(buf.Bytes())
}

// udp4 is an IPv4/UDP packet of exactly size bytes.
func udp4(t testing.TB, seq, size int) []byte {
	return buildPacket(t, "ipv4-udp", seq, size-28)
}

// checkDecodes parses b with gopacket and checks the layers of kind.
func checkDecodes(t testing.TB, b []byte, kind string) {
	t.Helper()
	first := layers.LayerTypeIPv4
	if kind[:4] == "ipv6" {
		first = layers.LayerTypeIPv6
	}
	p := gopacket.NewPacket(b, first, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("%s packet does not decode: %v", kind, el.Error())
	}
	want := layers.LayerTypeUDP
	if kind[5:] == "tcp" {
		want = layers.LayerTypeTCP
	}
	if p.Layer(want) == nil {
		t.Fatalf("%s packet has no %v layer", kind, want)
	}
}

// mixed returns n packets of all kinds and random sizes up to maxPayload.
func mixed(t testing.TB, rng *rand.Rand, n, maxPayload int) ([][]byte, []string) {
	pkts := make([][]byte, n)
	ks := make([]string, n)
	for i := range pkts {
		ks[i] = kinds[i%len(kinds)]
		pkts[i] = buildPacket(t, ks[i], i, rng.IntN(maxPayload+1))
	}
	return pkts, ks
}

// lenFraming is a test aggregation framing (a stand-in for QMAP until
// link/qmap exists): each packet is preceded by its length as a 16-bit
// big-endian word.
type lenFraming struct{}

func (lenFraming) Name() string  { return "test-len16" }
func (lenFraming) Overhead() int { return 2 }

func (lenFraming) Decode(frame []byte, spans []framing.Span) ([]framing.Span, error) {
	for off := 0; off < len(frame); {
		if len(frame)-off < 2 {
			return spans, framing.ErrRunt
		}
		n := int(binary.BigEndian.Uint16(frame[off:]))
		off += 2
		if n == 0 || n > len(frame)-off {
			return spans, framing.ErrBadFrame
		}
		spans = append(spans, framing.Span{Off: off, Len: n})
		off += n
	}
	return spans, nil
}

func (lenFraming) NewEncoder() framing.Encoder { return &lenEncoder{} }

type lenEncoder struct {
	buf []byte
	off int
}

func (e *lenEncoder) Begin(buf []byte) { e.buf, e.off = buf, 0 }

func (e *lenEncoder) Add(n int) []byte {
	if n <= 0 || n > len(e.buf)-e.off-2 {
		return nil
	}
	binary.BigEndian.PutUint16(e.buf[e.off:], uint16(n))
	dst := e.buf[e.off+2 : e.off+2+n]
	e.off += 2 + n
	return dst
}

func (e *lenEncoder) End() int { n := e.off; e.buf, e.off = nil, 0; return n }

// aggregate builds one lenFraming frame of pkts.
func aggregate(pkts ...[]byte) []byte {
	var f []byte
	for _, p := range pkts {
		f = binary.BigEndian.AppendUint16(f, uint16(len(p)))
		f = append(f, p...)
	}
	return f
}

func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitPublished waits until r's endpoint Stats satisfy done: a poll pass
// publishes its counters only after it has handed its packets to the
// dispatcher, so the sink can hold packets the Stats do not count yet.
func waitPublished(t testing.TB, r *rig, done func(link.Stats) bool) {
	t.Helper()
	waitUntil(t, 5*time.Second, "the last poll pass's counters", func() bool { return done(r.ep.Stats()) })
}

func fmtStats(s link.Stats) string { return fmt.Sprintf("%+v", s) }
