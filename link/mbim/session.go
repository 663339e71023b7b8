package mbim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mhistack/mhistack/internal/sessionloop"
	"github.com/mhistack/mhistack/internal/simlock"
)

// SessionState is a step of data-session bring-up (docs/FRAMING.md
// §2.10, the order ModemManager and mbim-network use).
type SessionState int

// Session states, in bring-up order.
const (
	StateIdle         SessionState = iota
	StateOpening                   // OPEN
	StateWaitingSIM                // SUBSCRIBER_READY_STATUS until INITIALIZED (PIN entered if asked)
	StateRadioOn                   // RADIO_STATE set on
	StateRegistering               // REGISTER_STATE until home/roaming/partner
	StateAttaching                 // PACKET_SERVICE attach
	StateConnecting                // CONNECT activate
	StateConfiguring               // IP_CONFIGURATION
	StateConnected                 // data flows; addresses reported
	StateFailed                    // an attempt failed; retrying after Progress.Err
	StateDisconnected              // the connection was lost (Progress.Err says why); re-connecting
	StateClosed                    // Close was called
)

func (s SessionState) String() string {
	n := [...]string{"idle", "opening", "waiting-for-sim", "radio-on", "registering", "attaching",
		"connecting", "configuring", "connected", "failed", "disconnected", "closed"}
	if int(s) >= 0 && int(s) < len(n) {
		return n[s]
	}
	return fmt.Sprintf("state-%d", int(s))
}

// Progress is one report of a Session: the step it entered, and for
// StateFailed and StateDisconnected the error.
type Progress struct {
	State SessionState
	Err   error
}

// SessionConfig is what a data session asks of the network, with its
// time limits and observers.
type SessionConfig struct {
	// SessionID is the MBIM session (0: the default link, wwan0).
	SessionID uint32
	// APN (access string), credentials and authentication protocol.
	APN, User, Password string
	Auth                AuthProtocol
	// IPType requested (default IPTypeIPv4v6).
	IPType IPType
	// PIN is entered if the SIM asks for PIN1. It is tried once per
	// Session: a rejected PIN is never retried, so as not to burn the
	// SIM's attempts.
	PIN string
	// PUK, if set, is entered (once) when the SIM asks for PUK1, with
	// PIN as the new PIN. Without it a SIM that needs its PUK fails the
	// session; a PUK is never sent unless given.
	PUK string
	// Refused, if set, is shared by the sessions of one modem (package
	// stack does): a code one session saw refused, no other sends.
	Refused *simlock.Refused
	// RadioRefused, if set, is called when the modem refuses to turn its
	// radio on (RADIO_STATE set answered with an error status: an
	// FCC-locked modem, which locks again at every restart). If it
	// returns nil, radio on is asked for once more; its error fails the
	// attempt. Package stack runs the model's FCC unlock here.
	RadioRefused func(context.Context) error
	// AllowRoaming lets the session come up, and stay up, while the
	// modem is registered on a visited network (REGISTER_STATE roaming
	// or partner); without it such a registration fails the attempt with
	// ErrRoaming, as ModemManager's allow-roaming bearer property does.
	AllowRoaming bool

	// Step limits: how long to wait for the SIM (default 30 s), the
	// radio (10 s), registration (60 s), attach (60 s) and an address
	// (10 s) before the attempt fails.
	SIMTimeout, RadioTimeout, RegisterTimeout, AttachTimeout, ConfigTimeout time.Duration
	// PollInterval is how often a waiting step queries again when no
	// indication arrives (default 1 s).
	PollInterval time.Duration
	// RetryInterval is the first pause after a failed attempt (default 5 s,
	// doubling up to 1 min with jitter; sessionloop.Supervise). A lost
	// connection is retried at once.
	RetryInterval time.Duration

	// OnProgress is told every step; OnAddress every change of the
	// session's IP configuration: the addresses when connected, again
	// when the network changes them, and a zero IPConfig (IsZero) when
	// the connection is lost. Both run on the session's goroutine, in
	// order, and must not block for long.
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
	def(&c.RadioTimeout, 10*time.Second)
	def(&c.RegisterTimeout, 60*time.Second)
	def(&c.AttachTimeout, 60*time.Second)
	def(&c.ConfigTimeout, 10*time.Second)
	def(&c.PollInterval, time.Second)
	def(&c.RetryInterval, 5*time.Second)
	if c.IPType == IPTypeDefault {
		c.IPType = IPTypeIPv4v6
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Session keeps one data session up: it walks SIM ready → radio on →
// registered → attached → CONNECT → IP_CONFIGURATION, reports each step,
// re-connects when the network detaches or deactivates the context or
// the modem is reset, and reports address changes. It is what stack.Open
// runs on an MBIM modem.
//
// A Session owns one goroutine, stopped by Close. It shares its Client
// (with a Proxy, for instance) and does not close it.
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
	newIP   *IPConfig        // set by an IP_CONFIGURATION indication
	refused *simlock.Refused // SessionConfig.Refused or the session's own
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
	s.unreset = c.OnReset(func() { s.loop.ModemReset(ErrModemReset) })
	loop.Go(s.run)
	return s
}

// State returns the current step and, in StateFailed or
// StateDisconnected, the error.
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
		ErrClosed: ErrClosed, Protocol: "mbim", Retry: retry,
		Config: func() (IPConfig, bool) { ip := s.IPConfig(); return ip, !ip.IsZero() },
	})
}

