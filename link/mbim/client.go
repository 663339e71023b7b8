package mbim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/mhistack/mhistack/internal/ctrlclient"
	"github.com/mhistack/mhistack/internal/ctrlstream"
)

// Transport carries MBIM messages to and from a function. Send writes
// one message or fragment; Recv returns the next chunk of the function's
// output, which the Client treats as a byte stream (one MHI transfer
// normally holds one message, but libmbim does not rely on it and neither
// does this package). *mhi.ControlPort is a Transport; StreamTransport
// adapts a pipe, a socket or a character device.
type Transport = ctrlstream.Transport

// Options configure a Client. The zero value is what libmbim uses.
type Options struct {
	// MaxControlTransfer is offered in OPEN and bounds every fragment in
	// both directions (default DefaultControlTransfer, at most
	// MaxControlTransfer).
	MaxControlTransfer int
	// Timeout bounds a request without a longer timeout of its own
	// (default 10 s); LongTimeout bounds CONNECT, PACKET_SERVICE and
	// REGISTER_STATE sets and IP_CONFIGURATION, which wait for the
	// network (default 120 s, libmbim's CONNECT timeout). A request's
	// context can only shorten them.
	Timeout, LongTimeout time.Duration
	// OpenTimeout bounds one OPEN attempt (default 5 s) and
	// OpenAttempts the attempts (default 3); between attempts the client
	// sends CLOSE, because a function still open for a previous host may
	// ignore OPEN until it is closed (libmbim mbim-device.c does the
	// same).
	OpenTimeout  time.Duration
	OpenAttempts int
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.MaxControlTransfer <= 0 {
		o.MaxControlTransfer = DefaultControlTransfer
	}
	o.MaxControlTransfer = max(MinControlTransfer, min(o.MaxControlTransfer, MaxControlTransfer))
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.LongTimeout <= 0 {
		o.LongTimeout = 120 * time.Second
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 5 * time.Second
	}
	if o.OpenAttempts <= 0 {
		o.OpenAttempts = 3
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Client is the host side of an MBIM function: it assigns transaction
// IDs, fragments requests, reassembles answers, matches them (and
// FUNCTION_ERRORs) to requests, and hands indications to subscribers.
//
// All methods may be called from any goroutine. The client owns one
// goroutine, the reader, which Close stops; subscriber callbacks run on it
// and must not block.
type Client struct {
	conn *ctrlclient.Conn[uint32, MessageType, *Message]
	opts Options
	log  *slog.Logger

	sendMu sync.Mutex // keeps the fragments of one message together

	exMu sync.Mutex // one MBIMEx negotiation at a time

	// guarded by conn.Mu
	nextTID  uint32
	opened   bool
	resetDec bool // the reader must drop its partial input
	// opens counts successful OPENs; ex is the MBIMEx version agreed
	// during open number exOpen (a function forgets it when reopened).
	opens, exOpen uint64
	ex            Version
	// proxyEx is the version a proxy reported (PROXY_CONTROL VERSION):
	// a client behind a proxy shares the proxy's agreement with the
	// modem, whatever its own OPENs.
	proxyEx Version
}

// NewClient starts a client over t; the client owns t and closes it in
// Close. The function is not opened yet: call Open.
func NewClient(t Transport, opts Options) *Client {
	opts.setDefaults()
	c := &Client{opts: opts, log: opts.Logger}
	dec := &Decoder{}
	c.conn = ctrlclient.New(t, ctrlclient.Config[uint32, MessageType, *Message]{
		Proto: "mbim", Logger: opts.Logger, ErrClosed: ErrClosed, Decoder: dec,
		Chunk: func() {
			if c.resetDec {
				c.resetDec = false
				dec.Reset()
			}
		},
		Dispatch: c.dispatch, Malformed: c.decodeFailed,
		Lost: func() { c.opened = false },
	})
	c.conn.Start()
	return c
}

// MaxControlTransfer returns the fragment size in use.
func (c *Client) MaxControlTransfer() int { return c.opts.MaxControlTransfer }

// Opened reports whether OPEN succeeded and nothing since (CLOSE, a
// NOT_OPENED function error, a modem reset) undid it.
func (c *Client) Opened() bool {
	c.conn.Mu.Lock()
	defer c.conn.Mu.Unlock()
	return c.opened
}

// Open opens the function: OPEN with MaxControlTransfer, retried with a
// CLOSE in between (see Options.OpenAttempts).
func (c *Client) Open(ctx context.Context) error {
	var last error
	for attempt := 0; attempt < c.opts.OpenAttempts; attempt++ {
		if attempt > 0 {
			// The function may be stuck in a session another host (or
			// this one, before a crash) opened: close it first.
			cctx, cancel := context.WithTimeout(ctx, c.opts.OpenTimeout)
			_, err := c.call(cctx, &Message{Type: TypeClose}, TypeCloseDone, false)
			cancel()
			c.log.Debug("mbim: close before re-open", "err", err)
		}
		octx, cancel := context.WithTimeout(ctx, c.opts.OpenTimeout)
		m, err := c.call(octx, &Message{Type: TypeOpen, MaxControlTransfer: uint32(c.opts.MaxControlTransfer)}, TypeOpenDone, false)
		cancel()
		if err == nil && m.Status != StatusNone {
			err = fmt.Errorf("mbim: OPEN: %w", m.Status)
		}
		if err == nil {
			c.conn.Mu.Lock()
			c.opened = true
			c.opens++
			c.conn.Mu.Unlock()
			return nil
		}
		last = err
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			break
		}
		c.log.Debug("mbim: OPEN failed", "attempt", attempt+1, "err", err)
	}
	return fmt.Errorf("mbim: open failed after retries: %w", last)
}

// CloseFunction sends CLOSE and waits for CLOSE_DONE; the client stays
// usable for a later Open. On a real modem this tears the data session
// down.
func (c *Client) CloseFunction(ctx context.Context) error {
	c.conn.Mu.Lock()
	c.opened = false
	c.conn.Mu.Unlock()
	m, err := c.call(ctx, &Message{Type: TypeClose}, TypeCloseDone, false)
	if err == nil && m.Status != StatusNone {
		err = fmt.Errorf("mbim: CLOSE: %w", m.Status)
	}
	return err
}

// Close sends CLOSE if the function is open (bounded by one second),
// stops the reader and closes the transport. Outstanding requests fail
// with ErrClosed.
func (c *Client) Close() error {
	return c.conn.Close(func() func() {
		if !c.opened || c.conn.DeadLocked() {
			return nil
		}
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.CloseFunction(ctx)
			cancel()
		}
	})
}

