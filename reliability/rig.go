package reliability

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
	"github.com/mhistack/mhistack/stack/proxy"
)

// TB is what the rig needs of its caller: a *testing.T, or hack/storm's
// run (Fatal ends the calling goroutine, as testing's does).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

// pipeline is the whole path under test: stack.Open on the emulated
// modem (qcom-sdx55m, IP_HW0 raw IP, MBIM data session, carrier network)
// with a proxy.Server in front of it on the host's loopback, plus handles
// on every layer for fault injection.
type pipeline struct {
	t       TB
	st      *stack.Stack
	ctrl    *mhi.Controller
	dev     *vpci.Device
	modem   *sim.Modem
	network *simnet.Network // the emulated network, to play it
	carrier *simnet.CarrierNetwork
	ep      linkEP
	srv     *proxy.Server
	proxy   string // the proxy's address on the host
	// carrierLog keeps the carrier network's last log lines (refused
	// forwards, say) for failure messages.
	carrierLog *lastLines

	serveDone chan error
	// mappedAtPowerDown is vpci.Device.MappedBuffers when the controller
	// reports EventPowerDown during Close: the link and the MBIM client
	// are gone by then, the controller's own rings not yet freed.
	mappedAtPowerDown atomic.Int64
	closed            bool
}

func openPipeline(t TB, configure func(*proxy.Server)) *pipeline {
	return openPipelineWith(t, stack.Config{}, configure)
}

// openPipelineWith is openPipeline with a stack configuration (limits).
func openPipelineWith(t TB, cfg stack.Config, configure func(*proxy.Server)) *pipeline {
	t.Helper()
	return openPipelineCarrier(t, cfg, simnet.CarrierOptions{}, configure)
}

// openPipelineCarrier is openPipelineWith with the carrier network's
// options (its Logger is the rig's).
func openPipelineCarrier(t TB, cfg stack.Config, co simnet.CarrierOptions, configure func(*proxy.Server)) *pipeline {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	carrierLog := &lastLines{}
	co.Logger = slog.New(slog.NewTextHandler(carrierLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The storms crash the firmware ten times in well under a minute on
	// purpose: no crash-loop bound.
	st, err := stack.Open(ctx, stack.Options{APN: "internet", Config: cfg, CrashLoopLimit: -1, Sim: stack.SimOptions{
		NetworkConfig: simnet.NetworkConfig{APN: "internet"},
		Carrier:       co,
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{t: t, st: st, ctrl: st.Controller(), serveDone: make(chan error, 1), carrierLog: carrierLog}
	p.mappedAtPowerDown.Store(-1)
	p.dev = p.ctrl.Device().(*vpci.Device)
	p.modem = p.dev.Model().(*sim.Modem)
	dp, err := p.ctrl.Profile().DataPath("", "") // the pair stack.Open put the carrier on
	if err != nil {
		t.Fatal(err)
	}
	p.network = p.modem.Function(mhi.ChannelMBIM).(*simnet.MBIMFunction).Network()
	p.carrier = p.modem.Function(dp.Channel).(*simnet.CarrierNetwork)
	p.ep = linkEndpoint(t, st)
	p.ctrl.Subscribe(func(e mhi.Event) {
		if e.Kind == mhi.EventPowerDown {
			p.mappedAtPowerDown.Store(int64(p.dev.MappedBuffers()))
		}
	})
	p.srv = &proxy.Server{Dialer: st, Resolver: st, PacketListener: proxy.PacketListenerFunc(
		func(_ context.Context, network, address string) (net.PacketConn, error) {
			return st.ListenPacket(network, address)
		})}
	if configure != nil {
		configure(p.srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	p.proxy = ln.Addr().String()
	go func() { p.serveDone <- p.srv.Serve(ln) }()
	t.Cleanup(p.close)
	return p
}

// linkEP is what the tests use of the modem's link.Endpoint: a
// *link.Endpoint, or the stack's wrapper of it for a session's own stack
// (which embeds it).
type linkEP interface {
	StarveRX() (release func() int)
	Stats() link.Stats
}

// linkEndpoint digs the modem's link endpoint out of the stack: the
// stack's only NIC (no name) is its capture tap, which wraps it.
func linkEndpoint(t TB, st *stack.Stack) linkEP {
	t.Helper()
	tap, ok := st.GVisor().GetLinkEndpointByName("").(interface{ Child() gstack.LinkEndpoint })
	if !ok {
		t.Fatal("the stack's NIC is not the nested capture tap any more")
	}
	ep, ok := tap.Child().(linkEP)
	if !ok {
		t.Fatalf("the tap wraps a %T, not a link endpoint", tap.Child())
	}
	return ep
}

// close stops the proxy and tears the pipeline down; it is idempotent.
func (p *pipeline) close() {
	if p.closed {
		return
	}
	p.closed = true
	p.srv.Close()
	if err := <-p.serveDone; err != proxy.ErrServerClosed {
		p.t.Errorf("proxy Serve returned %v", err)
	}
	if err := p.st.Close(); err != nil {
		p.t.Errorf("stack Close: %v", err)
	}
}

// dialSOCKS opens a SOCKS5 CONNECT to dst through the proxy.
func (p *pipeline) dialSOCKS(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	return (&proxy.Client{Proxy: p.proxy}).DialContext(ctx, "tcp", dst.String())
}

// dialHTTP opens an HTTP CONNECT tunnel to dst through the proxy.
func (p *pipeline) dialHTTP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.proxy)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
	br := bufio.NewReaderSize(c, 512)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 || br.Buffered() != 0 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %s (%d bytes early)", dst, resp.Status, br.Buffered())
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// hostServer is a TCP server on the host's loopback, reached through the
// modem as the carrier's 198.18.0.1. Close waits for its handlers.
type hostServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newHostServer(t TB, handle func(net.Conn)) *hostServer {
	t.Helper()
	h, err := listenHost(handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	return h
}

// listenHost starts a hostServer running handle on each connection; the
// caller closes it.
func listenHost(handle func(net.Conn)) (*hostServer, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hostServer{ln: ln, conns: map[net.Conn]struct{}{}}
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns[c] = struct{}{}
			h.mu.Unlock()
			h.wg.Go(func() {
				defer func() {
					c.Close()
					h.mu.Lock()
					delete(h.conns, c)
					h.mu.Unlock()
				}()
				handle(c)
			})
		}
	})
	return h, nil
}

func (h *hostServer) close() {
	h.ln.Close()
	h.mu.Lock()
	for c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// addr is the server as the modem's carrier network reaches it.
func (h *hostServer) addr() netip.AddrPort {
	return netip.AddrPortFrom(simnet.TestAddr4, uint16(h.ln.Addr().(*net.TCPAddr).Port))
}

// lastLines keeps the last 20 lines written to it.
type lastLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lastLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	if len(l.lines) > 20 {
		l.lines = l.lines[len(l.lines)-20:]
	}
	return len(p), nil
}

func (l *lastLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "")
}

// settle retries check for a few seconds: closed sockets, goroutines and
// timers wind down asynchronously.
func settle(d time.Duration, check func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if check() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
