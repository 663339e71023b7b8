package qmi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/mhistack/mhistack/internal/sessionloop"
	"github.com/mhistack/mhistack/internal/simlock"
)

// Session errors; failures wrap them (and the QMI code when there is one).
var (
	ErrSIM        = errors.New("qmi: SIM not ready")
	ErrNoService  = errors.New("qmi: not registered")
	ErrDisconnect = errors.New("qmi: data call disconnected")
	ErrRoaming    = errors.New("qmi: roaming not allowed (SessionConfig.AllowRoaming)")
)

// SessionState is a step of data-session bring-up.
type SessionState int

// Session states, in bring-up order.
const (
	StateIdle         SessionState = iota
	StateWaitingSIM                // UIM Get Card Status until the USIM is ready (PIN entered if asked)
	StateRegistering               // NAS Get Serving System until registered and PS attached
	StateDataFormat                // WDA Set Data Format
	StateConnecting                // WDS Bind Mux Data Port, Set IP Family, Start Network
	StateConfiguring               // WDS Get Current Settings
	StateConnected                 // data flows; addresses reported
	StateFailed                    // an attempt failed; retrying after Progress.Err
	StateDisconnected              // the call was lost (Progress.Err says why); re-connecting
	StateClosed                    // Close was called
)

func (s SessionState) String() string {
	n := [...]string{"idle", "waiting-for-sim", "registering", "data-format", "connecting", "configuring",
		"connected", "failed", "disconnected", "closed"}
	if int(s) >= 0 && int(s) < len(n) {
		return n[s]
	}
	return fmt.Sprintf("state-%d", int(s))
}

// Progress is one report of a Session.
type Progress struct {
	State SessionState
	Err   error
}

// IPConfig is what the network gave a session: the same fields an MBIM
// IP_CONFIGURATION carries, merged over the session's IPv4 and IPv6
// calls.
type IPConfig struct {
	IPv4        []netip.Prefix
	IPv6        []netip.Prefix
	IPv4Gateway netip.Addr
	IPv6Gateway netip.Addr
	IPv4DNS     []netip.Addr
	IPv6DNS     []netip.Addr
	IPv4MTU     uint32
	IPv6MTU     uint32
}

// IsZero reports a config with no address (the session is down).
func (c *IPConfig) IsZero() bool { return len(c.IPv4) == 0 && len(c.IPv6) == 0 }

