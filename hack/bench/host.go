package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/experiment"
	mstack "github.com/mhistack/mhistack/stack"
)

// Table 8 measures what the host side of mhistack costs when the modem is
// not in its process: the bench runs pinned to CPU 0, `mhictl sim serve`
// (the emulated modem and its carrier network) runs as another process
// pinned to CPU 1, and stack.Open drives it over vfio-user
// (mhi/pci/vfiouserclient). The host process's CPU (getrusage
// RUSAGE_SELF) is then the host's alone, and the server's
// (/proc/PID/stat) says which side limits the rate.
//
// Pinning a whole Go process needs the mask before the runtime starts its
// threads (they inherit it from the thread that creates them), so the
// table runs in a child: the bench binary with hostChildArg, which sets
// its own thread's affinity and re-executes itself; the child prints its
// samples as JSON and the parent builds the table.

// hostChildArg makes the bench binary the pinned child of table 8.
const hostChildArg = "-host-child"

// hostPinnedEnv marks the re-executed, pinned child.
const hostPinnedEnv = "MHISTACK_BENCH_PINNED"

// hostResult is what the child reports.
type hostResult struct {
	Names    []string
	Series   []series
	HostCPU  int
	ServeCPU int    // -1: the server was not pinned (one CPU only)
	Veth     string // why Linux over veth was skipped, if it was
}

// hostPaths are table 8's rows, in order.
var hostPaths = []struct{ name, key string }{
	{"mhistack: stack.Open over vfio-user → mhictl sim serve (modem + carrier network, CPU 1) → host socket; raw IP, one packet per transfer", "vfio-user"},
	{"the same with QMAPv5 (a QMI session: rmnet's framing, DL aggregated by the carrier, UL within the WDA limits)", "vfio-user QMAPv5"},
	{"two stacks, channel.Endpoint + pumps (wireguard-go), both in the host process", "chanpair"},
	{"Linux TCP over a veth pair into a netns", "veth"},
}

// benchServeFlags are extra flags for the mhictl sim serve processes of
// tables 8 and 9 (-serve-flags), split at spaces.
var benchServeFlags string

// hostVFIORows is how many of hostPaths' first rows are mhistack over
// vfio-user (the rest are the references on the host's one CPU).
const hostVFIORows = 2

// hostWorks are table 8's columns: the stack under test receiving
// (download: the host socket sends) and sending (upload).
var hostWorks = []altWork{
	{"download", "mbps", func(e *altEnv, d, w time.Duration) (sample, error) { return e.tcpStream(false, d, w) }},
	{"upload", "mbps", func(e *altEnv, d, w time.Duration) (sample, error) { return e.tcpStream(true, d, w) }},
}

func (c *config) hostTable() (*table, error) { return c.hostRun(false) }

// hostVariantsTable is table 9: the link options tables 1, 2 and 4 vary,
// measured as table 8's vfio-user row (the same pinned child, server and
// runner), so that their ratios are the host's alone.
func (c *config) hostVariantsTable() (*table, error) { return c.hostRun(true) }

// hostVariants are table 9's rows: the link options of tables 1 (RX
// refill), 2 (TX completions in the NAPI budget) and 4 (inline polling),
// one change from the defaults each. The first is the reference.
var hostVariants = []struct {
	name, short string
	x           func(w *experiment.Worker) *experiment.Options // link.Options.Experiments
}{
	{"defaults (dedicated refill goroutine, TX completions outside the budget, threaded poller)", "defaults",
		func(*experiment.Worker) *experiment.Options { return nil }},
	{"refill on a shared worker (table 1)", "shared-worker refill",
		func(w *experiment.Worker) *experiment.Options {
			return &experiment.Options{Refill: experiment.RefillShared, Worker: w}
		}},
	{"refill inline in the poll (table 1)", "inline refill",
		func(*experiment.Worker) *experiment.Options {
			return &experiment.Options{Refill: experiment.RefillInline}
		}},
	{"TX completions inside the budget (table 2)", "TX in budget",
		func(*experiment.Worker) *experiment.Options { return &experiment.Options{TXInBudget: true} }},
	{"inline polling on the interrupt goroutine (table 4)", "inline poll",
		func(*experiment.Worker) *experiment.Options { return &experiment.Options{InlinePoll: true} }},
}

