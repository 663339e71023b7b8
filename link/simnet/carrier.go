package simnet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/mhi/sim"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// Test addresses of the carrier network. A connection or datagram to
// TestAddr4 (198.18.0.1, RFC 2544 benchmarking space) or TestAddr6
// (2001:2::1, RFC 5180 benchmarking space) reaches the host's 127.0.0.1
// or ::1 on the same port, so a server on the host's loopback is
// reachable through the whole emulated path. The carrier's DNS answers
// TestName with both.
var (
	TestAddr4 = netip.MustParseAddr("198.18.0.1")
	TestAddr6 = netip.MustParseAddr("2001:2::1")
)

// TestName is the name the carrier's DNS resolves to TestAddr4 and
// TestAddr6; TestName4 has only TestAddr4, an IPv4-only name: on an
// IPv6-only APN its DNS64 answers AAAA questions for it with a synthesised
// address, which reaches the host through the NAT64.
const (
	TestName  = "test.mhistack"
	TestName4 = "test4.mhistack"
)

// CarrierOptions configure a CarrierNetwork.
type CarrierOptions struct {
	// Carrier is the session configuration the network serves: the
	// host's addresses, the gateway, the DNS servers (answered by the
	// network itself) and the MTU. Zero: DefaultCarrier, the same the
	// emulated MBIM function reports by default.
	Carrier Carrier
	// Framing of the channel pair: raw IP (nil or framing.RawIP{}:
	// IP_HW0, one packet per transfer), mbim.NTB{} (IP_HW0_MBIM, NTB16)
	// or qmap.Framing{Version: 1 or 5} (IP_HW0 with rmnet's MAPv1 /
	// MAPv5 on top; the session is the mux ID). On a framed pair UL frames are parsed
	// strictly with link/mbim's or link/qmap's codec (a malformed one is
	// a host violation) and DL packets are aggregated like a modem does:
	// see FlushDelay.
	Framing framing.Framing
	// MaxDatagrams and MaxBytes bound DL aggregation on a framed pair
	// (0: DefaultAggDatagrams / DefaultAggBytes, 32 / 32 KiB).
	// The Framing value's own limits (mbim.NTB's MaxDatagrams,
	// MaxBytes, Divisor, Remainder and NDPAlign; qmap.Framing's
	// MaxDatagrams and MaxBytes) are what the modem accepts on UL: a
	// UL frame beyond them is a host violation (zero: not checked).
	MaxDatagrams, MaxBytes int
	// FlushDelay is how long a DL frame waits for more packets after
	// its first one, on a framed pair: a frame goes when it is full or
	// when this has passed (0: DefaultFlushDelay, 200 µs; negative: as
	// soon as the sender goroutine is free, so frames fill only while
	// it is busy sending the previous one).
	FlushDelay time.Duration
	// APNs are the further access point names of the network
	// (NetworkConfig.APNs): their gateways and DNS servers are the
	// network's too, and the largest of their MTUs and 1500 is its
	// link's.
	APNs []APN
	// Hosts adds names to the DNS (TestName is always there). Names the
	// carrier does not know are resolved with the host's resolver, like
	// a carrier's DNS resolving the Internet.
	Hosts map[string][]netip.Addr
	// DialHost dials the host's network for a forwarded flow (default a
	// net.Dialer with a 5 s timeout). addr has the test addresses already
	// mapped to loopback.
	DialHost func(ctx context.Context, network, addr string) (net.Conn, error)
	// UDPIdle closes a forwarded UDP flow after this long without
	// traffic (default 30 s).
	UDPIdle time.Duration
	// NoTailLossProbe turns off the network's tail loss probe. By
	// default the network's TCP senders repair a lost tail of a flight
	// (a SYS_ERR loses whatever the modem held) with a probe after about
	// two round trips, as real servers do (RACK-TLP, RFC 8985 §7; see
	// carrier_tlp.go), instead of waiting out the retransmission timeout.
	NoTailLossProbe bool
	// Radio, if set, puts a radio link model between the modem and the
	// network, both ways (carrier_radio.go, docs/RADIO.md): the host's
	// UL packets and the network's DL packets cross it, with its rate,
	// queue, delay, loss, handover gaps and RRC promotion. Nil: packets
	// pass at once, as a network without a radio.
	Radio *radio.Config
	// NTBQuirks are the oddities of real modems' DL NTBs the network
	// plays on an MBIM pair (ProfileNTBQuirks gives a model's).
	NTBQuirks NTBQuirks
	// Network, when set, is the emulated network whose data sessions
	// this pair carries: the carrier sends its IPv6 sessions the
	// network's Router Advertisements (their /64, MTU, and on an APN
	// with a NAT64 its PREF64; NetworkConfig.RAInterval, ra.go), answers
	// their Router Solicitations, and stops routing a prefix the network
	// renumbered away from once its valid lifetime ends
	// (Network.RenumberIPv6). Nil: no advertisements.
	Network *Network
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

// CarrierNetwork is the network behind the emulated modem's data channel:
// a gVisor stack that terminates the host's TCP and UDP flows and forwards
// them to the host's own sockets (TestAddr4/TestAddr6 to loopback, any
// other destination to the host's network), answers DNS on the carrier's
// DNS addresses and echo requests to any address, and can open
// connections towards the host's stack (Dial) so that a listener on the
// modem is reachable.
//
// It is a Function: attach it to the data channel pair
// (Options.Functions{mhi.ChannelIPHW0: cn}). It outlives channel restarts (a
// SYS_ERR recovery keeps forwarded flows, as a real network would) and is
// released by Close, which stops every goroutine it started.
//
// Receive runs on the modem's device goroutine: it copies the transfer
// and queues it for the network's own goroutine, which hands it to
// gVisor, so the device goroutine is not held up. On a framed pair DL
// packets are aggregated and sent by a sender goroutine (see
// CarrierOptions.FlushDelay); echo replies are answered from Receive, in
// one frame per UL transfer.
type CarrierNetwork struct {
	opts CarrierOptions
	s    *stack.Stack
	ep   *carrierLink
	log  *slog.Logger

	mu     sync.Mutex
	closed bool
	flows  map[io.Closer]struct{}
	wg     sync.WaitGroup

	rx       chan *stack.PacketBuffer // Receive → rxLoop
	gro      gro.GRO                  // rxLoop's only
	groSink  groSink                  // rxLoop's only
	quit     chan struct{}            // closed by Close
	dnsConns []*gonet.UDPConn
	echo     []byte         // echo reply being built; only Receive (the device goroutine) uses it
	spans    []framing.Span // UL packets of the transfer; only Receive uses it
	sessions int            // sessions the framing carries (framing.SessionLimit; 256 without a limit)
	echoFr   *Framer        // frames echo replies on a framed pair; only Receive uses it
	session  atomic.Uint32  // session of the host's last UL packet: DL to an unknown address goes to it
	// routes maps the host's source addresses to the session (MBIM
	// session ID, QMAP mux ID) their UL packets came on: a DL packet
	// goes to its destination's session, as a network routes each PDN's
	// addresses to its bearer. Copy on write under routeMu; read by
	// Receive and the DL writers without locks.
	routes  atomic.Pointer[[]dlRoute]
	routeMu sync.Mutex

	nat64  *nat64 // nil when no APN has a NAT64
	xlUL   []byte // the translated UL packet; only Receive uses it
	xlEcho []byte // the translated echo reply; only Receive uses it

	stats  carrierCounters
	chunks relayChunks // the forwarded flows' relay chunks
	tlp    *tailProber // nil with NoTailLossProbe
	radio  *radio.Link // nil without CarrierOptions.Radio
	ra     carrierRA   // the router's side on this pair (carrier_ra.go); net nil without CarrierOptions.Network
}

// CarrierStats are the network's counters.
type CarrierStats struct {
	// TCPFlows and UDPFlows count forwarded flows; Refused counts TCP
	// flows the host refused (answered with RST); DNSQueries counts
	// queries answered; Dropped counts DL packets lost: refused by the
	// port, or sent while the data pair is stopped.
	TCPFlows, UDPFlows, Refused, DNSQueries, Dropped uint64
	// ULPackets and DLPackets count IP packets from and to the host;
	// DLFrames counts the aggregated DL frames (NTBs, QMAP aggregates)
	// that carried DLPackets on a framed pair (0 on raw IP), so
	// DLPackets/DLFrames is the DL aggregation achieved. Echoes counts
	// the echo replies the network answers itself, outside DLPackets:
	// they go back one UL transfer at a time.
	ULPackets, DLPackets, DLFrames, Echoes uint64
	// ULLargest is the largest UL IP packet the host sent, in bytes:
	// what the host's MTU and TCP MSS allowed (at most the session's
	// MTU, Carrier.MTU, on a host that follows it).
	ULLargest uint32
	// BadChecksums counts UL packets dropped for a wrong IPv4 header,
	// TCP or UDP checksum (within ULPackets).
	BadChecksums uint64
	// UnknownSessions counts UL packets dropped because their session
	// has no place in the framing: an NTB whose NDP session byte is
	// below the modem's MBIM session offset (mbim.NTB.SessionOffset), a
	// host that does not apply the offset. Outside ULPackets.
	UnknownSessions uint64
	// TimeWaitReused counts the host's SYNs that took over a 4-tuple
	// the carrier held in TIME-WAIT (see takeOverTimeWait).
	TimeWaitReused uint64
	// TailLossProbes counts the tail loss probes the network's TCP
	// senders sent (CarrierOptions.NoTailLossProbe): each sends a flow's
	// newest segments again, up to three.
	TailLossProbes uint64
	// TailLossProbesAgain counts those of TailLossProbes that went
	// again when the data pair started because the flow's probe had gone
	// out before the pair stopped and drew no ACK of new data: lost with
	// the pair.
	TailLossProbesAgain uint64
	// SACKDupAcks counts the host's ACKs that SACKed new data with a
	// grown window, which the link gave the network's TCP with the
	// window before so that it counts them as duplicate ACKs, as RFC
	// 6675 §2 does (carrier_tlp.go says why).
	SACKDupAcks uint64
	// RelayChunks is how many 256 KiB relay chunks the forwarded TCP
	// flows hold now: a direction holds one only while it has data to
	// move, so idle flows hold none.
	RelayChunks int64
	// RadioDown and RadioUp are the radio model's counters for each
	// direction (zero without CarrierOptions.Radio): what it queued,
	// dropped and why, delivered, and the queue delay. ULPackets count
	// the host's packets before the model, DLPackets after it.
	RadioDown, RadioUp radio.Stats
	// NAT64Translated counts packets the NAT64 translated (both ways,
	// Carrier.NAT64); NAT64Refused those it dropped: refused by the
	// translator (RFC 7915, RFC 6052 §3.1) or for a pool address with no
	// binding.
	NAT64Translated, NAT64Refused uint64
	// The UL datagrams of forwarded UDP flows, stage by stage after the
	// modem: UDPReceiveBufferErrors counts those the network's own stack
	// dropped because the flow's receive buffer was full (the relay had
	// not read them yet; gVisor's UDP ReceiveBufferErrors); UDPRelayed
	// those the relay wrote to the host's socket, UDPRelayErrors those
	// whose write failed. What the host's kernel then drops at the
	// receiving socket is the receiver's to count (SO_MEMINFO drops).
	UDPReceiveBufferErrors, UDPRelayed, UDPRelayErrors uint64
	// RouterAdverts counts the Router Advertisements the network sent
	// (CarrierOptions.Network; within DLPackets); DeadPrefixDrops the
	// packets it dropped to or from a prefix it renumbered away from,
	// once the prefix's valid lifetime ended.
	RouterAdverts, DeadPrefixDrops uint64
}

type carrierCounters struct {
	tcp, udp, refused, dns, dropped, ul, dl, dlFrames, echoes, badChecksum, timeWaitReused, unknownSession atomic.Uint64
	udpRelayed, udpRelayErrors                                                                             atomic.Uint64
	ulLargest                                                                                              atomic.Uint32
}

// seeUL counts one UL packet of n bytes. The largest is raised only when
// exceeded: after the first full-sized packet it is a load per packet.
func (c *carrierCounters) seeUL(n int) {
	c.ul.Add(1)
	for {
		old := c.ulLargest.Load()
		if uint32(n) <= old || c.ulLargest.CompareAndSwap(old, uint32(n)) {
			return
		}
	}
}

// NewCarrierNetwork starts the carrier network's stack.
// carrierTCPBufferMax is the carrier stack's TCP buffer maximum, each
// way. gVisor advertises half the free receive buffer as its window.
const carrierTCPBufferMax = 32 << 20

// carrierCongestionControl is the carrier stack's TCP congestion control.
const carrierCongestionControl = "reno"

func NewCarrierNetwork(opts CarrierOptions) (*CarrierNetwork, error) {
	if !opts.Carrier.IPv4.IsValid() && !opts.Carrier.IPv6.IsValid() {
		opts.Carrier = DefaultCarrier()
	}
	if opts.Carrier.MTU == 0 {
		opts.Carrier.MTU = 1500
	}
	if !knownFraming(opts.Framing) {
		return nil, errors.New("simnet: carrier network: unknown framing " + opts.Framing.Name())
	}
	if opts.Framing == nil {
		opts.Framing = framing.RawIP{}
	}
	if opts.FlushDelay == 0 {
		opts.FlushDelay = DefaultFlushDelay
	}
	if opts.DialHost == nil {
		d := &net.Dialer{Timeout: 5 * time.Second}
		opts.DialHost = d.DialContext
	}
	if opts.UDPIdle <= 0 {
		opts.UDPIdle = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cn := &CarrierNetwork{opts: opts, log: opts.Logger, flows: map[io.Closer]struct{}{},
		rx: make(chan *stack.PacketBuffer, 512), quit: make(chan struct{})}
	// The carrier's side is the Internet's, whose servers sit on
	// Ethernet (MTU 1500, MSS 1460): a session whose MTU is smaller is
	// bounded by the MSS its host announces, and follows a change of it
	// with no change here.
	mtu := max(opts.Carrier.MTU, 1500)
	for _, a := range opts.APNs {
		mtu = max(mtu, a.Carrier.MTU)
	}
	nat, err := newNAT64(append([]Carrier{opts.Carrier}, apnCarriers(opts.APNs)...))
	if err != nil {
		return nil, errors.New("simnet: carrier network: NAT64: " + err.Error())
	}
	cn.nat64 = nat
	cn.ep = &carrierLink{cn: cn, mtu: mtu}
	cn.sessions = 256
	if l, ok := opts.Framing.(framing.SessionLimit); ok {
		cn.sessions = l.Sessions()
	}
	if !opts.NoTailLossProbe {
		cn.tlp = new(tailProber)
		cn.tlp.init(cn)
	}
	cn.groSink.cn = cn
	cn.gro.Init(true)
	cn.gro.Dispatcher = &cn.groSink
	if !isRawIP(opts.Framing) {
		num := &dlNumbering{q: opts.NTBQuirks}
		cn.echoFr = NewFramer(opts.Framing, opts.MaxDatagrams, opts.MaxBytes)
		cn.echoFr.num = num
		cn.ep.agg.init(opts.Framing, opts.MaxDatagrams, opts.MaxBytes, num)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
	})
	cn.s = s
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	// RACK off, as in the host's stack (stack.TCPOptions.RACK). gVisor's
	// RACK marks a tail loss lost, but its SACK recovery still counts
	// the marked segments in flight (SetPipe applies RFC 6675's IsLost,
	// which wants three segments SACKed above a hole): when a SYS_ERR
	// loses a window and only one or two later segments reach the host,
	// the sender sits cwnd-blocked in recovery and repairs the hole one
	// or two segments per retransmission timeout (200 ms each). A
	// window of 580 segments then took a minute to come back
	// (TestSysErrTCPResumesBothWays, docs/RELIABILITY.md).
	rec := tcpip.TCPRecovery(0)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rec)
	// Reno (gVisor's default, set so that a change of it does not pass
	// unmeasured). The carrier sends every download; with CUBIC, as
	// Linux servers run, mhistack's downloads over link/radio's presets
	// had a higher median on nr-sa but collapsed more often: HyStart's
	// ACK-train rule left slow start at half of nr-mmwave-far-scaled's
	// 10 MB bandwidth-delay product, and a slow-start overflow of
	// nr-sa's queue still ended in RTOs (docs/PERFORMANCE.md, "Radio
	// presets").
	cc := tcpip.CongestionControlOption(carrierCongestionControl)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &cc); err != nil {
		s.Destroy()
		return nil, errors.New("simnet: carrier network: congestion control: " + err.String())
	}
	// Buffers as the host's stack (stack.DefaultTCPBufferMax): a 16 MiB
	// window, as the network side of a path with a 10 MB
	// bandwidth-delay product needs (link/radio's nr-mmwave-far).
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: carrierTCPBufferMax}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: carrierTCPBufferMax}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	if err := s.CreateNIC(1, cn.ep); err != nil {
		s.Destroy()
		return nil, errors.New("simnet: carrier network: " + err.String())
	}
	// Promiscuous + spoofing: the network owns every address but the
	// host's, so it accepts flows to any destination and answers from it.
	s.SetPromiscuousMode(1, true)
	s.SetSpoofing(1, true)
	// The network's own addresses: every APN's gateways and DNS
	// servers.
	var own, dns []netip.Addr
	for _, c := range append([]Carrier{opts.Carrier}, apnCarriers(opts.APNs)...) {
		own = append(own, c.IPv4Gateway, c.IPv6Gateway)
		dns = append(append(dns, c.IPv4DNS...), c.IPv6DNS...)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range append(own, dns...) {
		if !a.IsValid() || seen[a] {
			continue
		}
		seen[a] = true
		pa := tcpip.ProtocolAddress{Protocol: protoOf(a), AddressWithPrefix: tcpip.AddrFromSlice(a.AsSlice()).WithPrefix()}
		if err := s.AddProtocolAddress(1, pa, stack.AddressProperties{}); err != nil {
			s.Destroy()
			return nil, errors.New("simnet: carrier network: address " + a.String() + ": " + err.String())
		}
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: 1},
		{Destination: header.IPv6EmptySubnet, NIC: 1},
	})
	tf := tcp.NewForwarder(s, 0, 1024, cn.forwardTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tf.HandlePacket)
	uf := udp.NewForwarder(s, cn.forwardUDP)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, uf.HandlePacket)
	if opts.Radio != nil {
		if err := cn.startRadio(*opts.Radio); err != nil {
			s.Destroy()
			return nil, err
		}
	}
	cn.wg.Add(1)
	go cn.rxLoop()
	if cn.tlp != nil {
		cn.wg.Add(1)
		go cn.tlp.run()
	}
	if !isRawIP(opts.Framing) {
		cn.wg.Add(1)
		go cn.ep.runSender()
	}
	if opts.Network != nil {
		cn.ra.net, cn.ra.kick = opts.Network, make(chan struct{}, 1)
		cn.ra.detach = opts.Network.attachCarrier(cn)
		cn.wg.Add(1)
		go cn.raLoop()
	}
	dnsSeen := map[netip.Addr]bool{}
	for _, a := range dns {
		if dnsSeen[a] {
			continue
		}
		dnsSeen[a] = true
		fa := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(a.AsSlice()), Port: 53}
		uc, err := gonet.DialUDP(s, &fa, nil, protoOf(a))
		if err != nil {
			cn.Close()
			return nil, errors.New("simnet: carrier network: DNS on " + a.String() + ": " + err.Error())
		}
		cn.dnsConns = append(cn.dnsConns, uc)
		cn.wg.Add(1)
		go cn.serveDNS(uc, dns64Prefix(append([]Carrier{opts.Carrier}, apnCarriers(opts.APNs)...), a))
	}
	return cn, nil
}

