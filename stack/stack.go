package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/siit"
	"github.com/mhistack/mhistack/mhi"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// nicID is the stack's only NIC: the modem.
const nicID tcpip.NICID = 1

// ErrClosed is returned by every call on a closed Stack (Close included).
// It matches net.ErrClosed: errors.Is(err, net.ErrClosed) holds for it,
// and the stack's sockets fail with net.ErrClosed once it is closed.
var ErrClosed error = stackClosed{}

type stackClosed struct{}

func (stackClosed) Error() string { return "stack: closed" }
func (stackClosed) Unwrap() error { return net.ErrClosed }

// Stack is a gVisor TCP/IP stack over one link endpoint, with an API
// shaped like package net. All methods may be called from any goroutine.
type Stack struct {
	cfg Config
	gs  *gstack.Stack
	tap *tap
	txw *txWriter // the transmit queue's writer (nil without a queue)
	log *slog.Logger

	// closers run at Close after the gVisor stack is gone (Open's
	// pipeline: session, controller, device).
	closers []func() error
	// ctrl, mbim and qmi are Open's controller and control client
	// (nil after New; one of mbim and qmi is set).
	ctrl *mhi.Controller
	mbim *mbim.Client
	qmi  *qmi.Client
	// modem and sessionID: the Modem whose session the stack runs on
	// (nil after New) and the session's ID.
	modem     *Modem
	sessionID int
	finished  chan struct{} // closed when Close has released everything

	// holder is the link endpoint when it can hold UL frames while the
	// bearer is down (link.Endpoint); nil otherwise.
	holder txHolder

	mu     sync.Mutex
	addrs  []netip.Prefix
	dns    []netip.Addr
	linkUp bool
	// bridging says the link is down but the NIC stays enabled and the
	// link holds what is sent, until the bearer comes back or bridge
	// expires (bearerDown); bridgeGen tells a stale expiry from the
	// current one.
	bridging bool
	// bridgeStart is when the bridge began (the outage, for tail probes).
	bridgeStart time.Time
	// tails records what TCP sends, for the probes when a bridged
	// session comes back (nil with TCPOptions.NoTailProbe).
	tails     *tailTable
	bridge    *time.Timer
	bridgeGen uint64
	closed    bool
	done      chan struct{} // closed by Close: wakes the sockets' blocked calls
	http      *http.Transport

	events eventQueue

	conns     atomic.Int64 // open TCP connections
	dials     chan struct{}
	dialing   dialSet
	listeners listenTable
	counters  counters

	// The CLAT (clat.go), under mu: the address its discovery or run is
	// for, what cancels that discovery, its goroutine, and its NIC's
	// endpoint once made.
	clatFor    netip.Addr
	clatCancel context.CancelFunc
	clatDone   chan struct{} // closed when the latest discovery has started the CLAT or given up
	clatWG     sync.WaitGroup
	clatLink   *clatLink
	// clatDiscover is RFC 7050 discovery (nil: discoverNAT64) and
	// clatTTLMin the least time a discovered prefix is kept before
	// discovery runs again (0: nat64TTLMin); tests set them.
	clatDiscover func(context.Context) (siit.Prefix, time.Duration, error)
	clatTTLMin   time.Duration

	// ra is what the network's Router Advertisements said (ra.go).
	ra raState
}

