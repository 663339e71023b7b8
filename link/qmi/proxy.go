package qmi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/mhistack/mhistack/internal/unixpeer"
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
	log  *slog.Logger
	ln   net.Listener
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu       sync.Mutex
	clients  map[*proxyClient]struct{}
	owner    map[ClientID]*proxyClient // nil: disowned
	disowned []ClientID                // oldest first
	closed   bool
	unsub    func()
	unreset  func()
}

// ListenProxy listens on the abstract socket and serves c. It fails if
// the name is taken (a libqmi qmi-proxy or another mhistack runs).
func ListenProxy(c *Client, opts ProxyOptions) (*Proxy, error) {
	if opts.Name == "" {
		opts.Name = ProxySocket
	}
	ln, err := unixpeer.Listen(opts.Name)
	if err != nil {
		return nil, fmt.Errorf("qmi: proxy socket: %w", err)
	}
	p := NewProxy(c, opts)
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// NewProxy returns a proxy that serves connections handed to ServeConn
// (ListenProxy also accepts them from its socket).
func NewProxy(c *Client, opts ProxyOptions) *Proxy {
	if opts.Name == "" {
		opts.Name = ProxySocket
	}
	if opts.AllowUID == nil {
		opts.AllowUID = unixpeer.RootOrSelf()
	}
	if opts.MaxClients <= 0 {
		opts.MaxClients = 32
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 16
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 300 * time.Second
	}
	if opts.MaxDisowned <= 0 {
		opts.MaxDisowned = 32
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{c: c, opts: opts, log: opts.Logger, ctx: ctx, stop: cancel,
		clients: map[*proxyClient]struct{}{}, owner: map[ClientID]*proxyClient{}}
	p.unsub = c.Subscribe(p.indication)
	p.unreset = c.OnReset(p.reset)
	return p
}

// Name returns the abstract socket name.
func (p *Proxy) Name() string { return p.opts.Name }

// Clients returns the number of connected clients.
func (p *Proxy) Clients() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.clients)
}

// ClientIDs returns the client IDs the proxy's connections hold and the
// disowned ones, sorted.
func (p *Proxy) ClientIDs() (held, disowned []ClientID) {
	p.mu.Lock()
	defer p.mu.Unlock()
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
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	clients := make([]*proxyClient, 0, len(p.clients))
	for pc := range p.clients {
		clients = append(clients, pc)
	}
	p.mu.Unlock()
	p.unsub()
	p.unreset()
	p.stop()
	var err error
	if p.ln != nil {
		err = p.ln.Close()
	}
	for _, pc := range clients {
		pc.conn.Close()
	}
	p.wg.Wait()
	p.mu.Lock()
	ids := make([]ClientID, 0, len(p.owner))
	for id := range p.owner {
		ids = append(ids, id)
	}
	p.owner, p.disowned = map[ClientID]*proxyClient{}, nil
	p.mu.Unlock()
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
			p.log.Debug("qmi proxy: release client ID", "service", id.Service, "client", id.Client, "err", err)
		}
	}
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	unixpeer.Accept(ln, p.opts.AllowUID, p.log, "qmi proxy", func() bool { return p.ctx.Err() != nil }, p.ServeConn)
}

// ServeConn serves one client connection until it closes or the proxy
// does; it returns at once (the connection's goroutines belong to the
// proxy). conn is closed when done.
func (p *Proxy) ServeConn(conn net.Conn) {
	p.mu.Lock()
	if p.closed || len(p.clients) >= p.opts.MaxClients {
		p.mu.Unlock()
		conn.Close()
		return
	}
	pc := &proxyClient{p: p, conn: conn, box: unixpeer.NewOutbox(64), left: make(chan struct{}),
		sem: make(chan struct{}, p.opts.MaxInFlight)}
	pc.ctx, pc.cancel = context.WithCancel(p.ctx)
	p.clients[pc] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		pc.box.Run(conn)
	}()
	go pc.reader()
}

// reset runs when the modem lost its client IDs: nobody holds any now.
func (p *Proxy) reset() {
	p.mu.Lock()
	p.owner, p.disowned = map[ClientID]*proxyClient{}, nil
	p.mu.Unlock()
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
	p.mu.Lock()
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
	p.mu.Unlock()
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
// mhistack's own Client allocated it. The caller holds p.mu.
func (p *Proxy) holderLocked(id ClientID) (pc *proxyClient, known, self bool) {
	pc, known = p.owner[id]
	p.c.mu.Lock()
	self = p.c.cids[id]
	p.c.mu.Unlock()
	return pc, known, self
}

// disownLocked moves what pc held to the disowned list and returns the
// client IDs beyond MaxDisowned to release. The caller holds p.mu.
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
		p.log.Debug("qmi proxy: client ID disowned", "service", id.Service, "client", id.Client)
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
	p      *Proxy
	conn   net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	box    *unixpeer.Outbox // encoded frames for the writer; closed when the reader ends
	left   chan struct{}    // closed when the client's IDs are disowned
	sem    chan struct{}    // in-flight requests
	reqs   sync.WaitGroup

	opened bool // guarded by p.mu
}

// queue hands an encoded frame to the writer; a client that does not
// read loses frames (logged) rather than stalling the modem.
func (pc *proxyClient) queue(b []byte) {
	if !pc.box.Put(b) {
		pc.p.log.Warn("qmi proxy: client not reading, message dropped")
	}
}

func (pc *proxyClient) send(m *Message) {
	b, err := m.Marshal()
	if err != nil {
		pc.p.log.Warn("qmi proxy: cannot encode", "msg", m.String(), "err", err)
		return
	}
	pc.queue(b)
}

// reader owns the client: it decodes its stream and answers or forwards
// each request. When the client goes, it waits for the client's
// requests, disowns its client IDs and removes it.
func (pc *proxyClient) reader() {
	p := pc.p
	defer func() {
		pc.cancel()
		pc.reqs.Wait()
		pc.box.Close()
		pc.conn.Close()
		p.mu.Lock()
		delete(p.clients, pc)
		var drop []ClientID
		if !p.closed {
			drop = p.disownLocked(pc)
		}
		p.mu.Unlock()
		close(pc.left)
		p.release(drop)
		p.wg.Done()
	}()
	var dec Decoder
	buf := make([]byte, 4096)
	for {
		n, err := pc.conn.Read(buf)
		if n > 0 {
			dec.Write(buf[:n])
			for {
				m, derr := dec.Next()
				if derr != nil {
					pc.malformed(derr)
					continue
				}
				if m == nil {
					break
				}
				pc.handle(m)
			}
		}
		if err != nil {
			return
		}
	}
}

// malformed answers a malformed request whose header could be read with
// MALFORMED_MESSAGE; anything else is logged and dropped.
func (pc *proxyClient) malformed(err error) {
	pc.p.log.Debug("qmi proxy: malformed input from client", "err", err)
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
		p.log.Debug("qmi proxy: ignored a non-request from a client", "msg", m.String())
		return
	}
	if m.Service == ServiceCTL && m.ID == CTLInternalProxyOpen {
		pc.open(m)
		return
	}
	p.mu.Lock()
	opened := pc.opened
	p.mu.Unlock()
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
		p.log.Warn("qmi proxy: client asked for another device", "path", string(path))
		pc.send(m.Reply(ErrInvalidArgument))
		return
	}
	p.mu.Lock()
	pc.opened = true
	p.mu.Unlock()
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
	case <-pc.ctx.Done():
	}
	if !ok {
		pc.p.log.Debug("qmi proxy: client ID held by another connection", "service", id.Service, "client", id.Client)
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
	p.mu.Lock()
	defer p.mu.Unlock()
	o, known, self := p.holderLocked(id)
	switch {
	case self:
		p.log.Debug("qmi proxy: client ID held by mhistack", "service", id.Service, "client", id.Client)
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
	p.mu.Lock()
	var ids []ClientID
	for id, o := range p.owner {
		if o == pc {
			ids = append(ids, id)
			delete(p.owner, id)
		}
	}
	p.mu.Unlock()
	p.release(ids)
	pc.send(m.Reply(ErrNone))
}

// forward sends a request to the modem on its own goroutine and answers
// with the client's transaction ID.
func (pc *proxyClient) forward(m *Message) {
	select {
	case pc.sem <- struct{}{}:
	default:
		pc.send(m.Reply(ErrDeviceNotReady))
		return
	}
	pc.reqs.Add(1)
	go func() {
		defer func() {
			<-pc.sem
			pc.reqs.Done()
		}()
		ctx, d := pc.ctx, pc.p.opts.RequestTimeout
		if m.Service == ServiceCTL && m.ID == CTLAllocateCID {
			// Finish an allocation even if the client leaves, so
			// that the ID is tracked (disowned) rather than leaked.
			ctx, d = pc.p.ctx, pc.p.c.opts.Timeout
		}
		r, err := pc.p.c.do(ctx, m, d)
		if m.Service != ServiceCTL && ErrorCodeOf(err) == ErrInvalidClientID {
			// The modem does not know the ID the client named: it
			// holds nothing.
			p := pc.p
			id := ClientID{m.Service, m.Client}
			p.mu.Lock()
			if p.owner[id] == pc {
				delete(p.owner, id)
			}
			p.mu.Unlock()
		}
		if r == nil {
			pc.p.log.Debug("qmi proxy: forward failed", "msg", m.String(), "err", err)
			if pc.ctx.Err() == nil {
				pc.send(m.Reply(ErrAborted))
			}
			return
		}
		if m.Service == ServiceCTL && m.ID == CTLAllocateCID && err == nil {
			if id, perr := ParseClientID(r); perr == nil {
				p := pc.p
				p.mu.Lock()
				if _, live := p.clients[pc]; live && pc.ctx.Err() == nil {
					p.owner[id] = pc
				} else {
					// The client left while its ID was being
					// allocated: it is disowned like the rest.
					p.owner[id] = nil
					p.disowned = append(p.disowned, id)
				}
				p.mu.Unlock()
			}
		}
		ans := *r
		ans.TID = m.TID
		pc.send(&ans)
	}()
}

// DialProxy connects to a qmi-proxy (libqmi's, or a Proxy) on the
// abstract socket name (default ProxySocket) and sends Internal Proxy
// Open for devicePath: a Go program's equivalent of qmicli -p. Close the
// client to release its client IDs and disconnect.
func DialProxy(ctx context.Context, name, devicePath string, opts Options) (*Client, error) {
	if name == "" {
		name = ProxySocket
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", "@"+name)
	if err != nil {
		return nil, fmt.Errorf("qmi: proxy %q: %w", name, err)
	}
	c := NewClient(NewStreamTransport(conn), opts)
	if _, err := c.Do(ctx, NewRequest(ServiceCTL, CTLInternalProxyOpen).AddString(0x01, devicePath)); err != nil {
		c.Close()
		return nil, fmt.Errorf("qmi: proxy %q: %w", name, err)
	}
	return c, nil
}
