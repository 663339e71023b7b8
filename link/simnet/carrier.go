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

	"golang.org/x/net/dns/dnsmessage"

	"github.com/mhistack/mhistack/internal/segment"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/mhi/sim"
	"gvisor.dev/gvisor/pkg/buffer"
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
	"gvisor.dev/gvisor/pkg/waiter"
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
// TestAddr6.
const TestName = "test.mhistack"

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
	MaxDatagrams, MaxBytes int
	// FlushDelay is how long a DL frame waits for more packets after
	// its first one, on a framed pair: a frame goes when it is full or
	// when this has passed (0: DefaultFlushDelay, 200 µs; negative: as
	// soon as the sender goroutine is free, so frames fill only while
	// it is busy sending the previous one).
	FlushDelay time.Duration
	// APNs are the further access point names of the network
	// (MBIMConfig.APNs): their gateways and DNS servers are the
	// network's too, and their MTU bounds its link's.
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
// (Options.Functions{"IP_HW0": cn}). It outlives channel restarts (a
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
	echoFr   *Framer        // frames echo replies on a framed pair; only Receive uses it
	session  atomic.Uint32  // session of the host's last UL packet: DL to an unknown address goes to it
	// routes maps the host's source addresses to the session (MBIM
	// session ID, QMAP mux ID) their UL packets came on: a DL packet
	// goes to its destination's session, as a network routes each PDN's
	// addresses to its bearer. Copy on write under routeMu; read by
	// Receive and the DL writers without locks.
	routes  atomic.Pointer[[]dlRoute]
	routeMu sync.Mutex

	stats  carrierCounters
	chunks relayChunks // the forwarded flows' relay chunks
}

// dlRoute is a host address (4 or 16 bytes) and its session.
type dlRoute struct {
	addr    string
	session uint8
}

// maxDLRoutes bounds the learned addresses (a host spoofing sources
// cannot grow the table without bound); beyond it the oldest go.
const maxDLRoutes = 64

// learnRoute records that UL packet td came from its source address on
// session (framed pairs only). The common case, a known address on the
// same session, costs a short scan and no write.
func (cn *CarrierNetwork) learnRoute(session uint8, td []byte) {
	src := srcAddr(td)
	if src == nil {
		return
	}
	if rt := cn.routes.Load(); rt != nil {
		for _, r := range *rt {
			if r.addr == string(src) {
				if r.session == session {
					return
				}
				break
			}
		}
	}
	cn.routeMu.Lock()
	defer cn.routeMu.Unlock()
	var next []dlRoute
	if rt := cn.routes.Load(); rt != nil {
		for _, r := range *rt {
			if r.addr != string(src) {
				next = append(next, r)
			}
		}
	}
	if len(next) >= maxDLRoutes {
		next = next[1:]
	}
	next = append(next, dlRoute{addr: string(src), session: session})
	cn.routes.Store(&next)
}

// sessionFor returns the session a DL packet to the IP header hdr goes
// on: its destination's, else the session of the last UL packet.
func (cn *CarrierNetwork) sessionFor(hdr []byte) uint8 {
	if dst := dstAddr(hdr); dst != nil {
		if rt := cn.routes.Load(); rt != nil {
			for _, r := range *rt {
				if r.addr == string(dst) {
					return r.session
				}
			}
		}
	}
	return uint8(cn.session.Load())
}

func srcAddr(p []byte) []byte {
	switch {
	case len(p) >= header.IPv4MinimumSize && header.IPVersion(p) == header.IPv4Version:
		return p[12:16]
	case len(p) >= header.IPv6MinimumSize && header.IPVersion(p) == header.IPv6Version:
		return p[8:24]
	}
	return nil
}

func dstAddr(p []byte) []byte {
	switch {
	case len(p) >= header.IPv4MinimumSize && header.IPVersion(p) == header.IPv4Version:
		return p[16:20]
	case len(p) >= header.IPv6MinimumSize && header.IPVersion(p) == header.IPv6Version:
		return p[24:40]
	}
	return nil
}

