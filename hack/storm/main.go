// Command storm runs the fault storm of docs/RELIABILITY.md as users run
// the pipeline (stack.Open with its defaults, no RTO cap on either TCP)
// and measures it against fault-free runs of the same transfer:
//
//	go run ./hack/storm -runs 10
//
// It runs -runs storms interleaved with -runs fault-free runs (free,
// storm, free, storm, ...), then prints, per run and as median / 90th
// percentile / worst: the total time, the outage the injector caused
// (the sum of its fault windows), and per fault the time from the
// fault's end to the streams back at full rate, with each TCP's
// retransmission timeouts split by side: mhistack's stack (it sends the
// upload) and the emulated network's (the carrier, link/simnet: it sends
// the download).
//
// Full rate: a stream is back at full rate at the end of the first
// reliability.RateWindow (5 ms) window, starting at or after the fault's
// end, over which its receiver was delivered at least
// reliability.FullRateFraction (50 %) of that stream's median 5 ms rate
// in the fault-free runs; a fault is recovered when every stream still
// moving is. The receivers are the SOCKS5 client (download) and the host
// server (upload), sampled every reliability.SampleEvery.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mhistack/mhistack/reliability"
)

func main() {
	runs := flag.Int("runs", 10, "storm runs (and as many fault-free runs, interleaved)")
	size := flag.Int64("mib", 64, "MiB each run moves (half down over SOCKS5, half up over HTTP CONNECT)")
	maxRTO := flag.Duration("maxrto", 0, "cap both TCPs' RTO (0: gVisor's default, as stack.Open and mhiproxy run)")
	verbose := flag.Bool("v", false, "print every fault of every storm run")
	noTLP := flag.Bool("notlp", false, "run the emulated network's TCP without its tail loss probe, for comparison")
	noProbe := flag.Bool("notailprobe", false, "run mhistack's TCP without its tail probes after an outage (stack.TCPOptions.NoTailProbe), for comparison")
	rack := flag.Bool("stackrack", false, "run mhistack's TCP with gVisor's RACK-TLP on (stack.TCPOptions.RACK), for comparison")
	flag.Parse()
	if *runs < 1 || *size < 1 {
		fmt.Fprintln(os.Stderr, "storm: -runs and -mib must be at least 1")
		os.Exit(2)
	}
	loadBefore := loadAverage()
	var free, storms []*reliability.StormResult
	for i := range *runs {
		for _, noFaults := range []bool{true, false} {
			cfg := reliability.StormConfig{Bytes: *size << 20, NoFaults: noFaults, MaxRTO: *maxRTO, NoTailLossProbe: *noTLP, StackRACK: *rack, NoStackTailProbe: *noProbe}
			r, err := run(cfg)
			kind := "storm"
			if noFaults {
				kind = "fault-free"
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "storm: %s run %d failed: %v\n", kind, i+1, err)
				os.Exit(1)
			}
			if noFaults {
				free = append(free, r)
			} else {
				storms = append(storms, r)
			}
			fmt.Fprintf(os.Stderr, "%s run %d: %v\n", kind, i+1, r.Elapsed.Round(time.Millisecond))
		}
	}
	report(os.Stdout, free, storms, *verbose)
	fmt.Fprintf(os.Stdout, "\nload average (1, 5, 15 min): %s before, %s after\n", loadBefore, loadAverage())
}

// t is reliability.TB for one run: Fatal ends the run's goroutine, as
// testing's does.
type t struct {
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (t *t) Helper() {}
func (t *t) Fatal(args ...any) {
	t.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}
func (t *t) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}
func (t *t) Errorf(format string, args ...any) {
	t.mu.Lock()
	t.errs = append(t.errs, fmt.Sprintf(format, args...))
	t.mu.Unlock()
}
func (t *t) Logf(format string, args ...any) {}
func (t *t) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

// run runs one storm (or fault-free run) on its own goroutine and its
// cleanups after it.
func run(cfg reliability.StormConfig) (*reliability.StormResult, error) {
	tb := &t{}
	var r *reliability.StormResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		r = reliability.RunStorm(tb, cfg)
	}()
	<-done
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
	if len(tb.errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(tb.errs, "; "))
	}
	if !cfg.NoFaults && r.SysErrs != reliability.StormSysErrs {
		return nil, fmt.Errorf("%d SYS_ERRs, want %d", r.SysErrs, reliability.StormSysErrs)
	}
	return r, nil
}

type durations []time.Duration

