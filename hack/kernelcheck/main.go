// Command kernelcheck is the kernel cross-check harness
// (docs/KERNEL-CROSSCHECK.md): for each Debian kernel and modem
// profile it starts the emulated modem as a vfio-user server (mhictl sim
// serve), boots the kernel in QEMU with a vfio-user-pci device on it and a
// busybox initramfs holding the MHI/WWAN modules, and collects the checks
// the guest's /init runs (see guest.go) plus the modem's own verdict (no
// host protocol violation, no refused DMA, SYS_ERR seen through). It is
// called by hack/kernel-crosscheck.sh, which obtains QEMU and the kernels.
//
// Exit status: 0 every check passed, 1 a check failed, 2 a prerequisite is
// missing.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
)

// kernelFlag collects -kernel LABEL=DIR (an unpacked linux-image package).
type kernelFlag []kernelDir

type kernelDir struct{ label, dir string }

func (k *kernelFlag) String() string { return fmt.Sprint(*k) }
func (k *kernelFlag) Set(v string) error {
	label, dir, ok := strings.Cut(v, "=")
	if !ok || label == "" || dir == "" {
		return fmt.Errorf("want LABEL=DIR, got %q", v)
	}
	*k = append(*k, kernelDir{label, dir})
	return nil
}

type config struct {
	qemu, mhictl, busybox string
	kernels               kernelFlag
	profiles              []string
	pbl                   []string
	timeout               time.Duration
	wait                  int
	mem                   string
	smp                   int
	jobs                  int
	keep, verbose         bool
	initFile, initScript  string // -init: a debugging /init instead of the checks
	work                  string
}