func (c *config) hostRun(variants bool) (*table, error) {
	dir, err := os.MkdirTemp("", "bench-host")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "mhictl")
	build := exec.Command("go", "build", "-o", bin, "./cmd/mhictl")
	build.Dir, err = moduleRoot()
	if err != nil {
		return nil, err
	}
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/mhictl: %v\n%s", err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	d, w := min(c.dur, time.Second), min(c.warm, 300*time.Millisecond)
	child := exec.Command(exe, hostChildArg, "-mhictl", bin, "-dir", dir, "-runs", strconv.Itoa(c.runs), "-serve-flags", benchServeFlags,
		"-duration", d.String(), "-warm", w.String(), "-variants="+strconv.FormatBool(variants))
	child.Stderr = c.progress
	out, err := child.Output()
	if err != nil {
		return nil, fmt.Errorf("pinned child: %w", err)
	}
	var res hostResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("pinned child's report: %w", err)
	}
	if variants {
		return hostVariantsReport(res, d, w), nil
	}
	return hostReport(res, d, w), nil
}

// ratioText is a/b to two decimals, or "—" when b is 0 (a run that moved
// nothing) or missing.
func ratioText(a, b float64) string {
	if b <= 0 || a != a || b != b {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run the bench inside the mhistack module")
	}
	return filepath.Dir(mod), nil
}

// get is the series of row name and work (the child names them "row / work").
func (res hostResult) get(name, work string) series {
	for i, n := range res.Names {
		if n == name+" / "+work {
			return res.Series[i]
		}
	}
	return nil
}