// Close deactivates the context (bounded by ctx), stops the session's
// goroutine and returns when it is gone.
func (s *Session) Close(ctx context.Context) error {
	err := s.loop.Close(ctx)
	s.unsub()
	s.unreset()
	return err
}

// setState reports a step: OnProgress first, then the waiters
// (WaitUp), so that a WaitUp that returned has seen its step reported.
func (s *Session) setState(st SessionState, err error) {
	s.steps.Report(s.log, "mbim session", st, err, s.progress)
}

func (s *Session) progress(st SessionState, err error) {
	if s.cfg.OnProgress != nil {
		s.cfg.OnProgress(Progress{State: st, Err: err})
	}
}

func (s *Session) signal() { s.loop.Signal() }

// setLost records that the connection is gone (first cause wins).
func (s *Session) setLost(err error) { s.loop.SetLost(err) }

// indication runs on the client's reader goroutine: it only records and
// signals; the session goroutine acts.
func (s *Session) indication(m *Message) {
	if m.Service != ServiceBasicConnect {
		return
	}
	switch m.CID {
	case CIDConnect:
		cs, err := s.c.ParseContextState(m.Buffer)
		if err == nil && cs.SessionID == s.cfg.SessionID && cs.ActivationState == ActivationDeactivated {
			s.setLost(fmt.Errorf("mbim: context deactivated by the network (%v): %w", cs.NwError, ErrDetached))
			return
		}
	case CIDPacketService:
		ps, err := ParsePacketService(m.Buffer)
		if err == nil && ps.State == PacketServiceDetached {
			s.setLost(fmt.Errorf("mbim: packet service detached (%v): %w", ps.NwError, ErrDetached))
			return
		}
	case CIDRegisterState:
		rs, err := ParseRegisterState(m.Buffer)
		if err == nil && roaming(rs.State) && !s.cfg.AllowRoaming {
			s.setLost(fmt.Errorf("mbim: registered %v: %w", rs.State, ErrRoaming))
			return
		}
		if err == nil && (rs.State == RegisterDeregistered || rs.State == RegisterDenied) {
			s.setLost(fmt.Errorf("mbim: network registration lost (%v): %w", rs.State, ErrNoService))
			return
		}
	case CIDRadioState:
		rs, err := ParseRadioState(m.Buffer)
		if err == nil && !(rs.HardwareOn && rs.SoftwareOn) {
			s.setLost(fmt.Errorf("mbim: radio switched off: %w", ErrRadioOff))
			return
		}
	case CIDIPConfiguration:
		ic, err := ParseIPConfig(m.Buffer)
		if err == nil && ic.SessionID == s.cfg.SessionID {
			s.mu.Lock()
			s.newIP = &ic
			s.mu.Unlock()
		}
	}
	s.signal()
}

// takeLost returns and clears the recorded loss.
func (s *Session) takeLost() error { return s.loop.TakeLost() }

func (s *Session) setIP(ip IPConfig) {
	s.mu.Lock()
	s.ip = ip
	s.mu.Unlock()
	if s.cfg.OnAddress != nil {
		s.cfg.OnAddress(ip)
	}
}