// CarrierStats are the network's counters.
type CarrierStats struct {
	// TCPFlows and UDPFlows count forwarded flows; Refused counts TCP
	// flows the host refused (answered with RST); DNSQueries counts
	// queries answered; Dropped counts packets the port refused.
	TCPFlows, UDPFlows, Refused, DNSQueries, Dropped uint64
	// ULPackets and DLPackets count IP packets from and to the host;
	// DLFrames counts the aggregated DL frames (NTBs, QMAP aggregates)
	// that carried DLPackets on a framed pair (0 on raw IP), so
	// DLPackets/DLFrames is the DL aggregation achieved. Echoes counts
	// the echo replies the network answers itself, outside DLPackets:
	// they go back one UL transfer at a time.
	ULPackets, DLPackets, DLFrames, Echoes uint64
	// BadChecksums counts UL packets dropped for a wrong IPv4 header,
	// TCP or UDP checksum (within ULPackets).
	BadChecksums uint64
	// TimeWaitReused counts the host's SYNs that took over a 4-tuple
	// the carrier held in TIME-WAIT (see takeOverTimeWait).
	TimeWaitReused uint64
	// RelayChunks is how many 256 KiB relay chunks the forwarded TCP
	// flows hold now: a direction holds one only while it has data to
	// move, so idle flows hold none.
	RelayChunks int64
}

type carrierCounters struct {
	tcp, udp, refused, dns, dropped, ul, dl, dlFrames, echoes, badChecksum, timeWaitReused atomic.Uint64
}

// NewCarrierNetwork starts the carrier network's stack.
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
	mtu := opts.Carrier.MTU
	for _, a := range opts.APNs {
		mtu = max(mtu, a.Carrier.MTU)
	}
	cn.ep = &carrierLink{cn: cn, mtu: mtu}
	cn.groSink.cn = cn
	cn.gro.Init(true)
	cn.gro.Dispatcher = &cn.groSink
	if !isRawIP(opts.Framing) {
		cn.echoFr = NewFramer(opts.Framing, opts.MaxDatagrams, opts.MaxBytes)
		cn.ep.agg.init(opts.Framing, opts.MaxDatagrams, opts.MaxBytes)
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
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 6 << 20}
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
	cn.wg.Add(1)
	go cn.rxLoop()
	if !isRawIP(opts.Framing) {
		cn.wg.Add(1)
		go cn.ep.runSender()
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
		go cn.serveDNS(uc)
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
	return CarrierStats{TCPFlows: c.tcp.Load(), UDPFlows: c.udp.Load(), Refused: c.refused.Load(),
		DNSQueries: c.dns.Load(), Dropped: c.dropped.Load(), ULPackets: c.ul.Load(), DLPackets: c.dl.Load(), DLFrames: c.dlFrames.Load(), Echoes: c.echoes.Load(),
		BadChecksums: c.badChecksum.Load(), TimeWaitReused: c.timeWaitReused.Load(),
		RelayChunks: cn.chunks.held.Load()}
}

// Start implements Function.
func (cn *CarrierNetwork) Start(p *sim.Port) { cn.ep.port.Store(p) }

// Stop implements Function.
func (cn *CarrierNetwork) Stop() { cn.ep.port.Store(nil) }

// Receive implements Function: one UL transfer from the host (one raw
// IP packet, or an NTB of any number on an MBIM pair).
func (cn *CarrierNetwork) Receive(td []byte) {
	d := cn.ep.disp.Load()
	if d == nil || len(td) == 0 {
		return
	}
	if isRawIP(cn.opts.Framing) {
		cn.receivePacket(0, td)
		return
	}
	spans, err := parseUL(cn.opts.Framing, td, cn.spans[:0])
	cn.spans = spans
	p := cn.ep.port.Load()
	if err != nil && p != nil {
		p.Violation(ruleULFraming, "carrier network: UL transfer of %d bytes: %v", len(td), err)
	}
	for _, sp := range spans {
		if !sp.Ctrl {
			cn.receivePacket(sp.ID, td[sp.Off:sp.Off+sp.Len])
		}
	}
	// Echo replies of one transfer travel in one DL frame.
	if p != nil {
		if err := cn.echoFr.Flush(p); err != nil {
			cn.stats.dropped.Add(1)
		}
	}
}

