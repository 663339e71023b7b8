package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	mstack "github.com/mhistack/mhistack/stack"
)

// radioWindow and radioWarm bound a radio run from below: a round trip of
// up to 160 ms and seconds of drop-tail queue need seconds of slow start
// and queue filling before a window says anything about the steady state.
// -radio-seconds replaces radioWindow.
const (
	radioWarm   = 2 * time.Second
	radioWindow = 5 * time.Second
)

// radioSeconds is -radio-seconds: the window of each table 10 stream (0:
// radioWindow); radioOnly is -radio-presets (comma-separated; "": all);
// radioRcvBuf is -radio-rcvbuf: the receive buffer default of
// mhistack's stack in table 10 (0: package stack's).
var (
	radioSeconds time.Duration
	radioOnly    string
	radioRcvBuf  int
)

// radioWarmRTTs is a radio stream's warm-up in round trips of its preset
// when that is longer than radioWarm: slow start from 10 segments to a
// 10 MB window (nr-mmwave-far-scaled, 480 ms) takes about ten round trips.
const radioWarmRTTs = 12

// radioTooFast are presets faster than a loaded 2-core machine carries:
// the bench runs the scaled preset given for each instead (docs/RADIO.md;
// the plain gVisor row shows the machine carries the scaled rate).
var radioTooFast = map[string]string{"nr-mmwave-far": "nr-mmwave-far-scaled"}

// radioPlotted are the presets whose download goodput over time table 10
// plots (-radio-plot adds more): the handover train and the rate that
// follows a trace.
var radioPlotted = []string{"handover-train", "lte-trace"}

// radioStacks are table 10's systems, each measured down and up on every
// preset: key prefixes of a run's sample.
var radioStacks = []struct{ key, name string }{
	{"mh", "mhistack"},
	{"gv", "plain gVisor"},
	{"cubic", "Linux cubic"},
	{"bbr", "Linux bbr"},
}

