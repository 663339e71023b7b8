// Package ctrlproxy is the plumbing of the control-protocol proxies that
// share one modem client with local programs (link/mbim, link/qmi): the
// limits and defaults they share, the accept loop on their abstract unix
// socket (internal/unixpeer), the set of connected clients with each
// one's reader and writer goroutines, the bound on a client's outstanding
// requests, and Close. What a client says is the protocol's business: a
// Server calls back for it.
package ctrlproxy

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net"
	"sync"

	"github.com/mhistack/mhistack/internal/unixpeer"
)

// Config configures a Server; C is the protocol's per-client state.
type Config[C comparable] struct {
	// Name is the abstract socket name; Proto names the protocol
	// ("mbim") in log messages and errors.
	Name, Proto string
	// AllowUID decides which peers may connect (default
	// unixpeer.RootOrSelf).
	AllowUID func(uid uint32) bool
	// MaxClients bounds connected clients (default 32); MaxInFlight
	// bounds the requests one client has outstanding (default 16).
	MaxClients, MaxInFlight int
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger

	// NewClient makes the state of a new client; it runs with Mu held.
	NewClient func(*Peer) C
	// Serve reads the client's connection and answers it until a read
	// fails; it runs on the client's reader goroutine.
	Serve func(C)
	// Left runs with Mu held when the client is gone: its requests are
	// done, its connection is closed and it is out of the set. What it
	// returns, if not nil, runs once Mu is released.
	Left func(C) func()
}

// Server accepts and tracks a proxy's clients. It owns an accept
// goroutine (Accept) and, per client, a reader (Config.Serve), a writer
// and the goroutines of its outstanding requests (Peer.Go); Close stops
// them all.
type Server[C comparable] struct {
	// Mu guards the client set, and the protocol keeps its own state
	// about its clients under it too.
	Mu sync.Mutex
	// Log is Config.Logger, or a discarding logger.
	Log *slog.Logger

	cfg  Config[C]
	ln   net.Listener
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	clients map[C]*Peer // guarded by Mu
	closed  bool        // guarded by Mu
	// leaving counts clients removed whose Left work still runs
	// (guarded by Mu): Clients counts them until it is done.
	leaving int
}

// New returns a server that has no clients and does not listen yet.
func New[C comparable](cfg Config[C]) *Server[C] {
	if cfg.AllowUID == nil {
		cfg.AllowUID = unixpeer.RootOrSelf()
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = 32
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server[C]{Log: cfg.Logger, cfg: cfg, ctx: ctx, stop: cancel, clients: map[C]*Peer{}}
}

// Name returns the abstract socket name.
func (s *Server[C]) Name() string { return s.cfg.Name }

// Context ends when the server is closed.
func (s *Server[C]) Context() context.Context { return s.ctx }

// Listen makes proxy's server s listen on its abstract socket and accept
// connections from it. If it cannot (the name is taken), it closes proxy
// and returns the error, prefixed "proto: proxy socket: ".
func Listen[P interface{ Close() error }, C comparable](proxy P, s *Server[C]) (P, error) {
	ln, err := unixpeer.Listen(s.cfg.Name)
	if err != nil {
		proxy.Close()
		var none P
		return none, fmt.Errorf("%s: proxy socket: %w", s.cfg.Proto, err)
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		unixpeer.Accept(ln, s.cfg.AllowUID, s.Log, s.cfg.Proto+" proxy", func() bool { return s.ctx.Err() != nil }, s.ServeConn)
	}()
	return proxy, nil
}

// Clients returns the number of connected clients, counting one that has
// gone until the work its leaving causes (Config.Left's func) is done.
func (s *Server[C]) Clients() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return len(s.clients) + s.leaving
}

// ClientsLocked returns the connected clients; the caller holds Mu while
// it iterates.
func (s *Server[C]) ClientsLocked() iter.Seq[C] { return maps.Keys(s.clients) }

// ConnectedLocked reports whether c is still connected; the caller holds
// Mu.
func (s *Server[C]) ConnectedLocked(c C) bool {
	_, ok := s.clients[c]
	return ok
}

// ClosedLocked reports whether Close was called; the caller holds Mu.
func (s *Server[C]) ClosedLocked() bool { return s.closed }

// ServeConn serves one client connection until it closes or the server
// does; it returns at once (the connection's goroutines belong to the
// server). conn is closed when done; a connection beyond MaxClients, or
// one handed over after Close, is closed at once.
func (s *Server[C]) ServeConn(conn net.Conn) {
	s.Mu.Lock()
	if s.closed || len(s.clients) >= s.cfg.MaxClients {
		s.Mu.Unlock()
		conn.Close()
		return
	}
	p := &Peer{Conn: conn, box: unixpeer.NewOutbox(64), sem: make(chan struct{}, s.cfg.MaxInFlight)}
	p.Ctx, p.cancel = context.WithCancel(s.ctx)
	c := s.cfg.NewClient(p)
	s.clients[c] = p
	s.wg.Add(2)
	s.Mu.Unlock()
	go func() {
		defer s.wg.Done()
		p.box.Run(conn)
	}()
	go s.serve(c, p)
}

// serve owns the client: it runs Serve and, when the client goes, waits
// for its requests and removes it.
func (s *Server[C]) serve(c C, p *Peer) {
	defer s.wg.Done()
	s.cfg.Serve(c)
	p.cancel()
	p.reqs.Wait()
	p.box.Close()
	p.Conn.Close()
	s.Mu.Lock()
	delete(s.clients, c)
	after := s.cfg.Left(c)
	if after != nil {
		s.leaving++
	}
	s.Mu.Unlock()
	if after != nil {
		after()
		s.Mu.Lock()
		s.leaving--
		s.Mu.Unlock()
	}
}

// Close stops listening, disconnects every client and waits for all the
// server's goroutines. detach runs first, once the server counts as
// closed (the proxy stops taking the client's callbacks). closed reports
// that this call closed the server (false: it was closed before).
func (s *Server[C]) Close(detach func()) (closed bool, err error) {
	s.Mu.Lock()
	if s.closed {
		s.Mu.Unlock()
		return false, nil
	}
	s.closed = true
	peers := make([]*Peer, 0, len(s.clients))
	for _, p := range s.clients {
		peers = append(peers, p)
	}
	s.Mu.Unlock()
	detach()
	s.stop()
	if s.ln != nil {
		err = s.ln.Close()
	}
	for _, p := range peers {
		p.Conn.Close()
	}
	s.wg.Wait()
	return true, err
}

// Peer is one client's connection: a context that ends when the client
// leaves or the server closes, the queue of what is written to it, and
// its outstanding requests.
type Peer struct {
	Conn net.Conn
	Ctx  context.Context

	cancel context.CancelFunc
	box    *unixpeer.Outbox // closed when the client's reader ends
	sem    chan struct{}    // in-flight requests
	reqs   sync.WaitGroup
}

// Put queues an encoded message for the client's writer; it reports
// false when the client does not read and the queue is full (b is
// dropped: the modem's side never waits for a client).
func (p *Peer) Put(b []byte) bool { return p.box.Put(b) }

// Go runs request on its own goroutine, unless the client has
// MaxInFlight requests outstanding already: then it reports false. The
// client is not removed before its requests returned.
func (p *Peer) Go(request func()) bool {
	select {
	case p.sem <- struct{}{}:
	default:
		return false
	}
	p.reqs.Add(1)
	go func() {
		defer func() {
			<-p.sem
			p.reqs.Done()
		}()
		request()
	}()
	return true
}
