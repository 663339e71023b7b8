package mbim_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCtx is a context bounded well below the go test timeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pipeRig runs the emulated MBIM function over an in-memory pipe, the
// cheapest way to talk to it: no MHI, the same message stream.
// onNetwork configures an MBIM function answering for a network of its
// own, configured by nc.
func onNetwork(nc simnet.NetworkConfig) simnet.MBIMConfig {
	return simnet.MBIMConfig{Network: simnet.NewNetwork(nc)}
}

func pipeRig(t testing.TB, cfg simnet.MBIMConfig, opts mbim.Options) (*mbim.Client, *simnet.MBIMFunction) {
	t.Helper()
	f := simnet.NewMBIMFunction(cfg)
	a, b := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- f.Serve(b) }()
	c := mbim.NewClient(mbim.NewStreamTransport(a), opts)
	t.Cleanup(func() {
		c.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return c, f
}

// openPipe is pipeRig with the function opened.
func openPipe(t testing.TB, cfg simnet.MBIMConfig, opts mbim.Options) (*mbim.Client, *simnet.MBIMFunction) {
	t.Helper()
	c, f := pipeRig(t, cfg, opts)
	if err := c.Open(testCtx(t)); err != nil {
		t.Fatalf("Open: %v", err)
	}
	return c, f
}

// mhiRig is the whole path: an MHI controller drives an emulated modem
// of profile whose "MBIM" channel pair runs f; the client comes from
// DialMHI.
type mhiRig struct {
	t testing.TB
	m *sim.Modem
	c *mhi.Controller
	f *simnet.MBIMFunction
}

func newMHIRig(t testing.TB, profile string, cfg simnet.MBIMConfig) *mhiRig {
	t.Helper()
	f := simnet.NewMBIMFunction(cfg)
	r := mhitest.New(t, mhitest.Options{ProfileName: profile, Functions: map[string]sim.Function{"MBIM": f}})
	m, c := r.Modem, r.Controller
	return &mhiRig{t: t, m: m, c: c, f: f}
}

func (r *mhiRig) dial(opts mbim.Options) *mbim.Client {
	r.t.Helper()
	cl, err := mbim.DialMHI(testCtx(r.t), r.c, opts)
	if err != nil {
		r.t.Fatalf("DialMHI: %v", err)
	}
	r.t.Cleanup(func() { cl.Close() })
	return cl
}

// progressLog records a session's progress reports and addresses.
type progressLog struct {
	mu    sync.Mutex
	steps []mbim.Progress
	addrs []mbim.IPConfig
	ch    chan struct{}
}

func newProgressLog() *progressLog { return &progressLog{ch: make(chan struct{}, 1)} }

func (p *progressLog) progress(pr mbim.Progress) {
	p.mu.Lock()
	p.steps = append(p.steps, pr)
	p.mu.Unlock()
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

func (p *progressLog) address(ip mbim.IPConfig) {
	p.mu.Lock()
	p.addrs = append(p.addrs, ip)
	p.mu.Unlock()
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

func (p *progressLog) states() []mbim.SessionState {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s []mbim.SessionState
	for _, pr := range p.steps {
		s = append(s, pr.State)
	}
	return s
}

func (p *progressLog) addresses() []mbim.IPConfig {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]mbim.IPConfig(nil), p.addrs...)
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fastSession is a session config with test-sized limits.
func fastSession(apn string, log *progressLog) mbim.SessionConfig {
	cfg := mbim.SessionConfig{APN: apn, SIMTimeout: 2 * time.Second, RadioTimeout: time.Second,
		RegisterTimeout: 300 * time.Millisecond, AttachTimeout: time.Second, ConfigTimeout: time.Second,
		PollInterval: 20 * time.Millisecond, RetryInterval: 50 * time.Millisecond}
	if log != nil {
		cfg.OnProgress, cfg.OnAddress = log.progress, log.address
	}
	return cfg
}