// radioTable measures each radio preset (docs/RADIO.md) with one TCP
// stream down and one up through mhistack on the emulated modem, through
// two plain gVisor stacks joined by the model, and between two network
// namespaces whose TUNs the model joins with Linux cubic and bbr; all in
// the same run. It pings the network during mhistack's and cubic's
// uploads.
func (c *config) radioTable() (*table, error) {
	all, allCfgs, err := radioPresets(c.quick)
	if err != nil {
		return nil, err
	}
	var names, skipped []string
	var cfgs []radio.Config
	for i, n := range all {
		if _, ok := radioTooFast[n]; ok {
			skipped = append(skipped, n)
			continue
		}
		names, cfgs = append(names, n), append(cfgs, allCfgs[i])
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("-radio-presets %s: no preset of table 10 runs (too fast for this machine: %s)",
			radioOnly, strings.Join(skipped, ", "))
	}
	d, w := radioWindows(c)
	warm := func(cfg radio.Config) time.Duration {
		if c.quick {
			return w
		}
		return max(w, radioWarmRTTs*(cfg.Down.Delay+cfg.Up.Delay))
	}
	var longWarm []string
	for i, cfg := range cfgs {
		if ww := warm(cfg); ww > w {
			longWarm = append(longWarm, fmt.Sprintf("%v on %s", ww.Round(10*time.Millisecond), names[i]))
		}
	}
	warmNote := ""
	if len(longWarm) > 0 {
		warmNote = fmt.Sprintf(" (or %d round trips when longer, for slow start: %s)", radioWarmRTTs, strings.Join(longWarm, ", "))
	}
	tooFast := ""
	for _, n := range skipped {
		tooFast += fmt.Sprintf(" %s is faster than this machine carries; its scaled form %s (docs/RADIO.md) stands for it.", n, radioTooFast[n])
	}
	root := os.Geteuid() == 0
	traces := map[string]map[string][]float64{} // preset → stack key → bins of its download, last run
	var tmu sync.Mutex
	res, err := c.runAll(names, func(i int) (sample, error) {
		var tr map[string][]float64
		if slices.Contains(radioPlotted, names[i]) {
			tr = map[string][]float64{}
		}
		s, err := radioRun(cfgs[i], d, warm(cfgs[i]), root, tr)
		if len(tr) > 0 {
			tmu.Lock()
			traces[names[i]] = tr
			tmu.Unlock()
		}
		return s, err
	})
	if err != nil {
		return nil, err
	}
	t := &table{
		title: "10. Radio presets: TCP through the emulated modem's radio model, against gVisor and Linux on the same model",
		intro: "One TCP stream down and one up per preset (docs/RADIO.md), measured for " +
			fmt.Sprintf("%v after %v%s, each through a new instance of the model: ", d, w, warmNote) +
			"mhistack is stack.Open on the emulated modem (qcom-sdx55m, raw IP) with the preset on its carrier network, " +
			"the peer a host socket; plain gVisor is two package stacks on channel.Endpoints joined by the model (no modem); " +
			"Linux is the kernel's TCP between two network namespaces whose TUN devices a relay in the bench joins by the " +
			"model, with TCP_CONGESTION cubic or bbr (`ip netns exec` helpers; needs root). Each cell: Mbit/s of payload and " +
			"its share of the preset's rate in that direction (for a preset whose rate follows a trace: of the trace's mean rate over the window, counted from the model's start, which is a few hundred ms before the stream's). Ping: ICMP echo to the network's side every 100 ms during the " +
			"upload (p50/p99 ms; a ping lost to a full queue or a gap is not counted), and five idle pings of mhistack " +
			"before it. mhistack up, RACK on: the same upload with the stack's RACK-TLP on (stack.TCPOptions.RACK; off by " +
			"default, docs/STACK.md). Median of the runs." + tooFast,
		header: []string{"preset", "DL/UL Mbit/s", "RTT ms"},
	}
	for _, st := range radioStacks {
		t.header = append(t.header, st.name+" down", st.name+" up")
	}
	t.header = append(t.header, "mhistack up, RACK on", "idle ping ms", "mhistack upload ping p50/p99", "Linux cubic upload ping p50/p99")
	for i, n := range names {
		s, cfg := res[i], cfgs[i]
		down, up := radioWindowRate(cfg.Down, warm(cfg), d), radioWindowRate(cfg.Up, warm(cfg), d)
		rtt := (cfg.Down.Delay + cfg.Up.Delay).Seconds() * 1e3
		rates := fmt.Sprintf("%.0f/%.0f", down, up)
		if cfg.Down.Trace != nil || cfg.Up.Trace != nil {
			rates = fmt.Sprintf("%.0f/%.0f in the window (trace; mean %.0f/%.0f)", down, up,
				float64(cfg.Down.MeanRate())/1e6, float64(cfg.Up.MeanRate())/1e6)
		}
		row := []string{n, rates, fmt.Sprintf("%.0f", rtt)}
		for _, st := range radioStacks {
			for _, dir := range []struct {
				key  string
				rate float64
			}{{"_down", down}, {"_up", up}} {
				k := st.key + dir.key
				if len(s.values(k)) == 0 {
					row = append(row, "needs root")
					continue
				}
				row = append(row, fmt.Sprintf("%.1f (%.0f %%)", s.med(k), 100*s.med(k)/dir.rate))
			}
		}
		row = append(row, fmt.Sprintf("%.1f (%.0f %%)", s.med("mhrack_up"), 100*s.med("mhrack_up")/up),
			fmt.Sprintf("%.0f", s.med("ping_idle")), pingCell(s, "mh"), pingCell(s, "cubic"))
		t.rows = append(t.rows, row)
	}
	t.notes = radioTargets(names, cfgs, res, root)
	for _, n := range radioPlotted {
		if i := slices.Index(names, n); i >= 0 && len(traces[n]) > 0 {
			t.plots = append(t.plots, radioTracePlot(n, traces[n], d, warm(cfgs[i])))
		}
	}
	return t, nil
}

// radioWindowRate is dir's rate in Mbit/s over a stream's window (d
// after the warm-up w): its Rate, or for a trace the mean of what the
// trace gives then, counted from the model's start (the stream starts
// a few hundred milliseconds later, after the stack's start and the idle
// pings, so this is close, not exact).
func radioWindowRate(dir radio.Direction, w, d time.Duration) float64 {
	if dir.Trace == nil {
		return float64(dir.Rate) / 1e6
	}
	var sum float64
	n := 0
	for at := w; at < w+d; at += time.Millisecond {
		sum += float64(dir.Trace.RateAt(at))
		n++
	}
	return sum / float64(n) / 1e6
}