// receivePacket takes one IP packet of session from the host.
func (cn *CarrierNetwork) receivePacket(session uint8, td []byte) {
	var proto tcpip.NetworkProtocolNumber
	switch header.IPVersion(td) {
	case header.IPv4Version:
		proto = header.IPv4ProtocolNumber
	case header.IPv6Version:
		proto = header.IPv6ProtocolNumber
	default:
		return
	}
	cn.stats.ul.Add(1)
	cn.session.Store(uint32(session))
	if !isRawIP(cn.opts.Framing) {
		cn.learnRoute(session, td)
	}
	// Echo requests are answered here, from whatever address was pinged:
	// gVisor's promiscuous mode accepts flows to any address but answers
	// echo requests only for its own.
	if reply, v := echoReply(cn.echo[:0], td); v == echoReplied {
		cn.echo = reply
		p := cn.ep.port.Load()
		var err error = sim.ErrStopped
		if p != nil {
			if cn.echoFr != nil {
				err = cn.echoFr.Add(p, session, reply)
			} else {
				err = p.Send(reply)
			}
		}
		if err == nil {
			cn.stats.echoes.Add(1)
		} else {
			cn.stats.dropped.Add(1)
		}
		return
	}
	// MakeWithData copies: td is only valid during Receive.
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(td)})
	pkt.NetworkProtocolNumber = proto
	// Blocking here when the carrier falls behind stops the modem from
	// consuming UL transfers: the host's ring fills and its writers wait,
	// which is backpressure rather than loss.
	select {
	case cn.rx <- pkt:
	case <-cn.quit:
		pkt.DecRef()
	}
}

// rxBudget is how many UL packets rxLoop takes from the queue before it
// flushes GRO: a batch is what has piled up while gVisor was busy with
// the previous one, as NAPI polls up to its budget per pass.
const rxBudget = 64

// rxLoop hands the host's packets to gVisor on the carrier's own
// goroutine, so that whatever gVisor writes inline (RSTs, ICMP errors,
// ACKs) may wait for DL room without stalling the device goroutine. It
// takes what has queued up, up to rxBudget packets, through GRO and
// flushes GRO once per batch, so the carrier's TCP receives a burst of a
// flow's in-order segments as one (a network's receiving servers run GRO
// too); a lone packet is delivered at once.
func (cn *CarrierNetwork) rxLoop() {
	defer cn.wg.Done()
	for {
		select {
		case pkt := <-cn.rx:
			cn.enqueueGRO(pkt)
		batch:
			for range rxBudget - 1 {
				select {
				case pkt := <-cn.rx:
					cn.enqueueGRO(pkt)
				default:
					break batch
				}
			}
			cn.flushGRO()
		case <-cn.quit:
			cn.flushGRO()
			return
		}
	}
}

// enqueueGRO validates pkt's checksums (see ulChecksumOK) and hands it
// to GRO; a packet that fails is dropped and counted, as the stack would
// have.
func (cn *CarrierNetwork) enqueueGRO(pkt *stack.PacketBuffer) {
	// One chunk (receivePacket made it from one slice): no copy.
	p, _ := pkt.Data().PullUp(pkt.Data().Size())
	if !ulChecksumOK(p, pkt.NetworkProtocolNumber) {
		cn.stats.badChecksum.Add(1)
		pkt.DecRef()
		return
	}
	pkt.RXChecksumValidated = true
	cn.takeOverTimeWait(p, pkt.NetworkProtocolNumber)
	cn.groSink.in++
	cn.gro.Enqueue(pkt)
	pkt.DecRef()
}

