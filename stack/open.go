package stack

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vfio"
	"github.com/mhistack/mhistack/mhi/pci/vfiouserclient"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Options configure Open.
type Options struct {
	// Device is "sim" (the default: the emulated modem, with its MBIM
	// and QMI functions and the carrier network behind them), the PCI
	// address of a modem bound to vfio-pci ("0000:01:00.0"), or
	// "vfio-user:" and the UNIX socket of a vfio-user server such as
	// mhictl sim serve ("vfio-user:/run/modem.sock";
	// mhi/pci/vfiouserclient, docs/VFIO.md).
	Device string
	// Profile names the modem profile (mhi.Lookup). For "sim" it is the
	// modem to emulate (default "qcom-sdx55m"); for a PCI device the
	// default is the profile matching its PCI IDs.
	Profile string
	// Control is the control protocol of the data session: "mbim",
	// "qmi", or "" to pick MBIM when the profile has an MBIM channel
	// pair and QMI otherwise (the Telit FN980 v1 has only QMI). A QMI
	// session carries its data as QMAP on the data pair (MAPv5 if the
	// modem agreed to it in WDA Set Data Format, else MAPv1), with the
	// UL aggregation limits the modem answered, on mux ID Link.Session
	// (default 1). With Link.Channel it is decided by
	// mhi.Profile.DataPath (docs/STACK.md, "The data path").
	Control string

	// APN, credentials, authentication, IP type and SIM PIN of the
	// data session (mbim.SessionConfig).
	APN, User, Password string
	Auth                mbim.AuthProtocol
	IPType              mbim.IPType
	PIN                 string
	// PUK, when the SIM asks for its PUK (its PIN tries used up), is
	// entered once with PIN as the new PIN. It is never sent unless
	// set; a PIN or PUK the SIM refused is never sent again by this
	// modem's sessions (PINError says how many tries are left).
	PUK string

	// FCCUnlock runs the modem's FCC unlock (mhi.Profile.FCCLock) when
	// the modem refuses to turn its radio on, as ModemManager's
	// fcc-unlock.d scripts do. Off by default: whether to lift the lock
	// is the user's legal choice. Without it a locked modem fails Open
	// with ErrFCCLocked (docs/GETTING-ONLINE.md, "FCC lock").
	FCCUnlock bool

	// AllowRoaming lets data sessions come up, and stay up, while the
	// modem is registered on a visited network. Off by default, as
	// ModemManager's allow-roaming: roaming data can be costly, so a
	// session on a roaming modem fails Open with ErrRoaming, and one
	// already up is dropped when the modem starts roaming (and retried,
	// failing, until it is home again).
	AllowRoaming bool

	// RetryInterval is the data session's first pause after a failed
	// attempt (0: 5 s); each further failure doubles it, up to a minute,
	// less up to a quarter by jitter (docs/STACK.md, "A network that
	// refuses the data session"). A lost connection is retried at once.
	RetryInterval time.Duration

	// Config configures the stack; Open fills in the addresses, DNS
	// servers and MTU the session reports.
	Config Config
	// Link tunes the link endpoint. Link.Channel forces the data channel
	// pair, which the profile must have and whose framing must be known
	// ("": mhi.Profile.DataPath's choice, IP_HW0 if the profile has it,
	// else IP_HW0_MBIM, else IP_SW0). Link.Framing, if set, replaces the
	// framing the data path decides: raw IP on IP_HW0 and IP_SW0, MBIM
	// NTBs (mbim.NTB{}) on IP_HW0_MBIM, where the emulated carrier
	// network also speaks NTBs with DL aggregation, QMAP under QMI.
	Link link.Options
	// Sim tunes the emulated modem (Device "sim" only).
	Sim SimOptions
	// OnCrashDump receives the RAM dump of a modem whose firmware
	// crashed into RDDM (mhi.Options.OnCrashDump; docs/RELIABILITY.md
	// "Crash dumps"). The DMA arena has room for Profile.CrashDumpSize.
	OnCrashDump func(mhi.CrashDump)
	// CrashLoopLimit is mhi.Options.CrashLoopLimit: the firmware crash
	// within a minute at which SYS_ERR recovery stops, a crash loop
	// (docs/RELIABILITY.md, "Crash loop"; 0: 5; negative: no bound).
	CrashLoopLimit int
	// DMASize overrides the size of the VFIO or vfio-user DMA arena (0:
	// computed from the profile and Link, see DMASize). With VFIO it is
	// pinned memory and counts against RLIMIT_MEMLOCK (docs/VFIO.md).
	DMASize int
	// Logger receives diagnostics (nil: Config.Logger).
	Logger *slog.Logger

	// simCarrier is the emulated carrier network openDevice started
	// (Device "sim"), for tests that read what it saw.
	simCarrier *simnet.CarrierNetwork
}