func main() {
	var c config
	var profiles string
	flag.StringVar(&c.qemu, "qemu", "", "QEMU ≥ 10.1 with the vfio-user-pci device (required)")
	flag.StringVar(&c.mhictl, "mhictl", "", "mhictl binary (required)")
	flag.StringVar(&c.busybox, "busybox", "/bin/busybox", "a statically linked busybox (Debian: busybox-static)")
	flag.Var(&c.kernels, "kernel", "`LABEL=DIR` of an unpacked Debian linux-image package (repeatable)")
	flag.StringVar(&profiles, "profiles", "qcom-sdx55m,quectel-em1xx,foxconn-t99w175", "comma-separated modem profiles to emulate, or \"all\": every profile the kernel's mhi_pci_generic binds to")
	var pbl string
	flag.StringVar(&pbl, "pbl", "qcom-sdx55m", "comma-separated profiles (with a firmware image) also booted from PBL: the kernel downloads a firmware file over BHI at power-up and again after SYS_ERR")
	flag.DurationVar(&c.timeout, "timeout", 6*time.Minute, "limit for one guest run")
	flag.IntVar(&c.wait, "wait", 60, "seconds the guest waits for mission mode and for SYS_ERR recovery")
	flag.StringVar(&c.mem, "mem", "512M", "guest RAM (below 4 GiB: the MHI DMA mask is 32-bit)")
	flag.IntVar(&c.smp, "smp", 2, "guest CPUs")
	flag.IntVar(&c.jobs, "jobs", 1, "guests run at once")
	flag.StringVar(&c.initFile, "init", "", "debugging: boot this busybox script as /init instead of the checks (the modules are in /lib/modules)")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory (initramfs, serial and modem logs)")
	flag.BoolVar(&c.verbose, "v", false, "echo the guest's serial console and the modem's log")
	flag.String("repo", ".", "mhistack checkout (unused; accepted for the script)")
	flag.String("cache", "", "cache directory (unused; accepted for the script)")
	flag.Parse()
	c.profiles, c.pbl = qh.SplitList(profiles), qh.SplitList(pbl)
	if c.initFile != "" {
		b, err := os.ReadFile(c.initFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kernel-crosscheck: %v\n", err)
			os.Exit(2)
		}
		c.initScript = string(b)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	qh.Exit("kernel-crosscheck", err)
}

// result is one guest run: a kernel and a profile.
type result struct {
	kernel, profile string
	checks          map[string]check
	order           []string
	boot            time.Duration // QEMU start to /init
	wall            time.Duration // whole run
	logDir          string
}

type check struct {
	pass, skip bool
	detail     string
}

// skipped marks a check the guest did not run, for a reason it gave.
func (r *result) skipped(name string) {
	c := r.checks[name]
	c.skip = true
	r.checks[name] = c
}

func (r *result) add(name string, pass bool, detail string) {
	if r.checks == nil {
		r.checks = map[string]check{}
	}
	if _, dup := r.checks[name]; !dup {
		r.order = append(r.order, name)
	}
	r.checks[name] = check{pass: pass, detail: detail}
}

func (r *result) failed() bool {
	for _, c := range r.checks {
		if !c.pass {
			return true
		}
	}
	return false
}

func run(ctx context.Context, c config) error {
	start := time.Now()
	if c.qemu == "" || c.mhictl == "" || len(c.kernels) == 0 {
		return qh.PrereqError{Msg: "need -qemu, -mhictl and at least one -kernel LABEL=DIR (hack/kernel-crosscheck.sh passes them)"}
	}
	if err := initramfs.CheckStatic(c.busybox); err != nil {
		return qh.PrereqError{Msg: err.Error()}
	}
	work, cleanup, err := qh.Prepare("kernel-crosscheck", c.keep, c.profiles, c.pbl, true)
	if err != nil {
		return err
	}
	defer cleanup()
	c.work = work

	type job struct {
		k   kernelDir
		p   string
		pbl bool
	}
	var jobs []job
	for _, k := range c.kernels {
		profiles := c.profiles
		if len(profiles) == 1 && profiles[0] == "all" {
			if profiles, err = kernelProfiles(k); err != nil {
				return err
			}
		}
		for _, p := range profiles {
			jobs = append(jobs, job{k, p, false})
		}
		for _, p := range c.pbl {
			jobs = append(jobs, job{k, p, true})
		}
	}
	results := make([]*result, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, max(c.jobs, 1))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			results[i], errs[i] = runOne(ctx, c, j.k, j.p, j.pbl)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if qh.IsPrereq(err) {
			return err
		}
	}

	fmt.Printf("\nkernel-crosscheck: results\n")
	failed := 0
	for i, r := range results {
		if errs[i] != nil {
			fmt.Printf("FAIL  %s/%s  run: %v\n", jobs[i].k.label, jobs[i].p, errs[i])
			failed++
			continue
		}
		var rep qh.Report
		for _, name := range r.order {
			ch := r.checks[name]
			st := qh.Pass
			if ch.skip {
				st = qh.Skip
			}
			if !ch.pass {
				st = qh.Fail
			}
			rep.Add(qh.Row{Scope: r.kernel + "/" + r.profile, Name: name, Status: st, Detail: ch.detail})
		}
		rep.Print(os.Stdout)
		failed += rep.Failed()
		fmt.Printf("      %s/%s  boot to /init %v, run %v\n", r.kernel, r.profile, r.boot.Round(100*time.Millisecond), r.wall.Round(100*time.Millisecond))
	}
	fmt.Printf("kernel-crosscheck: %d runs in %v\n", len(jobs), time.Since(start).Round(time.Second))
	if failed > 0 {
		return fmt.Errorf("%d checks failed", failed)
	}
	return nil
}

// kernelProfiles returns the profiles whose first PCI ID the kernel's
// mhi_pci_generic binds to.
func kernelProfiles(k kernelDir) ([]string, error) {
	_, modDir, err := qh.FindKernel(k.dir)
	if err != nil {
		return nil, err
	}
	ko, err := initramfs.Module(modDir, "mhi_pci_generic")
	if err != nil {
		return nil, qh.PrereqError{Msg: err.Error()}
	}
	aliases := pciAliases(ko)
	var names, skipped []string
	for _, p := range mhi.Profiles() {
		if drives(aliases, p) {
			names = append(names, p.Name)
		} else {
			skipped = append(skipped, p.Name)
		}
	}
	fmt.Printf("kernel-crosscheck: kernel %s drives %d profiles; not in its table: %s\n", k.label, len(names), strings.Join(skipped, " "))
	return names, nil
}