// run is the session goroutine.
func (s *Session) run() {
	var ip IPConfig
	s.loop.Supervise(s.cfg.RetryInterval, sessionloop.Hooks{
		Up:     func() (err error) { ip, err = s.bringUp(); return err },
		Failed: func(err error) { s.setState(StateFailed, err) },
		Connected: func() {
			s.setIP(ip)
			s.setState(StateConnected, nil)
		},
		Watch: s.connected,
		Lost: func(cause error) {
			s.setIP(IPConfig{SessionID: s.cfg.SessionID})
			s.setState(StateDisconnected, cause)
		},
		Shutdown: s.shutdown,
	})
}

// connected watches a connected session until it is lost (the cause) or
// closed (nil), reporting address changes.
func (s *Session) connected() error {
	for {
		select {
		case <-s.ctx.Done():
			return nil
		case <-s.loop.Kicked():
		}
		if err := s.takeLost(); err != nil {
			return err
		}
		s.mu.Lock()
		nip := s.newIP
		s.newIP = nil
		cur := s.ip
		s.mu.Unlock()
		if nip != nil && !nip.Equal(&cur) {
			if nip.IsZero() {
				return errors.New("mbim: the network withdrew every address")
			}
			s.log.Info("mbim session: address change", "ip", nip.String())
			s.setIP(*nip)
		}
	}
}

// shutdown deactivates the context on Close, bounded, and reports closed.
func (s *Session) shutdown() {
	st, _, _ := s.steps.Get()
	if st == StateConnected && s.c.Opened() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := s.c.Disconnect(ctx, s.cfg.SessionID); err != nil {
			s.log.Debug("mbim session: deactivate on close", "err", err)
		}
		cancel()
		s.setIP(IPConfig{SessionID: s.cfg.SessionID})
	}
	s.setState(StateClosed, nil)
}

// sleep waits d, or until closed (false), or (wake) until something
// happened that may change the outcome (an indication, a reset).
func (s *Session) sleep(d time.Duration, wake bool) bool { return s.loop.Sleep(d, wake) }

// bringUp runs one attempt; it returns the IP configuration when the
// session is up.
func (s *Session) bringUp() (IPConfig, error) {
	ctx := s.ctx
	if !s.c.Opened() {
		s.setState(StateOpening, nil)
		if err := s.c.Open(ctx); err != nil {
			return IPConfig{}, err
		}
		// Every BASIC_CONNECT indication (the session needs six of
		// them; asking for all keeps those a Proxy's clients expect).
		// A function that refuses keeps its default, which is fine.
		_, err := s.c.SubscribeIndications(ctx, []EventSubscription{{Service: ServiceBasicConnect}})
		if err != nil {
			s.log.Debug("mbim session: subscribe list", "err", err)
		}
	}
	// MBIMEx 2.0 where the function has it (RSRP, SNR per RAT), once
	// per open of the function (whoever opened it); a function without
	// it, or one that fails the exchange, keeps MBIM 1.0, which is all
	// the session needs.
	if v, err := s.c.NegotiateMBIMEx(ctx); err != nil {
		s.log.Debug("mbim session: MBIMEx", "err", err)
	} else {
		s.log.Debug("mbim session: MBIMEx", "version", v)
	}
	steps := []struct {
		st SessionState
		fn func(context.Context) error
		d  time.Duration
	}{
		{StateWaitingSIM, s.waitSIM, s.cfg.SIMTimeout},
		{StateRadioOn, s.radioOn, s.cfg.RadioTimeout},
		{StateRegistering, s.register, s.cfg.RegisterTimeout},
		{StateAttaching, s.attach, s.cfg.AttachTimeout},
		{StateConnecting, s.connect, 0},
	}
	for _, st := range steps {
		s.setState(st.st, nil)
		if err := st.fn(ctx); err != nil {
			return IPConfig{}, err
		}
	}
	s.setState(StateConfiguring, nil)
	return s.configure(ctx)
}

// until calls check until it reports done, fails, or d passes (then the
// error is timeout(last state)). Between checks it waits for an
// indication or PollInterval.
func (s *Session) until(ctx context.Context, d time.Duration, check func() (bool, error), timeout func() error) error {
	return s.loop.Until(d, s.cfg.PollInterval, check, timeout)
}