// New builds a stack over ep (the modem's link.Endpoint, or any gVisor
// link endpoint) and configures it from cfg. The stack owns ep from now
// on: Close removes it, which closes it.
func New(ep gstack.LinkEndpoint, cfg Config) (*Stack, error) {
	cfg.setDefaults()
	s := &Stack{cfg: cfg, log: cfg.Logger, dials: make(chan struct{}, cfg.Limits.MaxInFlightDials), done: make(chan struct{}),
		finished: make(chan struct{})}
	s.events.init()
	s.gs = gstack.New(gstack.Options{
		NetworkProtocols: []gstack.NetworkProtocolFactory{
			ipv4.NewProtocol,
			ipv6.NewProtocolWithOptions(ipv6.Options{
				// Addresses come from the bearer; there is no one on a
				// point-to-point cellular link to collide with, and DAD
				// would delay the first connection by a second.
				DADConfigs: gstack.DADConfigurations{DupAddrDetectTransmits: 0},
			}),
		},
		TransportProtocols: []gstack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		// Dialing one's own address must work (wireguard-go does the
		// same); otherwise a listener on the modem is unreachable from
		// the same program.
		HandleLocal: true,
	})
	if err := s.tune(); err != nil {
		s.gs.Destroy()
		return nil, err
	}
	s.holder, _ = ep.(txHolder)
	s.tap = newTap(ep)
	s.tap.s = s
	if !cfg.TCP.NoTailProbe {
		s.tails = newTailTable()
		s.tap.tails = s.tails
	}
	if cfg.MTU != 0 {
		ep.SetMTU(cfg.MTU)
	}
	var nicOpts gstack.NICOptions
	if cfg.TXQueueLen > 0 {
		nicOpts.QDisc, s.txw = newTXQueue(s.tap, cfg.TXQueueLen)
	}
	if err := s.gs.CreateNICWithOptions(nicID, s.tap, nicOpts); err != nil {
		if nicOpts.QDisc != nil {
			nicOpts.QDisc.Close()
		}
		s.gs.Destroy()
		return nil, fmt.Errorf("stack: create NIC: %s", err)
	}
	s.linkUp = true
	s.ra.mtu = s.tap.MTU()
	if err := s.SetAddresses(cfg.Addresses); err != nil {
		s.gs.Destroy()
		return nil, err
	}
	s.setRoutes(cfg.Routes)
	s.dns = slices.Clone(cfg.DNSServers)
	return s, nil
}

// tune applies TCPOptions (docs/STACK.md, Tuning).
func (s *Stack) tune() error {
	t := &s.cfg.TCP
	set := func(what string, opt tcpip.SettableTransportProtocolOption) error {
		if err := s.gs.SetTransportProtocolOption(tcp.ProtocolNumber, opt); err != nil {
			return fmt.Errorf("stack: TCP option %s: %s", what, err)
		}
		return nil
	}
	sack := tcpip.TCPSACKEnabled(!t.NoSACK)
	mod := tcpip.TCPModerateReceiveBufferOption(!t.NoModerateReceiveBuffer)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: t.ReceiveBuffer.Min, Default: t.ReceiveBuffer.Default, Max: t.ReceiveBuffer.Max}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: t.SendBuffer.Min, Default: t.SendBuffer.Default, Max: t.SendBuffer.Max}
	cc := tcpip.CongestionControlOption(t.CongestionControl)
	rec := tcpip.TCPRecovery(0)
	if t.RACK {
		rec = tcpip.TCPRACKLossDetection
	}
	delay := tcpip.TCPDelayEnabled(t.Delay)
	for _, o := range []struct {
		n string
		o tcpip.SettableTransportProtocolOption
	}{{"SACK", &sack}, {"moderate receive buffer", &mod}, {"receive buffer", &rcv}, {"send buffer", &snd},
		{"congestion control " + t.CongestionControl, &cc}, {"RACK", &rec}, {"delay", &delay}} {
		if err := set(o.n, o.o); err != nil {
			return err
		}
	}
	if t.TimeWait > 0 {
		tw := tcpip.TCPTimeWaitTimeoutOption(t.TimeWait)
		if err := set("TIME-WAIT", &tw); err != nil {
			return err
		}
	}
	return nil
}

// GVisor returns the underlying gVisor stack.
//
// Unstable: this is an escape hatch for options the package does not
// offer (socket options, iptables, extra NICs). Its type follows the
// pinned gVisor version and may change with any release of this module;
// changing the stack's NIC, addresses or routes behind the Stack's back
// confuses Addresses and Events.
func (s *Stack) GVisor() *gstack.Stack { return s.gs }