func apnCarriers(apns []APN) []Carrier {
	out := make([]Carrier, len(apns))
	for i := range apns {
		out[i] = apns[i].Carrier
	}
	return out
}

func protoOf(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}

// Stats returns the network's counters.
func (cn *CarrierNetwork) Stats() CarrierStats {
	c := &cn.stats
	st := CarrierStats{TCPFlows: c.tcp.Load(), UDPFlows: c.udp.Load(), Refused: c.refused.Load(),
		DNSQueries: c.dns.Load(), Dropped: c.dropped.Load(), ULPackets: c.ul.Load(), ULLargest: c.ulLargest.Load(), DLPackets: c.dl.Load(), DLFrames: c.dlFrames.Load(), Echoes: c.echoes.Load(),
		BadChecksums: c.badChecksum.Load(), TimeWaitReused: c.timeWaitReused.Load(), UnknownSessions: c.unknownSession.Load(),
		RelayChunks:            cn.chunks.held.Load(),
		UDPReceiveBufferErrors: cn.s.Stats().UDP.ReceiveBufferErrors.Value(),
		UDPRelayed:             c.udpRelayed.Load(), UDPRelayErrors: c.udpRelayErrors.Load(),
		RouterAdverts: cn.ra.sent.Load(), DeadPrefixDrops: cn.ra.deadDrops.Load()}
	if cn.tlp != nil {
		st.TailLossProbes, st.TailLossProbesAgain, st.SACKDupAcks = cn.tlp.sent.Load(), cn.tlp.again.Load(), cn.tlp.dups.Load()
	}
	if cn.radio != nil {
		st.RadioDown, st.RadioUp = cn.radio.Stats(radio.Down), cn.radio.Stats(radio.Up)
	}
	if n := cn.nat64; n != nil {
		st.NAT64Translated, st.NAT64Refused = n.translated.Load(), n.refused.Load()
	}
	return st
}