// flushGRO delivers everything GRO holds. gro.GRO.Flush at the pinned
// gVisor delivers only the first packet of each bucket (it walks the list
// with Next after removing the element, which clears the link), so it is
// repeated until a call delivers nothing; a bucket holds at most 8.
//
// GRO was once tried here and taken out because the carrier lost
// segments and stalled. Two things caused it: a single Flush left
// segments in GRO until more traffic came, and merged segments were
// dropped as malformed, because GRO does not rewrite the checksums of
// what it merges and gVisor's NIC sets RXChecksumValidated from the
// link's capabilities, so a NIC without CapabilityRXChecksumOffload
// checks them again (hence ulChecksumOK).
func (cn *CarrierNetwork) flushGRO() {
	for range 9 {
		before := cn.groSink.out
		cn.gro.Flush()
		if cn.groSink.out == before {
			return
		}
	}
}

// groSink is the dispatcher GRO delivers to: the carrier's stack, with
// counts of the packets that went into GRO and came out (rxLoop's only;
// in − out is what GRO merged or holds).
type groSink struct {
	cn      *CarrierNetwork
	in, out uint64
}

func (s *groSink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	s.out++
	if d := s.cn.ep.disp.Load(); d != nil {
		(*d).DeliverNetworkPacket(proto, pkt)
	}
}

func (s *groSink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

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
	if !isRawIP(cn.opts.Framing) {
		cn.ep.agg.close()
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

// track registers closers of a flow and a goroutine count for it; false
// once the network is closed.
func (cn *CarrierNetwork) track(goroutines int, cs ...io.Closer) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return false
	}
	for _, c := range cs {
		cn.flows[c] = struct{}{}
	}
	cn.wg.Add(goroutines)
	return true
}

func (cn *CarrierNetwork) untrack(cs ...io.Closer) {
	cn.mu.Lock()
	for _, c := range cs {
		delete(cn.flows, c)
	}
	cn.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// hostAddr maps a destination of the carrier network to the host's.
func hostAddr(a tcpip.Address, port uint16) string {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	switch ip {
	case TestAddr4:
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case TestAddr6:
		ip = netip.IPv6Loopback()
	}
	return netip.AddrPortFrom(ip.Unmap(), port).String()
}

// forwardTCP runs on a goroutine of gVisor's forwarder for every SYN to
// an address the network has no listener for: it dials the host first,
// so that a refused or unreachable destination is answered with RST as a
// real path would (the host's stack then sees ECONNREFUSED).
func (cn *CarrierNetwork) forwardTCP(r *tcp.ForwarderRequest) {
	if !cn.track(1) {
		r.Complete(true)
		return
	}
	defer cn.wg.Done()
	id := r.ID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	hc, err := cn.opts.DialHost(ctx, "tcp", hostAddr(id.LocalAddress, id.LocalPort))
	cancel()
	if err != nil {
		cn.stats.refused.Add(1)
		cn.log.Debug("carrier: TCP forward refused", "dst", hostAddr(id.LocalAddress, id.LocalPort), "err", err)
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		hc.Close()
		r.Complete(true)
		return
	}
	r.Complete(false)
	ep.SocketOptions().SetDelayOption(false)
	gc := gonet.NewTCPConn(&wq, ep)
	cn.stats.tcp.Add(1)
	if !cn.track(1, gc, hc) {
		gc.Close()
		hc.Close()
		return
	}
	// A failed copy resets both sides, as a NAT does: a FIN would tell the
	// other end its stream ended cleanly when data was lost.
	var resetOnce sync.Once
	reset := func() {
		resetOnce.Do(func() {
			ep.Abort()
			if t, ok := hc.(*net.TCPConn); ok {
				t.SetLinger(0)
			}
			hc.Close()
			gc.Close()
		})
	}
	// Each direction ends its destination's write side at a clean end
	// of its source, so half-close travels through the network.
	up := make(chan struct{})
	go func() {
		defer cn.wg.Done()
		defer close(up)
		hcw, ok := hc.(halfCloser)
		if err := copyToHost(&cn.chunks, hc, ep, &wq); err != nil || !ok {
			reset()
			return
		}
		hcw.CloseWrite()
	}()
	if err := copyFromHost(&cn.chunks, ep, &wq, hc); err != nil {
		reset()
	} else {
		ep.Shutdown(tcpip.ShutdownWrite)
	}
	// A half-closed flow keeps running in the other direction: the flow
	// ends when both copies have.
	<-up
	cn.untrack(gc, hc)
}

// halfCloser is a connection that can end its write side.
type halfCloser interface{ CloseWrite() error }

// forwardUDP runs inline for the first datagram of a flow gVisor has no
// endpoint for.
func (cn *CarrierNetwork) forwardUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		return false
	}
	gc := gonet.NewUDPConn(&wq, ep)
	if !cn.track(1, gc) {
		gc.Close()
		return true
	}
	cn.stats.udp.Add(1)
	// Dialing is done on the flow's goroutine: a UDP "dial" is cheap, but
	// this handler runs on the device goroutine.
	go func() {
		defer cn.wg.Done()
		defer cn.untrack(gc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hc, err := cn.opts.DialHost(ctx, "udp", hostAddr(id.LocalAddress, id.LocalPort))
		cancel()
		if err != nil {
			return
		}
		if !cn.track(1, hc) {
			hc.Close()
			return
		}
		go func() {
			defer cn.wg.Done()
			cn.copyUDP(gc, hc)
			gc.Close()
		}()
		cn.copyUDP(hc, gc)
		cn.untrack(hc)
	}()
	return true
}