func (s *Session) waitSIM(ctx context.Context) error {
	var last ReadyState
	return s.until(ctx, s.cfg.SIMTimeout, func() (bool, error) {
		rs, err := s.c.SubscriberReadyStatus(ctx)
		if err != nil {
			return false, err
		}
		last = rs.ReadyState
		switch rs.ReadyState {
		case ReadyInitialized:
			return true, nil
		case ReadyNotInitialized:
			return false, nil
		case ReadySIMNotInserted:
			return false, fmt.Errorf("mbim: %w", ErrSIMNotInserted)
		case ReadyBadSIM:
			return false, fmt.Errorf("mbim: %w", ErrBadSIM)
		case ReadyDeviceLocked:
			return false, s.unlock(ctx)
		}
		return false, fmt.Errorf("mbim: SIM %v: %w", rs.ReadyState, StatusFailure)
	}, func() error {
		return fmt.Errorf("mbim: SIM still %v after %v: %w", last, s.cfg.SIMTimeout, ErrTimeout)
	})
}

// unlock enters the configured PIN, or PUK and new PIN, once each: a
// code the SIM refused is not sent again by this session. The SIM's
// ready state changes after it (the caller queries again). A SIM that
// stays locked fails with a *simlock.Error.
func (s *Session) unlock(ctx context.Context) error {
	info, err := s.c.PIN(ctx)
	if err != nil {
		return err
	}
	if !info.Locked {
		return nil // the ready state will follow
	}
	locked := func(need simlock.Code, info PINInfo, rejected bool, reason string, cause error) error {
		left := simlock.Unknown
		if info.RemainingAttempts != 0xFFFFFFFF && info.RemainingAttempts <= 255 {
			left = int(info.RemainingAttempts)
		}
		if cause == nil {
			cause = ErrPINRequired
		} else {
			cause = fmt.Errorf("%w: %w", ErrPINRequired, cause)
		}
		return &simlock.Error{Protocol: "mbim", Need: need, Remaining: left, Rejected: rejected, Reason: reason, Err: cause}
	}
	var need simlock.Code
	switch info.Type {
	case PINTypePIN1:
		need = simlock.PIN1
	case PINTypePUK1:
		need = simlock.PUK1
	default:
		return locked(simlock.Code(info.Type.String()), info, false, "this session only enters PIN1 and PUK1", nil)
	}
	code := s.cfg.PIN
	if need == simlock.PUK1 {
		code = s.cfg.PUK
	}
	switch {
	case code != "" && s.refused.Has(need, code):
		return locked(need, info, true, "", nil)
	case need == simlock.PIN1 && s.cfg.PIN == "", need == simlock.PUK1 && s.cfg.PUK == "":
		return locked(need, info, false, "", nil)
	case need == simlock.PUK1 && s.cfg.PIN == "":
		return locked(need, info, false, "a PUK needs the new PIN to set", nil)
	}
	if need == simlock.PIN1 {
		info, err = s.c.EnterPIN(ctx, PINTypePIN1, s.cfg.PIN)
	} else {
		info, err = s.c.EnterPUK(ctx, s.cfg.PUK, s.cfg.PIN)
	}
	if err == nil {
		return nil
	}
	var ce *CommandError
	if !errors.As(err, &ce) {
		return err // not an answer: nothing was refused
	}
	s.refused.Add(need, code)
	if need == simlock.PIN1 && info.Locked && info.Type == PINTypePUK1 {
		return locked(simlock.PUK1, info, true, "the PIN given was rejected, the last try: the SIM now needs its PUK", err)
	}
	return locked(need, info, true, "", err)
}