// SessionConfig is what a data session asks of the modem and network.
type SessionConfig struct {
	// APN, credentials and authentication of WDS Start Network.
	APN, User, Password string
	Auth                Auth
	// Families are the calls to start, one WDS client each (default
	// IPv4 then IPv6, as ModemManager does for ipv4v6). The session is
	// up when at least one succeeds.
	Families []IPFamily
	// PIN is entered once if the USIM asks for PIN1 (UIM Verify PIN): a
	// rejected PIN is never sent again by this session, so as not to
	// burn the SIM's tries.
	PIN string
	// PUK, if set, is entered once when the USIM asks for PUK1 (UIM
	// Unblock PIN), with PIN as the new PIN. A PUK is never sent unless
	// given.
	PUK string
	// Refused, if set, is shared by the sessions of one modem (package
	// stack does): a code one session saw refused, no other sends.
	Refused *simlock.Refused
	// AllowRoaming lets the session come up, and stay up, while NAS
	// reports the modem roaming (Serving System roaming indicator 0);
	// without it such a registration fails the attempt with ErrRoaming,
	// as ModemManager's allow-roaming bearer property does.
	AllowRoaming bool

	// Aggregation is the QMAP version to ask WDA for (default
	// AggregationQMAPv5; the modem may answer QMAP, which the session
	// accepts); AggregationDisabled asks for plain raw IP.
	Aggregation Aggregation
	// NoAggregation asks for raw IP without QMAP (Aggregation ignored).
	NoAggregation bool
	// DLMaxDatagrams and DLMaxSize bound DL aggregation (defaults 32
	// and 32768, ModemManager's request).
	DLMaxDatagrams, DLMaxSize uint32
	// Endpoint is the data port (default PCIeEndpoint).
	Endpoint Endpoint
	// MuxID is the QMAP mux ID bound to the calls (default 1, the first
	// libqmi's rmnet link manager allocates).
	MuxID uint8

	// Step limits: SIM (default 30 s), registration (60 s), addresses
	// (10 s).
	SIMTimeout, RegisterTimeout, ConfigTimeout time.Duration
	// PollInterval is how often a waiting step asks again (default 1 s).
	PollInterval time.Duration
	// RetryInterval is the first pause after a failed attempt (default 5 s,
	// doubling up to 1 min with jitter; sessionloop.Supervise). A lost
	// call is retried at once.
	RetryInterval time.Duration

	// OnProgress is told every step; OnAddress every change of the
	// session's IP configuration (a zero IPConfig when the call is
	// lost). Both run on the session's goroutine and must not block for
	// long.
	OnProgress func(Progress)
	OnAddress  func(IPConfig)
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

func (c *SessionConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.SIMTimeout, 30*time.Second)
	def(&c.RegisterTimeout, 60*time.Second)
	def(&c.ConfigTimeout, 10*time.Second)
	def(&c.PollInterval, time.Second)
	def(&c.RetryInterval, 5*time.Second)
	if len(c.Families) == 0 {
		c.Families = []IPFamily{IPv4, IPv6}
	}
	if c.Aggregation == AggregationDisabled {
		c.Aggregation = AggregationQMAPv5
	}
	if c.NoAggregation {
		c.Aggregation = AggregationDisabled
	}
	if c.DLMaxDatagrams == 0 {
		c.DLMaxDatagrams = 32
	}
	if c.DLMaxSize == 0 {
		c.DLMaxSize = 32768
	}
	if c.Endpoint == (Endpoint{}) {
		c.Endpoint = PCIeEndpoint
	}
	if c.MuxID == 0 {
		c.MuxID = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Session keeps one data session up on a QMI modem: SIM ready →
// registered → WDA data format → per family WDS Bind Mux Data Port, Set
// IP Family, Start Network → Get Current Settings; it re-connects when
// the network ends the call or the modem is reset. It is what stack.Open
// runs on a QMI modem. It owns one goroutine, stopped by Close, and
// shares its Client.
type Session struct {
	c     *Client
	cfg   SessionConfig
	log   *slog.Logger
	loop  *sessionloop.Loop // wake-ups, the recorded loss, Close
	ctx   context.Context   // loop's
	steps *sessionloop.Steps[SessionState]

	unsub, unreset func()

	mu      sync.Mutex
	ip      IPConfig
	format  DataFormat
	calls   []*call          // the running calls (session goroutine only, read under mu)
	refused *simlock.Refused // SessionConfig.Refused or the session's own
	cids    []ClientID       // allocated by this session
	// reconfigure is set by a Packet Service Status indication of a
	// connected call with "reconfiguration required" (the network
	// changed its settings): the session goroutine reads them again.
	reconfigure bool
}

// call is one started WDS call.
type call struct {
	wds    *ServiceClient
	family IPFamily
	handle uint32
}

// NewSession starts bringing a data session up on c.
func NewSession(c *Client, cfg SessionConfig) *Session {
	cfg.setDefaults()
	loop := sessionloop.NewLoop()
	s := &Session{c: c, cfg: cfg, log: cfg.Logger, loop: loop, ctx: loop.Context(),
		steps: sessionloop.NewSteps(StateIdle), refused: cfg.Refused}
	if s.refused == nil {
		s.refused = &simlock.Refused{}
	}
	s.unsub = c.Subscribe(s.indication)
	s.unreset = c.OnReset(func() {
		s.mu.Lock()
		// The modem forgot its client IDs and calls: stopping or
		// releasing them now would name IDs the host no longer holds.
		s.cids, s.calls = nil, nil
		s.mu.Unlock()
		s.loop.ModemReset(ErrModemReset)
	})
	loop.Go(s.run)
	return s
}

// State returns the current step and, when failed or disconnected, why.
func (s *Session) State() (SessionState, error) {
	st, err, _ := s.steps.Get()
	return st, err
}

// IPConfig returns the current configuration (zero when not connected).
func (s *Session) IPConfig() IPConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ip
}

// DataFormat returns what the modem agreed to in WDA Set Data Format
// (valid once connected): the link layer, the aggregation protocols and
// limits the data path must use.
func (s *Session) DataFormat() DataFormat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.format
}

// MuxID returns the QMAP mux ID the calls are bound to.
func (s *Session) MuxID() uint8 { return s.cfg.MuxID }

// WaitUp waits until the session is connected and returns its IP
// configuration, or until an attempt fails and returns why (the session
// keeps retrying in the background; WaitConnected waits through the
// failures it is told to, or Close).
func (s *Session) WaitUp(ctx context.Context) (IPConfig, error) { return s.WaitConnected(ctx, nil) }