// Subscribe registers fn for every INDICATE_STATUS (service, CID and
// buffer in the message), including the state changes a Proxy's clients
// cause. Callbacks run one at a time, on the reader goroutine (or the
// proxy's), and must not block or keep m.Buffer. The returned func
// unsubscribes.
func (c *Client) Subscribe(fn func(m *Message)) (cancel func()) { return c.conn.Subscribe(fn) }

// OnReset registers fn to be called when the function lost its state
// under the client (NotifyReset, a NOT_OPENED function error, or the
// transport failing for good): the session must be opened and brought up
// again. fn must not block.
func (c *Client) OnReset(fn func()) (cancel func()) { return c.conn.OnReset(fn) }

// NotifyReset tells the client that the function was reset under it
// (the modem crashed and MHI recovered it, mhi.EventSysErr and
// EventRecovered): outstanding requests fail with ErrModemReset, half
// received messages are dropped, the client counts as not opened, and
// OnReset subscribers are told.
func (c *Client) NotifyReset() {
	c.conn.NotifyReset(ErrModemReset, func() {
		c.opened = false
		c.resetDec = true
	})
}

// timeoutFor returns the request timeout of a command (§9: CONNECT
// 120 s, the rest as libmbim).
func (c *Client) timeoutFor(m *Message) time.Duration {
	if m.Type == TypeCommand && m.Service == ServiceBasicConnect {
		switch {
		case m.CID == CIDIPConfiguration,
			m.CommandType == Set && (m.CID == CIDConnect || m.CID == CIDPacketService || m.CID == CIDRegisterState):
			return c.opts.LongTimeout
		}
	}
	return c.opts.Timeout
}

// Call sends a COMMAND (m.TID is replaced by a fresh transaction ID) and
// returns the COMMAND_DONE whatever its Status; the error reports only
// transport, timeout and protocol failures. The proxy forwards with it;
// most users want Command.
func (c *Client) Call(ctx context.Context, m *Message) (*Message, error) {
	if m.Type != TypeCommand {
		return nil, fmt.Errorf("mbim: Call needs a COMMAND, not %v", m.Type)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeoutFor(m))
	defer cancel()
	return c.call(ctx, m, TypeCommandDone, true)
}