func hostReport(res hostResult, d, w time.Duration) *table {
	get := res.get
	t := &table{
		title: "8. Host cost: the modem in another process, the host on one CPU",
		intro: fmt.Sprintf("The bench process runs pinned to CPU %d (its whole process: GOMAXPROCS 1); `mhictl sim serve "+
			"-function IP_HW0=carrier` (and, for the QMAPv5 row, a second one with `IP_HW0=carrier-qmap5`) runs as its own "+
			"process pinned to CPU %d, and `stack.Open` drives it over vfio-user "+
			"(`-device vfio-user:PATH`: memfd DMA arena, eventfd MSIs, posted doorbells; docs/VFIO.md §9). "+
			"One TCP stream, 64 KiB writes: **download** is the host socket on 127.0.0.1 sending through the carrier "+
			"network and the modem to the stack, **upload** the stack sending. The host socket is in the bench process too, "+
			"so its kernel TCP is part of the host CPU, as both ends are for the other rows, which run on the same one CPU "+
			"with nothing outside it: two package stacks joined by `channel.Endpoint`s and pumps (internal/chanpair), and "+
			"Linux TCP across a veth pair. Host CPU is getrusage(RUSAGE_SELF) of the bench process over the window, per Gbit/s "+
			"of payload; server CPU is utime+stime of the mhictl process from /proc/PID/stat (1000 ms/s is its whole CPU); "+
			"a CPU's busy time (/proc/stat, every process) shows how much of it other load took, and a process's run-queue "+
			"wait (its threads' /proc/PID/task/*/schedstat) how long it was runnable without its CPU. "+
			"Each run: a %v window after a %v warm-up, rows interleaved.", res.HostCPU, res.ServeCPU, d, w),
		header: []string{"path", "download Mbit/s", "upload Mbit/s", "host CPU ms per Gbit/s (down / up)",
			"host process CPU ms/s (down / up)", "server process CPU ms/s (down / up)",
			"host's CPU busy ms/s, every process (down / up)", "run-queue wait ms/s, host / server (download)",
			"÷ the channel pair's Mbit/s (down / up)"},
	}
	ref := func(wk string) float64 { return get(hostPaths[hostVFIORows].name, wk).med("mbps") }
	for _, p := range hostPaths {
		dn, up := get(p.name, "download"), get(p.name, "upload")
		if len(dn) == 0 || len(up) == 0 {
			continue
		}
		srv, wait := "—", dn.medRange("host_wait", 0)
		if len(dn.values("server_ms")) > 0 {
			srv = dn.medRange("server_ms", 0) + " / " + up.medRange("server_ms", 0)
			wait += " / " + dn.medRange("server_wait", 0)
		}
		t.rows = append(t.rows, []string{p.name, dn.medRange("mbps", 0), up.medRange("mbps", 0),
			dn.medRange("cpu_gbit", 0) + " / " + up.medRange("cpu_gbit", 0),
			dn.medRange("proc_ms", 0) + " / " + up.medRange("proc_ms", 0), srv,
			dn.medRange("busy0", 0) + " / " + up.medRange("busy0", 0), wait,
			ratioText(dn.med("mbps"), ref("download")) + " / " + ratioText(up.med("mbps"), ref("upload"))})
	}
	for i, wk := range [][2]string{{"download", hostPaths[0].key}, {"upload", hostPaths[0].key}, {"download", hostPaths[1].key}, {"upload", hostPaths[1].key}} {
		s := get(hostPaths[i/2].name, wk[0])
		if len(s) == 0 {
			continue
		}
		host, srv := s.med("proc_ms"), s.med("server_ms")
		b0, b1 := s.med("busy0"), s.med("busy1")
		var verdict string
		switch {
		case host >= 900 && host >= srv:
			verdict = "the host process (its whole CPU) was the bottleneck"
		case srv >= 900:
			verdict = "the server process (the emulated modem and carrier network, its whole CPU) was the bottleneck"
		case b0 >= 900 && b1 >= 900:
			hw, sw := s.med("host_wait"), s.med("server_wait")
			side := "the host"
			if sw > hw {
				side = "the server"
			}
			verdict = fmt.Sprintf("both CPUs were saturated (%.0f and %.0f ms/s busy), mostly by other processes, so the machine's "+
				"load set the rate; runnable but waiting for its CPU, the host spent %.0f ms/s and the server %.0f: %s was the "+
				"more starved side", b0, b1, hw, sw, side)
		case b0 >= 900:
			verdict = fmt.Sprintf("the host's CPU was saturated (%.0f ms/s busy, %.0f of it other processes'): the host side was "+
				"the bottleneck, short of CPU", b0, b0-host)
		case b1 >= 900:
			verdict = fmt.Sprintf("the server's CPU was saturated (%.0f ms/s busy, %.0f of it other processes'): the server side "+
				"was the bottleneck, short of CPU", b1, b1-srv)
		default:
			verdict = "neither CPU was saturated: the stream is bound by the hand-offs between the processes (doorbell and " +
				"MSI latency, moderation), not by CPU"
		}
		t.notes = append(t.notes, fmt.Sprintf("%s %s: %.0f Mbit/s, host %.0f ms/s of CPU (%.0f ms per Gbit/s), server %.0f ms/s; "+
			"CPU %d busy %.0f ms/s, CPU %d %.0f ms/s (every process): %s.",
			wk[1], wk[0], s.med("mbps"), host, s.med("cpu_gbit"), srv, res.HostCPU, b0, res.ServeCPU, b1, verdict))
	}
	for _, v := range hostPaths[:hostVFIORows] {
		for _, p := range hostPaths[hostVFIORows:] {
			dn, up := get(p.name, "download"), get(p.name, "upload")
			if len(dn) == 0 || len(up) == 0 {
				continue
			}
			vd, vu := get(v.name, "download"), get(v.name, "upload")
			t.notes = append(t.notes, fmt.Sprintf("Host CPU per Gbit/s, %s ÷ %s: download %s, upload %s.",
				v.key, p.key, ratioText(vd.med("cpu_gbit"), dn.med("cpu_gbit")), ratioText(vu.med("cpu_gbit"), up.med("cpu_gbit"))))
		}
	}
	if res.Veth != "" {
		t.notes = append(t.notes, "Linux over veth skipped: "+res.Veth+".")
	}
	if benchServeFlags != "" {
		t.notes = append(t.notes, "`mhictl sim serve` ran with `"+benchServeFlags+"` (-serve-flags).")
	}
	if res.ServeCPU < 0 {
		t.notes = append(t.notes, "Only one CPU was available: the server shared CPU 0 with the host.")
	}
	return t
}