// GVisor returns the gVisor stack that terminates the host's flows on
// the network side, for tests that tune its TCP (a cap on the
// retransmission timeout, say). Its type follows the pinned gVisor
// version.
func (cn *CarrierNetwork) GVisor() *stack.Stack { return cn.s }

// Start implements sim.Function.
func (cn *CarrierNetwork) Start(p *sim.Port) {
	cn.ep.port.Store(p)
	if cn.tlp != nil {
		cn.tlp.started()
	}
}

// Stop implements sim.Function.
func (cn *CarrierNetwork) Stop() {
	cn.ep.port.Store(nil)
	if cn.tlp != nil {
		cn.tlp.stopped()
	}
}

// Dial opens a connection from the carrier network to the host's stack:
// network is "tcp" or "udp", addr one of the host's addresses and a
// port. The source is the carrier's gateway. It is how a test reaches a
// listener on the modem, like a peer on the Internet would.
func (cn *CarrierNetwork) Dial(ctx context.Context, network string, addr netip.AddrPort) (net.Conn, error) {
	fa := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(addr.Addr().AsSlice()), Port: addr.Port()}
	src := cn.opts.Carrier.IPv4Gateway
	if addr.Addr().Is6() {
		src = cn.opts.Carrier.IPv6Gateway
	}
	la := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(src.AsSlice())}
	switch network {
	case "tcp":
		return gonet.DialTCPWithBind(ctx, cn.s, la, fa, protoOf(addr.Addr()))
	case "udp":
		return gonet.DialUDP(cn.s, &la, &fa, protoOf(addr.Addr()))
	}
	return nil, errors.New("simnet: carrier network: cannot dial " + network)
}

// Close stops the network: forwarded flows are closed, the stack is
// destroyed and every goroutine the network started has returned.
func (cn *CarrierNetwork) Close() error {
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return nil
	}
	cn.closed = true
	flows := cn.flows
	cn.flows = nil
	cn.mu.Unlock()
	close(cn.quit)
	if cn.ra.detach != nil {
		cn.ra.detach()
	}
	if !isRawIP(cn.opts.Framing) {
		cn.ep.agg.close()
	}
	// After quit and the aggregation's close, so that the model's
	// goroutines, which may wait for DL room or the rx queue, return.
	if cn.radio != nil {
		cn.radio.Close()
	}
	// Abort every endpoint first: a gracefully closed flow would sit in
	// FIN-WAIT or TIME-WAIT and keep the stack's Wait for minutes.
	cn.s.Close()
	for c := range flows {
		c.Close()
	}
	for _, c := range cn.dnsConns {
		c.Close()
	}
	cn.wg.Wait()
	for {
		select {
		case p := <-cn.rx:
			p.DecRef()
			continue
		default:
		}
		break
	}
	cn.s.Close() // endpoints made by flows that were still starting
	cn.s.Wait()
	return nil
}