// Close closes every endpoint, removes the link endpoint (which stops
// and closes it), then releases what Open set up below the stack. It
// returns when all of the stack's goroutines are gone.
func (s *Stack) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	close(s.done)
	s.endBridgeLocked()
	if s.ra.timer != nil {
		s.ra.timer.Stop()
	}
	tr := s.http
	if s.clatCancel != nil {
		s.clatCancel()
	}
	xlat := s.clatLink
	s.mu.Unlock()
	s.clatWG.Wait()
	if xlat != nil {
		xlat.stopErrors()
	}
	if tr != nil {
		tr.CloseIdleConnections()
	}
	if s.txw != nil {
		s.txw.closing.Store(true)
	}
	s.gs.Close()
	// Wait removes the NIC: Attach(nil) stops the link's workers, then
	// the endpoint is closed.
	s.gs.Wait()
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.events.close()
	close(s.finished)
	return errors.Join(errs...)
}

func (s *Stack) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Addresses returns the interface's addresses, including the IPv6
// link-local one.
func (s *Stack) Addresses() []netip.Prefix {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.addrs)
}

// DNSServers returns the servers names are resolved with.
func (s *Stack) DNSServers() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.dns)
}

// SetDNSServers replaces the DNS servers.
func (s *Stack) SetDNSServers(servers []netip.Addr) {
	s.mu.Lock()
	changed := !slices.Equal(s.dns, servers)
	s.dns = slices.Clone(servers)
	s.mu.Unlock()
	if changed {
		s.events.push(Event{Kind: EventDNSChanged, DNS: slices.Clone(servers)})
	}
}

// SetAddresses replaces the interface's addresses: the ones no longer
// listed are removed, and the TCP connections and dials bound to them are
// reset at once (their reads, writes and dials fail with ECONNABORTED;
// Stats().AddressAborts counts them); new ones are added. For each IPv6
// address with a non-zero interface identifier the link-local address
// fe80::IID is added too.
func (s *Stack) SetAddresses(prefixes []netip.Prefix) error {
	want := withLinkLocal(prefixes)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if old := globals6(s.ra.cfg); len(old) > 0 && !slices.Equal(old, globals6(want)) {
		// Another session: what the network advertised on the
		// previous one is moot.
		s.ra.prefixes, s.ra.ended = nil, nil
	}
	s.ra.cfg = want
	_, _, err := s.raUpdateLocked(time.Now())
	s.mu.Unlock()
	return err
}

// globals6 are the IPv6 addresses of list that are not link-local.
func globals6(list []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range list {
		if a := p.Addr(); a.Is6() && !a.IsLinkLocalUnicast() {
			out = append(out, a)
		}
	}
	return out
}

// applyAddrsLocked makes the NIC's addresses want, dep of them
// deprecated (SetAddresses says what a removal does).
func (s *Stack) applyAddrsLocked(want []netip.Prefix, dep []netip.Addr) error {
	sameAddr := func(list []netip.Prefix, a netip.Addr) bool {
		return slices.ContainsFunc(list, func(p netip.Prefix) bool { return p.Addr() == a })
	}
	for _, old := range s.addrs {
		if slices.Contains(want, old) {
			continue
		}
		// An address that stays with another prefix stays on the NIC
		// (where IPv4 is a /32 anyway), and so do its connections.
		if !sameAddr(want, old.Addr()) {
			s.abortConnsFrom(old.Addr())
			if err := s.gs.RemoveAddress(nicID, tcpip.AddrFromSlice(old.Addr().AsSlice())); err != nil {
				return fmt.Errorf("stack: remove %v: %s", old, err)
			}
		}
		s.events.push(Event{Kind: EventAddressRemoved, Prefix: old})
	}
	for _, p := range want {
		if slices.Contains(s.addrs, p) {
			continue
		}
		if !sameAddr(s.addrs, p.Addr()) {
			pa := tcpip.ProtocolAddress{Protocol: protoOf(p.Addr()), AddressWithPrefix: tcpip.AddressWithPrefix{
				Address: tcpip.AddrFromSlice(p.Addr().AsSlice()), PrefixLen: nicPrefixLen(p)}}
			if err := s.gs.AddProtocolAddress(nicID, pa, gstack.AddressProperties{}); err != nil {
				return fmt.Errorf("stack: add %v: %s", p, err)
			}
		}
		s.events.push(Event{Kind: EventAddressAdded, Prefix: p})
	}
	s.addrs = want
	s.applyDeprecationLocked(dep)
	return nil
}

