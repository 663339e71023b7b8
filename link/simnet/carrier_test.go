package simnet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/linktest"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/mhi/mhitest"
)

// carrierPair is a framed data pair the carrier network serves: a
// profile, its channel, its framing and the host's session.
type carrierPair struct {
	name, profile, channel string
	framing                framing.Framing // the carrier's and the host's
	session                uint8
}

var framedPairs = []carrierPair{
	{"mbim-ntb16", "quectel-em1xx", "IP_HW0_MBIM", mbim.NTB{}, 0},
	// rmnet's first mux ID is 1 (ModemManager, libqmi).
	{"qmap-v1", "qcom-sdx55m", "IP_HW0", qmap.Framing{Version: 1}, 1},
	{"qmap-v5", "sierra-em919x", "IP_HW0", qmap.Framing{Version: 5}, 1},
}

// ulAggPairs are framed pairs whose host aggregates UL within the
// modem's limits (the carrier's framing carries them, so the strict modem
// checks every UL frame against them): QMAPv5 with what a Quectel modem
// grants in WDA (11 datagrams, 8 KiB) and NTB16 with an NTB OUT of 16
// datagrams, 16 KiB, datagrams at 2 mod 8 and 16-byte aligned NDPs.
var ulAggPairs = []carrierPair{
	{"qmap-v5-ul-aggregated", "sierra-em919x", "IP_HW0", qmap.Framing{Version: 5, MaxDatagrams: DefaultULDatagrams, MaxBytes: DefaultULBytes}, 1},
	{"mbim-ntb16-ntb-out", "quectel-em1xx", "IP_HW0_MBIM", mbim.NTB{MaxDatagrams: 16, MaxBytes: 16384, Divisor: 8, Remainder: 2, NDPAlign: 16}, 0},
}

// aggregatesUL reports whether f puts several packets in a UL frame.
func aggregatesUL(f framing.Framing) bool {
	a, ok := f.(framing.Aggregating)
	return ok && a.ULFrameBytes() > 0
}

// carrierHost is mhistack's host side (mhi controller, link endpoint, a
// gVisor stack with the carrier's address for the host) over an emulated
// modem whose data pair runs a CarrierNetwork.
type carrierHost struct {
	cn *CarrierNetwork
	s  *stack.Stack
	ep *link.Endpoint
}

func newCarrierHost(t testing.TB, k carrierPair, opts CarrierOptions) *carrierHost {
	t.Helper()
	return newCarrierHostWith(t, k, opts, false)
}

// newCarrierHostWith is newCarrierHost whose stack has the carrier's
// IPv6 address as well when v6 (without duplicate address detection, so
// that it is usable at once).
func newCarrierHostWith(t testing.TB, k carrierPair, opts CarrierOptions, v6 bool) *carrierHost {
	t.Helper()
	opts.Framing = k.framing
	cn, err := NewCarrierNetwork(opts)
	if err != nil {
		t.Fatal(err)
	}
	r := linktest.New(t, linktest.Options{Options: mhitest.Options{ProfileName: k.profile},
		Link: link.Options{Channel: k.channel, Framing: k.framing, Session: k.session}, Function: cn})
	ep := r.Endpoint
	protos := []stack.NetworkProtocolFactory{ipv4.NewProtocol}
	if v6 {
		protos = append(protos, ipv6.NewProtocolWithOptions(ipv6.Options{DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 0}}))
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   protos,
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	addr := tcpip.AddrFrom4(DefaultCarrier().IPv4.Addr().As4())
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: addr.WithPrefix()}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	routes := []tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}}
	if v6 {
		addr6 := tcpip.AddrFrom16(DefaultCarrier().IPv6.Addr().As16())
		if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber, AddressWithPrefix: addr6.WithPrefix()}, stack.AddressProperties{}); err != nil {
			t.Fatal(err)
		}
		routes = append(routes, tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: 1})
	}
	s.SetRouteTable(routes)
	// Before the rig's cleanup (the controller, the device, the
	// violations): the stack, the endpoint, the carrier.
	t.Cleanup(func() {
		s.Close()
		s.Wait()
		ep.Close()
		cn.Close()
	})
	return &carrierHost{cn: cn, s: s, ep: ep}
}

// testData is size pseudo-random bytes drawn from seed.
func testData(size int, seed uint64) []byte {
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), seed))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	return data
}

// dialHost dials, from the host's stack through the carrier, a server on
// the host's loopback (TestAddr4 is mapped to 127.0.0.1) that runs serve
// on the connection it accepts, on a goroutine of its own, and closes
// that connection after it. It returns the host stack's end and a wait
// for serve's result (or the accept's error).
func (h *carrierHost) dialHost(t testing.TB, serve func(net.Conn) error) (*gonet.TCPConn, func() error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		l.Close()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		served <- serve(c)
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := gonet.DialContextTCP(ctx, h.s, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(TestAddr4.As4()), Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		l.Close() // the server's goroutine ends
		t.Fatalf("dial %v: %v", netip.AddrPortFrom(TestAddr4, port), err)
	}
	return conn, func() error { return <-served }
}