// hostChild is the pinned child: it pins itself to one CPU (re-executing
// once so that every runtime thread inherits the mask), starts mhictl sim
// serve pinned to another, measures every row and prints a hostResult.
func hostChild(args []string) {
	fs := flag.NewFlagSet("host-child", flag.ExitOnError)
	bin := fs.String("mhictl", "", "mhictl binary")
	dir := fs.String("dir", "", "directory for the socket")
	runs := fs.Int("runs", 5, "runs")
	dur := fs.Duration("duration", time.Second, "window")
	warm := fs.Duration("warm", 300*time.Millisecond, "warm-up")
	fs.StringVar(&benchServeFlags, "serve-flags", "", "extra mhictl sim serve flags")
	variants := fs.Bool("variants", false, "table 9: the link variants over vfio-user instead of table 8's paths")
	fs.Parse(args)
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		fatal(err)
	}
	cpus := cpusOf(&all)
	if len(cpus) == 0 {
		fatal(errors.New("no CPU in the affinity mask"))
	}
	hostCPU, serveCPU := cpus[0], -1
	if os.Getenv(hostPinnedEnv) == "" {
		// Re-execute with this thread's mask: the new runtime's threads
		// all descend from it. The server's CPU is the next one.
		runtime.LockOSThread()
		if err := setAffinity(hostCPU); err != nil {
			fatal(err)
		}
		serve := "-1"
		if len(cpus) > 1 {
			serve = strconv.Itoa(cpus[1])
		}
		exe, err := os.Executable()
		if err != nil {
			fatal(err)
		}
		env := append(os.Environ(), hostPinnedEnv+"="+strconv.Itoa(hostCPU)+","+serve)
		fatal(syscall.Exec(exe, append([]string{exe, hostChildArg}, args...), env))
	}
	fmt.Sscanf(os.Getenv(hostPinnedEnv), "%d,%d", &hostCPU, &serveCPU)
	if runtime.NumCPU() != 1 || allowedCPUs(os.Getpid()) != strconv.Itoa(hostCPU) {
		fatal(fmt.Errorf("pinned child sees %d CPUs (%q)", runtime.NumCPU(), allowedCPUs(os.Getpid())))
	}
	sock := filepath.Join(*dir, "modem.sock")
	srv, err := startServer(*bin, sock, "carrier", serveCPU, hostCPU)
	if err != nil {
		fatal(err)
	}
	defer srv.stop()
	c := &config{runs: *runs, dur: *dur, warm: *warm, progress: os.Stderr}
	res := hostResult{HostCPU: hostCPU, ServeCPU: serveCPU}
	busy := []int{hostCPU}
	if serveCPU >= 0 {
		busy = append(busy, serveCPU)
	}
	if *variants {
		worker := experiment.NewWorker(nil)
		defer worker.Close()
		var setups []func() (*altEnv, error)
		for _, v := range hostVariants {
			lo := link.Options{Experiments: v.x(worker)}
			setups = append(setups, func() (*altEnv, error) { return vfioUserEnv(sock, srv.pid, lo) })
			for _, wk := range hostWorks {
				res.Names = append(res.Names, v.name+" / "+wk.name)
			}
		}
		hostMeasure(c, &res, setups, busy)
		return
	}
	sockQ := filepath.Join(*dir, "modem-qmap5.sock")
	srvQ, err := startServer(*bin, sockQ, "carrier-qmap5", serveCPU, hostCPU)
	if err != nil {
		fatal(err)
	}
	defer srvQ.stop()
	setups := []func() (*altEnv, error){
		func() (*altEnv, error) { return vfioUserEnv(sock, srv.pid, link.Options{}) },
		func() (*altEnv, error) { return vfioUserEnvControl(sockQ, srvQ.pid, "qmi") },
		channelPairEnv,
	}
	paths := hostPaths[:hostVFIORows+1]
	if v, err := newVethNS(); err != nil {
		res.Veth = fmt.Sprintf("%v (needs root and iproute2)", err)
	} else {
		defer v.close()
		setups = append(setups, func() (*altEnv, error) { return kernelEnv(v) })
		paths = hostPaths
	}
	for _, p := range paths {
		for _, wk := range hostWorks {
			res.Names = append(res.Names, p.name+" / "+wk.name)
		}
	}
	hostMeasure(c, &res, setups, busy)
}