// WaitConnected is WaitUp that waits through the failed attempts whose
// error retry accepts (nil: none) — a network that refuses the context
// for a while, say — for the session's next attempt, after its back-off.
// If ctx ends first, the error wraps ctx's and the last attempt's.
func (s *Session) WaitConnected(ctx context.Context, retry func(error) bool) (IPConfig, error) {
	return sessionloop.WaitUp(ctx, s.steps, sessionloop.Ends[SessionState, IPConfig]{
		Up: StateConnected, Failed: StateFailed, Closed: StateClosed,
		ErrClosed: ErrClosed, Protocol: "qmi", Retry: retry,
		Config: func() (IPConfig, bool) { ip := s.IPConfig(); return ip, !ip.IsZero() },
	})
}

// Close stops the calls and releases the session's client IDs (bounded
// by ctx), stops the goroutine and returns when it is gone.
func (s *Session) Close(ctx context.Context) error {
	err := s.loop.Close(ctx)
	s.unsub()
	s.unreset()
	return err
}

// setState reports a step: OnProgress first, then the waiters
// (WaitUp), so that a WaitUp that returned has seen its step reported.
func (s *Session) setState(st SessionState, err error) {
	s.steps.Report(s.log, "qmi session", st, err, s.progress)
}

func (s *Session) progress(st SessionState, err error) {
	if s.cfg.OnProgress != nil {
		s.cfg.OnProgress(Progress{State: st, Err: err})
	}
}

func (s *Session) setIP(ip IPConfig) {
	s.mu.Lock()
	s.ip = ip
	s.mu.Unlock()
	if s.cfg.OnAddress != nil {
		s.cfg.OnAddress(ip)
	}
}

// indication runs on the client's reader: it records and signals.
func (s *Session) indication(m *Message) {
	switch {
	case m.Service == ServiceWDS && m.ID == WDSGetPacketServiceStatus:
		s.mu.Lock()
		mine := false
		for _, c := range s.calls {
			if c.wds.id.Client == m.Client || m.Client == BroadcastClient {
				mine = true
			}
		}
		s.mu.Unlock()
		if !mine {
			return
		}
		ps, err := ParsePacketStatus(m)
		if err == nil && ps.Status == StatusDisconnected {
			s.loop.SetLost(fmt.Errorf("qmi: the network ended the call (%v): %w", ps.End, ErrDisconnect))
			return
		}
		if err == nil && ps.Status == StatusConnected && ps.Reconfigure {
			s.mu.Lock()
			s.reconfigure = true
			s.mu.Unlock()
		}
	case m.Service == ServiceNAS && m.ID == NASGetServingSystem:
		ss, err := ParseServingSystem(m)
		if err == nil && s.isConnected() && ss.Registration != Registered {
			s.loop.SetLost(fmt.Errorf("qmi: registration lost (%v): %w", ss.Registration, ErrNoService))
			return
		}
		if err == nil && s.isConnected() && s.refusesRoaming(ss) {
			s.loop.SetLost(fmt.Errorf("qmi: registered roaming: %w", ErrRoaming))
			return
		}
	}
	s.loop.Signal()
}

func (s *Session) isConnected() bool {
	st, _, _ := s.steps.Get()
	return st == StateConnected
}

func (s *Session) run() {
	var ip IPConfig
	s.loop.Supervise(s.cfg.RetryInterval, sessionloop.Hooks{
		Up: func() (err error) { ip, err = s.bringUp(); return err },
		Failed: func(err error) {
			s.teardown()
			s.setState(StateFailed, err)
		},
		Connected: func() {
			s.setIP(ip)
			s.setState(StateConnected, nil)
		},
		Watch: s.connected,
		Lost: func(cause error) {
			s.teardown()
			s.setIP(IPConfig{})
			s.setState(StateDisconnected, cause)
		},
		Shutdown: s.shutdown,
	})
}

// connected waits until the call is lost (the cause) or closed (nil).
// A call the network reconfigured (new addresses, DNS servers or MTU)
// has its runtime settings read again and reported (OnAddress).
func (s *Session) connected() error {
	for {
		select {
		case <-s.ctx.Done():
			return nil
		case <-s.loop.Kicked():
		}
		if err := s.loop.TakeLost(); err != nil {
			return err
		}
		s.mu.Lock()
		again := s.reconfigure
		s.reconfigure = false
		s.mu.Unlock()
		if again {
			ip, err := s.configure()
			if err != nil {
				return err
			}
			s.setIP(ip)
		}
	}
}

