package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/prometheus/client_golang/prometheus"
)

// TestRadioGaugesFollowTheDriftingSignal: on a QMI modem whose emulated
// cell drifts, /metrics has RSRP, RSRQ and SINR per RAT as gauges, and a
// later scrape shows the signal the modem measures then; Close stops
// the poller (goleak checks the goroutine is gone).
func TestRadioGaugesFollowTheDriftingSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := openOptions{Device: "sim:telit-fn980-hwv1", APN: "internet", RadioInterval: 5 * time.Millisecond}
	o.Stack.Sim.NetworkConfig.Cell = simnet.Cell{
		LTE:        &simnet.Measurement{RSRP: -100, RSRQ: -10, SINR: 10},
		NR:         &simnet.Measurement{RSRP: -90, RSRQ: -11, SINR: 20},
		Components: []simnet.Component{{Band: 3, Channel: 1300, BandwidthMHz: 20}, {Band: 7, Channel: 3050, BandwidthMHz: 10}},
		Drift:      simnet.Drift{Seed: 3, Interval: time.Millisecond, Step: 3},
	}
	addr := serveModemMetrics(t, ctx, o)

	first := map[string]float64{}
	series := []string{`mhiproxy_radio_rsrp_dbm{device="0",rat="lte"}`, `mhiproxy_radio_rsrp_dbm{device="0",rat="nr"}`,
		`mhiproxy_radio_sinr_db{device="0",rat="lte"}`, `mhiproxy_radio_rsrq_db{device="0",rat="nr"}`}
	changed := false
	for deadline := time.Now().Add(30 * time.Second); !changed; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the radio gauges never changed: first %v", first)
		}
		e := scrape(t, addr)
		if _, ok := e.series[series[0]]; !ok {
			continue // no answer yet
		}
		if !strings.Contains(e.text, "\n# TYPE mhiproxy_radio_rsrp_dbm gauge\n") {
			t.Fatal("mhiproxy_radio_rsrp_dbm is not a gauge")
		}
		if v := e.value(t, `mhiproxy_radio_carriers{device="0"}`); v != 2 {
			t.Errorf("carriers = %v, want 2", v)
		}
		for _, s := range series {
			v := e.value(t, s)
			base := map[int]float64{0: -100, 1: -90, 2: 10, 3: -11}[indexOf(series, s)]
			if v < base-6 || v > base+6 {
				t.Errorf("%s = %v, more than the drift's 6 dB from %v", s, v, base)
			}
			if f, ok := first[s]; !ok {
				first[s] = v
			} else if f != v {
				changed = true
			}
		}
		if t.Failed() {
			t.Fatalf("metrics:\n%s", e.text)
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestRadioGaugesOverMBIMFollowTheSignalSchedule: on an MBIM modem
// (MBIMEx 2.0 SIGNAL_STATE, BASE_STATIONS_INFO) whose emulated cell plays
// a schedule, the gauges show each step's LTE RSRP and SINR, RSRQ and the
// serving cell.
func TestRadioGaugesOverMBIMFollowTheSignalSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := openOptions{Device: "sim:qcom-sdx55m", APN: "internet", RadioInterval: 5 * time.Millisecond}
	good := &simnet.Measurement{RSRP: -80, RSRQ: -8, SINR: 20}
	o.Stack.Sim.NetworkConfig.Cell = simnet.Cell{LTE: good, Schedule: simnet.Schedule{Period: 200 * time.Millisecond, Steps: []simnet.Step{
		{At: 0, LTE: good}, {At: 100 * time.Millisecond, LTE: &simnet.Measurement{RSRP: -110, RSRQ: -15, SINR: 0}}}}}
	addr := serveModemMetrics(t, ctx, o)

	rsrp, sinr, rsrq := `mhiproxy_radio_rsrp_dbm{device="0",rat="lte"}`, `mhiproxy_radio_sinr_db{device="0",rat="lte"}`, `mhiproxy_radio_rsrq_db{device="0",rat="lte"}`
	seen := map[float64]bool{}
	for deadline := time.Now().Add(30 * time.Second); !seen[-80] || !seen[-110]; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("in 30 s the LTE RSRP gauge showed %v, want -80 and -110", seen)
		}
		e := scrape(t, addr)
		if _, ok := e.series[rsrp]; !ok {
			continue // no answer yet
		}
		if v := e.value(t, `mhiproxy_radio_carriers{device="0"}`); v != 1 {
			t.Errorf("carriers = %v, want the LTE serving cell", v)
		}
		r, s, q := e.value(t, rsrp), e.value(t, sinr), e.value(t, rsrq)
		switch {
		case r == -80 && s == 20 && q == -8, r == -110 && s == 0 && q == -15:
			seen[r] = true
		case r != -80 && r != -110:
			t.Fatalf("LTE RSRP %v is no step of the schedule:\n%s", r, e.text)
		}
		// Else the step changed between RadioStatus's queries.
	}
}

// serveModemMetrics opens the modem o names and serves its metrics, as
// device "0", on a loopback port whose address it returns; the test's
// cleanup stops both.
func serveModemMetrics(t *testing.T, ctx context.Context, o openOptions) string {
	t.Helper()
	nw, err := openModem(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nw.Close() })
	srcs := nw.Metrics()
	for i := range srcs {
		srcs[i].labels = prometheus.Labels{"device": "0"}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: metricsHandler(srcs)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
