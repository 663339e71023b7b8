package reliability

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/stack"
)

// stormBytes is the total moved by TestFaultStormThroughTheProxy, half
// each way. CI runs the reduced default; the full storm is
// -storm.bytes=1GiB.
var stormBytes = sizeFlag("storm.bytes", func() int64 {
	if underRace {
		return 16 << 20
	}
	return 64 << 20
}(), "bytes TestFaultStormThroughTheProxy moves (half down over SOCKS5, half up over HTTP CONNECT); e.g. 1GiB")

// stormMaxRTO caps the stack's TCP retransmission timeout during the
// storm. A SYS_ERR loses every segment in flight, and with gVisor's
// default (RTO backing off up to 120 s) the retransmission after a
// fault that fell on a retransmission can wait tens of seconds: the
// storm then measures TCP's backoff, not the modem's recovery, and takes
// minutes. 0 keeps gVisor's default.
var stormMaxRTO = flag.Duration("storm.maxrto", time.Second, "cap on the stack's TCP RTO during TestFaultStormThroughTheProxy (0: gVisor's default)")

// stormNoFaults runs the storm's transfer with every fault left out:
// the fault-free time the storm is compared with.
var stormNoFaults = flag.Bool("storm.nofaults", false, "run TestFaultStormThroughTheProxy's transfer without injecting the faults (its fault-free time)")

// storm is one fault: inject starts it, calls release as soon as it is
// in effect (the senders then go on into it) and returns when it is over.
type storm struct {
	name   string
	inject func(t *testing.T, p *pipeline, release func())
}

func sysErrFault(n int) storm {
	return storm{fmt.Sprintf("SYS_ERR #%d", n), func(t *testing.T, p *pipeline, release func()) {
		recovered := make(chan struct{}, 1)
		unsub := p.ctrl.Subscribe(func(e mhi.Event) {
			if e.Kind == mhi.EventRecovered {
				select {
				case recovered <- struct{}{}:
				default:
				}
			}
		})
		defer unsub()
		if err := p.modem.TriggerSysErr(); err != nil {
			t.Fatal(err)
		}
		release()
		select {
		case <-recovered:
		case <-time.After(30 * time.Second):
			t.Fatal("no recovery within 30 s of SYS_ERR")
		}
	}}
}

func msiLossFault(d time.Duration) storm {
	return storm{fmt.Sprintf("MSI loss burst (all vectors, %v)", d), func(t *testing.T, p *pipeline, release func()) {
		p.dev.SetMSIFilter(func(int) (bool, time.Duration) { return true, 0 })
		release()
		time.Sleep(d)
		p.dev.SetMSIFilter(nil)
	}}
}

var stormFaults = []storm{
	sysErrFault(1),
	msiLossFault(100 * time.Millisecond),
	sysErrFault(2),
	{"slow device (1 ms per TRE and event, 300 ms)", func(t *testing.T, p *pipeline, release func()) {
		p.modem.SetSlow(time.Millisecond)
		release()
		time.Sleep(300 * time.Millisecond)
		p.modem.SetSlow(0)
	}},
	sysErrFault(3),
	{"RX buffer starvation (200 ms)", func(t *testing.T, p *pipeline, release func()) {
		give := p.ep.StarveRX()
		release()
		time.Sleep(200 * time.Millisecond)
		give()
	}},
	sysErrFault(4),
	{"data session detach + reattach (same address)", func(t *testing.T, p *pipeline, release func()) {
		before := p.st.Addresses()
		for drained := false; !drained; {
			select {
			case <-p.st.Events():
			default:
				drained = true
			}
		}
		// 36: regular deactivation (3GPP TS 24.008 cause). The network
		// drops the context and detaches packet service; the host's
		// session attaches and connects again, and the emulated network
		// gives the same addresses back, so TCP rides it out.
		p.network.NetworkDetach(mbim.NwError(36))
		release()
		var down bool
		timeout := time.After(30 * time.Second)
		for {
			select {
			case e := <-p.st.Events():
				switch e.Kind {
				case stack.EventLinkDown:
					down = true
				case stack.EventLinkUp:
					if !down {
						t.Fatal("link-up before link-down")
					}
					if after := p.st.Addresses(); !slices.Equal(before, after) {
						t.Errorf("addresses %v after reattach, were %v", after, before)
					}
					return
				}
			case <-timeout:
				t.Fatalf("the session did not come back within 30 s (link down seen: %v)", down)
			}
		}
	}},
	sysErrFault(5),
	msiLossFault(100 * time.Millisecond),
	sysErrFault(6),
	sysErrFault(7),
	sysErrFault(8),
	sysErrFault(9),
	sysErrFault(10),
}