// copyUDP copies datagrams until src has been idle for UDPIdle or fails.
func (cn *CarrierNetwork) copyUDP(dst, src net.Conn) {
	buf := make([]byte, 65535)
	for {
		src.SetReadDeadline(time.Now().Add(cn.opts.UDPIdle))
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// serveDNS answers queries on one of the carrier's DNS addresses.
func (cn *CarrierNetwork) serveDNS(c *gonet.UDPConn) {
	defer cn.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		resp := cn.answerDNS(buf[:n])
		if resp != nil {
			cn.stats.dns.Add(1)
			c.WriteTo(resp, from)
		}
	}
}

// answerDNS builds the response to one query: A and AAAA from Hosts
// (and TestName), otherwise from the host's resolver.
func (cn *CarrierNetwork) answerDNS(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	question := qs[0]
	rh := dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, Authoritative: true}
	name := question.Name.String()
	if len(name) > 0 && name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}
	var addrs []netip.Addr
	known := false
	if name == TestName {
		addrs, known = []netip.Addr{TestAddr4, TestAddr6}, true
	} else if a, ok := cn.opts.Hosts[name]; ok {
		addrs, known = a, true
	}
	if !known && (question.Type == dnsmessage.TypeA || question.Type == dnsmessage.TypeAAAA) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		cancel()
		if err == nil {
			addrs, known = res, true
		}
	}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	b.StartQuestions()
	b.Question(question)
	b.StartAnswers()
	rrh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case question.Type == dnsmessage.TypeA && a.Is4():
			rrh.Type = dnsmessage.TypeA
			b.AResource(rrh, dnsmessage.AResource{A: a.As4()})
		case question.Type == dnsmessage.TypeAAAA && a.Is6():
			rrh.Type = dnsmessage.TypeAAAA
			b.AAAAResource(rrh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// carrierLink is the carrier stack's NIC: packets it writes go to the
// host on the DL channel; packets from the host come in through Receive.
type carrierLink struct {
	cn   *CarrierNetwork
	mtu  uint32
	port atomic.Pointer[sim.Port]
	disp atomic.Pointer[stack.NetworkDispatcher]
	pool sync.Pool // *dlWriter: Port.Send copies, so one per writer at a time
	agg  dlAgg     // DL aggregation on a framed pair
}

func (l *carrierLink) MTU() uint32                      { return l.mtu }
func (l *carrierLink) SetMTU(mtu uint32)                { l.mtu = mtu }
func (l *carrierLink) MaxHeaderLength() uint16          { return 0 }
func (l *carrierLink) LinkAddress() tcpip.LinkAddress   { return "" }
func (l *carrierLink) SetLinkAddress(tcpip.LinkAddress) {}
func (l *carrierLink) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload // rxLoop validates: ulChecksumOK
}
func (l *carrierLink) IsAttached() bool                        { return l.disp.Load() != nil }
func (l *carrierLink) Wait()                                   {}
func (l *carrierLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (l *carrierLink) AddHeader(*stack.PacketBuffer)           {}
func (l *carrierLink) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (l *carrierLink) Close()                                  {}
func (l *carrierLink) SetOnCloseAction(func())                 {}

// GSOMaxSize and SupportedGSO: the carrier's NIC does TSO, as a network
// server's NIC does: host GSO, so the carrier's TCP hands the link
// segments of up to 64 KiB, cut into MSS-sized packets (internal/segment,
// the same cutting the host's link does for UL) while they are copied into
// the DL transfer or frame. gVisor builds, routes and checksums one packet
// per 64 KiB instead of one per MSS.
func (l *carrierLink) GSOMaxSize() uint32               { return 1 << 16 }
func (l *carrierLink) SupportedGSO() stack.SupportedGSO { return stack.HostGSOSupported }

// dlWriter is what one WritePackets call works with.
type dlWriter struct {
	seg segment.Segmenter
	buf []byte // one DL packet (raw IP), grown on demand
}

func (l *carrierLink) writer() *dlWriter {
	w, _ := l.pool.Get().(*dlWriter)
	if w == nil {
		w = new(dlWriter)
	}
	return w
}

// put returns w to the pool without the packet it last walked.
func (l *carrierLink) put(w *dlWriter) {
	w.seg.Release()
	l.pool.Put(w)
}

func (l *carrierLink) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		l.disp.Store(nil)
		return
	}
	l.disp.Store(&d)
}