// buildInitramfs packs busybox, the modules and init (made from the
// mhi_pci_generic module by makeInit) into path.
func buildInitramfs(path, busybox, modDir string, extra map[string]initramfs.Entry, makeInit func(pciGeneric []byte) string) error {
	files, err := qh.BaseFiles(busybox)
	if err != nil {
		return err
	}
	if _, err := qh.AddModules(files, modDir, moduleNames(), nil); err != nil {
		return err
	}
	// mbimcli and its libraries for the MBIM section (mbim.go),
	if err := addMbimcli(files); err != nil {
		return err
	}
	// qmicli and its libraries for the QMI section (qmi.go).
	if err := addQmicli(files); err != nil {
		return err
	}
	for name, e := range extra {
		files[name] = e
	}
	files["init"] = initramfs.Entry{Mode: initramfs.Exec, Data: []byte(makeInit(files["lib/modules/mhi_pci_generic.ko"].Data))}
	return qh.WriteInitramfs(path, files)
}

// runOne boots one kernel against one emulated profile.
// runOne boots one kernel against one emulated profile; with pbl the
// modem powers up in its boot ROM and loses its firmware on SYS_ERR, so
// the kernel downloads a firmware file over BHI twice.
func runOne(ctx context.Context, c config, k kernelDir, profile string, pbl bool) (*result, error) {
	t0 := time.Now()
	r := &result{kernel: k.label, profile: profile}
	p, _ := mhi.Lookup(profile)
	modemArgs := []string{"sim", "serve", "-profile", profile, "-once", "-strict"}
	extra := map[string]initramfs.Entry{}
	var fw []byte
	if pbl {
		r.profile += "+pbl"
		modemArgs = append(modemArgs, "-boot", "pbl", "-lose-firmware-on-syserr")
		fw = firmware(p.FirmwareImage)
		extra = firmwareFiles(p.FirmwareImage, fw)
	}
	kernel, modDir, err := qh.FindKernel(k.dir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.work, k.label+"-"+r.profile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r.logDir = dir
	initrd := filepath.Join(dir, "initramfs.cpio.gz")
	// The carrier network on the pair the ping checks use, with a blob
	// for the guest to download through it (tcp.go).
	blobs, err := qh.NewBlobServer(tcpBlobSize)
	if err != nil {
		return nil, err
	}
	defer blobs.Close()
	var exp expect
	if err := buildInitramfs(initrd, c.busybox, modDir, extra, func(ko []byte) string {
		exp = expectFor(p, ko)
		exp.loseFirmware = pbl
		_, _, hasQMI := p.ChannelPair("QMI")
		_, err := os.Stat(qmicliPath)
		exp.qmiVerdict, exp.qmiReason = qmiPlan(exp, hasQMI, err == nil, os.Getenv(requireQMICLI) == "1")
		if carrierPair(exp) != "" {
			exp.tcpPort, exp.tcpSum = blobs.Port(), blobs.Sum
		}
		if c.initFile != "" {
			return c.initScript
		}
		return script(exp, c.wait)
	}); err != nil {
		return nil, err
	}
	if pair := carrierPair(exp); pair != "" {
		modemArgs = append(modemArgs, "-function", pair+"=carrier")
	}
	tag := fmt.Sprintf("[%s/%s] ", k.label, r.profile)
	say := func(format string, args ...any) { fmt.Printf(tag+format+"\n", args...) }

	// The modem first: QEMU connects while it realizes the device and
	// never retries (docs/KERNEL-CROSSCHECK.md §6). Killed with the run
	// (the harness interrupted), like QEMU.
	sock := filepath.Join(dir, "modem.sock")
	var echo func(string)
	if c.verbose {
		echo = func(line string) { fmt.Printf("%smodem| %s\n", tag, line) }
	}
	modemLogPath := filepath.Join(dir, "modem.log")
	modem, err := qh.StartModem(ctx, c.mhictl, append(modemArgs, "-socket", sock), sock, modemLogPath, echo)
	if err != nil {
		return nil, err
	}

	m := qh.Machine{
		QEMU: c.qemu, Firmware: true, Mem: c.mem, SMP: c.smp,
		// Guest RAM as a shared memfd: the vfio-user client then passes
		// it with DMA_MAP and the modem DMAs into it directly.
		SharedMemory: true,
		Kernel:       kernel, Initrd: initrd,
		Append:  "loglevel=4 log_buf_len=8M panic=-1",
		Devices: []string{fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"},"rombar":0}`, sock)},
	}
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	serial, err := os.Create(filepath.Join(dir, "serial.log"))
	if err != nil {
		return nil, err
	}
	defer serial.Close()
	say("booting %s with %s emulated (logs in %s)", filepath.Base(kernel), profile, dir)
	var dmesg []string
	var kernelConfig string
	inDmesg, done := false, false
	crashes := 0
	qStart := time.Now()
	_, qerr := qh.Boot(qctx, m, serial, func(line string) {
		switch {
		case line == "MHISTACK-DMESG-BEGIN":
			inDmesg = true
			return
		case line == "MHISTACK-DMESG-END":
			inDmesg = false
			return
		case inDmesg:
			dmesg = append(dmesg, line)
			return
		}
		if c.verbose {
			fmt.Printf("%sguest| %s\n", tag, line)
		}
		if m := qh.InitRE.FindStringSubmatch(line); m != nil && r.boot == 0 {
			r.boot = time.Since(qStart)
		}
		if v, ok := strings.CutPrefix(line, "MHISTACK-INFO kernel-config "); ok {
			kernelConfig = v
		}
		if name, st, detail, ok := qh.ParseCheck(line); ok {
			r.add(name, st != qh.Fail, detail)
			if st == qh.Skip {
				r.skipped(name)
			}
			say("%s %s %s", st, name, detail)
		}
		if strings.Contains(line, "MHISTACK-REQUEST syserr") {
			crashes++
			say("crashing the modem (SIGUSR1: SYS_ERR)")
			modem.Signal(syscall.SIGUSR1)
		}
		if strings.Contains(line, "MHISTACK-REQUEST carrier-stats") {
			modem.Signal(syscall.SIGUSR2)
		}
		if strings.HasPrefix(line, "MHISTACK-DONE") {
			done = true
		}
		if strings.Contains(line, "Kernel panic") {
			r.add("kernel", false, line)
		}
	})
	if qh.IsPrereq(qerr) {
		modem.Signal(syscall.SIGKILL)
		modem.Stop(0)
		return nil, qerr
	}
	if ctx.Err() != nil {
		r.add("guest-finished", false, "interrupted")
	} else if qctx.Err() != nil {
		r.add("guest-finished", false, fmt.Sprintf("timeout after %v", c.timeout))
	} else if !done {
		r.add("guest-finished", false, fmt.Sprintf("the guest stopped before the end of its checks (qemu: %v)", qerr))
	}
	modem.Stop(15 * time.Second)
	if ch, ok := r.checks["mission-mode"]; ok && kernelConfig != "" {
		ch.detail += fmt.Sprintf(" [kernel config %s]", kernelConfig)
		r.checks["mission-mode"] = ch
	}
	if ch, ok := r.checks["channels"]; ok && len(exp.absent) > 0 {
		ch.detail += fmt.Sprintf("(profile channels this kernel's mhi_pci_generic does not know: %s)", strings.Join(exp.absent, " "))
		r.checks["channels"] = ch
	}
	for _, name := range guestChecks {
		if _, ok := r.checks[name]; !ok {
			r.add(name, false, "not reached")
		}
	}
	os.WriteFile(filepath.Join(dir, "dmesg.log"), []byte(strings.Join(dmesg, "\n")+"\n"), 0o644)

	// The modem's side.
	mlog := modem.Log()
	if m := qh.SummaryRE.FindStringSubmatch(mlog); m == nil {
		r.add("modem-verdict", false, "the modem printed no summary (crashed?); see "+modemLogPath)
	} else {
		ok := m[1] == "0" && m[2] == "0"
		detail := fmt.Sprintf("%s host protocol violations, %s refused DMAs", m[1], m[2])
		if !ok {
			detail += ": " + firstLines(mlog, `msg=violation|msg="dma fault"|msg="host protocol violation"`, 3)
		}
		r.add("modem-verdict", ok, detail)
	}
	r.add("modem-syserr-cycle", sysErrCycle(mlog), stateTrail(mlog))
	if ch, ok := r.checks["ping-burst"]; ok && !ch.skip {
		if m := wpWithoutDoorbellRE.FindStringSubmatch(mlog); m != nil {
			ch.detail += fmt.Sprintf("; modem: %s burst-channel write pointers moved without a doorbell in doorbell mode (found by its DB_MODE watchdog)", m[1])
			r.checks["ping-burst"] = ch
		}
	}
	qmiIdentity(r, mlog)
	if ch, ok := r.checks["tcp-download"]; ok && !ch.skip {
		agg, ok := aggregation(mlog)
		ch.detail += fmt.Sprintf("; the host served %d bytes; modem: %s", blobs.Served.Load(), agg)
		ch.pass = ch.pass && ok
		r.checks["tcp-download"] = ch
	}
	if ch, ok := r.checks["tcp-upload"]; ok && !ch.skip {
		ch.detail += fmt.Sprintf("; the host received %d bytes", blobs.Received.Load())
		r.checks["tcp-upload"] = ch
	}
	if exp.pingDev == "mhi_hwip0" {
		// QMAP: mhi_net's raw-IP netdev with rmnet on top (tcp.go).
		if ok, why := rmnetSupport(k.dir, modDir); !ok {
			r.add("qmap-rmnet", true, why)
			r.skipped("qmap-rmnet")
		} else {
			r.add("qmap-rmnet", false, "rmnet is there ("+why+") but the guest's rmnet check is not written: no Debian kernel the harness ran had rmnet")
		}
	}
	if pbl {
		// The modem loses its firmware with every crash.
		ok, detail := firmwareDownloads(mlog, fw, 1+crashes)
		r.add("firmware-download", ok, detail)
	}
	complaints, tolerated := dmesgErrors(dmesg)
	detail := strings.Join(limit(complaints, 5), " | ")
	if len(tolerated) > 0 {
		detail = strings.TrimSpace(detail + " tolerated: " + strings.Join(limit(tolerated, 3), " | "))
	}
	r.add("dmesg-clean", len(complaints) == 0, detail)
	r.wall = time.Since(t0)
	return r, nil
}

// firmware returns the made-up image the guest offers as name.
func firmware(name string) []byte {
	return qh.Firmware(name, 192<<10+123) // not a multiple of any page or segment size
}

// firmwareFiles places fw at lib/firmware/name, where the kernel's
// firmware loader finds it without user space.
func firmwareFiles(name string, fw []byte) map[string]initramfs.Entry {
	files := map[string]initramfs.Entry{}
	dir := "lib/firmware"
	files[dir] = initramfs.Entry{Mode: initramfs.Dir}
	parts := strings.Split(name, "/")
	for _, d := range parts[:len(parts)-1] {
		dir += "/" + d
		files[dir] = initramfs.Entry{Mode: initramfs.Dir}
	}
	files["lib/firmware/"+name] = initramfs.Entry{Mode: initramfs.File, Data: fw}
	return files
}

// firmwareDownloads checks the modem received fw over BHI want times (at
// power-up and after each crash), intact each time.
func firmwareDownloads(log string, fw []byte, want int) (bool, string) {
	sum := fmt.Sprintf("%x", sha256.Sum256(fw))
	var got []string
	good := 0
	for _, m := range qh.ImageRE.FindAllStringSubmatch(log, -1) {
		if m[1] == "BHI" && m[2] == fmt.Sprint(len(fw)) && m[3] == sum {
			good++
			got = append(got, "intact")
		} else {
			got = append(got, fmt.Sprintf("%s %s bytes sha256 %.12s", m[1], m[2], m[3]))
		}
	}
	detail := fmt.Sprintf("%d BHI downloads of the %d-byte image, %d expected (%s)", len(got), len(fw), want, strings.Join(got, ", "))
	return good == want && len(got) == want, detail
}

func sysErrCycle(log string) bool  { return qh.SysErrCycle(log) }
func stateTrail(log string) string { return qh.StateTrail(log, 16) }

// wpWithoutDoorbellRE: the modem's count of burst channels whose context
// write pointer its doorbell-mode watchdog found moved with no doorbell
// (the host lost its doorbell-mode flag, docs/KERNEL-CROSSCHECK.md §4).
var wpWithoutDoorbellRE = regexp.MustCompile(`msg=summary .*\bwp_without_doorbell=(\d+)`)

var dmesgErrRE = regexp.MustCompile(`(?i)fail|timeout|timed out|unable|could not|error|warn|BUG|call trace|oops|underflow`)
var dmesgOK = regexp.MustCompile(`SYS ERROR|SYS_ERROR|System error detected|Triggering SYS_ERR|error_detected|Transitioning from PM state`)
var dmesgMHI = regexp.MustCompile(`(?i)mhi|wwan|0000:00:0`)

// knownKernelMessages are complaints of the reference kernels that no
// device behaviour avoids; they are reported, not failed.
var knownKernelMessages = []struct {
	re  *regexp.Regexp
	why string
}{
	// One shared MSI runs both the INTVEC handler (MHISTATUS says
	// SYS_ERR) and the control event ring's (STATE_CHANGE(SYS_ERR)), so
	// both kernels queue two SYS_ERR transitions: two MHI resets, two
	// READY transitions. On 6.1 the second READY transition may find the
	// first already in M0 and log this; recovery completes regardless.
	{regexp.MustCompile(`Error moving to state POWER ON RESET from M0`), "second READY transition of a doubly detected SYS_ERR"},
	// mhi_queue publishes a TRE before taking its runtime PM reference;
	// when another CPU rings the channel doorbell in between (DB_MODE
	// handling), the completion's put comes first. Seen under the
	// four-stream ping burst; the runtime-pm check runs before it.
	{regexp.MustCompile(`Runtime PM usage count underflow`), "mhi_queue takes its runtime PM reference after the TRE is visible"},
}

// afterDoubleSysErr are complaints that follow from the 6.1 race above:
// its failed second READY transition leaves the kernel's idea of the
// device state at READY while the modem is in M0, so every later runtime
// suspend waits for M0/M1 until the controller timeout and fails (-EIO),
// and rmmod waits for it. Tolerated only after that message.
var afterDoubleSysErr = regexp.MustCompile(`Could not enter M0/M1 state|failed to suspend device: -5`)

// resumeFailure is how the kernel reports a modem that crashed while
// suspended, and what mhi_net says of the packet that woke it (the
// check's ping, queued while the kernel powers the crashed modem down:
// "Failed to queue TX buf (-5)"; seen on 6.1 with sierra-em919x):
// suspended (the syserr-in-m3 check does it on purpose): mhi_pm_resume
// finds SYS_ERR, mhi_pci_generic starts its recovery work.
var resumeFailure = regexp.MustCompile(`Resuming from non M3 state|failed to resume device|Linkdown or Error Fatal|Failed to queue TX buf \(-5\)`)

// dmesgErrors returns the kernel's complaints about the MHI stack, and
// the known ones separately.
func dmesgErrors(lines []string) (complaints, tolerated []string) {
	doubled, inM3Crash := false, false
next:
	for _, l := range lines {
		switch {
		case strings.Contains(l, "mhistack: syserr-in-m3 begin"):
			inM3Crash = true
		case strings.Contains(l, "mhistack: syserr-in-m3 end"):
			inM3Crash = false
		}
		if !dmesgMHI.MatchString(l) || !dmesgErrRE.MatchString(l) || dmesgOK.MatchString(l) {
			continue
		}
		l = strings.TrimSpace(l)
		if inM3Crash && resumeFailure.MatchString(l) {
			tolerated = append(tolerated, l+" (the syserr-in-m3 check crashed the suspended modem)")
			continue
		}
		for i, k := range knownKernelMessages {
			if k.re.MatchString(l) {
				tolerated = append(tolerated, l+" ("+k.why+")")
				doubled = doubled || i == 0
				continue next
			}
		}
		if doubled && afterDoubleSysErr.MatchString(l) {
			tolerated = append(tolerated, l+" (kernel left in READY by the doubly detected SYS_ERR)")
			continue
		}
		complaints = append(complaints, l)
	}
	return complaints, tolerated
}

func firstLines(s, pattern string, n int) string { return qh.FirstLines(s, pattern, n) }

func limit(s []string, n int) []string { return qh.Limit(s, n) }
