// Command bench reproduces, on the emulated modem, the Linux netdev
// experiments mhistack's design rests on (each table names its mailing
// list thread by subject, as archived on lore.kernel.org) and prints
// markdown tables: the median and range of several runs per
// configuration, with the CPU time of the endpoint's goroutine roles read
// from per-thread CPU clocks.
//
//	go run ./hack/bench                                  # all tables, 5 runs
//	go run ./hack/bench -only refill -runs 7             # one table
//	go run ./hack/bench -o docs/BENCHMARKS.md -svg-dir docs/bench
//	go run ./hack/bench -only 5,7 -o docs/BENCHMARKS.md -svg-dir docs/bench  # replace two tables
//	go run ./hack/bench -render -o docs/BENCHMARKS.md                       # re-render, no measuring
//	go run ./hack/bench -quick                           # CI smoke (~30 s)
//	go run ./hack/bench -only host                       # table 8: the modem in another process (vfio-user), the host on one CPU
//	go run ./hack/bench -only host-variants              # table 9: tables 1, 2, 4's link options in table 8's setting
//	go run ./hack/bench -only radio                      # table 10: TCP down/up over each radio preset (docs/RADIO.md): mhistack, gVisor, Linux cubic/bbr (root)
//	go run ./hack/bench -only radio -runs 1 -radio-seconds 3s  # the same, shorter
//	go run ./hack/bench -only proxy -proxy-ab=false -runs 5  # table 11's page rows alone: direct, SOCKS5, HTTP proxy, interleaved
//	go run ./hack/bench -only radio-udp                  # table 10b: unpaced UDP up over each radio preset, drops per stage: mhistack, Linux (root)
//
// Runs of the configurations of a table are interleaved (run 1 of every
// configuration, then run 2, …) so that a change of outside load affects
// all of them alike rather than one.
//
// With -o the report is rendered from data the bench keeps beside it
// (docs/bench/BENCHMARKS.json for docs/BENCHMARKS.md, see report.go): the
// tables as measured and, per invocation, the command, date, machine, CPU
// count and load average at its start and end.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/mhistack/mhistack/link/radio"
)

type config struct {
	runs       int
	dur, warm  time.Duration
	quick      bool
	progress   io.Writer
	verbose    bool // print each run's duration
	linger0    bool // table 7: close the streams with linger 0 before Stack.Close
	partial    bool // -only: -o replaces these tables and keeps the rest
	loadBefore string
	start      time.Time
	command    string // how the bench was invoked, for the report
}

// tableFunc measures one table.
type tableFunc struct {
	id, alias string
	run       func(*config) (*table, error)
}

