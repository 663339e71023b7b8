package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	mstack "github.com/mhistack/mhistack/stack"
)

// radioWindow and radioWarm bound a radio run from below: a round trip of
// up to 160 ms and seconds of drop-tail queue need seconds of slow start
// and queue filling before a window says anything about the steady state.
const (
	radioWarm   = 2 * time.Second
	radioWindow = 5 * time.Second
)

// radioTable downloads over stack.Open's emulated modem with each radio
// preset on its carrier network (docs/RADIO.md): one TCP stream from a
// host socket to the stack, pinging the carrier every 100 ms meanwhile,
// after a few idle pings.
func (c *config) radioTable() (*table, error) {
	infos := radio.Presets()
	if c.quick {
		infos = infos[:1]
	}
	names := make([]string, len(infos))
	cfgs := make([]radio.Config, len(infos))
	for i, p := range infos {
		cfg, err := radio.Preset(p.Name)
		if err != nil {
			return nil, err
		}
		names[i], cfgs[i] = p.Name, cfg
	}
	d, w := max(c.dur, radioWindow), max(c.warm, radioWarm)
	if c.quick {
		d, w = c.dur, c.warm
	}
	res, err := c.runAll(names, func(i int) (sample, error) { return radioRun(cfgs[i], d, w) })
	if err != nil {
		return nil, err
	}
	t := &table{
		title: "10. Radio presets: a TCP download over the emulated modem's radio model",
		intro: "stack.Open on the emulated modem (qcom-sdx55m, raw IP) with a link/radio preset on its carrier " +
			"network, both ways (docs/RADIO.md). One TCP stream from a host socket down to the stack, measured for " +
			fmt.Sprintf("%v after %v; five pings of the carrier before it (idle) and one every 100 ms during it "+
				"(loaded). Median of the runs (range); ping ms are each run's median.", d, w),
		header: []string{"preset", "DL rate Mbit/s", "round trip ms", "download Mbit/s", "of the DL rate",
			"idle ping ms", "loaded ping ms"},
	}
	for i, n := range names {
		s, cfg := res[i], cfgs[i]
		rate := float64(cfg.Down.Rate) / 1e6
		rtt := (cfg.Down.Delay + cfg.Up.Delay).Seconds() * 1e3
		t.rows = append(t.rows, []string{n, fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.0f", rtt), s.medRange("mbps", 1),
			fmt.Sprintf("%.0f %%", 100*s.med("mbps")/rate), s.medRange("ping_idle", 1), s.medRange("ping_load", 0)})
		if idle, load := s.med("ping_idle"), s.med("ping_load"); idle > 0 && load > 3*idle {
			t.notes = append(t.notes, fmt.Sprintf("%s: the loaded ping is %.0f× the idle one: the download keeps the "+
				"preset's drop-tail queue standing (%.0f ms of it).", n, load/idle, load-idle))
		}
	}
	return t, nil
}

// radioRun is one run of radioTable for cfg.
func radioRun(cfg radio.Config, d, w time.Duration) (sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cn := simnet.CarrierOptions{Radio: &cfg}
	s, err := mstack.Open(ctx, mstack.Options{Device: "sim", Sim: mstack.SimOptions{Carrier: cn}})
	if err != nil {
		return nil, err
	}
	e, err := openedEnv(s, nil)
	if err != nil {
		return nil, err
	}
	var idle []float64
	for range 5 {
		rtt, err := s.Ping(ctx, simnet.TestAddr4)
		if err != nil {
			e.close()
			return nil, fmt.Errorf("idle ping: %w", err)
		}
		idle = append(idle, ms(rtt))
	}
	// Ping while the stream runs; a ping lost to a full queue or a gap
	// times out and is not counted.
	var mu sync.Mutex
	var loaded []float64
	stop := make(chan struct{})
	var wg sync.WaitGroup
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
	smp, err := e.tcpStream(false, d, w)
	close(stop)
	wg.Wait()
	if cerr := e.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	smp["ping_idle"] = median(idle)
	if len(loaded) > 0 {
		smp["ping_load"] = median(loaded)
	}
	return smp, nil
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }
