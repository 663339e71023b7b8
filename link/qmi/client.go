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

	"github.com/mhistack/mhistack/internal/callbacks"
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
// matches responses to requests by (service, client, transaction), and
// hands indications to subscribers.
//
// All methods may be called from any goroutine. The client owns one
// goroutine, the reader, which Close stops; subscriber callbacks run on it
// and must not block.
type Client struct {
	t    Transport
	opts Options
	log  *slog.Logger

	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	tids    map[ClientID]uint16 // last transaction ID per client
	pending map[pendingKey]chan result
	cids    map[ClientID]bool // allocated client IDs, released by Close
	closed  bool
	dead    error
	subs    callbacks.Set[func(*Message)]
	resets  callbacks.Set[func()]
	subMu   sync.Mutex // one callback at a time
}

type pendingKey struct {
	svc    Service
	client uint8
	tid    uint16
}

type result struct {
	m   *Message
	err error
}

// NewClient starts a client over t; the client owns t and closes it in
// Close.
func NewClient(t Transport, opts Options) *Client {
	opts.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{t: t, opts: opts, log: opts.Logger, ctx: ctx, stop: cancel, done: make(chan struct{}),
		tids: map[ClientID]uint16{}, pending: map[pendingKey]chan result{}, cids: map[ClientID]bool{}}
	go c.read()
	return c
}

// DialMHI opens the modem's "QMI" control channel pair (14/15), starts a
// Client on it, synchronises CTL (CTL Sync, which makes the modem drop
// client IDs a previous host left) and ties the client to the
// controller's SYS_ERR recovery (NotifyReset through
// mhi.ControlOptions.OnReset). Close the client to release the channels.
func DialMHI(ctx context.Context, c *mhi.Controller, opts Options) (*Client, error) {
	var cl atomic.Pointer[Client]
	port, err := c.OpenControl(ctx, "QMI", mhi.ControlOptions{OnReset: func() {
		if c := cl.Load(); c != nil {
			c.NotifyReset()
		}
	}})
	if err != nil {
		return nil, err
	}
	client := NewClient(port, opts)
	cl.Store(client)
	if err := client.Sync(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}

// Close releases the client IDs still allocated (bounded by one second),
// stops the reader and closes the transport. Outstanding requests fail
// with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	var cids []ClientID
	if c.dead == nil {
		for id := range c.cids {
			cids = append(cids, id)
		}
	}
	c.mu.Unlock()
	if len(cids) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		for _, id := range cids {
			_ = c.ReleaseCID(ctx, id)
		}
		cancel()
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	err := c.t.Close()
	<-c.done
	c.failAll(ErrClosed)
	return err
}

// Subscribe registers fn for every indication. Callbacks run one at a
// time on the reader goroutine and must not block or keep the message.
func (c *Client) Subscribe(fn func(*Message)) (cancel func()) { return c.subs.Add(fn) }

// OnReset registers fn to be called when the modem lost its state under
// the client (NotifyReset, or the transport failing for good): client
// IDs and calls are gone. fn must not block.
func (c *Client) OnReset(fn func()) (cancel func()) { return c.resets.Add(fn) }

// NotifyReset tells the client the modem was reset (mhi.EventSysErr,
// EventRecovered): outstanding requests fail with ErrModemReset, the
// client IDs are forgotten, and OnReset subscribers are told.
func (c *Client) NotifyReset() {
	c.mu.Lock()
	pend := c.pending
	c.pending = map[pendingKey]chan result{}
	c.cids = map[ClientID]bool{}
	c.mu.Unlock()
	for _, ch := range pend {
		ch <- result{err: ErrModemReset}
	}
	for _, fn := range c.resets.All() {
		fn()
	}
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
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, ErrClosed
	case c.dead != nil:
		c.mu.Unlock()
		return nil, c.dead
	}
	id := ClientID{Service: m.Service, Client: m.Client}
	limit := uint16(0xFFFF)
	if m.Service == ServiceCTL {
		limit = 0xFF
	}
	// Transactions count 1..limit and wrap to 1, skipping IDs in use.
	tid := c.tids[id]
	for {
		tid++
		if tid == 0 || tid > limit {
			tid = 1
		}
		if c.pending[pendingKey{m.Service, m.Client, tid}] == nil {
			break
		}
	}
	c.tids[id] = tid
	key := pendingKey{m.Service, m.Client, tid}
	ch := make(chan result, 1)
	c.pending[key] = ch
	c.mu.Unlock()

	req := *m
	req.TID, req.Kind, req.FromModem = tid, Request, false
	b, err := req.Marshal()
	if err == nil {
		err = c.t.Send(ctx, b)
	}
	if err != nil {
		c.forget(key)
		return nil, fmt.Errorf("qmi: send %s: %w", MessageName(m.Service, m.ID), err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("qmi: %s: %w", MessageName(m.Service, m.ID), r.err)
		}
		return r.m, r.m.Result()
	case <-ctx.Done():
		c.forget(key)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %s (client %d, tid %d)", ErrTimeout, MessageName(m.Service, m.ID), m.Client, tid)
		}
		return nil, ctx.Err()
	}
}

func (c *Client) forget(k pendingKey) {
	c.mu.Lock()
	delete(c.pending, k)
	c.mu.Unlock()
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

// read is the reader goroutine.
func (c *Client) read() {
	defer close(c.done)
	var dec Decoder
	for {
		chunk, err := c.t.Recv(c.ctx)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil && len(chunk) == 0 {
			c.log.Warn("qmi: transport failed", "err", err)
			c.mu.Lock()
			c.dead = fmt.Errorf("qmi: transport: %w", err)
			dead := c.dead
			c.mu.Unlock()
			c.failAll(dead)
			for _, fn := range c.resets.All() {
				fn()
			}
			return
		}
		dec.Write(chunk)
		for {
			m, err := dec.Next()
			if err != nil {
				c.malformed(err)
				continue
			}
			if m == nil {
				break
			}
			c.dispatch(m)
		}
	}
}

// malformed fails the transaction a malformed response belonged to, so
// the caller hears about it now rather than at its timeout.
func (c *Client) malformed(err error) {
	c.log.Warn("qmi: dropped malformed input", "err", err)
	var fe *FormatError
	if errors.As(err, &fe) && fe.Header && fe.Kind == Response {
		c.complete(pendingKey{fe.Service, fe.Client, fe.TID}, result{err: err})
	}
}

func (c *Client) complete(k pendingKey, r result) bool {
	c.mu.Lock()
	ch := c.pending[k]
	delete(c.pending, k)
	c.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- r
	return true
}

func (c *Client) failAll(err error) {
	c.mu.Lock()
	pend := c.pending
	c.pending = map[pendingKey]chan result{}
	c.mu.Unlock()
	for _, ch := range pend {
		ch <- result{err: err}
	}
}

func (c *Client) dispatch(m *Message) {
	switch {
	case !m.FromModem:
		c.log.Debug("qmi: ignored a request from the modem side", "msg", m.String())
	case m.Kind == Response:
		if !c.complete(pendingKey{m.Service, m.Client, m.TID}, result{m: m}) {
			c.log.Debug("qmi: unexpected response (late or unknown transaction)", "msg", m.String())
		}
	case m.Kind == Indication:
		c.subMu.Lock()
		for _, fn := range c.subs.All() {
			fn(m)
		}
		c.subMu.Unlock()
	default:
		c.log.Debug("qmi: ignored message from the modem", "msg", m.String())
	}
}