// radioLossFree reports whether cfg loses no packet at random in either
// direction (its handovers and queues still may) and has a constant
// rate: table 10's bottleneck-rate target applies to it, the Linux cubic
// one otherwise.
func radioLossFree(cfg radio.Config) bool {
	for _, d := range []radio.Direction{cfg.Down, cfg.Up} {
		if d.Loss > 0 || d.Burst.Rate() > 0 || d.Trace != nil {
			return false
		}
	}
	return true
}

// radioTargets judges each preset's medians against table 10's targets
// and says by how much a missed one is missed: on a loss-free preset
// mhistack's stream at least 0.9 × the bottleneck each way (and, for a
// preset scaled down for this machine, the plain gVisor pair too: it
// shows the machine carries the rate); on a lossy one at least Linux
// cubic's goodput; the ping p99 during mhistack's upload within 2 ×
// Linux cubic's on the same preset.
func radioTargets(names []string, cfgs []radio.Config, res []series, root bool) []string {
	var notes []string
	verdict := func(ok bool, miss string) string {
		if ok {
			return "met"
		}
		return "**missed** by " + miss
	}
	for i, n := range names {
		s, cfg := res[i], cfgs[i]
		rates := map[string]float64{"down": float64(cfg.Down.MeanRate()) / 1e6, "up": float64(cfg.Up.MeanRate()) / 1e6}
		var parts []string
		scaled := false
		for _, sc := range radioTooFast {
			scaled = scaled || sc == n
		}
		for _, dir := range []string{"down", "up"} {
			mh := s.med("mh_" + dir)
			// rack is the same upload with RACK-TLP on, beside the
			// verdict on the default (RACK off).
			rack := func(f func(float64) string) string {
				if dir != "up" || len(s.values("mhrack_up")) == 0 {
					return ""
				}
				return " (RACK on: " + f(s.med("mhrack_up")) + ")"
			}
			if radioLossFree(cfg) {
				share := mh / rates[dir]
				parts = append(parts, fmt.Sprintf("mhistack %s %.0f %% of the bottleneck: %s%s", dir, 100*share,
					verdict(share >= 0.9, fmt.Sprintf("%.0f points", 100*(0.9-share))),
					rack(func(v float64) string { return fmt.Sprintf("%.0f %%", 100*v/rates[dir]) })))
				if scaled {
					g := s.med("gv_"+dir) / rates[dir]
					parts = append(parts, fmt.Sprintf("plain gVisor %s %.0f %%: %s", dir, 100*g,
						verdict(g >= 0.9, fmt.Sprintf("%.0f points", 100*(0.9-g)))))
				}
				continue
			}
			if !root {
				continue
			}
			r := mh / s.med("cubic_"+dir)
			// Two decimals: a stream within 0.5 % of cubic's is level
			// with it at this precision.
			parts = append(parts, fmt.Sprintf("mhistack %s %.2f × Linux cubic: %s%s", dir, r,
				verdict(math.Round(100*r) >= 100, fmt.Sprintf("%.0f %%", 100*(1-r))),
				rack(func(v float64) string { return fmt.Sprintf("%.2f ×", v/s.med("cubic_"+dir)) })))
		}
		if root && len(s.values("mh_ping99")) > 0 && len(s.values("cubic_ping99")) > 0 {
			r := s.med("mh_ping99") / s.med("cubic_ping99")
			parts = append(parts, fmt.Sprintf("ping p99 during the upload %.2f × Linux cubic's: %s", r,
				verdict(r <= 2, fmt.Sprintf("%.2f×", r-2))))
		}
		kind := "lossy or a trace: at least Linux cubic's goodput"
		if radioLossFree(cfg) {
			kind = "loss-free: at least 0.9 × the bottleneck"
		}
		notes = append(notes, fmt.Sprintf("%s (%s; ping p99 within 2 × Linux cubic's): %s.", n, kind, strings.Join(parts, "; ")))
	}
	return notes
}