// TestFaultStormThroughTheProxy is the fault storm: a TCP transfer
// through the proxy (half of it down over SOCKS5, half up over HTTP
// CONNECT, at the same time) while the test injects ten SYS_ERRs, two MSI
// loss bursts, a slow device, RX buffer starvation and a data session
// detach. Every fault lands mid-stream: the senders are held at the
// start of each stretch of the transfer until its fault is in effect.
// Both transfers must complete with matching SHA-256s, and afterwards
// nothing may leak: goroutines, file descriptors, DMA buffers (the same
// number mapped at power-down as in a pipeline that never saw a fault).
// Recovery per fault (from its end until every unfinished stream has
// moved another 256 KiB) is reported, not asserted.
func TestFaultStormThroughTheProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault storm runs the whole pipeline")
	}
	ignore := goleak.IgnoreCurrent()
	fds := openFDs(t)

	// The reference: a pipeline that carries nothing and sees no fault.
	ref := openPipeline(t, nil)
	refMapped := ref.dev.MappedBuffers()
	ref.close()
	refAtPowerDown := ref.mappedAtPowerDown.Load()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGate(ctx)
	srv := newStreamServer(t, g)
	p := openPipeline(t, nil)
	if *stormMaxRTO > 0 {
		// Both TCPs: the stack's, and the carrier network's, which
		// sends the download.
		opt := tcpip.TCPMaxRTOOption(*stormMaxRTO)
		for _, gs := range []*gstack.Stack{p.st.GVisor(), p.carrier.GVisor()} {
			if err := gs.SetTransportProtocolOption(tcp.ProtocolNumber, &opt); err != nil {
				t.Fatalf("max RTO: %s", err)
			}
		}
	}
	mapped := p.dev.MappedBuffers()
	if mapped != refMapped {
		t.Errorf("%d DMA buffers mapped after Open, %d in the reference pipeline", mapped, refMapped)
	}

	const step = 256 << 10
	per := int64(*stormBytes) / 2
	down := &stream{n: per, seed: 1}
	up := &stream{n: per, seed: 2}
	segment := per / int64(len(stormFaults)+1)
	if segment < 2*step {
		t.Fatalf("-storm.bytes %d is too small for %d faults", *stormBytes, len(stormFaults))
	}
	g.release(segment)

	errs := make(chan error, 2)
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	dc, err := p.dialSOCKS(dctx, srv.addr())
	if err != nil {
		t.Fatalf("SOCKS5 CONNECT through the modem: %v", err)
	}
	defer dc.Close()
	uc, err := p.dialHTTP(dctx, srv.addr())
	if err != nil {
		t.Fatalf("HTTP CONNECT through the modem: %v", err)
	}
	defer uc.Close()
	start := time.Now()
	go func() { errs <- download(dc, down) }()
	go func() { errs <- upload(uc, up, g) }()
	// The upload's progress is what the server has read.
	var upRecv func() int64
	settle(10*time.Second, func() bool { return srv.upload(up.seed) != nil })
	if s := srv.upload(up.seed); s != nil {
		upRecv = s.received.Load
	} else {
		t.Fatal("the upload never reached the host server")
	}
	progress := func() (d, u int64) { return down.received.Load(), upRecv() }

	// waitAll waits until both streams have reached at least want (or
	// finished); a stall of 60 s fails the test.
	waitAll := func(what string, want func(d, u int64) bool) {
		last, lastAt := int64(-1), time.Now()
		for {
			d, u := progress()
			if want(d, u) {
				return
			}
			if d+u != last {
				last, lastAt = d+u, time.Now()
			} else if time.Since(lastAt) > 60*time.Second {
				t.Fatalf("no progress for 60 s %s: down %d, up %d of %d each", what, d, u, per)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}

	type figure struct {
		name                  string
		before, held, recover time.Duration
		// RTOs each TCP sender took from the fault's start until both
		// streams moved again: the carrier network's (download) and
		// the stack's (upload).
		carrierRTO, stackRTO uint64
	}
	rtos := func() (c, s uint64) {
		return p.carrier.GVisor().Stats().TCP.Timeouts.Value(), p.st.GVisor().Stats().TCP.Timeouts.Value()
	}
	var figures []figure
	for k, f := range stormFaults {
		mid := int64(k+1)*segment - segment/2
		tw := time.Now()
		waitAll("before "+f.name, func(d, u int64) bool { return d >= mid && u >= mid })
		before := time.Since(tw)
		c0, s0 := rtos()
		t0 := time.Now()
		if *stormNoFaults {
			g.release(int64(k+2) * segment)
		} else {
			f.inject(t, p, func() { g.release(int64(k+2) * segment) })
		}
		held := time.Since(t0)
		// A stream may have reached the end of its stretch during the
		// fault: let it go on by another step, so that recovery is
		// always measured on moving data.
		g.release(int64(k+2)*segment + step)
		d0, u0 := progress()
		t1 := time.Now()
		waitAll("after "+f.name, func(d, u int64) bool {
			return (d >= d0+step || d == per) && (u >= u0+step || u == per)
		})
		c1, s1 := rtos()
		figures = append(figures, figure{f.name, before, held, time.Since(t1), c1 - c0, s1 - s0})
	}
	g.release(per)
	tailStart := time.Now()
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Minute):
			d, u := progress()
			t.Fatalf("transfer did not finish: down %d, up %d of %d", d, u, per)
		}
	}
	elapsed := time.Since(start)
	elapsedTail := time.Since(tailStart)

	var tab strings.Builder
	fmt.Fprintf(&tab, "\n| Fault | Stream reached its start after | Fault lasted | Recovery (next 256 KiB both ways) | RTOs carrier / stack |\n|---|---|---|---|---|\n")
	for _, f := range figures {
		name := f.name
		if *stormNoFaults {
			name = "(none: " + name + ")"
		}
		fmt.Fprintf(&tab, "| %s | %v | %v | %v | %d / %d |\n", name, f.before.Round(time.Millisecond), f.held.Round(100*time.Microsecond), f.recover.Round(100*time.Microsecond), f.carrierRTO, f.stackRTO)
	}
	t.Log(tab.String())
	cs, ls, ss := p.ctrl.Stats(), p.ep.Stats(), p.st.Stats()
	t.Logf("%d MiB (%d down over SOCKS5, %d up over HTTP CONNECT) in %v, SHA-256s match; controller: %d SYS_ERRs, %d recoveries, %d liveness checks; link: missed MSIs caught %d, RX alloc fails %d; TCP retransmits %d, timeouts %d (max RTO %v)",
		2*per>>20, per>>20, per>>20, elapsed.Round(time.Millisecond), cs.SysErrs, cs.Recoveries, cs.LivenessChecks,
		ls.MissedInterrupts, ls.RXAllocFail, ss.TCPRetransmits, ss.TCPTimeouts, *stormMaxRTO)
	if want := uint64(10); *stormNoFaults {
		if cs.SysErrs != 0 {
			t.Errorf("controller saw %d SYS_ERRs with -storm.nofaults", cs.SysErrs)
		}
	} else if cs.SysErrs != want || cs.Recoveries != want {
		t.Errorf("controller saw %d SYS_ERRs and %d recoveries, want 10 and 10", cs.SysErrs, cs.Recoveries)
	}
	if n := p.dev.MappedBuffers(); n != mapped {
		t.Errorf("%d DMA buffers mapped after the storm, %d before", n, mapped)
	}

	t0 := time.Now()
	dc.Close()
	uc.Close()
	p.close()
	srv.close()
	t.Logf("last fault to end of transfer %v; teardown %v", elapsedTail.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if got := p.mappedAtPowerDown.Load(); got != refAtPowerDown {
		t.Errorf("%d DMA buffers still mapped at power-down, %d in the reference pipeline", got, refAtPowerDown)
	}
	if !settle(5*time.Second, func() bool { return openFDs(t) <= fds }) {
		t.Errorf("%d file descriptors open after teardown, %d before", openFDs(t), fds)
	}
	cancel()
	goleak.VerifyNone(t, ignore)
}