// SimOptions configure the emulated modem Open builds.
type SimOptions struct {
	// Modem options (functions on the MBIM and data pairs are set by
	// Open).
	Modem sim.Options
	// NetworkConfig configures the emulated network (SIM, radio,
	// registration, APNs and their addresses) that the modem's MBIM and
	// QMI functions share; its Carrier and APNs are also the carrier
	// network's.
	NetworkConfig simnet.NetworkConfig
	// Network, if set, is the network Open's functions share instead of
	// one built from NetworkConfig (whose Carrier and APNs still
	// configure the carrier network). A test keeps it to play the
	// network: SetCarrier changes the session's addresses, NetworkDetach
	// and NetworkLost drop the connection, Configure and Reregister bring
	// it back.
	Network *simnet.Network
	// Carrier configures the carrier network (its Carrier field is
	// taken from NetworkConfig). Carrier.Radio puts a radio link model
	// (link/radio: a preset such as radio.Preset("lte"), or a file,
	// radio.Load) between the modem and the network, both ways; nil
	// (the default) passes packets at once (docs/RADIO.md).
	Carrier simnet.CarrierOptions
	// MBIM configures the emulated MBIM function (on profiles with an
	// MBIM pair) and QMI the emulated QMI function (on profiles with a
	// QMI pair); their Network is always the one above.
	MBIM simnet.MBIMConfig
	QMI  simnet.QMIConfig
	// DMAWindow is the size of the emulated device's IOVA window. 0
	// gives it the DMA arena a VFIO device would get for the same
	// profile and options (Options.DMASize, or DMASize), so the emulated
	// pipeline runs in the memory hardware gets; negative: the whole
	// 4 GiB.
	DMAWindow int
}

// DMASize returns the DMA arena Open maps for a modem with profile p and
// link options lo (Options.Link with its Channel and Framing set): what
// the MHI engine with its MBIM control port allocates (mhi.DMASize, an RDDM
// crash dump of the profile's size included) plus the
// link's RX and TX pools (link.DMASize, at lo.MTU or at least
// link.DefaultMTU: the session's MTU is not known yet), with the arena's
// headroom (vfio.ArenaSize). A network that reports an MTU well above
// the one sized for needs Options.Link.MTU set, or Options.DMASize.
func DMASize(p *mhi.Profile, lo link.Options) (int, error) {
	lo.MTU = max(lo.MTU, link.DefaultMTU)
	pools, err := link.DMASize(p, lo)
	if err != nil {
		return 0, fmt.Errorf("stack: DMA size: %w", err)
	}
	return vfio.ArenaSize(mhi.DMASize(p, mhi.DMAUse{CrashDump: p.CrashDumpSize()}) + pools), nil
}

// Open brings the whole pipeline up and returns a stack on it: the
// device, the MHI controller powered up to mission mode, the data
// session (MBIM: SIM → radio → registration → attach → CONNECT →
// IP_CONFIGURATION; or QMI), the link endpoint on the data channel, and
// a stack configured with the session's addresses, DNS servers and MTU.
// ctx bounds the bring-up only. A network that refuses the session for
// now (TransientCause) is waited for: the session tries again after its
// back-off (RetryInterval) until ctx ends; a refusal for good fails at
// once (ErrActivationRefused). It is OpenModem and one OpenSession;
// closing the stack closes the modem too.
//
// The stack then follows the session: a lost connection takes the link
// down (EventLinkDown), a re-connection brings it up again with the
// addresses the network gives this time, and address changes are
// applied as they are reported. Close tears everything down.
func Open(ctx context.Context, opts Options) (*Stack, error) {
	m, err := OpenModem(ctx, opts)
	if err != nil {
		return nil, err
	}
	s, err := m.OpenSession(ctx, SessionOptions{
		APN: opts.APN, User: opts.User, Password: opts.Password, Auth: opts.Auth, IPType: opts.IPType,
		ID: int(opts.Link.Session), Config: opts.Config,
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	// The modem goes with its only stack, last (closers run last
	// first).
	s.closers = append([]func() error{m.closeModem}, s.closers...)
	return s, nil
}

// Controller returns the MHI controller Open powered up (nil for a
// stack made with New), for its Stats, Profile and channels. Its
// lifetime is the stack's: do not close it.
func (s *Stack) Controller() *mhi.Controller { return s.ctrl }

// MBIM returns the MBIM client Open's data session runs on (nil for a
// stack made with New, or whose session runs on QMI), e.g. for
// mbim.ListenProxy so mbimcli -p and ModemManager share the modem. Its
// lifetime is the stack's: do not close it.
func (s *Stack) MBIM() *mbim.Client { return s.mbim }

// QMI returns the QMI client Open's data session runs on (nil for a
// stack made with New, or whose session runs on MBIM), e.g. to allocate
// a NAS client and ask for the serving system. Its lifetime is the
// stack's: do not close it.
func (s *Stack) QMI() *qmi.Client { return s.qmi }

// dataPath is the data path Open runs on p: mhi.Profile.DataPath with
// Options.Link.Channel and Options.Control forced where set. A profile
// with neither an MBIM nor a QMI pair has none (no session can run).
func dataPath(p *mhi.Profile, opts *Options) (mhi.DataPath, error) {
	dp, err := p.DataPath(opts.Link.Channel, opts.Control)
	if err != nil {
		return mhi.DataPath{}, fmt.Errorf("stack: %w", err)
	}
	if dp.Control == "" {
		return mhi.DataPath{}, fmt.Errorf("stack: %w: profile %s has neither an MBIM nor a QMI channel pair", mhi.ErrNoDataPath, p.Name)
	}
	return dp, nil
}

// linkOptions returns lo (Options.Link) on the data path dp: its data
// pair and, unless lo sets one, its framing (link.FramingFor), except
// QMAP, whose version and limits the QMI session's WDA answer decides
// (OpenSession).
func linkOptions(lo link.Options, dp mhi.DataPath) (link.Options, error) {
	lo.Channel = dp.Channel
	if lo.Framing == nil && dp.Framing != mhi.FramingQMAP {
		f, err := link.FramingFor(dp)
		if err != nil {
			return lo, fmt.Errorf("stack: %w", err)
		}
		lo.Framing = f
	}
	return lo, nil
}

// maxULAggBytes caps the UL aggregate size a modem grants in WDA Set Data
// Format (Quectel grants 8192, docs/FRAMING.md §0): the link endpoint's TX
// buffers take that size, and the DMA arena is sized before the answer
// comes.
const maxULAggBytes = 16384

// dmaSize is the arena for p: Options.DMASize or DMASize.
func dmaSize(opts *Options, p *mhi.Profile) (int, error) {
	if opts.DMASize > 0 {
		return opts.DMASize, nil
	}
	dp, err := dataPath(p, opts)
	if err != nil {
		return 0, err
	}
	lo, err := linkOptions(opts.Link, dp)
	if err != nil {
		return 0, err
	}
	if lo.Framing == nil {
		// QMAP: sized for the largest framing WDA may agree to.
		lo.Framing = qmap.Framing{Version: 5, MaxDatagrams: 2, MaxBytes: maxULAggBytes}
	}
	return DMASize(p, lo)
}

// qmiAuth maps the MBIM authentication protocol of Options to WDS's
// preference bits.
func qmiAuth(a mbim.AuthProtocol) qmi.Auth {
	switch a {
	case mbim.AuthPAP:
		return qmi.AuthPAP
	case mbim.AuthCHAP, mbim.AuthMSCHAPv2:
		return qmi.AuthCHAP
	}
	return 0
}

// qmiFamilies maps the MBIM IP type of Options to the WDS calls to start.
func qmiFamilies(t mbim.IPType) []qmi.IPFamily {
	switch t {
	case mbim.IPTypeIPv4:
		return []qmi.IPFamily{qmi.IPv4}
	case mbim.IPTypeIPv6:
		return []qmi.IPFamily{qmi.IPv6}
	}
	return []qmi.IPFamily{qmi.IPv4, qmi.IPv6}
}

// fromQMI gives a QMI session's configuration the MBIM shape the stack
// follows (the fields are the same).
func fromQMI(ip qmi.IPConfig) mbim.IPConfig {
	return mbim.IPConfig{IPv4: ip.IPv4, IPv6: ip.IPv6, IPv4Gateway: ip.IPv4Gateway, IPv6Gateway: ip.IPv6Gateway,
		IPv4DNS: ip.IPv4DNS, IPv6DNS: ip.IPv6DNS, IPv4MTU: ip.IPv4MTU, IPv6MTU: ip.IPv6MTU}
}

// openDevice returns the PCI device, its profile, the data path on it
// (dataPath; opts.Control and opts.Link.Channel are set to its control
// and pair) and what closes the device.
func openDevice(opts *Options) (_ pci.Device, _ *mhi.Profile, _ mhi.DataPath, fcc mhi.FCCUnlock, _ []func() error, _ error) {
	if opts.Device == "" || opts.Device == "sim" {
		name := opts.Profile
		if name == "" {
			name = "qcom-sdx55m"
		}
		p, ok := mhi.Lookup(name)
		if !ok {
			return nil, nil, mhi.DataPath{}, "", nil, fmt.Errorf("stack: no modem profile %q", name)
		}
		dp, err := dataPath(p, opts)
		if err != nil {
			return nil, nil, mhi.DataPath{}, "", nil, err
		}
		opts.Control, opts.Link.Channel = dp.Control, dp.Channel
		mc := opts.Sim.NetworkConfig
		if mc.APN == "" && mc.APNs == nil {
			// The network serves "internet" (the default, also for
			// an empty APN), "ims" and "corp.mhistack", each with
			// its own address pool, and refuses other names.
			mc.APN, mc.APNs = "internet", simnet.DefaultAPNs()[1:]
		}
		// The emulated modem presents the profile's first ID
		// (sim.Options.IDIndex) and is FCC-locked as that ID ships.
		fcc = p.EmulatedFCCUnlock(opts.Sim.Modem.IDIndex)
		if mc.FCCLock == mhi.FCCUnlockNone {
			mc.FCCLock = fcc
		}
		nw := opts.Sim.Network
		if nw == nil {
			nw = simnet.NewNetwork(mc)
		}
		mbc := opts.Sim.MBIM
		mbc.Network = nw
		fn := simnet.NewMBIMFunction(mbc)
		co := opts.Sim.Carrier
		if co.NTBQuirks == (simnet.NTBQuirks{}) && !opts.Sim.Modem.NoProfileQuirks {
			co.NTBQuirks = simnet.ProfileNTBQuirks(p)
		}
		if mc.Carrier.IPv4.IsValid() || mc.Carrier.IPv6.IsValid() {
			co.Carrier = mc.Carrier
		}
		if co.APNs == nil {
			co.APNs = mc.APNs
		}
		if co.Network == nil {
			// The data pair carries the network's sessions: it sends
			// their Router Advertisements.
			co.Network = nw
		}
		qc := opts.Sim.QMI
		qc.Network = nw
		if qc.Logger == nil {
			qc.Logger = opts.Logger
		}
		qfn := simnet.NewQMIFunction(qc)
		switch {
		case co.Framing != nil:
		case dp.Framing == mhi.FramingQMAP:
			// The host's QMI session asks WDA for QMAPv5; the modem
			// answers v5 unless it only knows v1. The UL limits the
			// modem grants in WDA Set Data Format are what its strict
			// mode holds the host to.
			ul := qmap.Framing{Version: 5, MaxDatagrams: int(qc.ULMaxDatagrams), MaxBytes: int(qc.ULMaxSize)}
			if ul.MaxDatagrams == 0 {
				ul.MaxDatagrams = simnet.DefaultULDatagrams
			}
			if ul.MaxBytes == 0 {
				ul.MaxBytes = simnet.DefaultULBytes
			}
			if qc.MaxAggregation == qmi.AggregationQMAP {
				ul.Version = 1
			}
			co.Framing = ul
		default:
			// The carrier speaks what the host's link does.
			if co.Framing, err = link.FramingFor(dp); err != nil {
				return nil, nil, mhi.DataPath{}, "", nil, err
			}
		}
		cn, err := simnet.NewCarrierNetwork(co)
		if err != nil {
			return nil, nil, mhi.DataPath{}, "", nil, err
		}
		so := opts.Sim.Modem
		so.Functions = map[string]sim.Function{dp.Channel: cn}
		// Both control functions run where the profile has their pair,
		// on one simnet.Network, as on a modem.
		if _, _, ok := p.ChannelPair(mhi.ChannelMBIM); ok {
			so.Functions[mhi.ChannelMBIM] = fn
		}
		if _, _, ok := p.ChannelPair(mhi.ChannelQMI); ok {
			so.Functions[mhi.ChannelQMI] = qfn
		}
		// The AT port answers from the same network and the NMEA pair
		// streams a fix (Modem.AT; docs/GETTING-ONLINE.md, "AT and
		// GNSS ports").
		if name, ok := p.ATChannel(); ok {
			so.Functions[name] = simnet.NewATFunction(nw)
		}
		if name, ok := p.NMEAChannel(); ok {
			so.Functions[name] = simnet.NewGNSSFunction(simnet.GNSSConfig{})
		}
		var vo []vpci.Option
		switch w := opts.Sim.DMAWindow; {
		case w == 0:
			n, err := dmaSize(opts, p)
			if err != nil {
				cn.Close()
				return nil, nil, mhi.DataPath{}, "", nil, err
			}
			vo = append(vo, vpci.WithIOVAWindow(uint64(n)))
		case w > 0:
			vo = append(vo, vpci.WithIOVAWindow(uint64(w)))
		}
		dev, _, err := sim.NewDevice(p, so, vo...)
		if err != nil {
			cn.Close()
			return nil, nil, mhi.DataPath{}, "", nil, fmt.Errorf("stack: emulated %s: %w", name, err)
		}
		opts.simCarrier = cn
		return dev, p, dp, fcc, []func() error{cn.Close, dev.Close}, nil
	}
	// The arena is mapped at open, so it is sized from the profile the
	// function's IDs select, before anything is allocated from it.
	var (
		p       *mhi.Profile
		sizeErr error
	)
	sizeFor := func(info pci.Info) int {
		ok := false
		if opts.Profile != "" {
			p, ok = mhi.Lookup(opts.Profile)
		} else {
			p, ok = mhi.Match(info.Vendor, info.Device, info.SubVendor, info.SubDev)
		}
		if !ok {
			p = nil
			return 0
		}
		fcc = p.FCCUnlockFor(info.Vendor, info.Device, info.SubVendor, info.SubDev)
		var n int
		n, sizeErr = dmaSize(opts, p)
		return n
	}
	var dev pci.Device
	if path, ok := strings.CutPrefix(opts.Device, vfiouserclient.Prefix); ok {
		d, err := vfiouserclient.Open(path, &vfiouserclient.Options{DMASizeFor: sizeFor})
		if err != nil {
			return nil, nil, mhi.DataPath{}, "", nil, fmt.Errorf("stack: open %s: %w", opts.Device, err)
		}
		dev = d
	} else {
		d, err := vfio.Open(opts.Device, &vfio.Options{DMASizeFor: sizeFor})
		if err != nil {
			return nil, nil, mhi.DataPath{}, "", nil, fmt.Errorf("stack: open %s: %w", opts.Device, err)
		}
		dev = d
	}
	switch {
	case p == nil:
		dev.Close()
		return nil, nil, mhi.DataPath{}, "", nil, fmt.Errorf("stack: open %s: no modem profile (set Options.Profile)", opts.Device)
	case sizeErr != nil:
		dev.Close()
		return nil, nil, mhi.DataPath{}, "", nil, fmt.Errorf("stack: open %s: %w", opts.Device, sizeErr)
	}
	dp, err := dataPath(p, opts)
	if err != nil {
		dev.Close()
		return nil, nil, mhi.DataPath{}, "", nil, err
	}
	opts.Control, opts.Link.Channel = dp.Control, dp.Channel
	return dev, p, dp, fcc, []func() error{dev.Close}, nil
}

// mtuOf is the link MTU a session's IP configuration asks for (MBIM
// IP_CONFIGURATION's IPv4Mtu and IPv6Mtu, QMI WDS Get Runtime Settings
// TLV 0x29), 0 for none. The smaller of the two wins: one NIC carries
// both families. The modem's values are checked: one below what the
// session's families must carry (IPv4 68, RFC 791; IPv6 1280, RFC 8200
// §5: on a session with an IPv6 address, both values must reach it) or
// above the largest IP packet is ignored, as Linux refuses such an MTU
// on an interface with IPv6.
func mtuOf(ip mbim.IPConfig) uint32 {
	const maxIPPacket = 65535 // IPv4 Total Length, RFC 791 §3.1
	least := uint32(header.IPv4MinimumMTU)
	if len(ip.IPv6) > 0 {
		least = header.IPv6MinimumMTU
	}
	var m uint32
	for _, v := range []uint32{ip.IPv4MTU, ip.IPv6MTU} {
		if v >= least && v <= maxIPPacket && (m == 0 || v < m) {
			m = v
		}
	}
	return m
}

// follower applies the session's reports to the stack. The session calls
// it on its goroutine; reports before the stack exists are kept for it.
type follower struct {
	mu   sync.Mutex
	s    *Stack
	last *mbim.IPConfig
	// solicited are the IPv6 addresses of the session the stack last
	// sent a Router Solicitation for.
	solicited []netip.Addr
}

func (f *follower) attach(s *Stack) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s = s
	if f.last != nil {
		f.apply(*f.last)
	}
}

func (f *follower) progress(p mbim.Progress) { f.event(p.State.String(), p.Err) }

// event reports a step of the data session (MBIM or QMI).
func (f *follower) event(state string, err error) {
	f.mu.Lock()
	s := f.s
	f.mu.Unlock()
	if s != nil {
		s.events.push(Event{Kind: EventSession, Session: state, Err: err})
	}
}

func (f *follower) address(ip mbim.IPConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = &ip
	if f.s != nil {
		f.apply(ip)
	}
}

// apply runs with f.mu held. A lost session takes the link down but keeps
// the addresses: if the network gives them back, connections survive a
// short outage, as they do on a kernel interface, and what TCP sent
// meanwhile was held by the link and goes out then (Stack.bearerDown).
func (f *follower) apply(ip mbim.IPConfig) {
	s := f.s
	if ip.IsZero() {
		s.bearerDown()
		return
	}
	before := s.Addresses()
	if err := s.SetAddresses(append(append([]netip.Prefix(nil), ip.IPv4...), ip.IPv6...)); err != nil {
		s.log.Warn("stack: session addresses not applied", "err", err)
	}
	s.SetDNSServers(append(append([]netip.Addr(nil), ip.IPv4DNS...), ip.IPv6DNS...))
	s.SetMTU(mtuOf(ip))
	s.followCLAT(s.Addresses())
	// Held packets from addresses the session no longer has would only
	// be dropped by the network.
	s.setLinkUp(true, slices.Equal(before, s.Addresses()))
	if v6 := globals6(withLinkLocal(ip.IPv6)); len(v6) > 0 && !slices.Equal(v6, f.solicited) {
		// A new IPv6 session: ask the network for its advertisement
		// (docs/STACK.md), which may have gone out before the link
		// was ready for it.
		f.solicited = v6
		s.solicitRouter()
	}
}