// download fetches size bytes from a server on the host's loopback
// through the carrier and checks them.
func (h *carrierHost) download(t testing.TB, size int) {
	t.Helper()
	data := testData(size, 7)
	conn, served := h.dialHost(t, func(c net.Conn) error {
		_, err := c.Write(data)
		return err
	})
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("download: %v after %d bytes", err, len(got))
	}
	if err := served(); err != nil {
		t.Fatalf("server: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("download: %d bytes, sha256 %x; sent %d, sha256 %x", len(got), sha256.Sum256(got), len(data), sha256.Sum256(data))
	}
}

// TestCarrierAggregatesDLOfABulkTCPTransferLikeAModem: a TCP download
// through the carrier network on every framed pair arrives intact, and
// the carrier's DL frames carry many datagrams each (a modem fills its
// aggregation while the host's ring is busy). Sending a frame as soon as
// the sender is free (FlushDelay < 0, the carrier's behaviour before it
// had a flush timer) is measured for comparison.
func TestCarrierAggregatesDLOfABulkTCPTransferLikeAModem(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	const size = 4 << 20
	for _, k := range framedPairs {
		t.Run(k.name, func(t *testing.T) {
			var perFrame [2]float64
			for i, delay := range []time.Duration{-1, 0} {
				h := newCarrierHost(t, k, CarrierOptions{FlushDelay: delay})
				h.download(t, size)
				cs := h.cn.Stats()
				if cs.DLFrames == 0 {
					t.Fatalf("no DL frame counted: %+v", cs)
				}
				perFrame[i] = float64(cs.DLPackets) / float64(cs.DLFrames)
				t.Logf("flush delay %v: %d DL datagrams in %d frames: %.1f per frame", h.cn.opts.FlushDelay, cs.DLPackets, cs.DLFrames, perFrame[i])
			}
			// A 4 MiB download is ~2900 full-size segments; with the
			// timer a frame holds a burst of them (21 fill 32 KiB).
			if perFrame[1] <= 4 {
				t.Errorf("DL aggregation with the flush timer: %.1f datagrams per frame, want > 4", perFrame[1])
			}
		})
	}
	goleak.VerifyNone(t, ignore)
}

// TestCarrierSendsADatagramLargerThanAFrameAlone: with an aggregation
// size below the MTU every full-size segment is larger than an empty
// frame; each travels alone in a frame of its own size instead of being
// dropped, and the stream arrives intact.
func TestCarrierSendsADatagramLargerThanAFrameAlone(t *testing.T) {
	for _, k := range framedPairs {
		t.Run(k.name, func(t *testing.T) {
			h := newCarrierHost(t, k, CarrierOptions{MaxBytes: 1024})
			h.download(t, 256<<10)
			cs := h.cn.Stats()
			if cs.Dropped != 0 || cs.DLFrames < 256<<10/1500 {
				t.Fatalf("%+v: want no drop and a frame per full-size segment at least", cs)
			}
		})
	}
}

// TestCarrierSendsWithReno: the carrier's TCP, the sender of every
// download, runs Reno, the congestion control table 10's download rows
// were measured with (carrier.go says why not CUBIC).
func TestCarrierSendsWithReno(t *testing.T) {
	cn, err := NewCarrierNetwork(CarrierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	var cc tcpip.CongestionControlOption
	if err := cn.GVisor().TransportProtocolOption(tcp.ProtocolNumber, &cc); err != nil {
		t.Fatal(err)
	}
	if cc != "reno" {
		t.Errorf("carrier congestion control %q, want reno", cc)
	}
}

// TestCarrierBuffersCoverEveryRadioPreset: the carrier's TCP, the sender
// of every download, can keep each link/radio preset's bandwidth-delay
// product in flight (a send buffer of at least it) and receive one (a
// receive buffer of twice it: gVisor advertises half the free space).
func TestCarrierBuffersCoverEveryRadioPreset(t *testing.T) {
	cn, err := NewCarrierNetwork(CarrierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	var rcv tcpip.TCPReceiveBufferSizeRangeOption
	var snd tcpip.TCPSendBufferSizeRangeOption
	if err := cn.GVisor().TransportProtocolOption(tcp.ProtocolNumber, &rcv); err != nil {
		t.Fatal(err)
	}
	if err := cn.GVisor().TransportProtocolOption(tcp.ProtocolNumber, &snd); err != nil {
		t.Fatal(err)
	}
	if name, bdp := radio.LargestPresetBDP(); int64(rcv.Max/2) < bdp || int64(snd.Max) < bdp {
		t.Errorf("%s: BDP %d bytes, receive buffer max %d, send buffer max %d", name, bdp, rcv.Max, snd.Max)
	}
}
