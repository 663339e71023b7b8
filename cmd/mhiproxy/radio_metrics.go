package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/stack"
	"github.com/prometheus/client_golang/prometheus"
)

// defaultRadioInterval is how often mhiproxy asks the modem for its radio
// status: each refresh is a few control messages (on QMI, five NAS and a
// UIM request with their client IDs), so scrapes never wait on the modem
// and the modem is asked at a fixed, low rate however often it is scraped.
const defaultRadioInterval = 15 * time.Second

// minRadioRefresh is the least time one refresh is given.
const minRadioRefresh = 5 * time.Second

// radioPoller keeps the modem's latest radio status. Its goroutine, which
// startRadioPoller starts, is the only one that asks the modem; stop ends
// it and waits for it. Scrapes read the latest snapshot.
type radioPoller struct {
	latest atomic.Pointer[radioSnapshot]
	cancel context.CancelFunc
	done   chan struct{}
}

type radioSnapshot struct {
	r  stack.RadioStatus
	at time.Time
}

// startRadioPoller reads the radio status now and then every interval
// until stop.
func startRadioPoller(read func(context.Context) (stack.RadioStatus, error), interval time.Duration, log *slog.Logger) *radioPoller {
	if interval <= 0 {
		interval = defaultRadioInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &radioPoller{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			// One refresh may take an interval, and at least
			// minRadioRefresh: a modem that stopped answering delays
			// nothing but its own gauges, and a short interval on a
			// loaded host does not cut the later queries of a refresh
			// (whose answers would then be missing from it).
			rctx, rcancel := context.WithTimeout(ctx, max(interval, minRadioRefresh))
			r, err := read(rctx)
			rcancel()
			switch {
			case err == nil:
				p.latest.Store(&radioSnapshot{r: r, at: time.Now()})
			case ctx.Err() == nil && log != nil:
				log.Debug("radio status", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// stop ends the poller's goroutine and waits for it; it may be called
// more than once.
func (p *radioPoller) stop() {
	p.cancel()
	<-p.done
}

// collect sends the latest snapshot as gauges: per RAT (label rat="lte"
// or "nr") RSRP, RSRQ and SINR, and the count of component carriers and
// the snapshot's time. Nothing is sent before the first answer.
func (p *radioPoller) collect(ch chan<- prometheus.Metric, labels prometheus.Labels) {
	s := p.latest.Load()
	if s == nil {
		return
	}
	gauge := func(name, help string, v float64, extra ...string) {
		var keys []string
		if len(extra) == 2 {
			keys = []string{extra[0]}
		}
		desc := prometheus.NewDesc("mhiproxy_radio_"+name, help, keys, labels)
		var vals []string
		if len(extra) == 2 {
			vals = []string{extra[1]}
		}
		m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, vals...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
	for _, rs := range []struct {
		rat string
		s   *stack.Signal
	}{{"lte", s.r.LTE}, {"nr", s.r.NR}} {
		if rs.s == nil {
			continue
		}
		gauge("rsrp_dbm", "Reference signal received power (dBm).", rs.s.RSRP, "rat", rs.rat)
		gauge("sinr_db", "Signal to interference and noise ratio (dB).", rs.s.SINR, "rat", rs.rat)
		if rs.s.HasRSRQ {
			gauge("rsrq_db", "Reference signal received quality (dB).", rs.s.RSRQ, "rat", rs.rat)
		}
	}
	gauge("carriers", "Component carriers in use (more than one: carrier aggregation).", float64(len(s.r.Carriers)))
	gauge("refreshed_timestamp_seconds", "When the modem last answered the radio status.", float64(s.at.UnixNano())/1e9)
}
