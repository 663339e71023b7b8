package mbim

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/mhistack/mhistack/internal/ctrlproxy"
	"github.com/mhistack/mhistack/internal/ctrlstream"
	"github.com/mhistack/mhistack/internal/unixpeer"
)

// ProxySocket is the abstract unix socket name libmbim clients connect to
// (mbimcli -p, ModemManager): "\0mbim-proxy" (libmbim mbim-proxy.h).
const ProxySocket = "mbim-proxy"

// ProxyOptions configure a Proxy.
type ProxyOptions struct {
	// Name is the abstract socket name (default ProxySocket). Tests use
	// their own name; mbimcli only knows the default.
	Name string
	// DevicePath, when set, is the only device path a client may name
	// in its CONFIGURATION; otherwise any path is accepted, since the
	// proxy serves one modem whatever the client calls it.
	DevicePath string
	// AllowUID decides which peers may connect (default: root and the
	// proxy's own user, like libmbim's proxy).
	AllowUID func(uid uint32) bool
	// MaxClients bounds connected clients (default 32); MaxInFlight
	// bounds the requests one client has outstanding (default 16).
	MaxClients, MaxInFlight int
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

// Proxy shares a Client with libmbim programs: it speaks libmbim's
// mbim-proxy protocol (docs/FRAMING.md §6.1; libmbim mbim-proxy.c) on an
// abstract unix socket. A client configures the proxy (PROXY_CONTROL
// CONFIGURATION), then OPEN and CLOSE are answered locally — never
// forwarded, so a client's CLOSE cannot tear down mhistack's data
// session — and its commands are forwarded with the Client's own
// transaction IDs and answered with the client's; a successful RADIO_STATE,
// REGISTER_STATE, PACKET_SERVICE or CONNECT set is announced to the
// Client's other users as the indication the modem would not send (the
// Session re-connects after a client's disconnect). Indications are fanned
// out to the clients that subscribed to them; DEVICE_SERVICE_SUBSCRIBE_LIST
// from clients is merged (with every BASIC_CONNECT indication, which the
// host's Session needs) before it reaches the modem.
//
// The proxy owns an accept goroutine and, per client, a reader, a writer
// and one goroutine per outstanding request; Close stops them all.
type Proxy struct {
	c     *Client
	opts  ProxyOptions
	srv   *ctrlproxy.Server[*proxyClient]
	unsub func()
}

// ListenProxy listens on the abstract socket and serves c. It fails if
// the name is taken (a libmbim mbim-proxy or another mhistack runs).
func ListenProxy(c *Client, opts ProxyOptions) (*Proxy, error) {
	p := NewProxy(c, opts)
	return ctrlproxy.Listen(p, p.srv)
}

// NewProxy returns a proxy that serves connections handed to ServeConn
// (ListenProxy also accepts them from its socket).
func NewProxy(c *Client, opts ProxyOptions) *Proxy {
	p := &Proxy{c: c, opts: opts}
	p.srv = ctrlproxy.New(ctrlproxy.Config[*proxyClient]{Name: cmp.Or(opts.Name, ProxySocket), Proto: "mbim",
		AllowUID: opts.AllowUID, MaxClients: opts.MaxClients, MaxInFlight: opts.MaxInFlight, Logger: opts.Logger,
		NewClient: p.newClient, Serve: (*proxyClient).read, Left: (*proxyClient).left})
	p.unsub = c.Subscribe(p.indication)
	return p
}

// newClient is the state of a new connection (p.srv.Mu held).
func (p *Proxy) newClient(peer *ctrlproxy.Peer) *proxyClient {
	return &proxyClient{Peer: peer, p: p, max: DefaultControlTransfer}
}

// Name returns the abstract socket name.
func (p *Proxy) Name() string { return p.srv.Name() }

// Clients returns the number of connected clients.
func (p *Proxy) Clients() int { return p.srv.Clients() }

// Close stops listening, disconnects every client and waits for all the
// proxy's goroutines. The Client stays open.
func (p *Proxy) Close() error {
	_, err := p.srv.Close(p.unsub)
	return err
}

// ServeConn serves one client connection until it closes or the proxy
// does; it returns at once (the connection's goroutines belong to the
// proxy). conn is closed when done.
func (p *Proxy) ServeConn(conn net.Conn) { p.srv.ServeConn(conn) }

// standardSubscriptions is the default list of a client that never sets
// one: the BASIC_CONNECT CIDs that have indications (libmbim's proxy
// gives its clients a similar "standard" list).
var standardSubscriptions = []EventSubscription{{Service: ServiceBasicConnect, CIDs: []uint32{
	CIDSubscriberReadyStatus, CIDRadioState, CIDPreferredProviders, CIDRegisterState, CIDPacketService,
	CIDSignalState, CIDConnect, CIDProvisionedContexts, CIDIPConfiguration, CIDEmergencyMode, CIDMulticarrierProviders}}}

// indication runs on the Client's reader goroutine: it queues the
// indication for every interested client, never waiting.
func (p *Proxy) indication(m *Message) {
	var enc []*proxyClient
	// The MBIMEx version the Client agreed goes to every configured
	// client: it decides how they parse the modem's answers.
	all := m.Service == ServiceProxyControl && m.CID == CIDProxyVersion
	p.srv.Mu.Lock()
	for pc := range p.srv.ClientsLocked() {
		if (all && pc.configured) || pc.wants(m.Service, m.CID) {
			enc = append(enc, pc)
		}
	}
	p.srv.Mu.Unlock()
	for _, pc := range enc {
		ind := *m
		ind.TID = 0
		pc.queue(&ind)
	}
}

// mergedSubscriptions is the list sent to the modem: every BASIC_CONNECT
// indication plus whatever any client asked for.
func (p *Proxy) mergedSubscriptions() []EventSubscription {
	merged := []EventSubscription{{Service: ServiceBasicConnect}}
	p.srv.Mu.Lock()
	defer p.srv.Mu.Unlock()
	for pc := range p.srv.ClientsLocked() {
		for _, s := range pc.subsLocked() {
			if s.Service == ServiceBasicConnect {
				continue
			}
			i := -1
			for j := range merged {
				if merged[j].Service == s.Service {
					i = j
				}
			}
			switch {
			case i < 0:
				merged = append(merged, EventSubscription{Service: s.Service, CIDs: append([]uint32(nil), s.CIDs...)})
			case len(merged[i].CIDs) == 0:
			case len(s.CIDs) == 0:
				merged[i].CIDs = nil
			default:
				for _, c := range s.CIDs {
					if !merged[i].Wants(s.Service, c) {
						merged[i].CIDs = append(merged[i].CIDs, c)
					}
				}
			}
		}
	}
	return merged
}

// announced are the BASIC_CONNECT sets whose effect the proxy announces
// to everyone as the matching indication (their answers share the
// indication's layout).
var announced = map[uint32]bool{CIDRadioState: true, CIDRegisterState: true, CIDPacketService: true, CIDConnect: true}

// proxyClient is one connected libmbim client.
type proxyClient struct {
	*ctrlproxy.Peer
	p *Proxy

	// guarded by p.srv.Mu
	configured, opened bool
	max                int
	subs               []EventSubscription // nil: standardSubscriptions
}

func (pc *proxyClient) subsLocked() []EventSubscription {
	if pc.subs == nil {
		return standardSubscriptions
	}
	return pc.subs
}

// wants reports whether the client gets an indication; the caller holds
// p.srv.Mu.
func (pc *proxyClient) wants(svc UUID, cid uint32) bool {
	if !pc.opened {
		return false
	}
	for _, s := range pc.subsLocked() {
		if s.Wants(svc, cid) {
			return true
		}
	}
	return false
}

// queue encodes m at the client's fragment size and hands it to the
// writer; a client that does not read loses messages (counted in the
// log) rather than stalling the modem.
func (pc *proxyClient) queue(m *Message) {
	pc.p.srv.Mu.Lock()
	max := pc.max
	pc.p.srv.Mu.Unlock()
	var enc []byte
	if err := m.Fragments(max, func(f []byte) error {
		enc = append(enc, f...)
		return nil
	}); err != nil {
		return
	}
	if !pc.Put(enc) {
		pc.p.srv.Log.Warn("mbim proxy: client not reading, message dropped", "msg", m.String())
	}
}

// read decodes the client's stream and answers or forwards each message.
func (pc *proxyClient) read() {
	ctrlstream.ReadAll(pc.Conn, MaxControlTransfer, &Decoder{}, pc.handle, func(err error) {
		var de *DecodeError
		if errors.As(err, &de) && de.TID != 0 {
			pc.queue(&Message{Type: TypeFunctionError, TID: de.TID, Error: de.Code})
		}
	})
}

// left runs when the client is gone (p.srv.Mu held): the modem's subscribe
// list loses what only the client wanted.
func (pc *proxyClient) left() func() {
	p := pc.p
	if pc.subs == nil {
		return nil
	}
	return func() {
		if p.srv.Context().Err() == nil {
			p.pushSubscriptions()
		}
	}
}

func (pc *proxyClient) handle(m *Message) {
	p := pc.p
	p.srv.Mu.Lock()
	configured, opened := pc.configured, pc.opened
	p.srv.Mu.Unlock()
	switch m.Type {
	case TypeOpen:
		st := StatusNone
		switch {
		case !configured:
			st = StatusNotInitialized
		case m.MaxControlTransfer < MinControlTransfer:
			st = StatusInvalidParameters
		case !p.c.Opened():
			// The modem is between sessions (reset, not yet
			// opened): open it for the client, as libmbim's proxy
			// opens its device.
			if err := p.c.Open(pc.Ctx); err != nil {
				p.srv.Log.Warn("mbim proxy: open for client", "err", err)
				st = StatusFailure
			}
		}
		if st == StatusNone {
			p.srv.Mu.Lock()
			pc.opened = true
			pc.max = int(min(m.MaxControlTransfer, MaxControlTransfer))
			p.srv.Mu.Unlock()
		}
		pc.queue(&Message{Type: TypeOpenDone, TID: m.TID, Status: st})
	case TypeClose:
		p.srv.Mu.Lock()
		pc.opened = false
		p.srv.Mu.Unlock()
		pc.queue(&Message{Type: TypeCloseDone, TID: m.TID})
	case TypeCommand:
		switch {
		case m.Service == ServiceProxyControl:
			pc.proxyControl(m)
		case !configured || !opened:
			pc.queue(&Message{Type: TypeFunctionError, TID: m.TID, Error: ProtoNotOpened})
		default:
			pc.forward(m)
		}
	case TypeHostError:
		p.srv.Log.Debug("mbim proxy: client host error", "code", m.Error)
	default:
		pc.queue(&Message{Type: TypeFunctionError, TID: m.TID, Error: ProtoUnknown})
	}
}

// proxyControl answers the PROXY_CONTROL service locally.
func (pc *proxyClient) proxyControl(m *Message) {
	p := pc.p
	done := &Message{Type: TypeCommandDone, TID: m.TID, Service: m.Service, CID: m.CID}
	switch {
	case m.CID != CIDProxyConfiguration:
		done.Status = StatusNoDeviceSupport
	case m.CommandType != Set:
		done.Status = StatusInvalidParameters
	default:
		cfg, err := ParseProxyConfiguration(m.Buffer)
		switch {
		case err != nil:
			done.Status = StatusInvalidParameters
		case p.opts.DevicePath != "" && cfg.DevicePath != p.opts.DevicePath:
			p.srv.Log.Warn("mbim proxy: client asked for another device", "path", cfg.DevicePath)
			done.Status = StatusFailure
		default:
			p.srv.Mu.Lock()
			pc.configured = true
			p.srv.Mu.Unlock()
			if ex := p.c.MBIMEx(); ex != MBIMEx1 {
				// As libmbim's proxy does, before the answer: a
				// client learns the MBIMEx version agreed so far
				// (libmbim >= 1.28 adopts it, older ones ignore
				// it).
				v := VersionInfo{MBIM: MBIMVersion1, Extended: ex}
				pc.queue(&Message{Type: TypeIndicateStatus, Service: ServiceProxyControl, CID: CIDProxyVersion, Buffer: v.Encode()})
			}
		}
	}
	pc.queue(done)
}

// forward sends a client's command to the modem on its own goroutine and
// answers with the client's transaction ID.
func (pc *proxyClient) forward(m *Message) {
	if !pc.Go(func() { pc.request(m) }) {
		pc.queue(&Message{Type: TypeFunctionError, TID: m.TID, Error: ProtoUnknown})
	}
}

// request is forward's goroutine.
func (pc *proxyClient) request(m *Message) {
	tid := m.TID
	if m.Service == ServiceBasicConnect && m.CID == CIDDeviceServiceSubscribeList && m.CommandType == Set {
		pc.subscribe(m)
		return
	}
	if pc.p.c.MBIMEx() >= MBIMEx3 {
		m = toMBIMEx3(m)
	}
	r, err := pc.p.c.Call(pc.Ctx, m)
	if err != nil {
		code := ProtoUnknown
		var fe *FunctionError
		switch {
		case errors.As(err, &fe):
			code = fe.Code
		case errors.Is(err, ErrNotOpened), errors.Is(err, ErrModemReset):
			// The modem is being re-opened (after a reset);
			// the client may retry.
			code = ProtoNotOpened
		}
		pc.p.srv.Log.Debug("mbim proxy: forward failed", "msg", m.String(), "err", err)
		pc.queue(&Message{Type: TypeFunctionError, TID: tid, Error: code})
		return
	}
	ans := *r
	ans.TID = tid
	pc.queue(&ans)
	if r.Status == StatusNone && m.Service == ServiceMSBasicConnectExtensions && m.CID == CIDMSVersion {
		// The client switched the modem's layouts for everyone:
		// the host parses them too, the other clients are told (as
		// libmbim's proxy does).
		pc.p.c.sawVersionAnswer(r.Buffer)
	}
	if r.Status == StatusNone && m.CommandType == Set && m.Service == ServiceBasicConnect && announced[m.CID] {
		// The modem will not indicate a change its (only) host
		// asked for; tell mhistack's session and the other
		// clients, e.g. that mbimcli --disconnect took the
		// data session down.
		pc.p.c.announce(r)
	}
}

// subscribe records a client's subscribe list, pushes the merged list to
// the modem, and answers with the client's own list.
func (pc *proxyClient) subscribe(m *Message) {
	p := pc.p
	done := &Message{Type: TypeCommandDone, TID: m.TID, Service: m.Service, CID: m.CID}
	list, err := ParseSubscribeList(m.Buffer)
	if err != nil {
		done.Status = StatusInvalidParameters
		pc.queue(done)
		return
	}
	if list == nil {
		list = []EventSubscription{}
	}
	p.srv.Mu.Lock()
	pc.subs = list
	p.srv.Mu.Unlock()
	if err := p.pushSubscriptions(); err != nil {
		var ce *CommandError
		if errors.As(err, &ce) {
			done.Status = ce.Status
		} else {
			done.Status = StatusFailure
		}
	}
	done.Buffer = EncodeSubscribeList(list)
	pc.queue(done)
}

// pushSubscriptions sends the merged subscribe list to the modem.
func (p *Proxy) pushSubscriptions() error {
	if !p.c.Opened() {
		return nil
	}
	_, err := p.c.SubscribeIndications(p.srv.Context(), p.mergedSubscriptions())
	return err
}

// DialProxy connects to an mbim-proxy (libmbim's, or a Proxy) on the
// abstract socket name (default ProxySocket), configures it for
// devicePath and opens the function: a Go program's equivalent of
// mbimcli -p. Close the client to disconnect.
func DialProxy(ctx context.Context, name, devicePath string, opts Options) (*Client, error) {
	return unixpeer.DialClient(ctx, "mbim", cmp.Or(name, ProxySocket), func(conn net.Conn) *Client {
		return NewClient(NewStreamTransport(conn), opts)
	}, func(c *Client) error {
		cfg := ProxyConfiguration{DevicePath: devicePath, Timeout: 30}
		cctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		r, err := c.call(cctx, &Message{Type: TypeCommand, Service: ServiceProxyControl, CID: CIDProxyConfiguration,
			CommandType: Set, Buffer: cfg.Encode()}, TypeCommandDone, false)
		cancel()
		if err == nil && r.Status != StatusNone {
			err = &CommandError{Service: ServiceProxyControl, CID: CIDProxyConfiguration, Set: true, Status: r.Status}
		}
		if err == nil {
			err = c.Open(ctx)
		}
		return err
	})
}

// toMBIMEx3 rewrites a client's request built in the 1.0/2.0 layout of a
// command whose request 3.0 changes (CONNECT set, BASE_STATIONS_INFO
// query) once the host has agreed 3.0. A libmbim client learns the
// version from the proxy's VERSION indication, which libmbim applies in
// an idle callback: a request built right after OPEN (mbimcli -p
// --connect) may still use the old layout. The answers need no rewrite:
// 3.0's CONNECT answer starts with 1.0's 36 bytes, and the client parses
// answers after the indication has been applied. Anything that is not
// clearly the old layout is passed on as it came.
func toMBIMEx3(m *Message) *Message {
	switch {
	case m.Service == ServiceBasicConnect && m.CID == CIDConnect && m.CommandType == Set:
		if _, err := ParseConnectRequestV3(m.Buffer); err == nil {
			return m
		}
		req, err := ParseConnectRequest(m.Buffer)
		if err != nil {
			return m
		}
		c := *m
		c.Buffer = req.EncodeV3()
		return &c
	case m.Service == ServiceMSBasicConnectExtensions && m.CID == CIDMSBaseStationsInfo && m.CommandType == Query && len(m.Buffer) == 20:
		c := *m
		c.Buffer = append(append([]byte(nil), m.Buffer...), 0, 0, 0, 0) // MaxNrCount 0
		return &c
	}
	return m
}
