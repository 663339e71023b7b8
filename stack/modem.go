package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/internal/simlock"
	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Modem is an opened modem: the device, the MHI controller in mission
// mode and the control client (MBIM or QMI). Each data session on it is a
// Stack of its own (OpenSession), with its own addresses, DNS servers,
// routes and counters; the sessions share the data channel pair, told
// apart by MBIM session ID (IPS<n> NDPs in the NTBs) or QMAP mux ID
// (docs/FRAMING.md §3.2, §4.1). Closing one session's Stack leaves the
// others running; Close closes them all. All methods may be called from
// any goroutine.
type Modem struct {
	opts    Options // as OpenModem normalized them
	profile *mhi.Profile
	path    mhi.DataPath    // the control, data pair and framing kind sessions use
	fcc     mhi.FCCUnlock   // the unlock the modem's PCI IDs ship needing
	refused simlock.Refused // SIM codes refused: no session sends them again
	ctrl    *mhi.Controller
	mbim    *mbim.Client
	qmi     *qmi.Client
	log     *slog.Logger
	closers []func() error // device, controller, control client

	ctx    context.Context // cancelled by Close: fails an OpenSession under way
	cancel context.CancelFunc

	// openMu serializes OpenSession (the link endpoint is made by the
	// first) and lets Close wait for one under way.
	openMu sync.Mutex
	ep     *link.Endpoint // the data pair, made by the first session; openMu

	mu       sync.Mutex
	closed   bool
	own      *ownEP // the stack of ep's own session, nil if none runs
	sessions map[uint8]*Stack

	at   atPort  // Modem.AT
	gnss []*GNSS // Modem.GNSS streams open; mu
}

// SessionOptions configure one data session (Modem.OpenSession).
type SessionOptions struct {
	// APN, credentials, authentication and IP type of the session
	// (mbim.SessionConfig). The SIM PIN is the modem's (Options.PIN).
	APN, User, Password string
	Auth                mbim.AuthProtocol
	IPType              mbim.IPType
	// ID is the MBIM session ID (0–255) or QMAP mux ID (1–254) the
	// session runs on; 0 takes the lowest free one (MBIM from 0, QMAP
	// from 1). On a raw-IP data pair (IP_HW0 without QMAP) only one
	// session can run.
	ID int
	// Config configures the session's stack; the addresses, DNS
	// servers and MTU the session reports are filled in.
	Config Config
}