func (l *carrierLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	p := l.port.Load()
	if p == nil {
		return 0, &tcpip.ErrClosedForSend{}
	}
	if !isRawIP(l.cn.opts.Framing) {
		return l.writeFramed(pkts)
	}
	w := l.writer()
	defer l.put(w)
	seg := &w.seg
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if !seg.Reset(pkt) {
			l.cn.stats.dropped.Add(1)
			n++
			continue
		}
		for !seg.Done() {
			size := seg.Next()
			if size > len(w.buf) {
				w.buf = make([]byte, max(size, 2048))
			}
			b := w.buf[:size]
			seg.Write(b)
			if err := l.send(p, b); err != nil {
				l.cn.stats.dropped.Add(1)
				if n == 0 {
					return 0, &tcpip.ErrNoBufferSpace{}
				}
				return n, nil
			}
			l.cn.stats.dl.Add(1)
		}
		n++
	}
	return n, nil
}

// DefaultFlushDelay is how long the carrier holds a DL frame for more
// packets after its first one (CarrierOptions.FlushDelay). Modems
// aggregate DL with a time limit as well as the datagram and byte limits
// the host negotiated; 200 µs is long enough to gather a burst of a TCP
// sender's segments (gVisor writes them one by one, microseconds apart)
// and short against any round-trip time, so an idle flow barely notices
// it. Raising it fills frames better under light load at the cost of
// that much latency per packet.
const DefaultFlushDelay = 200 * time.Microsecond

// dlPending is how many full DL frames wait for the sender before a
// writer waits: enough to keep the host's ring busy while the next frame
// fills, small enough that a slow host pushes back on the carrier's TCP
// rather than piling up frames.
const dlPending = 4

// dlAgg is the DL aggregation of a framed pair, as a modem does it. The
// carrier's writers (gVisor goroutines, in WritePackets) add packets to
// the frame being filled; the sender goroutine (runSender, started by
// NewCarrierNetwork, stopped by Close) sends a frame when it is full
// (MaxDatagrams or MaxBytes) or when FlushDelay has passed since its
// first packet. Full frames wait in a queue of dlPending; a writer that
// finds it full waits, which slows the carrier's TCP instead of losing
// its segments. Only the sender calls Port.Send, so frames leave in order.
type dlAgg struct {
	mu      sync.Mutex
	cond    sync.Cond // a frame left the queue, or the network closed
	cur     *Framer   // frame being filled (begun when open)
	first   time.Time // when cur got its first packet
	full    []*Framer // frames waiting for the sender, oldest first
	free    []*Framer
	closed  bool
	kick    chan struct{} // one token: cur got its first packet, or a frame is full
	framing framing.Framing
	maxD    int
	maxB    int
}

func (a *dlAgg) init(f framing.Framing, maxDatagrams, maxBytes int) {
	a.cond.L = &a.mu
	a.framing, a.maxD, a.maxB = f, maxDatagrams, maxBytes
	if a.maxD <= 0 {
		a.maxD = DefaultAggDatagrams
	}
	a.kick = make(chan struct{}, 1)
	a.cur = a.newFrame()
}

// newFrame returns a recycled or new frame; a.mu is held (or a is not
// shared yet).
func (a *dlAgg) newFrame() *Framer {
	if n := len(a.free); n > 0 {
		fr := a.free[n-1]
		a.free = a.free[:n-1]
		return fr
	}
	return NewFramer(a.framing, a.maxD, a.maxB)
}

func (a *dlAgg) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// push hands fr to the sender once the queue has room; false if the
// network closed meanwhile. Waiting releases a.mu, so the caller checks
// that the frame it meant to push is still a.cur (the sender may have
// flushed it by timer meanwhile) by passing it: push returns true without
// pushing in that case. a.mu is held.
func (a *dlAgg) push(fr *Framer) bool {
	gen := fr.gen
	for len(a.full) >= dlPending && !a.closed {
		a.cond.Wait()
	}
	if a.closed {
		return false
	}
	if fr.gen != gen {
		// Flushed by the sender's timer while we waited, and perhaps
		// recycled as a.cur since: that is someone else's frame now.
		return true
	}
	if fr == a.cur {
		a.cur = a.newFrame()
	} else if !fr.oneOff {
		return true // flushed by the sender's timer while we waited
	}
	fr.gen++
	a.full = append(a.full, fr)
	a.wake()
	return true
}

// close wakes the writers waiting for room; frames not sent are dropped.
func (a *dlAgg) close() {
	a.mu.Lock()
	a.closed = true
	a.cond.Broadcast()
	a.mu.Unlock()
}

// writeFramed adds the batch to the DL aggregation; see dlAgg.
func (l *carrierLink) writeFramed(pkts stack.PacketBufferList) (int, tcpip.Error) {
	a := &l.agg
	w := l.writer()
	defer l.put(w)
	seg := &w.seg
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, pkt := range pkts.AsSlice() {
		if a.closed {
			if i == 0 {
				return 0, &tcpip.ErrClosedForSend{}
			}
			return i, nil
		}
		session := l.cn.sessionFor(pkt.NetworkHeader().Slice())
		if !seg.Reset(pkt) {
			l.cn.stats.dropped.Add(1)
			continue
		}
		for !seg.Done() && !a.closed {
			l.addFramed(seg, session)
		}
	}
	return pkts.Len(), nil
}