// hostMeasure runs every (setup, hostWorks) pair of res.Names, interleaved,
// and prints res as JSON; the child exits on failure.
func hostMeasure(c *config, res *hostResult, setups []func() (*altEnv, error), busy []int) {
	var err error
	res.Series, err = c.runAll(res.Names, func(i int) (sample, error) {
		return runEnv(setups[i/len(hostWorks)], hostWorks[i%len(hostWorks)], c.dur, c.warm, busy)
	})
	if err != nil {
		fatal(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fatal(err)
	}
}

// hostVariantsReport is table 9 from the child's samples.
func hostVariantsReport(res hostResult, d, w time.Duration) *table {
	get := res.get
	t := &table{
		title: "9. Tables 1, 2 and 4 on the host alone: link variants with the modem in another process",
		intro: fmt.Sprintf("Table 8's setting (the bench process pinned to CPU %d, `mhictl sim serve -function IP_HW0=carrier` pinned "+
			"to CPU %d, `stack.Open` over vfio-user, one TCP stream of 64 KiB writes to or from a host socket) with one link "+
			"option changed per row from the defaults (`stack.Options.Link.Experiments`, package `link/experiment`): the RX refill of table 1 (`Refill`; the shared "+
			"worker is an `experiment.Worker` of the bench process), the TX-completion accounting of table 2 (`TXInBudget`) and the "+
			"polling of table 4 (`InlinePoll`). In tables 1, 2 and 4 the emulated modem runs in the measuring process and "+
			"shares its CPUs; here the host's CPU (getrusage of the bench process, per Gbit/s of payload) is the host's alone. "+
			"Each run: a %v window after a %v warm-up, rows interleaved; median (min–max).", res.HostCPU, res.ServeCPU, d, w),
		header: []string{"link options", "download Mbit/s", "upload Mbit/s", "host CPU ms per Gbit/s (down / up)",
			"server process CPU ms/s (down / up)", "this ÷ defaults: Mbit/s (down / up)",
			"this ÷ defaults: host CPU per Gbit/s (down / up)"},
	}
	ref := hostVariants[0].name
	for _, v := range hostVariants {
		dn, up := get(v.name, "download"), get(v.name, "upload")
		if len(dn) == 0 || len(up) == 0 {
			continue
		}
		rd, ru := get(ref, "download"), get(ref, "upload")
		t.rows = append(t.rows, []string{v.name, dn.medRange("mbps", 0), up.medRange("mbps", 0),
			dn.medRange("cpu_gbit", 0) + " / " + up.medRange("cpu_gbit", 0),
			dn.medRange("server_ms", 0) + " / " + up.medRange("server_ms", 0),
			ratioText(dn.med("mbps"), rd.med("mbps")) + " / " + ratioText(up.med("mbps"), ru.med("mbps")),
			ratioText(dn.med("cpu_gbit"), rd.med("cpu_gbit")) + " / " + ratioText(up.med("cpu_gbit"), ru.med("cpu_gbit"))})
	}
	works := []string{"download", "upload"}
	var names []string
	var vals, lo, hi [][]float64
	for _, v := range hostVariants {
		var m, l, h []float64
		for _, wk := range works {
			s := get(v.name, wk)
			m, l, h = append(m, s.med("mbps")), append(l, minOf(s.values("mbps"))), append(h, maxOf(s.values("mbps")))
		}
		names, vals, lo, hi = append(names, v.short), append(vals, m), append(lo, l), append(hi, h)
	}
	t.plots = append(t.plots, plot{file: "host-variants.svg", alt: "link variants over vfio-user: throughput",
		svg: barChart("Link variants, modem in another process: one TCP stream (median, min–max)", "Mbit/s", works, names, vals, lo, hi)})
	if last := hostVariants[len(hostVariants)-1].name; len(get(last, "download")) > 0 {
		rd, ru, id, iu := get(ref, "download"), get(ref, "upload"), get(last, "download"), get(last, "upload")
		t.notes = append(t.notes, fmt.Sprintf("Table 4's ratio, threaded ÷ inline polling, here: download %s, upload %s (Mbit/s); "+
			"host CPU per Gbit/s %s, %s. Tables 1, 2 and 4 run the modem in the measuring process, where a variant that "+
			"adds or removes a goroutine hand-off also changes how the modem's goroutines share the cores with the host's; "+
			"here the modem has a CPU of its own and a variant's cost is the host's.",
			ratioText(rd.med("mbps"), id.med("mbps")), ratioText(ru.med("mbps"), iu.med("mbps")),
			ratioText(rd.med("cpu_gbit"), id.med("cpu_gbit")), ratioText(ru.med("cpu_gbit"), iu.med("cpu_gbit"))))
	}
	for _, wk := range works {
		s := get(ref, wk)
		if len(s) > 0 {
			t.notes = append(t.notes, fmt.Sprintf("Defaults, %s: CPU %d busy %.0f ms/s, CPU %d %.0f ms/s (every process); "+
				"run-queue wait host %.0f ms/s, server %.0f ms/s. Where both CPUs are near 1000 ms/s busy, other processes' "+
				"load shares them and the ratios carry its noise.", wk, res.HostCPU, s.med("busy0"), res.ServeCPU, s.med("busy1"),
				s.med("host_wait"), s.med("server_wait")))
		}
	}
	if res.ServeCPU < 0 {
		t.notes = append(t.notes, "Only one CPU was available: the server shared CPU 0 with the host.")
	}
	return t
}

func cpusOf(set *unix.CPUSet) []int {
	var out []int
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

// setAffinity pins the calling thread (locked by the caller) to cpu.
func setAffinity(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("sched_setaffinity(CPU %d): %w", cpu, err)
	}
	return nil
}

// server is the mhictl sim serve process.
type server struct {
	pid    int
	cmd    *exec.Cmd
	exited chan struct{}
}

// startServer starts mhictl sim serve with the carrier network on IP_HW0
// in framing kind (a -function KIND: carrier, carrier-qmap5),
// pinned to cpu (-1: not pinned): the fork happens on a thread pinned to
// cpu, which the child inherits; home is the mask this thread returns to.
// It returns once the server listens.
func startServer(bin, sock, kind string, cpu, home int) (*server, error) {
	cmd := exec.Command(bin, append([]string{"sim", "serve", "-socket", sock, "-function", "IP_HW0=" + kind},
		strings.Fields(benchServeFlags)...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	if cpu >= 0 {
		if err := setAffinity(cpu); err != nil {
			runtime.UnlockOSThread()
			return nil, err
		}
	}
	err = cmd.Start()
	if cpu >= 0 {
		if err := setAffinity(home); err != nil {
			fatal(err) // the bench's own thread must not stay on the server's CPU
		}
	}
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	s := &server{pid: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{})}
	if cpu >= 0 {
		if got := allowedCPUs(s.pid); got != strconv.Itoa(cpu) {
			s.cmd.Process.Kill()
			s.cmd.Wait()
			return nil, fmt.Errorf("mhictl sim serve runs on CPUs %q, want %d", got, cpu)
		}
	}
	ready := make(chan struct{})
	go func() {
		defer close(s.exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving the emulated modem") {
				close(ready)
				break
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.exited:
		return nil, errors.New("mhictl sim serve exited before it served")
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, errors.New("mhictl sim serve did not start within 30 s")
	}
}

// allowedCPUs is Cpus_allowed_list of /proc/PID/status ("1", "0-1").
func allowedCPUs(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == "Cpus_allowed_list" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// processCPUOf is another process's user+system CPU time so far, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s).
func processCPUOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100)
}

// schedWait is the time the threads of process pid spent runnable but
// waiting for a CPU so far: the second field of each thread's
// /proc/PID/task/TID/schedstat (Documentation/scheduler/sched-stats.rst),
// summed. Threads that exited are not counted.
func schedWait(pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var sum uint64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			sum += n
		}
	}
	return time.Duration(sum)
}