// nicPrefixLen is the prefix length an address gets on the NIC. The link
// is point to point, so an IPv4 address is added as a /32: with the
// session's prefix gVisor would treat an address that is its subnet's
// broadcast address (10.9.8.7/30, which carriers do hand out) as a
// broadcast destination, and TCP drops every segment sent to it, so
// dials time out. Routes come from Config.Routes, not from the prefix;
// Addresses still reports the session's prefix.
func nicPrefixLen(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 32
	}
	return p.Bits()
}

// withLinkLocal returns prefixes, deduplicated, plus fe80::IID/64 for the
// interface identifier of the first IPv6 address that has one.
func withLinkLocal(prefixes []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	ll := false
	for _, p := range prefixes {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits())
		if p.Addr().Is4In6() || !p.IsValid() || slices.Contains(out, p) {
			continue
		}
		if p.Addr().IsLinkLocalUnicast() {
			ll = true
		}
		out = append(out, p)
	}
	if ll {
		return out
	}
	for _, p := range out {
		a := p.Addr()
		if !a.Is6() {
			continue
		}
		b := a.As16()
		if [8]byte(b[8:]) == ([8]byte{}) {
			continue
		}
		copy(b[:8], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0})
		return append(out, netip.PrefixFrom(netip.AddrFrom16(b), 64))
	}
	return out
}

// setRoutes sets the routes, all over the modem, except IPv4 routes while
// the CLAT runs: those go to its NIC.
func (s *Stack) setRoutes(routes []netip.Prefix) {
	var rt []tcpip.Route
	clat := s.tap.clat.Load() != nil
	for _, r := range routes {
		r = r.Masked()
		sub, err := tcpip.NewSubnet(tcpip.AddrFromSlice(r.Addr().AsSlice()), tcpip.MaskFromBytes(netMask(r)))
		if err != nil {
			continue
		}
		nic := nicID
		if clat && r.Addr().Is4() {
			nic = clatNIC
		}
		rt = append(rt, tcpip.Route{Destination: sub, NIC: nic})
	}
	s.gs.SetRouteTable(rt)
}

func netMask(p netip.Prefix) []byte {
	n := p.Addr().BitLen() / 8
	m := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// SetLinkUp enables or disables the interface (bearer up or down): while
// down, nothing is sent or received and dials fail with ENETUNREACH.
func (s *Stack) SetLinkUp(up bool) { s.setLinkUp(up, true) }

// setLinkUp is SetLinkUp; send says what to do with what the link held
// while the bearer was down (bearerDown): send it (the addresses are the
// same) or drop it.
func (s *Stack) setLinkUp(up, send bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if s.bridging {
		// Down, NIC enabled: up sends what the link held, down for
		// good drops it.
		s.endBridgeLocked()
		s.holder.ResumeTX(up && send)
		if !up {
			s.gs.DisableNIC(nicID)
			s.mu.Unlock()
			return
		}
		s.linkUp = true
		start := s.bridgeStart
		s.mu.Unlock()
		if send {
			s.sendTailProbes(start)
		}
		s.events.push(Event{Kind: EventLinkUp})
		return
	}
	if s.linkUp == up {
		s.mu.Unlock()
		return
	}
	s.linkUp = up
	if up {
		s.gs.EnableNIC(nicID)
	} else {
		s.gs.DisableNIC(nicID)
	}
	s.mu.Unlock()
	k := EventLinkDown
	if up {
		k = EventLinkUp
	}
	s.events.push(Event{Kind: k})
}

// txHolder is a link endpoint that can hold UL frames while the bearer is
// down (link.Endpoint).
type txHolder interface {
	PauseTX()
	ResumeTX(send bool)
}

// bridgeTime is how long the stack bridges a lost bearer (bearerDown)
// before it takes the interface down for good. A modem reset or a
// network reattach gives the session back within it; past it the outage
// is a real one.
var bridgeTime = 5 * time.Second

// bearerDown is the data session lost with its addresses kept (Open's
// follower): the link is down (LinkUp false, EventLinkDown, dials fail
// with ENETUNREACH), but for up to bridgeTime the NIC stays enabled and
// the link holds what TCP sends (link.Endpoint.PauseTX), and packets
// still arriving are received. A session that comes back with the same
// addresses then loses nothing: a SYS_ERR resets the modem's control
// function and so the session, and with the NIC disabled meanwhile
// gVisor dropped the ACKs and data TCP sent and the segments that
// arrived, which cost each sender a retransmission timeout
// (docs/RELIABILITY.md, "What remains"). Without a holding link, or
// after bridgeTime, it is SetLinkUp(false).
func (s *Stack) bearerDown() {
	s.mu.Lock()
	if s.bridging {
		s.mu.Unlock()
		return
	}
	if s.closed || !s.linkUp || s.holder == nil {
		s.mu.Unlock()
		s.SetLinkUp(false)
		return
	}
	s.linkUp = false
	s.bridging = true
	s.bridgeStart = time.Now()
	s.bridgeGen++
	gen := s.bridgeGen
	s.holder.PauseTX()
	s.bridge = time.AfterFunc(bridgeTime, func() { s.bridgeExpired(gen) })
	s.mu.Unlock()
	s.counters.bridges.Add(1)
	s.events.push(Event{Kind: EventLinkDown})
}

// bridgeExpired takes the interface down for good when the bearer has
// not come back within bridgeTime.
func (s *Stack) bridgeExpired(gen uint64) {
	s.mu.Lock()
	if !s.bridging || s.bridgeGen != gen || s.closed {
		s.mu.Unlock()
		return
	}
	s.endBridgeLocked()
	s.holder.ResumeTX(false)
	s.gs.DisableNIC(nicID)
	s.mu.Unlock()
	s.counters.bridgeExpiries.Add(1)
}

// endBridgeLocked ends bridging (its timer too); the caller decides what
// happens to what the link held.
func (s *Stack) endBridgeLocked() {
	if !s.bridging {
		return
	}
	s.bridging = false
	if s.bridge != nil {
		s.bridge.Stop()
		s.bridge = nil
	}
}

// LinkUp reports whether the interface is up.
func (s *Stack) LinkUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.linkUp
}

// SetMTU sets the link MTU; it applies to connections made afterwards
// (TCP fixes its MSS at connect time).
func (s *Stack) SetMTU(mtu uint32) {
	if mtu == 0 {
		return
	}
	s.mu.Lock()
	s.ra.mtu = mtu
	s.mu.Unlock()
	if s.tap.MTU() == mtu {
		return
	}
	s.applyMTU(mtu)
}

// applyMTU sets the NIC's MTU (and the CLAT's) and reports it.
func (s *Stack) applyMTU(mtu uint32) {
	s.gs.SetNICMTU(nicID, mtu)
	// The link caps it at what its TX buffers carry.
	mtu = s.tap.MTU()
	s.mu.Lock()
	if s.clatLink != nil {
		s.gs.SetNICMTU(clatNIC, s.clatMTU(mtu))
	}
	s.mu.Unlock()
	s.events.push(Event{Kind: EventMTUChanged, MTU: mtu})
}

// MTU returns the link MTU.
func (s *Stack) MTU() uint32 { return s.tap.MTU() }

func protoOf(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is4() || a.Is4In6() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}