// at returns the q quantile (nearest rank) of d.
func (d durations) at(q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func (d durations) String() string {
	return fmt.Sprintf("median %v, p90 %v, worst %v", ms(d.at(0.5)), ms(d.at(0.9)), ms(d.at(1)))
}

func ms(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func report(w *os.File, free, storms []*reliability.StormResult, verbose bool) {
	// The reference rates: the medians of the fault-free runs' medians.
	var rd, ru []float64
	var freeT durations
	for _, r := range free {
		d, u := r.MedianRates()
		rd, ru = append(rd, d), append(ru, u)
		freeT = append(freeT, r.Elapsed)
	}
	refDown, refUp := medianOf(rd), medianOf(ru)
	fmt.Fprintf(w, "%d MiB per run (%d down over SOCKS5, %d up over HTTP CONNECT); %d storms, %d fault-free runs, interleaved; GOMAXPROCS %d\n",
		2*storms[0].PerWay>>20, storms[0].PerWay>>20, storms[0].PerWay>>20, len(storms), len(free), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "full rate: %.0f %% of the fault-free median over %v windows: download %.0f MB/s, upload %.0f MB/s\n\n",
		100*reliability.FullRateFraction, reliability.RateWindow, refDown/1e6, refUp/1e6)

	type faultStats struct {
		rec          durations
		unrecovered  int
		carrier, stk uint64
	}
	byName := map[string]*faultStats{}
	var names []string
	var stormT, outage durations
	var sysErr, other durations
	var sysErrStackRTO, sysErrStackSpurious, sysErrCarrierRTO, sysErrs int
	var probes uint64
	fmt.Fprintf(w, "| Run | Fault-free | Storm | Injected outage | SYS_ERR recovery to full rate (median / worst) | Other faults (worst) | RTOs carrier / stack (storm) |\n|---|---|---|---|---|---|---|\n")
	for i, r := range storms {
		var se, ot durations
		for k, f := range r.Faults {
			d, ok, c, s := r.FullRate(k, refDown, refUp)
			fs := byName[f.Name]
			if fs == nil {
				fs = &faultStats{}
				byName[f.Name] = fs
				names = append(names, f.Name)
			}
			if !ok {
				fs.unrecovered++
				// Not back at full rate before the next fault: count
				// the whole gap.
				next := r.Elapsed
				if k+1 < len(r.Faults) {
					next = r.Faults[k+1].Start
				}
				d = next - f.End
			}
			fs.rec = append(fs.rec, d)
			fs.carrier += c.Timeouts
			fs.stk += s.Timeouts
			if f.IsSysErr {
				se = append(se, d)
				sysErrs++
				if s.Timeouts > 0 {
					sysErrStackRTO++
				}
				if s.SpuriousRTOs > 0 {
					sysErrStackSpurious++
				}
				if c.Timeouts > 0 {
					sysErrCarrierRTO++
				}
			} else {
				ot = append(ot, d)
			}
			if verbose {
				fmt.Fprintf(os.Stderr, "run %d %s: outage %v, full rate after %v (reached %v), 256 KiB after %v, carrier %v, %d tail loss probes (%d again after the pair's stop), %d SACK duplicates given the window before, stack %v%s\n",
					i+1, f.Name, ms(f.Outage()), ms(d), ok, ms(f.Resumed), c, f.CarrierProbes, f.CarrierProbesAgain, f.CarrierSACKDupAcks, s, rtoTimes(r, k))
			}
		}
		sysErr, other = append(sysErr, se...), append(other, ot...)
		probes += r.TailProbes
		c, s := r.RTOs()
		stormT, outage = append(stormT, r.Elapsed), append(outage, r.InjectedOutage())
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s / %s | %s | %d / %d |\n", i+1, ms(free[i].Elapsed), ms(r.Elapsed), ms(r.InjectedOutage()),
			ms(se.at(0.5)), ms(se.at(1)), ms(ot.at(1)), c.Timeouts, s.Timeouts)
	}
	fmt.Fprintf(w, "\nTotal time: fault-free %v; storm %v; injected outage %v\n", freeT, stormT, outage)
	fmt.Fprintf(w, "Recovery to full rate, %d SYS_ERRs: %v; %d with a carrier (network-side) RTO, %d with a stack-side RTO (%d with a spurious one)\n",
		sysErrs, sysErr, sysErrCarrierRTO, sysErrStackRTO, sysErrStackSpurious)
	fmt.Fprintf(w, "Stack tail probes sent after outages: %d in %d storms\n", probes, len(storms))
	fmt.Fprintf(w, "Recovery to full rate, %d other faults: %v\n\n", len(other), other)
	fmt.Fprintf(w, "| Fault | Recovery to full rate: median | worst | not back before the next fault | RTOs carrier / stack (all runs) |\n|---|---|---|---|---|\n")
	for _, n := range names {
		fs := byName[n]
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d / %d |\n", n, ms(fs.rec.at(0.5)), ms(fs.rec.at(1)), fs.unrecovered, fs.carrier, fs.stk)
	}
}

// rtoTimes says when, from fault k's start to the next fault's, each
// side's retransmission timer fired, relative to the fault's end.
func rtoTimes(r *reliability.StormResult, k int) string {
	f := r.Faults[k]
	to := r.Elapsed
	if k+1 < len(r.Faults) {
		to = r.Faults[k+1].Start
	}
	c, s := r.RTOTimes(f.Start, to)
	var b strings.Builder
	for _, side := range []struct {
		name string
		at   []time.Duration
	}{{"carrier", c}, {"stack", s}} {
		for _, at := range side.at {
			fmt.Fprintf(&b, "; %s RTO at end%+.1f ms", side.name, float64(at-f.End)/float64(time.Millisecond))
		}
	}
	return b.String()
}

// loadAverage is /proc/loadavg's first three fields ("?" where it is
// not readable): the figures are this load's.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