// OpenModem brings the modem up to where data sessions can start: the
// device, the MHI controller powered up to mission mode and the control
// client of Options.Control. The session fields of opts (APN, User,
// Password, Auth, IPType, Config) are not used: each OpenSession has its
// own; Options.PIN unlocks the SIM for all of them. ctx bounds the
// bring-up only.
func OpenModem(ctx context.Context, opts Options) (_ *Modem, err error) {
	if opts.Logger == nil {
		opts.Logger = opts.Config.Logger
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Device == "" {
		opts.Device = "sim"
	}
	if err := errors.Join(checkCode("PIN", opts.PIN, 4, 8), checkCode("PUK", opts.PUK, 8, 8)); err != nil {
		return nil, err
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	dev, p, dp, fcc, cls, err := openDevice(&opts)
	if err != nil {
		return nil, err
	}
	defer func() { err = removalCause(err, dev) }()
	closers = append(closers, cls...)
	c, err := mhi.New(dev, mhi.Options{Profile: p, Logger: opts.Logger, OnCrashDump: opts.OnCrashDump, CrashLoopLimit: opts.CrashLoopLimit})
	if err != nil {
		return nil, fmt.Errorf("stack: open %s: %w", opts.Device, err)
	}
	closers = append(closers, c.Close)
	if err := c.PowerUp(ctx); err != nil {
		return nil, fmt.Errorf("stack: open %s: power up: %w", opts.Device, err)
	}
	m := &Modem{opts: opts, profile: p, path: dp, fcc: fcc, ctrl: c, log: opts.Logger, sessions: map[uint8]*Stack{}}
	if dp.Control == mhi.ControlQMI {
		m.qmi, err = qmi.DialMHI(ctx, c, qmi.Options{Logger: opts.Logger})
		if err != nil {
			return nil, fmt.Errorf("stack: open %s: QMI: %w", opts.Device, err)
		}
		closers = append(closers, m.qmi.Close)
	} else {
		m.mbim, err = mbim.DialMHI(ctx, c, mbim.Options{Logger: opts.Logger})
		if err != nil {
			return nil, fmt.Errorf("stack: open %s: MBIM: %w", opts.Device, err)
		}
		closers = append(closers, m.mbim.Close)
	}
	if err := m.fccRadioOn(ctx); err != nil {
		return nil, fmt.Errorf("stack: open %s: %w", opts.Device, err)
	}
	m.closers = closers
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// removalCause adds to an error that says the device was removed why,
// when the device knows: a vfio-user server that closed the connection or
// did not answer in time (vfiouserclient.Device.Err; the engine only sees
// registers reading all-ones).
func removalCause(err error, dev pci.Device) error {
	if err == nil || !errors.Is(err, mhi.ErrRemoved) {
		return err
	}
	d, ok := dev.(interface{ Err() error })
	if !ok {
		return err
	}
	if cause := d.Err(); cause != nil {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// Controller returns the modem's MHI controller, for its Stats, Profile
// and channels. Its lifetime is the modem's: do not close it.
func (m *Modem) Controller() *mhi.Controller { return m.ctrl }

// MBIM returns the MBIM client the sessions run on (nil when they run on
// QMI). Its lifetime is the modem's: do not close it.
func (m *Modem) MBIM() *mbim.Client { return m.mbim }

// QMI returns the QMI client the sessions run on (nil when they run on
// MBIM). Its lifetime is the modem's: do not close it.
func (m *Modem) QMI() *qmi.Client { return m.qmi }

// Profile returns the modem's profile.
func (m *Modem) Profile() *mhi.Profile { return m.profile }

// Sessions returns the stacks of the sessions running now.
func (m *Modem) Sessions() []*Stack {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Stack, 0, len(m.sessions))
	for id := 0; id < 256; id++ {
		if s := m.sessions[uint8(id)]; s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (m *Modem) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// pickID returns the session ID for want (0: the lowest free); m.mu is
// held.
func (m *Modem) pickIDLocked(want int) (uint8, error) {
	lo, hi := 0, 255
	if m.qmi != nil {
		lo, hi = 1, 254 // 0 and 0xFF are not mux IDs
	}
	if want == 0 {
		for id := lo; id <= hi; id++ {
			if m.sessions[uint8(id)] == nil {
				return uint8(id), nil
			}
		}
		return 0, fmt.Errorf("stack: every session ID is in use")
	}
	if want < lo || want > hi {
		return 0, fmt.Errorf("stack: session ID %d out of range %d–%d", want, lo, hi)
	}
	if m.sessions[uint8(want)] != nil {
		return 0, fmt.Errorf("stack: session ID %d is in use", want)
	}
	return uint8(want), nil
}

// OpenSession brings a data session up on the modem and returns a stack
// on it: the MBIM CONNECT or QMI WDS Start Network for so.APN on its
// session ID, then a stack with the addresses, DNS servers and MTU the
// network gave this session. The stack follows the session as Open's does
// (docs/STACK.md, "Following the session"); closing it disconnects the
// session and leaves the modem and its other sessions running. ctx
// bounds the bring-up only, and a refusal for now (TransientCause) is
// waited through, as in Open. After Close it fails with ErrClosed.
func (m *Modem) OpenSession(ctx context.Context, so SessionOptions) (_ *Stack, err error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(m.ctx, cancel)()
	m.openMu.Lock()
	defer m.openMu.Unlock()
	m.mu.Lock()
	closed := m.closed
	id, err := m.pickIDLocked(so.ID)
	m.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if err != nil {
		return nil, err
	}
	opts := &m.opts
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
			if m.ctx.Err() != nil {
				err = ErrClosed
			}
		}
	}()
	f := &follower{}
	lo, err := linkOptions(opts.Link, m.path)
	if err != nil {
		return nil, err
	}
	var ip mbim.IPConfig
	if m.qmi != nil {
		sess := qmi.NewSession(m.qmi, qmi.SessionConfig{
			APN: so.APN, User: so.User, Password: so.Password, Auth: qmiAuth(so.Auth),
			Families: qmiFamilies(so.IPType), PIN: opts.PIN, PUK: opts.PUK, Refused: &m.refused, MuxID: id, Logger: m.log,
			AllowRoaming: opts.AllowRoaming, RetryInterval: opts.RetryInterval,
			OnProgress: func(p qmi.Progress) { f.event(p.State.String(), p.Err) },
			OnAddress:  func(ip qmi.IPConfig) { f.address(fromQMI(ip)) },
		})
		closers = append(closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return sess.Close(ctx)
		})
		qip, err := sess.WaitConnected(ctx, transientRefusal)
		if err != nil {
			return nil, &sessionError{fmt.Errorf("stack: open %s: data session: %w", opts.Device, err)}
		}
		ip = fromQMI(qip)
		// The data path is what WDA agreed: QMAP of that version with
		// the modem's UL limits on the bound mux ID, or raw IP.
		if df := sess.DataFormat(); lo.Framing == nil && df.DLAggregation != qmi.AggregationDisabled {
			lo.Framing = qmap.Framing{Version: df.DLAggregation.QMAPVersion(),
				MaxDatagrams: int(df.ULMaxDatagrams), MaxBytes: min(int(df.ULMaxSize), maxULAggBytes)}
		}
	} else {
		sess := mbim.NewSession(m.mbim, mbim.SessionConfig{
			APN: so.APN, User: so.User, Password: so.Password, Auth: so.Auth, IPType: so.IPType, PIN: opts.PIN, PUK: opts.PUK, Refused: &m.refused,
			RadioRefused: m.fccRelocked, SessionID: uint32(id), OnProgress: f.progress, OnAddress: f.address, Logger: m.log,
			AllowRoaming: opts.AllowRoaming, RetryInterval: opts.RetryInterval,
		})
		closers = append(closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return sess.Close(ctx)
		})
		ip, err = sess.WaitConnected(ctx, transientRefusal)
		if err != nil {
			return nil, &sessionError{fmt.Errorf("stack: open %s: data session: %w", opts.Device, err)}
		}
	}
	lo.Session = id
	if lo.Logger == nil {
		lo.Logger = m.log
	}
	if mtu := mtuOf(ip); mtu != 0 && lo.MTU == 0 {
		// The link's buffers are sized for at least the default MTU: a
		// network that first gives a smaller one (IPv6's 1280) may
		// raise it later, and the NIC follows (Config.MTU is the
		// session's).
		lo.MTU = max(mtu, link.DefaultMTU)
	}
	ep, err := m.endpointFor(ctx, id, lo)
	if err != nil {
		return nil, fmt.Errorf("stack: open %s: %w", opts.Device, err)
	}
	cfg := so.Config
	cfg.Addresses = append(append([]netip.Prefix(nil), ip.IPv4...), ip.IPv6...)
	cfg.DNSServers = append(append([]netip.Addr(nil), ip.IPv4DNS...), ip.IPv6DNS...)
	if cfg.Logger == nil {
		cfg.Logger = m.log
	}
	if mtu := mtuOf(ip); mtu != 0 && cfg.MTU == 0 {
		cfg.MTU = mtu
	}
	s, err := New(ep, cfg)
	if err != nil {
		ep.Close()
		m.forget(id, nil)
		return nil, err
	}
	s.closers = append(closers, func() error { m.forget(id, s); return nil })
	s.ctrl, s.mbim, s.qmi, s.modem, s.sessionID = m.ctrl, m.mbim, m.qmi, m, int(id)
	m.mu.Lock()
	m.sessions[id] = s
	if o, ok := ep.(*ownEP); ok {
		o.stack = s
	}
	m.mu.Unlock()
	f.attach(s)
	// An IPv6-only session is not ready for IPv4 before its CLAT is.
	s.waitCLAT(ctx)
	return s, nil
}

// endpointFor returns the link endpoint session id's stack runs on: the
// data pair's own endpoint (made now by the first session, with id as its
// own session) wrapped so that closing the stack leaves the pair running,
// or a link.SessionEndpoint for another ID. openMu is held.
func (m *Modem) endpointFor(ctx context.Context, id uint8, lo link.Options) (gstack.LinkEndpoint, error) {
	if m.ep == nil {
		ep, err := link.New(ctx, m.ctrl, lo)
		if err != nil {
			return nil, err
		}
		m.ep = ep
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == m.ep.Session() && m.own == nil {
		m.own = &ownEP{Endpoint: m.ep}
		return m.own, nil
	}
	ls, err := m.ep.NewSessionEndpoint(id)
	if err != nil {
		return nil, err
	}
	return ls, nil
}

// forget drops s, closed, from the running sessions (nil: a stack that
// was never made on id).
func (m *Modem) forget(id uint8, s *Stack) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s != nil && m.sessions[id] == s {
		delete(m.sessions, id)
	}
	if m.own != nil && m.own.stack == s {
		m.own = nil
	}
}

// Close closes every session's stack (disconnecting the sessions), then
// the data pair, the control client, the controller and the device. It
// returns when all of their goroutines are gone; a second Close returns
// ErrClosed.
func (m *Modem) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.openMu.Lock() // an OpenSession under way fails and returns
	defer m.openMu.Unlock()
	var errs []error
	for _, s := range m.Sessions() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
		<-s.finished
	}
	if m.ep != nil {
		m.ep.Close()
	}
	m.closeAT()
	m.closeGNSS()
	for i := len(m.closers) - 1; i >= 0; i-- {
		if err := m.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// closeModem is the closer of an Open stack: its modem goes with it.
func (m *Modem) closeModem() error {
	if err := m.Close(); !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// Modem returns the modem the stack's session runs on (nil for a stack
// made with New).
func (s *Stack) Modem() *Modem { return s.modem }

// SessionID returns the MBIM session ID or QMAP mux ID of the stack's
// session (-1 for a stack made with New).
func (s *Stack) SessionID() int {
	if s.modem == nil {
		return -1
	}
	return s.sessionID
}

// ownEP is the data pair's link.Endpoint as the stack of its own session
// sees it: removing the NIC detaches the stack (the poller and refiller
// keep serving the other sessions) and Close does not close the pair,
// which the Modem closes.
type ownEP struct {
	*link.Endpoint
	stack   *Stack // set by OpenSession once the stack exists; Modem.mu
	closed  atomic.Bool
	onClose atomic.Pointer[func()]
}

// Attach implements stack.LinkEndpoint; nil detaches.
func (o *ownEP) Attach(d gstack.NetworkDispatcher) {
	if d == nil || o.closed.Load() {
		o.Endpoint.Detach()
		return
	}
	o.Endpoint.Attach(d)
}

// Wait implements stack.LinkEndpoint: the workers are the Modem's.
func (o *ownEP) Wait() {}

// SetOnCloseAction implements stack.LinkEndpoint.
func (o *ownEP) SetOnCloseAction(fn func()) { o.onClose.Store(&fn) }

// Close implements stack.LinkEndpoint: the stack stops receiving and
// sending; the pair stays up for the other sessions.
func (o *ownEP) Close() {
	if !o.closed.CompareAndSwap(false, true) {
		return
	}
	if fn := o.onClose.Swap(nil); fn != nil && *fn != nil {
		(*fn)()
	}
	o.Endpoint.Detach()
}

// WritePackets implements stack.LinkWriter.
func (o *ownEP) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	if o.closed.Load() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	return o.Endpoint.WritePackets(pkts)
}

// WritePacketsKept is WritePackets for the transmit queue, which keeps
// what the link does not take (link.Endpoint.WritePacketsKept).
func (o *ownEP) WritePacketsKept(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	if o.closed.Load() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	return o.Endpoint.WritePacketsKept(pkts)
}

// linkEndpointOf returns the link.Endpoint under a stack's NIC (the
// pair's, for a session of a Modem), or nil.
func linkEndpointOf(ep gstack.LinkEndpoint) *link.Endpoint {
	switch e := ep.(type) {
	case *link.Endpoint:
		return e
	case *ownEP:
		return e.Endpoint
	case *link.SessionEndpoint:
		return e.Endpoint()
	}
	return nil
}