// radioPresets are the presets tables 10 and 10b measure (-quick: the
// first).
func radioPresets(quick bool) ([]string, []radio.Config, error) {
	infos := radio.Presets()
	if radioOnly != "" {
		want := strings.Split(radioOnly, ",")
		infos = slices.DeleteFunc(infos, func(p radio.PresetInfo) bool { return !slices.Contains(want, p.Name) })
		if len(infos) == 0 {
			return nil, nil, fmt.Errorf("-radio-presets %q: no such preset", radioOnly)
		}
	}
	if quick {
		infos = infos[:1]
	}
	names := make([]string, len(infos))
	cfgs := make([]radio.Config, len(infos))
	for i, p := range infos {
		cfg, err := radio.Preset(p.Name)
		if err != nil {
			return nil, nil, err
		}
		names[i], cfgs[i] = p.Name, cfg
	}
	return names, cfgs, nil
}

// radioWindows are the window and warm-up of each stream of tables 10 and
// 10b.
func radioWindows(c *config) (d, w time.Duration) {
	d, w = max(c.dur, radioWindow), max(c.warm, radioWarm)
	if radioSeconds > 0 {
		d = radioSeconds
	}
	if c.quick {
		d, w = c.dur, c.warm
	}
	return d, w
}

// pingCell is stack key's upload ping p50/p99.
func pingCell(s series, key string) string {
	if len(s.values(key+"_ping50")) == 0 {
		if key != "mh" {
			return "needs root"
		}
		return "—"
	}
	return fmt.Sprintf("%.0f / %.0f", s.med(key+"_ping50"), s.med(key+"_ping99"))
}

// radioTracePlot draws preset's download goodput per bin for mhistack
// and Linux cubic.
func radioTracePlot(preset string, traces map[string][]float64, d, w time.Duration) plot {
	n := 0
	for _, b := range traces {
		n = max(n, len(b))
	}
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = math.Round(float64(i+1)*binEvery.Seconds()*10) / 10
	}
	var names []string
	var vals [][]float64
	for _, st := range radioStacks {
		b, ok := traces[st.key]
		if !ok {
			continue
		}
		v := make([]float64, n)
		for i := range v {
			v[i] = math.NaN()
			if i < len(b) {
				v[i] = b[i]
			}
		}
		names, vals = append(names, st.name), append(vals, v)
	}
	return plot{file: "radio-" + preset + ".svg",
		alt: fmt.Sprintf("%s: download goodput per %v over %v (warm-up %v, then the window)", preset, binEvery, w+d, w),
		svg: lineChart(fmt.Sprintf("%s download, goodput per %v", preset, binEvery), "seconds since the stream started",
			"Mbit/s", xs, names, vals)}
}

