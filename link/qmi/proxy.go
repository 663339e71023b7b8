package qmi

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"

	"github.com/mhistack/mhistack/internal/ctrlproxy"
	"github.com/mhistack/mhistack/internal/ctrlstream"
	"github.com/mhistack/mhistack/internal/unixpeer"
	"time"
)

// ProxySocket is the abstract unix socket name libqmi clients connect to
// (qmicli -p, ModemManager): "\0qmi-proxy" (libqmi qmi-proxy.h).
const ProxySocket = "qmi-proxy"

// CTLInternalProxyOpen is the CTL request a libqmi client sends first to
// a qmi-proxy, with the device path as a whole-TLV string in TLV 0x01
// (libqmi qmi-proxy.c, "internal proxy open"). It never reaches a modem.
const CTLInternalProxyOpen uint16 = 0xFF00

// ProxyOptions configure a Proxy.
type ProxyOptions struct {
	// Name is the abstract socket name (default ProxySocket). Tests use
	// their own name; qmicli only knows the default.
	Name string
	// DevicePath, when set, is the only device path a client may name
	// in its internal proxy open; otherwise any path is accepted, since
	// the proxy serves one modem whatever the client calls it.
	DevicePath string
	// AllowUID decides which peers may connect (default: root and the
	// proxy's own user, like libqmi's proxy).
	AllowUID func(uid uint32) bool
	// MaxClients bounds connected clients (default 32); MaxInFlight
	// bounds the requests one client has outstanding (default 16).
	MaxClients, MaxInFlight int
	// RequestTimeout bounds a forwarded request (default 300 s, libqmi's
	// proxy's): clients choose their own, longer than the Client's
	// Options.Timeout for slow requests such as a NAS network scan.
	RequestTimeout time.Duration
	// MaxDisowned bounds the client IDs kept for clients that left
	// without releasing them (default 32); beyond it the oldest are
	// released at the modem.
	MaxDisowned int
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

// Proxy shares a Client with libqmi programs: it speaks libqmi's
// qmi-proxy protocol (libqmi qmi-proxy.c) on an abstract unix socket, a
// stream of QMUX frames. A client first sends CTL Internal Proxy Open
// (answered here); then its requests are forwarded through the Client,
// which gives them its own transaction IDs (one CTL counter and one
// counter per client ID, shared with mhistack's own requests), and the
// responses go back with the client's transaction IDs.
//
// The proxy tracks which connection holds which (service, client ID): an
// Allocate CID it forwarded, or any client ID a connection uses that
// nobody else holds. Indications for a client ID go to its holder; a
// broadcast indication (client ID 0xFF) goes to every connection holding
// a client ID of that service. A connection may not use or release a
// client ID another connection or mhistack itself holds (answered
// INVALID_CLIENT_ID without reaching the modem), and CTL Sync, which
// would make the modem drop every client ID, is answered here by
// releasing only the sender's client IDs. As in libqmi's proxy, client
// IDs a connection leaves without releasing (qmicli
// --client-no-release-cid) are kept, disowned, for a later connection
// that names them (--client-cid); at most MaxDisowned are kept, the
// oldest are released. A modem reset forgets them all.
//
// The proxy owns an accept goroutine and, per connection, a reader, a
// writer and one goroutine per outstanding request; Close stops them all
// and releases the client IDs the proxy's connections held.
type Proxy struct {
	c    *Client
	opts ProxyOptions
	srv  *ctrlproxy.Server[*proxyClient]

	owner    map[ClientID]*proxyClient // nil: disowned; guarded by srv.Mu
	disowned []ClientID                // oldest first; guarded by srv.Mu
	unsub    func()
	unreset  func()
}

// ListenProxy listens on the abstract socket and serves c. It fails if
// the name is taken (a libqmi qmi-proxy or another mhistack runs).
func ListenProxy(c *Client, opts ProxyOptions) (*Proxy, error) {
	p := NewProxy(c, opts)
	return ctrlproxy.Listen(p, p.srv)
}

// NewProxy returns a proxy that serves connections handed to ServeConn
// (ListenProxy also accepts them from its socket).
func NewProxy(c *Client, opts ProxyOptions) *Proxy {
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 300 * time.Second
	}
	if opts.MaxDisowned <= 0 {
		opts.MaxDisowned = 32
	}
	p := &Proxy{c: c, opts: opts, owner: map[ClientID]*proxyClient{}}
	p.srv = ctrlproxy.New(ctrlproxy.Config[*proxyClient]{Name: cmp.Or(opts.Name, ProxySocket), Proto: "qmi",
		AllowUID: opts.AllowUID, MaxClients: opts.MaxClients, MaxInFlight: opts.MaxInFlight, Logger: opts.Logger,
		NewClient: p.newClient, Serve: (*proxyClient).read, Left: (*proxyClient).leave})
	p.unsub = c.Subscribe(p.indication)
	p.unreset = c.OnReset(p.reset)
	return p
}

// newClient is the state of a new connection (p.srv.Mu held).
func (p *Proxy) newClient(peer *ctrlproxy.Peer) *proxyClient {
	return &proxyClient{Peer: peer, p: p, left: make(chan struct{})}
}

// Name returns the abstract socket name.
func (p *Proxy) Name() string { return p.srv.Name() }

// Clients returns the number of connected clients.
func (p *Proxy) Clients() int { return p.srv.Clients() }

// ClientIDs returns the client IDs the proxy's connections hold and the
// disowned ones, sorted.
func (p *Proxy) ClientIDs() (held, disowned []ClientID) {
	p.srv.Mu.Lock()
	defer p.srv.Mu.Unlock()
	for id, pc := range p.owner {
		if pc != nil {
			held = append(held, id)
		}
	}
	disowned = slices.Clone(p.disowned)
	cmp := func(a, b ClientID) int { return int(a.Service)<<8 + int(a.Client) - int(b.Service)<<8 - int(b.Client) }
	slices.SortFunc(held, cmp)
	slices.SortFunc(disowned, cmp)
	return held, disowned
}

// Close stops listening, disconnects every client, waits for all the
// proxy's goroutines and releases the client IDs its clients held
// (bounded by one second). The Client stays open.
func (p *Proxy) Close() error {
	closed, err := p.srv.Close(func() {
		p.unsub()
		p.unreset()
	})
	if !closed {
		return nil
	}
	p.srv.Mu.Lock()
	ids := make([]ClientID, 0, len(p.owner))
	for id := range p.owner {
		ids = append(ids, id)
	}
	p.owner, p.disowned = map[ClientID]*proxyClient{}, nil
	p.srv.Mu.Unlock()
	p.release(ids)
	return err
}

// release releases client IDs at the modem, bounded by one second.
func (p *Proxy) release(ids []ClientID) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, id := range ids {
		if _, err := p.c.Do(ctx, ReleaseCIDRequest(id)); err != nil {
			p.srv.Log.Debug("qmi proxy: release client ID", "service", id.Service, "client", id.Client, "err", err)
		}
	}
}

// ServeConn serves one client connection until it closes or the proxy
// does; it returns at once (the connection's goroutines belong to the
// proxy). conn is closed when done.
func (p *Proxy) ServeConn(conn net.Conn) { p.srv.ServeConn(conn) }

// reset runs when the modem lost its client IDs: nobody holds any now.
func (p *Proxy) reset() {
	p.srv.Mu.Lock()
	p.owner, p.disowned = map[ClientID]*proxyClient{}, nil
	p.srv.Mu.Unlock()
}

// indication runs on the Client's reader goroutine: it queues the
// indication for its holder, or for a broadcast every holder of a client
// ID of the service, never waiting. CTL indications stay with mhistack
// (libqmi's proxy does not forward them either).
func (p *Proxy) indication(m *Message) {
	if m.Service == ServiceCTL {
		return
	}
	var to []*proxyClient
	p.srv.Mu.Lock()
	if m.Client == BroadcastClient {
		for id, pc := range p.owner {
			if pc != nil && id.Service == m.Service && !slices.Contains(to, pc) {
				to = append(to, pc)
			}
		}
	} else if pc := p.owner[ClientID{m.Service, m.Client}]; pc != nil {
		if _, _, self := p.holderLocked(ClientID{m.Service, m.Client}); !self {
			to = append(to, pc)
		}
	}
	p.srv.Mu.Unlock()
	if len(to) == 0 {
		return
	}
	b, err := m.Marshal()
	if err != nil {
		return
	}
	for _, pc := range to {
		pc.queue(b)
	}
}

// holderLocked says who holds id: a proxy connection, the disowned list
// (nil, true) or nobody the proxy knows (nil, false); self reports that
// mhistack's own Client allocated it. The caller holds p.srv.Mu.
func (p *Proxy) holderLocked(id ClientID) (pc *proxyClient, known, self bool) {
	pc, known = p.owner[id]
	p.c.mu.Lock()
	self = p.c.cids[id]
	p.c.mu.Unlock()
	return pc, known, self
}

// disownLocked moves what pc held to the disowned list and returns the
// client IDs beyond MaxDisowned to release. The caller holds p.srv.Mu.
func (p *Proxy) disownLocked(pc *proxyClient) (drop []ClientID) {
	var ids []ClientID
	for id, o := range p.owner {
		if o == pc {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b ClientID) int {
		return int(a.Service)<<8 + int(a.Client) - int(b.Service)<<8 - int(b.Client)
	})
	for _, id := range ids {
		p.owner[id] = nil
		p.disowned = append(p.disowned, id)
		p.srv.Log.Debug("qmi proxy: client ID disowned", "service", id.Service, "client", id.Client)
	}
	for len(p.disowned) > p.opts.MaxDisowned {
		id := p.disowned[0]
		p.disowned = p.disowned[1:]
		delete(p.owner, id)
		drop = append(drop, id)
	}
	return drop
}

func (p *Proxy) undisownLocked(id ClientID) {
	if i := slices.Index(p.disowned, id); i >= 0 {
		p.disowned = slices.Delete(p.disowned, i, i+1)
	}
}

// proxyClient is one connected libqmi client.
type proxyClient struct {
	*ctrlproxy.Peer
	p    *Proxy
	left chan struct{} // closed when the client's IDs are disowned

	opened bool // guarded by p.srv.Mu
}

// queue hands an encoded frame to the writer; a client that does not
// read loses frames (logged) rather than stalling the modem.
func (pc *proxyClient) queue(b []byte) {
	if !pc.Put(b) {
		pc.p.srv.Log.Warn("qmi proxy: client not reading, message dropped")
	}
}

func (pc *proxyClient) send(m *Message) {
	b, err := m.Marshal()
	if err != nil {
		pc.p.srv.Log.Warn("qmi proxy: cannot encode", "msg", m.String(), "err", err)
		return
	}
	pc.queue(b)
}

// read decodes the client's stream and answers or forwards each request.
func (pc *proxyClient) read() {
	ctrlstream.ReadAll(pc.Conn, 4096, &Decoder{}, pc.handle, pc.malformed)
}

// leave runs when the client is gone (p.srv.Mu held): its client IDs are
// disowned, and those beyond MaxDisowned released.
func (pc *proxyClient) leave() func() {
	p := pc.p
	var drop []ClientID
	if !p.srv.ClosedLocked() {
		drop = p.disownLocked(pc)
	}
	return func() {
		close(pc.left)
		p.release(drop)
	}
}

// malformed answers a malformed request whose header could be read with
// MALFORMED_MESSAGE; anything else is logged and dropped.
func (pc *proxyClient) malformed(err error) {
	pc.p.srv.Log.Debug("qmi proxy: malformed input from client", "err", err)
	var fe *FormatError
	if errors.As(err, &fe) && fe.Header && fe.Kind == Request && (fe.Service != ServiceCTL || fe.TID <= 0xFF) {
		req := &Message{Service: fe.Service, Client: fe.Client, Kind: Request, TID: fe.TID, ID: fe.ID}
		pc.send(req.Reply(ErrMalformedMessage))
	}
}

// handle answers or forwards one message from the client.
func (pc *proxyClient) handle(m *Message) {
	p := pc.p
	if m.FromModem || m.Kind != Request {
		p.srv.Log.Debug("qmi proxy: ignored a non-request from a client", "msg", m.String())
		return
	}
	if m.Service == ServiceCTL && m.ID == CTLInternalProxyOpen {
		pc.open(m)
		return
	}
	p.srv.Mu.Lock()
	opened := pc.opened
	p.srv.Mu.Unlock()
	if !opened {
		// libqmi clients always open first; the device is "not
		// ready" for one that does not.
		pc.send(m.Reply(ErrDeviceNotReady))
		return
	}
	if m.Service == ServiceCTL {
		switch m.ID {
		case CTLSync:
			pc.sync(m)
			return
		case CTLReleaseCID:
			id, err := ParseClientID(m)
			if err != nil {
				pc.send(m.Reply(ErrorCodeOf(err)))
				return
			}
			if !pc.claim(id, false) {
				pc.send(m.Reply(ErrInvalidClientID, id.TLV()))
				return
			}
		}
	} else if !pc.claim(ClientID{m.Service, m.Client}, true) {
		pc.send(m.Reply(ErrInvalidClientID))
		return
	}
	pc.forward(m)
}

// open answers Internal Proxy Open.
func (pc *proxyClient) open(m *Message) {
	p := pc.p
	path, ok := m.Get(0x01)
	switch {
	case !ok || len(path) == 0:
		pc.send(m.Reply(ErrMissingArgument))
		return
	case p.opts.DevicePath != "" && string(path) != p.opts.DevicePath:
		p.srv.Log.Warn("qmi proxy: client asked for another device", "path", string(path))
		pc.send(m.Reply(ErrInvalidArgument))
		return
	}
	p.srv.Mu.Lock()
	pc.opened = true
	p.srv.Mu.Unlock()
	pc.send(m.Reply(ErrNone))
}

// claim checks that the client may use (keep true) or release (keep
// false) id: nobody else holds it. Using it makes the client its holder
// (a disowned ID is re-owned); releasing it forgets it.
//
// A connection that just ended may still hold the ID: qmicli run twice in
// a row, --client-no-release-cid then --client-cid, can be faster than
// the proxy notices the first one leave. The claim waits for such a
// holder to leave (at most leaveWait) before refusing.
func (pc *proxyClient) claim(id ClientID, keep bool) bool {
	ok, other := pc.tryClaim(id, keep)
	if ok || other == nil {
		return ok
	}
	t := time.NewTimer(leaveWait)
	defer t.Stop()
	select {
	case <-other.left:
		ok, _ = pc.tryClaim(id, keep)
	case <-t.C:
	case <-pc.Ctx.Done():
	}
	if !ok {
		pc.p.srv.Log.Debug("qmi proxy: client ID held by another connection", "service", id.Service, "client", id.Client)
	}
	return ok
}

// leaveWait bounds how long a claim waits for another connection that
// holds the ID to leave.
const leaveWait = 500 * time.Millisecond

// tryClaim is claim without waiting; other is the connection holding the
// ID when that is why it fails.
func (pc *proxyClient) tryClaim(id ClientID, keep bool) (ok bool, other *proxyClient) {
	p := pc.p
	p.srv.Mu.Lock()
	defer p.srv.Mu.Unlock()
	o, known, self := p.holderLocked(id)
	switch {
	case self:
		p.srv.Log.Debug("qmi proxy: client ID held by mhistack", "service", id.Service, "client", id.Client)
		return false, nil
	case o != nil && o != pc:
		return false, o
	case !keep:
		delete(p.owner, id)
		p.undisownLocked(id)
	case o == nil:
		if known {
			p.undisownLocked(id)
		}
		p.owner[id] = pc
	}
	return true, nil
}

// sync answers CTL Sync without forwarding it (it would drop mhistack's
// client IDs too): the client's own client IDs are released.
func (pc *proxyClient) sync(m *Message) {
	p := pc.p
	p.srv.Mu.Lock()
	var ids []ClientID
	for id, o := range p.owner {
		if o == pc {
			ids = append(ids, id)
			delete(p.owner, id)
		}
	}
	p.srv.Mu.Unlock()
	p.release(ids)
	pc.send(m.Reply(ErrNone))
}

// forward sends a request to the modem on its own goroutine and answers
// with the client's transaction ID.
func (pc *proxyClient) forward(m *Message) {
	if !pc.Go(func() { pc.request(m) }) {
		pc.send(m.Reply(ErrDeviceNotReady))
	}
}

// request is forward's goroutine.
func (pc *proxyClient) request(m *Message) {
	ctx, d := pc.Ctx, pc.p.opts.RequestTimeout
	if m.Service == ServiceCTL && m.ID == CTLAllocateCID {
		// Finish an allocation even if the client leaves, so
		// that the ID is tracked (disowned) rather than leaked.
		ctx, d = pc.p.srv.Context(), pc.p.c.opts.Timeout
	}
	r, err := pc.p.c.do(ctx, m, d)
	if m.Service != ServiceCTL && ErrorCodeOf(err) == ErrInvalidClientID {
		// The modem does not know the ID the client named: it
		// holds nothing.
		p := pc.p
		id := ClientID{m.Service, m.Client}
		p.srv.Mu.Lock()
		if p.owner[id] == pc {
			delete(p.owner, id)
		}
		p.srv.Mu.Unlock()
	}
	if r == nil {
		pc.p.srv.Log.Debug("qmi proxy: forward failed", "msg", m.String(), "err", err)
		if pc.Ctx.Err() == nil {
			pc.send(m.Reply(ErrAborted))
		}
		return
	}
	if m.Service == ServiceCTL && m.ID == CTLAllocateCID && err == nil {
		if id, perr := ParseClientID(r); perr == nil {
			p := pc.p
			p.srv.Mu.Lock()
			if p.srv.ConnectedLocked(pc) && pc.Ctx.Err() == nil {
				p.owner[id] = pc
			} else {
				// The client left while its ID was being
				// allocated: it is disowned like the rest.
				p.owner[id] = nil
				p.disowned = append(p.disowned, id)
			}
			p.srv.Mu.Unlock()
		}
	}
	ans := *r
	ans.TID = m.TID
	pc.send(&ans)
}

// DialProxy connects to a qmi-proxy (libqmi's, or a Proxy) on the
// abstract socket name (default ProxySocket) and sends Internal Proxy
// Open for devicePath: a Go program's equivalent of qmicli -p. Close the
// client to release its client IDs and disconnect.
func DialProxy(ctx context.Context, name, devicePath string, opts Options) (*Client, error) {
	return unixpeer.DialClient(ctx, "qmi", cmp.Or(name, ProxySocket), func(conn net.Conn) *Client {
		return NewClient(NewStreamTransport(conn), opts)
	}, func(c *Client) error {
		_, err := c.Do(ctx, NewRequest(ServiceCTL, CTLInternalProxyOpen).AddString(0x01, devicePath))
		return err
	})
}