// addFramed adds the next piece of seg's packet to the frame being
// filled, pushing frames as they fill; a.mu is held.
func (l *carrierLink) addFramed(seg *segment.Segmenter, session uint8) {
	a := &l.agg
	size := seg.Next()
	for {
		fr := a.cur
		if !fr.open {
			fr.enc.Begin(fr.buf)
			fr.open, fr.n = true, 0
		}
		fr.enc.SetSession(session)
		if dst := fr.enc.Add(size); dst != nil {
			seg.Write(dst)
			fr.n++
			switch {
			case fr.n >= a.maxD: // full: no need to wait for the timer
				a.push(fr)
			case fr.n == 1:
				a.first = time.Now()
				a.wake() // the sender arms the flush timer
			}
			return
		}
		if fr.n == 0 {
			// Larger than an empty frame of MaxBytes (a ping with a
			// large MTU): it travels alone in a frame of its own size,
			// as a modem whose MTU exceeds its aggregation size sends
			// it.
			big := NewFramer(a.framing, 1, size+64)
			big.oneOff = true
			big.enc.Begin(big.buf)
			big.open = true
			big.enc.SetSession(session)
			if dst := big.enc.Add(size); dst != nil {
				seg.Write(dst)
				big.n = 1
				a.push(big)
			} else {
				seg.Skip()
				l.cn.stats.dropped.Add(1)
			}
			return
		}
		// No room for this piece: the frame goes, the piece starts the
		// next one.
		if !a.push(fr) {
			seg.Skip()
			return
		}
	}
}

// runSender is the DL sender of a framed pair: it sends queued full
// frames, and the frame being filled once FlushDelay has passed since its
// first packet. It returns when the network closes.
func (l *carrierLink) runSender() {
	defer l.cn.wg.Done()
	a := &l.agg
	delay := l.cn.opts.FlushDelay
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		var fr *Framer
		wait := time.Duration(-1)
		a.mu.Lock()
		switch {
		case len(a.full) > 0:
			fr = a.full[0]
			a.full = append(a.full[:0], a.full[1:]...)
			a.cond.Broadcast()
		case a.cur.open && a.cur.n > 0:
			if d := delay - time.Since(a.first); d > 0 {
				wait = d
			} else {
				fr = a.cur
				fr.gen++
				a.cur = a.newFrame()
			}
		}
		a.mu.Unlock()
		if fr != nil {
			l.sendFrame(fr)
			if !fr.oneOff {
				a.mu.Lock()
				a.free = append(a.free, fr)
				a.mu.Unlock()
			}
			continue
		}
		if wait >= 0 {
			t.Reset(wait)
		}
		select {
		case <-a.kick:
		case <-t.C:
		case <-l.cn.quit:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// sendFrame ends fr and sends it to the host.
func (l *carrierLink) sendFrame(fr *Framer) {
	k := fr.n
	n := fr.enc.End()
	fr.open, fr.n = false, 0
	p := l.port.Load()
	var err error = sim.ErrStopped
	if p != nil {
		err = l.send(p, fr.buf[:n])
	}
	if err != nil {
		l.cn.stats.dropped.Add(uint64(k))
		return
	}
	l.cn.stats.dl.Add(uint64(k))
	l.cn.stats.dlFrames.Add(1)
}

// sendPatience bounds how long a writer of the carrier waits for DL room.
const sendPatience = time.Second

// send is Port.Send with a network's patience: Send waits up to the
// modem's SendTimeout for queue room, a network queues longer before it
// drops, so the writer (a gVisor goroutine or the DL sender, never the
// device goroutine) tries again until sendPatience has passed.
func (l *carrierLink) send(p *sim.Port, b []byte) error {
	deadline := time.Now().Add(sendPatience)
	for {
		err := p.Send(b)
		if !errors.Is(err, sim.ErrNoBuffer) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-l.cn.quit:
			return err
		default:
		}
	}
}