// radioRun is one run of radioTable for cfg: every stack down and up. If
// trace is set, it receives mhistack's and Linux cubic's download bins.
func radioRun(cfg radio.Config, d, w time.Duration, root bool, trace map[string][]float64) (sample, error) {
	smp := sample{}
	for _, down := range []bool{true, false} {
		dir := "_up"
		if down {
			dir = "_down"
		}
		var bins []float64
		var binsP *[]float64
		if trace != nil && down {
			binsP = &bins
		}
		m, err := mhistackRadio(cfg, down, false, d, w, binsP)
		if err != nil {
			return nil, fmt.Errorf("mhistack%s: %w", dir, err)
		}
		if !down {
			// The stack sends the upload: the same stream with RACK-TLP
			// on, for the RACK on/off comparison (the carrier network
			// sends the download, so RACK of the stack does not change
			// it).
			r, err := mhistackRadio(cfg, false, true, d, w, nil)
			if err != nil {
				return nil, fmt.Errorf("mhistack%s, RACK on: %w", dir, err)
			}
			smp["mhrack_up"] = r["mbps"]
			copyTCPState(smp, "mhrack_up", r)
		}
		smp["mh"+dir] = m["mbps"]
		copyTCPState(smp, "mh"+dir, m)
		if down {
			smp["ping_idle"] = m["ping_idle"]
			if binsP != nil {
				trace["mh"] = bins
			}
		} else {
			smp["mh_ping50"], smp["mh_ping99"] = m["ping50"], m["ping99"]
		}
		e, err := radioPairEnv(cfg)
		if err != nil {
			return nil, fmt.Errorf("gVisor pair: %w", err)
		}
		g, err := e.tcpStream(!down, d, w)
		if cerr := e.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("gVisor pair%s: %w", dir, err)
		}
		smp["gv"+dir] = g["mbps"]
		copyTCPState(smp, "gv"+dir, g)
		if !root {
			continue
		}
		for _, cc := range []string{"cubic", "bbr"} {
			p, err := newTunPair(cfg)
			if err != nil {
				return nil, fmt.Errorf("linux %s: %w", cc, err)
			}
			r, err := linuxStream(p, cc, down, w, d)
			p.close()
			if err != nil {
				return nil, err
			}
			smp[cc+dir] = r.Mbps
			if down && cc == "cubic" && trace != nil {
				trace["cubic"] = r.Bins
			}
			if !down && len(r.Pings) > 0 {
				smp[cc+"_ping50"], smp[cc+"_ping99"] = quantile(r.Pings, 0.5), quantile(r.Pings, 0.99)
			}
		}
	}
	return smp, nil
}

// mhistackRadio is one stream over stack.Open's emulated modem with cfg
// on its carrier network: down from a host socket to the stack, else up;
// rack turns the stack's RACK-TLP on (stack.TCPOptions.RACK).
// A download pings the carrier five times before (ping_idle); an upload
// pings it every 100 ms during the stream (ping50, ping99).
func mhistackRadio(cfg radio.Config, down, rack bool, d, w time.Duration, bins *[]float64) (sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cn := simnet.CarrierOptions{Radio: &cfg}
	var sc mstack.Config
	sc.TCP.RACK = rack
	if radioRcvBuf > 0 {
		sc.TCP.ReceiveBuffer.Default = radioRcvBuf // Min and Max keep their defaults
	}
	s, err := mstack.Open(ctx, mstack.Options{Device: "sim", Config: sc, Sim: mstack.SimOptions{Carrier: cn}})
	if err != nil {
		return nil, err
	}
	e, err := openedEnv(s, nil)
	if err != nil {
		return nil, err
	}
	e.bins = bins
	carrier := carrierOf(s)
	e.tcpCounters = func() (uint64, uint64) {
		st := s.Stats()
		rto, retx := st.TCPTimeouts, st.TCPRetransmits
		if carrier != nil {
			t := carrier.GVisor().Stats().TCP
			rto, retx = rto+t.Timeouts.Value(), retx+t.Retransmits.Value()
		}
		return rto, retx
	}
	var idle []float64
	if down {
		for range 5 {
			rtt, err := s.Ping(ctx, simnet.TestAddr4)
			if err != nil {
				e.close()
				return nil, fmt.Errorf("idle ping: %w", err)
			}
			idle = append(idle, ms(rtt))
		}
	}
	var mu sync.Mutex
	var loaded []float64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if !down {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Second)
				rtt, err := s.Ping(pctx, simnet.TestAddr4)
				pcancel()
				if err == nil {
					mu.Lock()
					loaded = append(loaded, ms(rtt))
					mu.Unlock()
				}
			}
		}()
	}
	smp, err := e.tcpStream(!down, d, w)
	close(stop)
	wg.Wait()
	if cerr := e.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if down {
		smp["ping_idle"] = median(idle)
	}
	if len(loaded) > 0 {
		smp["ping50"], smp["ping99"] = quantile(loaded, 0.5), quantile(loaded, 0.99)
	}
	return smp, nil
}

// copyTCPState copies a stream's TCP counters and sender state (tcpStream)
// into smp under prefix, for -v.
func copyTCPState(smp sample, prefix string, from sample) {
	for _, k := range []string{"rto", "retx", "cwnd", "ssthresh"} {
		if v, ok := from[k]; ok {
			smp[prefix+"_"+k] = v
		}
	}
}

// quantile is v's q-quantile (nearest rank).
func quantile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }
