package qmi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/internal/ctrlclient"
	"github.com/mhistack/mhistack/internal/ctrlstream"
	"github.com/mhistack/mhistack/mhi"
)

// Transport carries QMUX frames to and from the modem: Send writes one
// frame, Recv returns the next chunk of the modem's output, which the
// Client reads as a byte stream. *mhi.ControlPort is a Transport;
// StreamTransport adapts a pipe, a socket or a character device.
type Transport = ctrlstream.Transport

// StreamTransport adapts a byte stream (a socket, a pipe, a PTY,
// /dev/wwan0qmi0) to Transport: one Write per frame, Recv returns what
// one Read returned (at most MaxFrame bytes).
type StreamTransport = ctrlstream.Stream

// NewStreamTransport wraps rw; Close closes it.
func NewStreamTransport(rw io.ReadWriteCloser) *StreamTransport { return ctrlstream.New(rw, MaxFrame) }

// The MHI control port is the transport on real and emulated modems.
var _ Transport = (*mhi.ControlPort)(nil)

// Errors of the client. Request errors wrap them.
var (
	ErrClosed     = errors.New("qmi: client closed")
	ErrTimeout    = errors.New("qmi: request timed out")
	ErrModemReset = errors.New("qmi: modem reset")
)

// Options configure a Client.
type Options struct {
	// Timeout bounds a request without a longer timeout of its own
	// (default 10 s); LongTimeout bounds WDS Start Network, which waits
	// for the network (default 120 s, libqmi's). A request's context can
	// only shorten them.
	Timeout, LongTimeout time.Duration
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.LongTimeout <= 0 {
		o.LongTimeout = 120 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Client is the host side of a QMI port: it allocates client IDs,
// assigns transaction IDs (8-bit on CTL, 16-bit per service client),
// matches responses to requests by (service, client, transaction,
// message ID), and hands indications to subscribers. A response that
// matches no outstanding request on all four (a modem answering a
// transaction it already answered or that timed out, or with another
// message's ID) is dropped, logged at debug and counted (Stats); the
// request keeps waiting for its own answer.
//
// All methods may be called from any goroutine. The client owns one
// goroutine, the reader, which Close stops; subscriber callbacks run on it
// and must not block.
type Client struct {
	conn *ctrlclient.Conn[pendingKey, uint16, *Message] // waits keep the message ID
	// unmatched counts responses that answered no outstanding request.
	unmatched atomic.Uint64
	opts      Options
	log       *slog.Logger

	// guarded by conn.Mu
	mu   *sync.Mutex         // conn.Mu
	tids map[ClientID]uint16 // last transaction ID per client
	cids map[ClientID]bool   // allocated client IDs, released by Close
}

type pendingKey struct {
	svc    Service
	client uint8
	tid    uint16
}

// NewClient starts a client over t; the client owns t and closes it in
// Close.
func NewClient(t Transport, opts Options) *Client {
	opts.setDefaults()
	c := &Client{opts: opts, log: opts.Logger, tids: map[ClientID]uint16{}, cids: map[ClientID]bool{}}
	c.conn = ctrlclient.New(t, ctrlclient.Config[pendingKey, uint16, *Message]{
		Proto: "qmi", Logger: opts.Logger, ErrClosed: ErrClosed, Decoder: &Decoder{},
		Dispatch: c.dispatch, Malformed: c.malformed,
	})
	c.mu = &c.conn.Mu
	c.conn.Start()
	return c
}

// DialMHI opens the modem's "QMI" control channel pair (14/15), starts a
// Client on it, synchronises CTL (CTL Sync, which makes the modem drop
// client IDs a previous host left) and ties the client to the
// controller's SYS_ERR recovery (NotifyReset through
// mhi.ControlOptions.OnReset). Close the client to release the channels.
func DialMHI(ctx context.Context, c *mhi.Controller, opts Options) (*Client, error) {
	return ctrlclient.Dial(func(onReset func()) (Transport, error) {
		return c.OpenControl(ctx, "QMI", mhi.ControlOptions{OnReset: onReset})
	}, func(t Transport) *Client { return NewClient(t, opts) }, (*Client).NotifyReset,
		func(cl *Client) error { return cl.Sync(ctx) })
}

// Close releases the client IDs still allocated (bounded by one second),
// stops the reader and closes the transport. Outstanding requests fail
// with ErrClosed.
func (c *Client) Close() error {
	return c.conn.Close(func() func() {
		var cids []ClientID
		if !c.conn.DeadLocked() {
			for id := range c.cids {
				cids = append(cids, id)
			}
		}
		if len(cids) == 0 {
			return nil
		}
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			for _, id := range cids {
				_ = c.ReleaseCID(ctx, id)
			}
			cancel()
		}
	})
}

// Subscribe registers fn for every indication. Callbacks run one at a
// time on the reader goroutine and must not block or keep the message.
func (c *Client) Subscribe(fn func(*Message)) (cancel func()) { return c.conn.Subscribe(fn) }

// OnReset registers fn to be called when the modem lost its state under
// the client (NotifyReset, or the transport failing for good): client
// IDs and calls are gone. fn must not block.
func (c *Client) OnReset(fn func()) (cancel func()) { return c.conn.OnReset(fn) }

// NotifyReset tells the client the modem was reset (mhi.EventSysErr,
// EventRecovered): outstanding requests fail with ErrModemReset, the
// client IDs are forgotten, and OnReset subscribers are told.
func (c *Client) NotifyReset() {
	c.conn.NotifyReset(ErrModemReset, func() { c.cids = map[ClientID]bool{} })
}

// Do sends request m (its TID is assigned here; Service and Client say
// where it goes) and waits for the response. A response whose result
// TLV reports a failure is returned with an *Error wrapping the code.
func (c *Client) Do(ctx context.Context, m *Message) (*Message, error) {
	d := c.opts.Timeout
	if m.Service == ServiceWDS && m.ID == WDSStartNetwork {
		d = c.opts.LongTimeout
	}
	return c.do(ctx, m, d)
}

// do is Do bounded by d instead of the options' timeouts.
func (c *Client) do(ctx context.Context, m *Message, d time.Duration) (*Message, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c.mu.Lock()
	if err := c.conn.UsableLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	id := ClientID{Service: m.Service, Client: m.Client}
	limit := uint16(0xFFFF)
	if m.Service == ServiceCTL {
		limit = 0xFF
	}
	tid := ctrlclient.NextID(c.tids[id], limit, func(tid uint16) bool {
		return !c.conn.WaitingLocked(pendingKey{m.Service, m.Client, tid})
	})
	c.tids[id] = tid
	key := pendingKey{m.Service, m.Client, tid}
	ch := c.conn.AddLocked(key, m.ID)
	c.mu.Unlock()

	req := *m
	req.TID, req.Kind, req.FromModem = tid, Request, false
	b, err := req.Marshal()
	if err == nil {
		err = c.conn.T.Send(ctx, b)
	}
	if err != nil {
		c.conn.Forget(key)
		return nil, fmt.Errorf("qmi: send %s: %w", MessageName(m.Service, m.ID), err)
	}
	r, err := c.conn.Wait(ctx, key, ch)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: %s (client %d, tid %d)", ErrTimeout, MessageName(m.Service, m.ID), m.Client, tid)
	case err != nil:
		return nil, err
	case r.Err != nil:
		return nil, fmt.Errorf("qmi: %s: %w", MessageName(m.Service, m.ID), r.Err)
	}
	return r.M, r.M.Result()
}