var tables = []tableFunc{
	{"refill", "1", (*config).refillTable},
	{"budget", "2", (*config).budgetTable},
	{"mru", "3", (*config).mruTable},
	{"threaded", "4", (*config).threadedTable},
	{"alternatives", "5", (*config).altTable},
	{"latency", "6", (*config).latencyTable},
	{"scale", "7", (*config).scaleTable},
	{"host", "8", (*config).hostTable},
	{"host-variants", "9", (*config).hostVariantsTable},
	{"radio", "10", (*config).radioTable},
	{"radio-udp", "10b", (*config).radioUDPTable},
	{"proxy", "11", (*config).proxyTable},
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == hogArg {
		hog()
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == radioChildArg {
		radioChild(os.Args[2:])
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == hostChildArg {
		hostChild(os.Args[2:])
		return
	}
	runs := flag.Int("runs", 5, "runs per configuration (median and range are reported)")
	dur := flag.Duration("duration", time.Second, "measurement window of one run")
	only := flag.String("only", "", "comma-separated tables to run (refill,budget,mru,threaded,alternatives,latency,scale,host,host-variants,radio,radio-udp,proxy or 1–11, 10b)")
	quick := flag.Bool("quick", false, "CI smoke: 1 run, short windows, fewer configurations")
	out := flag.String("o", "", "write the report (markdown) to this file, e.g. docs/BENCHMARKS.md, and its data to bench/NAME.json beside it (docs/bench/BENCHMARKS.json)")
	svgDir := flag.String("svg-dir", "", "write the plots (SVG) to this directory, e.g. docs/bench")
	verbose := flag.Bool("v", false, "print how long each run took")
	flag.IntVar(&benchTXQueueLen, "txqueuelen", 0, "package stack's Config.TXQueueLen for the stack.Open rows (0: its default)")
	flag.DurationVar(&benchTXTimeout, "txtimeout", 0, "the link's Options.TXTimeout for the stack.Open rows (0: its default)")
	flag.StringVar(&benchServeFlags, "serve-flags", "", "tables 8 and 9: extra flags for the `mhictl sim serve` processes, space-separated, e.g. -no-moderation (a device setting, to see what the host can carry)")
	flag.DurationVar(&radioSeconds, "radio-seconds", 0, "tables 10 and 10b: the measurement window of each stream (0: 5s; -quick: its own short window); every preset runs 8 streams of this plus 2s warm-up per run")
	flag.IntVar(&radioRcvBuf, "radio-rcvbuf", 0, "table 10: mhistack's TCP receive buffer default in bytes (stack.TCPOptions.ReceiveBuffer.Default; 0: the stack's, 1 MiB), e.g. 2097152 to see its window's effect on the downloads")
	flag.Func("radio-plot", "table 10: also plot these presets' download goodput over time (comma-separated; handover-train and lte-trace always are), e.g. nr-sa", func(v string) error {
		for _, n := range strings.Split(v, ",") {
			if _, err := radio.Preset(n); err != nil {
				return err
			}
			radioPlotted = append(radioPlotted, n)
		}
		return nil
	})
	flag.StringVar(&radioOnly, "radio-presets", "", "tables 10 and 10b: only these presets (comma-separated, e.g. lte,nr-mmwave; default all; table 10 runs the scaled form of a preset too fast for this machine; mhictl sim serve -radio list lists them)")
	flag.BoolVar(&proxyAB, "proxy-ab", true, "table 11: also run ab -k through the HTTP proxy (false: the page rows alone, a quicker look)")
	flag.StringVar(&proxyRadio, "proxy-radio", "", "table 11: put this radio preset (docs/RADIO.md) on the page's carrier network (default none: the page is then bound by the machine's CPU, not by a link)")
	flag.StringVar(&proxyOnly, "proxy-paths", "", "table 11: fetch the page over only these paths (comma-separated: direct, socks, http; default all; the ratios need direct), e.g. to -cpuprofile one path alone")
	linger0 := flag.Bool("linger0", false, "table 7: close the busy streams abortively (linger 0) before Stack.Close")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the whole run to this file")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (every stack, proxy and origin in this process) to this file")
	renderOnly := flag.Bool("render", false, "measure nothing: re-render the -o report from its data (see -o; the plots are not redrawn)")
	flag.Parse()
	if *renderOnly {
		if *out == "" {
			fatal(fmt.Errorf("-render needs -o"))
		}
		d, err := readData(dataPath(*out))
		if err == nil && d == nil {
			err = fmt.Errorf("%s: no such file", dataPath(*out))
		}
		if err != nil {
			fatal(err)
		}
		if err := os.WriteFile(*out, []byte(render(*d)), 0o644); err != nil {
			fatal(err)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *memprofile != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memprofile)
			if err != nil {
				fatal(err)
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fatal(err)
			}
		}()
	}

	c := &config{runs: *runs, dur: *dur, warm: min(*dur/3, 300*time.Millisecond), progress: os.Stderr, verbose: *verbose, linger0: *linger0}
	if *quick {
		c.quick, c.runs, c.dur, c.warm = true, 1, 150*time.Millisecond, 50*time.Millisecond
	}
	c.loadBefore, c.start = loadavg(), time.Now()
	c.command = strings.TrimSpace("go run ./hack/bench " + strings.Join(os.Args[1:], " "))
	c.partial = *only != ""
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	start := time.Now()
	var done []*table
	failed := false
	for _, tf := range tables {
		if len(want) > 0 && !want[tf.id] && !want[tf.alias] {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(c.progress, "bench: table %s…\n", tf.id)
		t, err := tf.run(c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: table %s: %v\n", tf.id, err)
			failed = true
			continue
		}
		t.id = tf.id
		fmt.Fprintf(c.progress, "bench: table %s took %v\n", tf.id, time.Since(t0).Round(time.Second))
		fmt.Println(t.markdown(""))
		done = append(done, t)
		// Write what is done so far: a long run that is interrupted
		// still leaves its finished tables behind.
		writeOut(c, *out, *svgDir, done, time.Since(start))
	}
	fmt.Fprintf(c.progress, "bench: done in %v\n", time.Since(start).Round(time.Second))
	if failed {
		os.Exit(1)
	}
}

// writeOut writes the plots of done to svgDir, and to out the report
// rendered from its data (dataPath(out)): with -only, the data kept from
// earlier runs with done's tables replaced; without, done alone.
func writeOut(c *config, out, svgDir string, done []*table, took time.Duration) {
	if svgDir != "" {
		if err := os.MkdirAll(svgDir, 0o755); err != nil {
			fatal(err)
		}
		for _, t := range done {
			for _, p := range t.plots {
				if err := os.WriteFile(filepath.Join(svgDir, p.file), p.svg, 0o644); err != nil {
					fatal(err)
				}
			}
		}
	}
	if out == "" {
		return
	}
	var old *reportData
	if c.partial {
		var err error
		if old, err = readData(dataPath(out)); err != nil {
			fatal(err)
		}
	}
	d := update(old, c.thisRun(took), done, svgRel(out, svgDir))
	if err := os.MkdirAll(filepath.Dir(dataPath(out)), 0o755); err != nil {
		fatal(err)
	}
	if err := os.WriteFile(dataPath(out), encodeData(d), 0o644); err != nil {
		fatal(err)
	}
	if err := os.WriteFile(out, []byte(render(d)), 0o644); err != nil {
		fatal(err)
	}
}

// svgRel is the plots' directory relative to the report's ("" without
// plots).
func svgRel(out, svgDir string) string {
	if svgDir == "" {
		return ""
	}
	rel, err := filepath.Rel(filepath.Dir(out), svgDir)
	if err != nil {
		fatal(err)
	}
	return filepath.ToSlash(rel)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// runAll measures every configuration c.runs times, interleaved. A run
// that fails is reported on stderr and left out (the table says how many
// runs it has); a configuration with no successful run is an error.
func (c *config) runAll(names []string, fn func(i int) (sample, error)) ([]series, error) {
	out := make([]series, len(names))
	for r := range c.runs {
		for i, n := range names {
			t0 := time.Now()
			s, err := fn(i)
			if c.verbose {
				fmt.Fprintf(c.progress, "bench:   %s: %v %s\n", n, time.Since(t0).Round(time.Millisecond), s)
			}
			if err != nil {
				fmt.Fprintf(c.progress, "bench:   %s run %d: %v\n", n, r+1, err)
				continue
			}
			out[i] = append(out[i], s)
		}
		fmt.Fprintf(c.progress, "bench:   run %d/%d done\n", r+1, c.runs)
	}
	for i, s := range out {
		if len(s) == 0 {
			return nil, fmt.Errorf("%s: every run failed", names[i])
		}
	}
	return out, nil
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// machine describes the host: CPU model, cores, kernel, Go.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "unknown kernel"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s, %s %s/%s",
		model, cpuCount(), runtime.GOMAXPROCS(0), kernel, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// cpuCount is the number of CPUs the bench may run on.
func cpuCount() int { return runtime.NumCPU() }
