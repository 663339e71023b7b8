package stack

import (
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// Config is the stack's configuration. The zero value is usable: no
// addresses yet (set them with SetAddresses, as Open does when the data
// session comes up), default routes over the link, the tuning of
// TCPOptions' zero value and the limits of Limits' zero value.
type Config struct {
	// Addresses of the interface: IPv4 (usually a /32 or the carrier's
	// prefix) and IPv6. For IPv6 the link-local address is derived from
	// the interface identifier of the first global address (3GPP bearers
	// assign one, RFC 6459 §5.2), since gVisor's own generation needs a
	// link address a raw-IP link does not have.
	Addresses []netip.Prefix
	// Routes default to 0.0.0.0/0 and ::/0 over the link (a cellular
	// bearer is point to point: no gateway is needed to reach it).
	Routes []netip.Prefix
	// DNSServers are used by Resolver, LookupHost, LookupNetIP and the
	// Dial functions for names. Names are never resolved by the host.
	DNSServers []netip.Addr
	// MTU overrides the link's MTU (0: the link's). It applies to
	// connections made after it is set.
	MTU uint32

	TCP    TCPOptions
	Limits Limits

	// CLAT says when the stack runs its CLAT, the host side of 464XLAT
	// (RFC 6877): on a session with IPv6 only (CLATAuto, the default),
	// also on a dual-stack one (CLATForce), or never (CLATOff). The CLAT
	// gives the stack the IPv4 address CLATAddr4 and the IPv4 routes,
	// and translates IPv4 to IPv6 for the network's NAT64 (docs/STACK.md,
	// "464XLAT"). It follows the data session of Open; a stack made
	// with New has none.
	CLAT CLATMode
	// NAT64Prefix is the NAT64 prefix the CLAT uses (zero: discovered
	// as RFC 7050 says, from the AAAA records of ipv4only.arpa).
	NAT64Prefix netip.Prefix

	// TXQueueLen is the length, in packets, of the transmit queue in
	// front of the link (gVisor's fifo queueing discipline; Linux's
	// txqueuelen and qdisc): the stack's goroutines queue their packets
	// and return, and one goroutine hands them to the link in batches,
	// waiting for the modem's UL ring itself. A packet that finds the
	// queue full is dropped (TCP retransmits it) and counted in
	// Stats.TXDroppedNoBufferSpace. Default 10000 (docs/STACK.md,
	// "Transmit queue": Linux's 1000 relies on TCP Small Queues, which
	// gVisor lacks); a negative value removes the queue, and every sender
	// then writes to the link directly and may wait there for ring space
	// (up to the link's TXTimeout), holding up the TCP goroutines it
	// shares with other connections.
	TXQueueLen int
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

// TCPOptions tune gVisor's TCP (docs/STACK.md, Tuning). Zero fields take the
// defaults given.
type TCPOptions struct {
	// SendBuffer and ReceiveBuffer are the buffer ranges (defaults
	// 4 KiB / 1 MiB / 32 MiB each). Both grow with the connection (gVisor
	// tunes the send buffer to twice the congestion window and, with
	// moderation, the receive buffer to twice what the application read
	// in a round trip), so the maxima bound only what a fast path may
	// take. gVisor advertises half of the free receive buffer as the
	// window (like Linux's tcp_adv_win_scale 1), so a path's
	// bandwidth-delay product needs a ReceiveBuffer.Max of twice it and a
	// SendBuffer.Max of once it: 32 MiB covers 16 MiB, e.g. 5G mmWave to
	// a distant server, 1686 Mbit/s × 48 ms = 10 MB (link/radio's
	// nr-mmwave-far; docs/RADIO.md). Tailscale's 8 MiB / 6 MiB cap the
	// window at 4 MiB: 3.3 MB in flight, a third of that path.
	SendBuffer, ReceiveBuffer BufferRange
	// NoSACK turns selective acknowledgements off (on by default).
	NoSACK bool
	// NoModerateReceiveBuffer turns receive-buffer auto-tuning off (on
	// by default: it grows the window towards ReceiveBuffer.Max).
	NoModerateReceiveBuffer bool
	// CongestionControl is "cubic" (default) or "reno".
	CongestionControl string
	// RACK turns RACK-TLP loss detection on (RFC 8985; gVisor's default).
	// It is off by default: over a modem that moderates its interrupts
	// (1 ms on the emulated SDX55, as on real ones) ACKs arrive in bursts
	// and RACK entered spurious SACK recoveries that cut ssthresh to a
	// few segments; with the classic duplicate-ACK threshold the same
	// transfers saw no retransmission at all (docs/STACK.md, Measured).
	// Tailscale turns it off for spurious retransmits too. And after a
	// SYS_ERR loses the tail of a write (nothing left to send behind it)
	// gVisor's RACK leaves the sender waiting for its retransmission
	// timer after the first segment it resends, where RFC 6675 recovery
	// repairs it all (docs/RELIABILITY.md, "RACK and the SYS_ERR tail";
	// TestTailProbesStartSACKRecoveryOfALostTailWithoutATimeout's case
	// tail/RACKOn). On lossy radio links it helps: uploads over
	// link/radio's presets took more RTOs without it, on retransmissions
	// lost unnoticed (docs/PERFORMANCE.md, "Radio presets").
	RACK bool
	// NoTailProbe turns off the probes sent when the data session comes
	// back after an outage the stack bridged (a SYS_ERR): each flow that
	// sent data shortly before or during it gets one-byte copies of the
	// last bytes of its newest segments, so that a sender whose ACKs
	// were lost in the modem hears them again at once instead of after
	// a retransmission timeout (docs/STACK.md, "Tail probes"). For
	// comparison only.
	NoTailProbe bool
	// Delay enables Nagle's algorithm on new connections (off by
	// default, like Go's net package).
	Delay bool
	// KeepAlive is applied to every new connection (net.KeepAliveConfig
	// semantics; the zero value enables keepalive with 15 s idle and
	// interval and 9 probes, Go's defaults; Enable false with Idle -1
	// disables it).
	KeepAlive net.KeepAliveConfig
	// TimeWait shortens TIME-WAIT (default gVisor's 60 s).
	TimeWait time.Duration
}

// DefaultTXQueueLen is Config.TXQueueLen's default: ten packets for each
// of 1,000 busy connections.
const DefaultTXQueueLen = 10000

// DefaultTCPBufferMax is the default maximum of TCPOptions.SendBuffer and
// ReceiveBuffer: a window of 16 MiB (TCPOptions).
const DefaultTCPBufferMax = 32 << 20

// BufferRange is a TCP buffer size range in bytes.
type BufferRange struct{ Min, Default, Max int }

// Limits bound what the stack holds. Zero fields take the defaults.
type Limits struct {
	// MaxTCPConns bounds open TCP connections, dialed and accepted
	// (default 8192). A dial beyond it fails with ErrTooManyConns; an
	// accepted connection beyond it is reset.
	MaxTCPConns int
	// MaxInFlightDials bounds TCP handshakes in progress (default 256).
	// A dial beyond it fails at once with ErrTooManyDials.
	MaxInFlightDials int
	// MaxPendingAccept is a listener's backlog (default 1024).
	MaxPendingAccept int
}

func (c *Config) setDefaults() {
	def := func(r *BufferRange, d BufferRange) {
		if r.Min <= 0 {
			r.Min = d.Min
		}
		if r.Default <= 0 {
			r.Default = d.Default
		}
		if r.Max <= 0 {
			r.Max = d.Max
		}
	}
	def(&c.TCP.SendBuffer, BufferRange{4 << 10, 1 << 20, DefaultTCPBufferMax})
	def(&c.TCP.ReceiveBuffer, BufferRange{4 << 10, 1 << 20, DefaultTCPBufferMax})
	if c.TCP.CongestionControl == "" {
		c.TCP.CongestionControl = "cubic"
	}
	ka := &c.TCP.KeepAlive
	if !ka.Enable && ka.Idle == 0 && ka.Interval == 0 && ka.Count == 0 {
		ka.Enable = true
	}
	if ka.Idle == 0 {
		ka.Idle = 15 * time.Second
	}
	if ka.Interval == 0 {
		ka.Interval = 15 * time.Second
	}
	if ka.Count == 0 {
		ka.Count = 9
	}
	if c.Limits.MaxTCPConns <= 0 {
		c.Limits.MaxTCPConns = 8192
	}
	if c.Limits.MaxInFlightDials <= 0 {
		c.Limits.MaxInFlightDials = 256
	}
	if c.Limits.MaxPendingAccept <= 0 {
		c.Limits.MaxPendingAccept = 1024
	}
	if c.TXQueueLen == 0 {
		c.TXQueueLen = DefaultTXQueueLen
	}
	if len(c.Routes) == 0 {
		c.Routes = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}