// cpuBusy is the busy time so far (every process's, interrupts included:
// all but idle and iowait) of each CPU in cpus, from /proc/stat (clock
// ticks of 1/100 s); a CPU it cannot read counts 0.
func cpuBusy(cpus []int) []time.Duration {
	if len(cpus) == 0 {
		return nil
	}
	out := make([]time.Duration, len(cpus))
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var busy uint64
		for j, v := range f[1:] {
			if j == 3 || j == 4 { // idle, iowait
				continue
			}
			x, _ := strconv.ParseUint(v, 10, 64)
			busy += x
		}
		for i, c := range cpus {
			if c == n {
				out[i] = time.Duration(busy) * (time.Second / 100)
			}
		}
	}
	return out
}

// vfioUserEnv is the product on a modem in another process: stack.Open
// with -device vfio-user:sock, the server's CPU read from /proc.
// lo is the link's options (table 9 varies them).
func vfioUserEnv(sock string, pid int, lo link.Options) (*altEnv, error) {
	return vfioUserOpen(mstack.Options{Device: "vfio-user:" + sock, Link: lo}, pid)
}

// vfioUserEnvControl is vfioUserEnv with the data session on control
// protocol ctl ("qmi": QMAP, as the server's carrier-qmap5 speaks).
func vfioUserEnvControl(sock string, pid int, ctl string) (*altEnv, error) {
	return vfioUserOpen(mstack.Options{Device: "vfio-user:" + sock, Control: ctl}, pid)
}

func vfioUserOpen(o mstack.Options, pid int) (*altEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.Config.TXQueueLen = benchTXQueueLen
	s, err := mstack.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	e, err := openedEnv(s, nil)
	if err != nil {
		return nil, err
	}
	e.serverPID = pid
	return e, nil
}