// teardown stops the calls and releases the client IDs, bounded.
func (s *Session) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.mu.Lock()
	calls, cids := s.calls, s.cids
	s.calls, s.cids = nil, nil
	s.mu.Unlock()
	for _, c := range calls {
		if _, err := c.wds.Do(ctx, StopNetworkRequest(c.handle)); err != nil {
			s.log.Debug("qmi session: stop network", "family", c.family, "err", err)
		}
	}
	for _, id := range cids {
		if err := s.c.ReleaseCID(ctx, id); err != nil {
			s.log.Debug("qmi session: release client ID", "id", id, "err", err)
		}
	}
}

func (s *Session) shutdown() {
	up := s.isConnected()
	s.teardown()
	if up {
		s.setIP(IPConfig{})
	}
	s.setState(StateClosed, nil)
}

// until calls check until it is done, fails, or d passes.
func (s *Session) until(d time.Duration, check func() (bool, error), timeout func() error) error {
	return s.loop.Until(d, s.cfg.PollInterval, check, timeout)
}

// client allocates a client ID of svc for this session.
func (s *Session) client(svc Service) (*ServiceClient, error) {
	id, err := s.c.AllocateCID(s.ctx, svc)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cids = append(s.cids, ClientID{Service: svc, Client: id})
	s.mu.Unlock()
	return s.c.Service(svc, id), nil
}