// Sync sends CTL Sync: the modem releases every client ID (libqmi sends
// it when it opens a port).
func (c *Client) Sync(ctx context.Context) error {
	_, err := c.Do(ctx, NewRequest(ServiceCTL, CTLSync))
	return err
}

// VersionInfo asks which services the modem has, with their versions.
func (c *Client) VersionInfo(ctx context.Context) ([]ServiceVersion, error) {
	r, err := c.Do(ctx, NewRequest(ServiceCTL, CTLGetVersionInfo))
	if err != nil {
		return nil, err
	}
	return ParseVersionInfo(r)
}

// AllocateCID allocates a client ID of service s.
func (c *Client) AllocateCID(ctx context.Context, s Service) (uint8, error) {
	if s == ServiceCTL {
		return 0, errors.New("qmi: CTL has no client IDs")
	}
	r, err := c.Do(ctx, AllocateCIDRequest(s))
	if err != nil {
		return 0, err
	}
	id, err := ParseClientID(r)
	if err != nil {
		return 0, err
	}
	if id.Service != s {
		return 0, fmt.Errorf("qmi: asked a %s client ID, the modem allocated one of %s", s, id.Service)
	}
	c.mu.Lock()
	c.cids[id] = true
	c.mu.Unlock()
	return id.Client, nil
}

// ReleaseCID releases a client ID.
func (c *Client) ReleaseCID(ctx context.Context, id ClientID) error {
	c.mu.Lock()
	delete(c.cids, id)
	c.mu.Unlock()
	_, err := c.Do(ctx, ReleaseCIDRequest(id))
	return err
}

// Service returns a handle that sends requests as client id of s.
func (c *Client) Service(s Service, id uint8) *ServiceClient {
	return &ServiceClient{c: c, id: ClientID{Service: s, Client: id}}
}

// ServiceClient is one allocated client ID: requests go out with it.
type ServiceClient struct {
	c  *Client
	id ClientID
}

// ID returns the (service, client) pair.
func (s *ServiceClient) ID() ClientID { return s.id }

// Do sends m as this client (m.Service is set from the client).
func (s *ServiceClient) Do(ctx context.Context, m *Message) (*Message, error) {
	req := *m
	req.Service, req.Client = s.id.Service, s.id.Client
	return s.c.Do(ctx, &req)
}

// malformed fails the transaction a malformed response belonged to, so
// the caller hears about it now rather than at its timeout.
func (c *Client) malformed(err error) {
	c.log.Warn("qmi: dropped malformed input", "err", err)
	var fe *FormatError
	if errors.As(err, &fe) && fe.Header && fe.Kind == Response {
		c.conn.Complete(pendingKey{fe.Service, fe.Client, fe.TID}, ctrlclient.Result[*Message]{Err: err}, sameID(fe.ID))
	}
}

// sameID matches a waiting request by its message ID.
func sameID(id uint16) func(uint16) bool { return func(want uint16) bool { return want == id } }

// ClientStats counts what the client refused.
type ClientStats struct {
	// Unmatched counts responses that matched no outstanding request's
	// service, client ID, transaction ID and message ID.
	Unmatched uint64
}

// Stats returns the counters.
func (c *Client) Stats() ClientStats { return ClientStats{Unmatched: c.unmatched.Load()} }

func (c *Client) dispatch(m *Message) {
	switch {
	case !m.FromModem:
		c.log.Debug("qmi: ignored a request from the modem side", "msg", m.String())
	case m.Kind == Response:
		if !c.conn.Complete(pendingKey{m.Service, m.Client, m.TID}, ctrlclient.Result[*Message]{M: m}, sameID(m.ID)) {
			c.unmatched.Add(1)
			c.log.Debug("qmi: dropped a response that matches no outstanding request (service, client, transaction, message ID)", "msg", m.String())
		}
	case m.Kind == Indication:
		c.conn.Indicate(m)
	default:
		c.log.Debug("qmi: ignored message from the modem", "msg", m.String())
	}
}