func (s *Session) radioOn(ctx context.Context) error {
	set, unlocked := false, false
	return s.until(ctx, s.cfg.RadioTimeout, func() (bool, error) {
		rs, err := s.c.RadioState(ctx)
		if err != nil {
			return false, err
		}
		if !rs.HardwareOn {
			return false, fmt.Errorf("mbim: hardware radio switch is off: %w", ErrRadioOff)
		}
		if rs.SoftwareOn {
			return true, nil
		}
		if !set {
			set = true
			rs, err = s.c.SetRadioState(ctx, true)
			var ce *CommandError
			if errors.As(err, &ce) && s.cfg.RadioRefused != nil && !unlocked {
				unlocked = true
				if uerr := s.cfg.RadioRefused(ctx); uerr != nil {
					return false, uerr
				}
				set = false // ask again
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return rs.HardwareOn && rs.SoftwareOn, nil
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("mbim: radio did not come on within %v: %w", s.cfg.RadioTimeout, ErrRadioOff)
	})
}

func (s *Session) register(ctx context.Context) error {
	var last RegisterState
	return s.until(ctx, s.cfg.RegisterTimeout, func() (bool, error) {
		rs, err := s.c.RegisterState(ctx)
		if err != nil {
			return false, err
		}
		last = rs
		if rs.State.Registered() {
			if roaming(rs.State) && !s.cfg.AllowRoaming {
				return false, fmt.Errorf("mbim: registered %v: %w", rs.State, ErrRoaming)
			}
			return true, nil
		}
		if rs.State == RegisterDenied {
			return false, fmt.Errorf("mbim: registration denied: %v: %w", rs.NwError, ErrNoService)
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("mbim: not registered after %v (%v): %w", s.cfg.RegisterTimeout, last.State, ErrNoService)
	})
}

func (s *Session) attach(ctx context.Context) error {
	set := false
	var last PacketServiceState
	return s.until(ctx, s.cfg.AttachTimeout, func() (bool, error) {
		ps, err := s.c.PacketService(ctx)
		if err != nil {
			return false, err
		}
		last = ps.State
		if ps.State == PacketServiceAttached {
			return true, nil
		}
		if !set && ps.State != PacketServiceAttaching {
			set = true
			ps, err = s.c.SetPacketService(ctx, Attach)
			if err != nil {
				return false, err
			}
			return ps.State == PacketServiceAttached, nil
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("mbim: packet service still %v after %v: %w", last, s.cfg.AttachTimeout, ErrDetached)
	})
}

func (s *Session) connect(ctx context.Context) error {
	// Start from a clean context, as ModemManager does: one left
	// active (by another client, or before a host restart) may carry
	// other parameters.
	if cs, err := s.c.ConnectState(ctx, s.cfg.SessionID); err == nil && cs.ActivationState == ActivationActivated {
		if _, err := s.c.Disconnect(ctx, s.cfg.SessionID); err != nil {
			s.log.Debug("mbim session: deactivate stale context", "err", err)
		}
	}
	cs, err := s.c.Connect(ctx, ConnectRequest{SessionID: s.cfg.SessionID, Activate: true, APN: s.cfg.APN,
		User: s.cfg.User, Password: s.cfg.Password, Auth: s.cfg.Auth, IPType: s.cfg.IPType,
		ContextType: ContextTypeInternet})
	if err != nil {
		return err
	}
	if cs.ActivationState != ActivationActivated {
		return fmt.Errorf("mbim: CONNECT answered %v (%v): %w", cs.ActivationState, cs.NwError, StatusContextNotActivated)
	}
	// A loss reported before this point belongs to the previous
	// connection.
	s.takeLost()
	s.mu.Lock()
	s.newIP = nil
	s.mu.Unlock()
	return nil
}

func (s *Session) configure(ctx context.Context) (IPConfig, error) {
	var ip IPConfig
	err := s.until(ctx, s.cfg.ConfigTimeout, func() (bool, error) {
		if err := s.takeLost(); err != nil {
			return false, err
		}
		var err error
		ip, err = s.c.IPConfiguration(ctx, s.cfg.SessionID)
		if err != nil {
			return false, err
		}
		return !ip.IsZero(), nil
	}, func() error {
		return fmt.Errorf("mbim: no address within %v: %w", s.cfg.ConfigTimeout, ErrTimeout)
	})
	return ip, err
}

// ErrRoaming is a session refused because the modem is registered on a
// visited network and SessionConfig.AllowRoaming is off.
var ErrRoaming = errors.New("mbim: roaming not allowed (SessionConfig.AllowRoaming)")

// roaming reports a registration on a visited network.
func roaming(v RegisterStateValue) bool { return v == RegisterRoaming || v == RegisterPartner }