func (s *Session) bringUp() (IPConfig, error) {
	s.setState(StateWaitingSIM, nil)
	if err := s.waitSIM(); err != nil {
		return IPConfig{}, err
	}
	s.setState(StateRegistering, nil)
	if err := s.register(); err != nil {
		return IPConfig{}, err
	}
	s.setState(StateDataFormat, nil)
	if err := s.dataFormat(); err != nil {
		return IPConfig{}, err
	}
	s.setState(StateConnecting, nil)
	var errs []error
	for _, f := range s.cfg.Families {
		if err := s.startCall(f); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	n := len(s.calls)
	s.mu.Unlock()
	if n == 0 {
		return IPConfig{}, errors.Join(errs...)
	}
	for _, err := range errs {
		s.log.Info("qmi session: a family failed, continuing with the others", "err", err)
	}
	s.loop.TakeLost() // a loss before this point belongs to an earlier call
	s.setState(StateConfiguring, nil)
	return s.configure()
}

func (s *Session) waitSIM() error {
	uim, err := s.client(ServiceUIM)
	if err != nil {
		return err
	}
	var last string
	return s.until(s.cfg.SIMTimeout, func() (bool, error) {
		r, err := uim.Do(s.ctx, NewRequest(ServiceUIM, UIMGetCardStatus))
		if err != nil {
			return false, err
		}
		cs, err := ParseCardStatus(r)
		if err != nil {
			return false, err
		}
		card, app, ok := primaryApp(&cs)
		switch {
		case !ok || card.State == CardAbsent:
			return false, fmt.Errorf("qmi: no SIM card: %w", ErrSIM)
		case card.State == CardError:
			return false, fmt.Errorf("qmi: SIM card error %d: %w", card.Error, ErrSIM)
		case app == nil:
			last = "no application"
			return false, nil
		}
		last = fmt.Sprintf("application state %d", app.State)
		switch AppState(app.State) {
		case AppReady:
			return true, nil
		case AppPINRequired:
			return false, s.unlock(uim, simlock.PIN1, int(app.PIN1Retries))
		case AppPUKRequired, AppPIN1Blocked:
			if app.PIN1State == PINPermanentlyBlocked {
				return false, &simlock.Error{Protocol: "qmi", Need: simlock.PUK1, Remaining: 0,
					Reason: "the SIM is blocked for good", Err: ErrSIM}
			}
			return false, s.unlock(uim, simlock.PUK1, int(app.PUK1Retries))
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("qmi: SIM not ready after %v (%s): %w", s.cfg.SIMTimeout, last, ErrSIM)
	})
}

// primaryApp returns the card and application the GW primary index
// names (a card index in the high byte, an application in the low
// byte; 0xFFFF none), or the first USIM.
func primaryApp(cs *CardStatus) (*Card, *App, bool) {
	if i := cs.IndexGWPrimary; i != 0xFFFF {
		ci, ai := int(i>>8), int(i&0xFF)
		if ci < len(cs.Cards) {
			c := &cs.Cards[ci]
			if ai < len(c.Apps) {
				return c, &c.Apps[ai], true
			}
			return c, nil, true
		}
	}
	for ci := range cs.Cards {
		c := &cs.Cards[ci]
		for ai := range c.Apps {
			if c.Apps[ai].Type == AppTypeUSIM {
				return c, &c.Apps[ai], true
			}
		}
		return c, nil, true
	}
	return nil, nil, false
}

// unlock enters the configured PIN (UIM Verify PIN) or PUK and new PIN
// (UIM Unblock PIN) once: a code the SIM refused is not sent again. A
// SIM that stays locked fails with a *simlock.Error.
func (s *Session) unlock(uim *ServiceClient, need simlock.Code, left int) error {
	locked := func(need simlock.Code, left int, rejected bool, reason string, cause error) error {
		err := error(ErrSIM)
		if cause != nil {
			err = fmt.Errorf("%w: %w", ErrSIM, cause)
		}
		return &simlock.Error{Protocol: "qmi", Need: need, Remaining: left, Rejected: rejected, Reason: reason, Err: err}
	}
	code := s.cfg.PIN
	if need == simlock.PUK1 {
		code = s.cfg.PUK
	}
	switch {
	case code != "" && s.refused.Has(need, code):
		return locked(need, left, true, "", nil)
	case need == simlock.PIN1 && s.cfg.PIN == "", need == simlock.PUK1 && s.cfg.PUK == "":
		return locked(need, left, false, "", nil)
	case need == simlock.PUK1 && s.cfg.PIN == "":
		return locked(need, left, false, "a PUK needs the new PIN to set", nil)
	}
	var req *Message
	if need == simlock.PIN1 {
		req = (&VerifyPIN{SessionType: SessionCardSlot1, ID: PIN1, PIN: s.cfg.PIN}).Request()
	} else {
		req = (&UnblockPIN{SessionType: SessionCardSlot1, ID: PIN1, PUK: s.cfg.PUK, NewPIN: s.cfg.PIN}).Request()
	}
	r, err := uim.Do(s.ctx, req)
	if err == nil {
		return nil
	}
	var qe *Error
	if !errors.As(err, &qe) {
		return err // not an answer: nothing was refused
	}
	s.refused.Add(need, code)
	left = simlock.Unknown
	var rt Retries
	ok := false
	if r != nil {
		rt, ok, _ = ParseRetries(r)
	}
	if ok {
		left = int(rt.Verify)
		if need == simlock.PUK1 {
			left = int(rt.Unblock)
		}
	}
	if need == simlock.PIN1 && (qe.Code == ErrPINBlocked || (ok && rt.Verify == 0)) {
		left = simlock.Unknown
		if ok {
			left = int(rt.Unblock)
		}
		return locked(simlock.PUK1, left, true, "the PIN given was rejected, the last try: the SIM now needs its PUK", err)
	}
	return locked(need, left, true, "", err)
}

func (s *Session) register() error {
	nas, err := s.client(ServiceNAS)
	if err != nil {
		return err
	}
	var last ServingSystem
	return s.until(s.cfg.RegisterTimeout, func() (bool, error) {
		r, err := nas.Do(s.ctx, NewRequest(ServiceNAS, NASGetServingSystem))
		if err != nil {
			return false, err
		}
		ss, err := ParseServingSystem(r)
		if err != nil {
			return false, err
		}
		last = ss
		if ss.Registration == RegistrationDenied {
			return false, fmt.Errorf("qmi: registration denied: %w", ErrNoService)
		}
		if ss.Registration == Registered && s.refusesRoaming(ss) {
			return false, fmt.Errorf("qmi: registered roaming: %w", ErrRoaming)
		}
		return ss.Registration == Registered && ss.PSAttach == Attached, nil
	}, func() error {
		return fmt.Errorf("qmi: not registered after %v (%v, PS attach %d): %w", s.cfg.RegisterTimeout, last.Registration, last.PSAttach, ErrNoService)
	})
}

// dataFormat runs WDA Set Data Format and keeps what the modem agreed.
// A modem that answers a QMAP version other than the one asked for
// (QMAP v1 for v5) is accepted: the data path follows the answer.
func (s *Session) dataFormat() error {
	wda, err := s.client(ServiceWDA)
	if err != nil {
		return err
	}
	req := DataFormat{LinkLayer: LinkLayerRawIP, ULAggregation: s.cfg.Aggregation, DLAggregation: s.cfg.Aggregation,
		Endpoint: s.cfg.Endpoint}
	if s.cfg.Aggregation != AggregationDisabled {
		req.DLMaxDatagrams, req.DLMaxSize = s.cfg.DLMaxDatagrams, s.cfg.DLMaxSize
	}
	r, err := wda.Do(s.ctx, req.SetRequest())
	if err != nil {
		return err
	}
	got, err := ParseDataFormat(r)
	if err != nil {
		return err
	}
	if got.LinkLayer != LinkLayerRawIP {
		return fmt.Errorf("qmi: the modem set link layer protocol %d, not raw IP: %w", got.LinkLayer, ErrInvalidDataFormat)
	}
	if got.ULAggregation != got.DLAggregation {
		return fmt.Errorf("qmi: the modem set UL aggregation %v and DL %v: %w", got.ULAggregation, got.DLAggregation, ErrInvalidDataFormat)
	}
	if got.DLAggregation != AggregationDisabled && got.DLAggregation.QMAPVersion() == 0 {
		return fmt.Errorf("qmi: the modem set aggregation %v, which this host does not speak: %w", got.DLAggregation, ErrInvalidDataFormat)
	}
	if s.cfg.Aggregation == AggregationDisabled && got.DLAggregation != AggregationDisabled {
		return fmt.Errorf("qmi: asked for raw IP, the modem set %v: %w", got.DLAggregation, ErrInvalidDataFormat)
	}
	s.mu.Lock()
	s.format = got
	s.mu.Unlock()
	return nil
}

func (s *Session) startCall(f IPFamily) error {
	wds, err := s.client(ServiceWDS)
	if err != nil {
		return err
	}
	if s.DataFormat().DLAggregation != AggregationDisabled {
		b := BindMuxDataPort{Endpoint: s.cfg.Endpoint, MuxID: s.cfg.MuxID, ClientType: ClientTypeTethered}
		if _, err := wds.Do(s.ctx, b.Request()); err != nil {
			return err
		}
	}
	if _, err := wds.Do(s.ctx, SetIPFamilyRequest(f)); err != nil {
		return err
	}
	sn := StartNetwork{APN: s.cfg.APN, User: s.cfg.User, Password: s.cfg.Password, Auth: s.cfg.Auth, Family: f}
	r, err := wds.Do(s.ctx, sn.Request())
	if err != nil {
		if r != nil {
			if ce, perr := ParseCallEnd(r); perr == nil && (ce.HasReason || ce.HasVerbose) {
				return &CallError{Family: f, End: ce, Err: err}
			}
		}
		return fmt.Errorf("qmi: IPv%d call: %w", f, err)
	}
	h, err := ParseHandle(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.calls = append(s.calls, &call{wds: wds, family: f, handle: h})
	s.mu.Unlock()
	return nil
}

func (s *Session) configure() (IPConfig, error) {
	s.mu.Lock()
	calls := append([]*call(nil), s.calls...)
	s.mu.Unlock()
	var ip IPConfig
	for _, c := range calls {
		var st Settings
		err := s.until(s.cfg.ConfigTimeout, func() (bool, error) {
			if err := s.loop.TakeLost(); err != nil {
				return false, err
			}
			r, err := c.wds.Do(s.ctx, GetCurrentSettingsRequest(SettingsDataPath))
			if err != nil {
				return false, err
			}
			st, err = ParseSettings(r)
			if err != nil {
				return false, err
			}
			return st.IPv4.IsValid() || st.IPv6.IsValid(), nil
		}, func() error {
			return fmt.Errorf("qmi: no IPv%d address within %v: %w", c.family, s.cfg.ConfigTimeout, ErrTimeout)
		})
		if err != nil {
			return IPConfig{}, err
		}
		if st.IPv4.IsValid() {
			ip.IPv4 = append(ip.IPv4, st.IPv4)
			ip.IPv4Gateway = st.IPv4Gateway
			ip.IPv4DNS = append(ip.IPv4DNS, st.IPv4DNS...)
			ip.IPv4MTU = st.MTU
		}
		if st.IPv6.IsValid() {
			ip.IPv6 = append(ip.IPv6, st.IPv6)
			ip.IPv6Gateway = st.IPv6Gateway
			ip.IPv6DNS = append(ip.IPv6DNS, st.IPv6DNS...)
			ip.IPv6MTU = st.MTU
		}
	}
	return ip, nil
}

// refusesRoaming reports a Serving System that says roaming (indicator
// 0, TLV 0x10) to a session that does not allow it.
func (s *Session) refusesRoaming(ss ServingSystem) bool {
	return !s.cfg.AllowRoaming && ss.HasRoaming && ss.Roaming == 0
}