// Command runs one command and returns the answer's information buffer.
// A non-success status is a *CommandError (the buffer is still returned:
// CONNECT puts the 3GPP cause in it).
func (c *Client) Command(ctx context.Context, svc UUID, cid uint32, typ CommandType, buf []byte) ([]byte, error) {
	m := &Message{Type: TypeCommand, Service: svc, CID: cid, CommandType: typ, Buffer: buf}
	r, err := c.Call(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("mbim: %s: %w", cidName(svc, cid), err)
	}
	if r.Status != StatusNone {
		return r.Buffer, &CommandError{Service: svc, CID: cid, Set: typ == Set, Status: r.Status}
	}
	return r.Buffer, nil
}

// call sends m with a new TID and waits for the answer of type want.
func (c *Client) call(ctx context.Context, m *Message, want MessageType, needOpen bool) (*Message, error) {
	c.conn.Mu.Lock()
	err := c.conn.UsableLocked()
	if err == nil && needOpen && !c.opened {
		err = ErrNotOpened
	}
	if err != nil {
		c.conn.Mu.Unlock()
		return nil, err
	}
	// libmbim counts 1..0xFFFFFFFF and wraps to 1; skip IDs in use.
	c.nextTID = ctrlclient.NextID(c.nextTID, math.MaxUint32, func(tid uint32) bool { return !c.conn.WaitingLocked(tid) })
	tid := c.nextTID
	ch := c.conn.AddLocked(tid, want)
	c.conn.Mu.Unlock()

	req := *m
	req.TID = tid
	if err := c.send(ctx, &req); err != nil {
		c.conn.Forget(tid)
		return nil, fmt.Errorf("mbim: send %v: %w", req.Type, err)
	}
	r, err := c.conn.Wait(ctx, tid, ch)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: %v (tid %d)", ErrTimeout, m.Type, tid)
	}
	if err != nil {
		return nil, err
	}
	return r.M, r.Err
}

// send writes m in fragments of at most MaxControlTransfer bytes.
func (c *Client) send(ctx context.Context, m *Message) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return m.Fragments(c.opts.MaxControlTransfer, func(f []byte) error {
		return c.conn.T.Send(ctx, f)
	})
}

// decodeFailed fails the transaction a malformed answer belonged to, so
// that the caller hears about it now rather than at its timeout.
func (c *Client) decodeFailed(err error) {
	c.log.Warn("mbim: dropped malformed input", "err", err)
	var de *DecodeError
	if errors.As(err, &de) && de.TID != 0 && de.Type&0x80000000 != 0 && de.Type != TypeIndicateStatus {
		c.complete(de.TID, 0, ctrlclient.Result[*Message]{Err: err})
	}
}

// complete hands the answer (or the error) to the waiting call tid; typ
// 0 matches any call (FUNCTION_ERROR carries no type, §2.2).
func (c *Client) complete(tid uint32, typ MessageType, r ctrlclient.Result[*Message]) bool {
	return c.conn.Complete(tid, r, func(want MessageType) bool { return typ == 0 || want == typ })
}

func (c *Client) dispatch(m *Message) {
	switch m.Type {
	case TypeOpenDone, TypeCloseDone, TypeCommandDone:
		if !c.complete(m.TID, m.Type, ctrlclient.Result[*Message]{M: m}) {
			c.log.Debug("mbim: unexpected answer (late or unknown transaction)", "msg", m.String())
		}
	case TypeFunctionError:
		if m.Error == ProtoNotOpened {
			c.notOpened()
		}
		if !c.complete(m.TID, 0, ctrlclient.Result[*Message]{Err: &FunctionError{TID: m.TID, Code: m.Error}}) {
			c.log.Warn("mbim: function error", "tid", m.TID, "code", m.Error)
		}
	case TypeIndicateStatus:
		if m.Service == ServiceProxyControl && m.CID == CIDProxyVersion {
			if v, err := ParseVersionInfo(m.Buffer); err == nil {
				c.conn.Mu.Lock()
				c.proxyEx = v.Extended
				c.conn.Mu.Unlock()
			}
		}
		c.conn.Indicate(m)
	default:
		c.log.Debug("mbim: ignored message from function", "msg", m.String())
	}
}

// announce delivers an indication the function will not send: a state
// change another user of the client (a proxy client) asked for. Functions
// indicate only changes the host did not request, and behind a proxy the
// modem sees a single host.
func (c *Client) announce(m *Message) {
	ind := *m
	ind.Type, ind.TID = TypeIndicateStatus, 0
	c.conn.Indicate(&ind)
}

// notOpened handles a NOT_OPENED function error: the function forgot the
// session (it restarted on its own), which is a reset for the user.
func (c *Client) notOpened() {
	c.conn.Mu.Lock()
	was := c.opened
	c.opened = false
	c.conn.Mu.Unlock()
	if was {
		c.conn.Reset()
	}
}
