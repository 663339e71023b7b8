package reliability

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/stack"
)

// storm is one fault: inject starts it, calls release as soon as it is
// in effect (the senders then go on into it) and returns when it is over.
type storm struct {
	name   string
	inject func(t TB, p *pipeline, release func())
}

func sysErrFault(n int) storm {
	return storm{fmt.Sprintf("SYS_ERR #%d", n), func(t TB, p *pipeline, release func()) {
		recovered, unsub := onRecovered(p.ctrl)
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

// onRecovered returns a channel that receives when ctrl reports
// EventRecovered, until unsub.
func onRecovered(ctrl *mhi.Controller) (recovered <-chan struct{}, unsub func()) {
	ch := make(chan struct{}, 1)
	unsub = ctrl.Subscribe(func(e mhi.Event) {
		if e.Kind == mhi.EventRecovered {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	return ch, unsub
}

func msiLossFault(d time.Duration) storm {
	return storm{fmt.Sprintf("MSI loss burst (all vectors, %v)", d), func(t TB, p *pipeline, release func()) {
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
	{"slow device (1 ms per TRE and event, 300 ms)", func(t TB, p *pipeline, release func()) {
		p.modem.SetSlow(time.Millisecond)
		release()
		time.Sleep(300 * time.Millisecond)
		p.modem.SetSlow(0)
	}},
	sysErrFault(3),
	{"RX buffer starvation (200 ms)", func(t TB, p *pipeline, release func()) {
		give := p.ep.StarveRX()
		release()
		time.Sleep(200 * time.Millisecond)
		give()
	}},
	sysErrFault(4),
	{"data session detach + reattach (same address)", func(t TB, p *pipeline, release func()) {
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

// StormSysErrs is how many SYS_ERRs one storm injects.
const StormSysErrs = 10

// StormConfig is one run of the fault storm.
type StormConfig struct {
	// Bytes is the total moved, half down over SOCKS5 and half up over
	// HTTP CONNECT.
	Bytes int64
	// NoFaults runs the same transfer, paced the same way, without
	// injecting the faults: the fault-free time and rate.
	NoFaults bool
	// MaxRTO caps the retransmission timeout of both TCPs, the stack's
	// and the emulated network's (0: gVisor's default, what users get).
	MaxRTO time.Duration
	// NoTailLossProbe runs the emulated network's TCP without its tail
	// loss probe (simnet.CarrierOptions.NoTailLossProbe), for comparison.
	NoTailLossProbe bool
	// StackRACK turns gVisor's RACK-TLP on in mhistack's stack
	// (stack.TCPOptions.RACK), for comparison with its default.
	StackRACK bool
	// NoStackTailProbe turns off the stack's probes after a bridged
	// outage (stack.TCPOptions.NoTailProbe), for comparison.
	NoStackTailProbe bool
}

// Sample is the pipeline's progress at one moment of a storm run, taken
// every SampleEvery: bytes each receiver has been delivered and each
// TCP's retransmission counters.
type Sample struct {
	At       time.Duration // since the transfer started
	Down, Up int64         // bytes delivered to the download's client, the upload's server
	Released int64         // bytes the gate let each sender send so far
	Carrier  TCPCounters   // the emulated network's TCP (sends the download)
	Stack    TCPCounters   // mhistack's TCP (sends the upload)
}

// SampleEvery is how often a storm run samples its progress.
const SampleEvery = 250 * time.Microsecond

// TCPCounters are one TCP's loss-recovery counters (gVisor's stack-wide
// statistics).
// SpuriousRTOs are the timeouts the sender found spurious afterwards
// (RFC 3522: the first ACK after the retransmission echoes a timestamp
// from before it, so what it acknowledges had arrived before): the data
// was not lost, its ACKs were.
type TCPCounters struct {
	Timeouts, Retransmits, SACKRecoveries, FastRetransmits, SpuriousRTOs uint64
}

func tcpCountersOf(gs *gstack.Stack) TCPCounters {
	s := gs.Stats().TCP
	return TCPCounters{s.Timeouts.Value(), s.Retransmits.Value(), s.SACKRecovery.Value(), s.FastRetransmit.Value(), s.SpuriousRTORecovery.Value()}
}

// Sub returns c minus o.
func (c TCPCounters) Sub(o TCPCounters) TCPCounters {
	return TCPCounters{c.Timeouts - o.Timeouts, c.Retransmits - o.Retransmits, c.SACKRecoveries - o.SACKRecoveries,
		c.FastRetransmits - o.FastRetransmits, c.SpuriousRTOs - o.SpuriousRTOs}
}

func (c TCPCounters) String() string {
	return fmt.Sprintf("%d RTO (%d spurious), %d retransmits, %d SACK recoveries", c.Timeouts, c.SpuriousRTOs, c.Retransmits, c.SACKRecoveries)
}

// Fault is what a storm run measured of one fault.
type Fault struct {
	Name string
	// Before is how long the streams took to reach the fault's point
	// after the previous fault.
	Before time.Duration
	// Start and End are when the injector started the fault and when it
	// was over (its own end: EventRecovered, the filter removed, ...),
	// since the transfer started; End-Start is the outage it injected.
	Start, End time.Duration
	// Resumed is from End until both unfinished streams had moved
	// another 256 KiB.
	Resumed time.Duration
	// IsSysErr says the fault is a SYS_ERR.
	IsSysErr bool
	// CarrierProbes are the tail loss probes the emulated network sent
	// from the fault's start until Resumed (simnet.CarrierStats).
	CarrierProbes uint64
	// CarrierProbesAgain are those of CarrierProbes that repeated a
	// probe lost with the modem's data pair (simnet.CarrierStats).
	CarrierProbesAgain uint64
	// CarrierSACKDupAcks are the host's ACKs with new SACK information
	// the emulated network's link made its TCP count as duplicates
	// (simnet.CarrierStats.SACKDupAcks), same window.
	CarrierSACKDupAcks uint64
}

// Outage is the fault's window, as the injector caused it.
func (f Fault) Outage() time.Duration { return f.End - f.Start }

// StormResult is one storm run.
type StormResult struct {
	Config  StormConfig
	PerWay  int64 // bytes each stream moves
	Elapsed time.Duration
	Faults  []Fault
	Samples []Sample
	// Controller, link and stack statistics at the end of the run.
	Controller mhi.Stats
	SysErrs    uint64
	// TailProbes is the stack's Stats.TailProbes: the probes it sent
	// when the session came back.
	TailProbes uint64
}

// InjectedOutage is the sum of the fault windows the injector caused.
func (r *StormResult) InjectedOutage() time.Duration {
	var d time.Duration
	for _, f := range r.Faults {
		d += f.Outage()
	}
	return d
}

// RunStorm opens the whole pipeline (stack.Open on the emulated modem
// and a proxy in front of it), runs one storm (or, with NoFaults, the
// same transfer without faults) and tears the pipeline down.
func RunStorm(t TB, cfg StormConfig) *StormResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGate(ctx)
	srv := newStreamServer(t, g)
	defer srv.close()
	var sc stack.Config
	sc.TCP.RACK = cfg.StackRACK
	sc.TCP.NoTailProbe = cfg.NoStackTailProbe
	p := openPipelineCarrier(t, sc, simnet.CarrierOptions{NoTailLossProbe: cfg.NoTailLossProbe}, nil)
	defer p.close()
	return runStorm(t, p, srv, g, cfg)
}

// runStorm is the storm on an open pipeline p, with srv serving the
// streams paced by g: two transfers at once through the proxy, each
// half of cfg.Bytes (one down over SOCKS5, one up over HTTP CONNECT),
// the faults landing mid-stream one after another (the senders are held
// at the start of each stretch of the transfer until its fault is in
// effect). It fails t if a transfer fails, its SHA-256s differ or it
// stalls for 60 s; it leaves the streams' connections closed.
func runStorm(t TB, p *pipeline, srv *streamServer, g *gate, cfg StormConfig) *StormResult {
	t.Helper()
	if cfg.MaxRTO > 0 {
		opt := tcpip.TCPMaxRTOOption(cfg.MaxRTO)
		for _, gs := range []*gstack.Stack{p.st.GVisor(), p.carrier.GVisor()} {
			if err := gs.SetTransportProtocolOption(tcp.ProtocolNumber, &opt); err != nil {
				t.Fatalf("max RTO: %s", err)
			}
		}
	}
	const step = 256 << 10
	per := cfg.Bytes / 2
	down := &stream{n: per, seed: 1}
	up := &stream{n: per, seed: 2}
	segment := per / int64(len(stormFaults)+1)
	if segment < 2*step {
		t.Fatalf("%d bytes are too few for %d faults", cfg.Bytes, len(stormFaults))
	}
	g.release(segment)

	errs := make(chan error, 2)
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	settle(10*time.Second, func() bool { return srv.upload(up.seed) != nil })
	upStream := srv.upload(up.seed)
	if upStream == nil {
		t.Fatal("the upload never reached the host server")
	}
	progress := func() (d, u int64) { return down.received.Load(), upStream.received.Load() }

	// The sampler: the receivers' progress and both TCPs' counters,
	// every SampleEvery, until the transfer is over.
	res := &StormResult{Config: cfg, PerWay: per}
	res.Samples = make([]Sample, 0, 1<<14)
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(SampleEvery)
		defer tick.Stop()
		for {
			d, u := progress()
			res.Samples = append(res.Samples, Sample{At: time.Since(start), Down: d, Up: u, Released: g.releasedUpTo(),
				Carrier: tcpCountersOf(p.carrier.GVisor()), Stack: tcpCountersOf(p.st.GVisor())})
			select {
			case <-tick.C:
			case <-stopSampling:
				return
			}
		}
	})
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(stopSampling)
			sampling.Wait()
		}
	}
	defer stop()

	// waitAll waits until both streams have reached at least want (or
	// finished); a stall of 60 s fails.
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

	for k, f := range stormFaults {
		mid := int64(k+1)*segment - segment/2
		tw := time.Now()
		waitAll("before "+f.name, func(d, u int64) bool { return d >= mid && u >= mid })
		fr := Fault{Name: f.name, Before: time.Since(tw), Start: time.Since(start), IsSysErr: len(f.name) > 7 && f.name[:7] == "SYS_ERR"}
		cs0 := p.carrier.Stats()
		if cfg.NoFaults {
			g.release(int64(k+2) * segment)
		} else {
			f.inject(t, p, func() { g.release(int64(k+2) * segment) })
		}
		fr.End = time.Since(start)
		// A stream may have reached the end of its stretch during the
		// fault: let it go on by another step, so that recovery is
		// always measured on moving data.
		g.release(int64(k+2)*segment + step)
		d0, u0 := progress()
		t1 := time.Now()
		waitAll("after "+f.name, func(d, u int64) bool {
			return (d >= d0+step || d == per) && (u >= u0+step || u == per)
		})
		fr.Resumed = time.Since(t1)
		cs := p.carrier.Stats()
		fr.CarrierProbes = cs.TailLossProbes - cs0.TailLossProbes
		fr.CarrierProbesAgain = cs.TailLossProbesAgain - cs0.TailLossProbesAgain
		fr.CarrierSACKDupAcks = cs.SACKDupAcks - cs0.SACKDupAcks
		res.Faults = append(res.Faults, fr)
	}
	g.release(per)
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
	res.Elapsed = time.Since(start)
	stop()
	res.Controller = p.ctrl.Stats()
	res.SysErrs = res.Controller.SysErrs
	res.TailProbes = p.st.Stats().TailProbes
	return res
}

// RateWindow is the window over which "full rate" is judged.
const RateWindow = 5 * time.Millisecond

// FullRateFraction is the share of the fault-free median rate a stream
// must reach again, over one RateWindow, to count as back at full rate.
const FullRateFraction = 0.5

// rates calls f for every RateWindow-long window of r's samples that
// starts at or after from (a time since the transfer started), in order,
// with each stream's delivery rate over it in bytes per second and
// whether the stream was live: started, and at the window's end still
// short of both its end and of what the gate had released (a stream
// that has everything its sender was let send is idle, not slow); f
// returns false to stop.
func (r *StormResult) rates(from time.Duration, f func(end time.Duration, down, up float64, downLive, upLive bool) bool) {
	s := r.Samples
	j := 0
	for j < len(s) && s[j].At < from {
		j++
	}
	for i := j; i < len(s); i++ {
		// The window starts at sample j, the latest sample at least
		// RateWindow before sample i.
		for j+1 < i && s[i].At-s[j+1].At >= RateWindow {
			j++
		}
		d := s[i].At - s[j].At
		if d < RateWindow {
			continue
		}
		sec := d.Seconds()
		if !f(s[i].At, float64(s[i].Down-s[j].Down)/sec, float64(s[i].Up-s[j].Up)/sec,
			s[j].Down > 0 && s[i].Down < min(r.PerWay, s[i].Released), s[j].Up > 0 && s[i].Up < min(r.PerWay, s[i].Released)) {
			return
		}
	}
}

// MedianRates are the median rates of the download and the upload over
// the run's RateWindow windows in which each was live and delivered
// something (bytes/s): in a fault-free run, the reference "full rate".
func (r *StormResult) MedianRates() (down, up float64) {
	var ds, us []float64
	r.rates(0, func(_ time.Duration, d, u float64, dl, ul bool) bool {
		if dl && d > 0 {
			ds = append(ds, d)
		}
		if ul && u > 0 {
			us = append(us, u)
		}
		return true
	})
	return median(ds), median(us)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// FullRate returns, for fault k of the run, the time from the fault's
// end to the end of the first RateWindow window starting at or after it
// in which every stream still moving delivered at least
// FullRateFraction of its reference rate (refDown, refUp bytes/s:
// fault-free medians), and whether that happened before the next fault
// started (or the run ended). It also returns each TCP's counters from
// the fault's start to that moment.
func (r *StormResult) FullRate(k int, refDown, refUp float64) (d time.Duration, ok bool, carrier, stk TCPCounters) {
	f := r.Faults[k]
	limit := r.Elapsed
	if k+1 < len(r.Faults) {
		limit = r.Faults[k+1].Start
	}
	var at time.Duration
	r.rates(f.End, func(end time.Duration, down, up float64, dl, ul bool) bool {
		if end > limit {
			return false
		}
		if (!dl || down >= FullRateFraction*refDown) && (!ul || up >= FullRateFraction*refUp) {
			at, ok = end, true
			return false
		}
		return true
	})
	to := limit
	if ok {
		to = at
	}
	c0, s0 := r.countersAt(f.Start)
	c1, s1 := r.countersAt(to)
	return at - f.End, ok, c1.Sub(c0), s1.Sub(s0)
}

// countersAt returns both TCPs' counters at the last sample at or before
// at.
func (r *StormResult) countersAt(at time.Duration) (carrier, stk TCPCounters) {
	i, _ := slices.BinarySearchFunc(r.Samples, at, func(s Sample, at time.Duration) int {
		if s.At <= at {
			return -1
		}
		return 1
	})
	if i > 0 {
		i--
	}
	if i >= len(r.Samples) {
		return
	}
	return r.Samples[i].Carrier, r.Samples[i].Stack
}

// RTOs returns each TCP's retransmission timeouts and retransmits over
// the whole run.
func (r *StormResult) RTOs() (carrier, stk TCPCounters) {
	if len(r.Samples) == 0 {
		return
	}
	a, b := r.Samples[0], r.Samples[len(r.Samples)-1]
	return b.Carrier.Sub(a.Carrier), b.Stack.Sub(a.Stack)
}

// RTOTimes returns when, between from and to (times since the transfer
// started), each TCP's retransmission timer fired, as sampled: the first
// sample at which its Timeouts counter had grown, once per increment.
func (r *StormResult) RTOTimes(from, to time.Duration) (carrier, stk []time.Duration) {
	c0, s0 := r.countersAt(from)
	for _, s := range r.Samples {
		if s.At <= from {
			continue
		}
		if s.At > to {
			break
		}
		for ; c0.Timeouts < s.Carrier.Timeouts; c0.Timeouts++ {
			carrier = append(carrier, s.At)
		}
		for ; s0.Timeouts < s.Stack.Timeouts; s0.Timeouts++ {
			stk = append(stk, s.At)
		}
	}
	return carrier, stk
}
