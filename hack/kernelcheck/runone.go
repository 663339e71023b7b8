package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
)

// guestRun is one kernel booted against one emulated profile: what it
// was given, what it should show, and its verdicts.
type guestRun struct {
	c              config
	k              kernelDir
	p              *mhi.Profile
	pbl            bool
	r              *result
	dir            string // the run's logs and image
	kernel, modDir string
	exp            expect
	quirk          *quirkRun // a quirk run (quirks.go)
	lock           *lockRun  // a lock run (locks.go), nil for the checks
	fw             []byte    // PBL runs: the image the kernel downloads
	modemArgs      []string  // mhictl sim serve … (without -socket)
	blobs          *qh.BlobServer
	tag            string // "[KERNEL/PROFILE] ", before every progress line
}

// guestOutput is what the harness read from the guest's serial console
// besides the verdicts.
type guestOutput struct {
	dmesg        []string // the kernel log the guest dumped at the end
	kernelConfig string   // mhi_pci_generic's configuration name
	crashes      int      // SYS_ERRs the guest asked for
	// stallDmesg is the kernel log tail the guest's stall watcher
	// printed (stall.go), all there is of a guest stopped before its end.
	stallDmesg []string
}

// runOne boots one kernel against one emulated profile; with pbl the
// modem powers up in its boot ROM and loses its firmware on SYS_ERR, so
// the kernel downloads a firmware file over BHI twice. A quirk run judges
// its behaviours instead of the checks.
func runOne(ctx context.Context, c config, j job) (*result, error) {
	t0 := time.Now()
	g, err := newGuestRun(c, j.k, j.p, j.pbl, j.quirk, j.lock)
	if err != nil {
		return nil, err
	}
	defer g.blobs.Close()
	initrd, err := g.buildImage()
	if err != nil {
		return nil, err
	}
	// The modem first: QEMU connects while it realizes the device and
	// never retries (docs/KERNEL-CROSSCHECK.md §6). Killed with the run
	// (the harness interrupted), like QEMU.
	sock := filepath.Join(g.dir, "modem.sock")
	var echo func(string)
	if c.verbose {
		echo = func(line string) { fmt.Printf("%smodem| %s\n", g.tag, line) }
	}
	modemLogPath := filepath.Join(g.dir, "modem.log")
	modem, err := qh.StartModem(ctx, c.mhictl, append(g.modemArgs, "-socket", sock), sock, modemLogPath, echo)
	if err != nil {
		return nil, err
	}
	out, err := g.boot(ctx, initrd, sock, modem)
	if err != nil {
		return nil, err
	}
	os.WriteFile(filepath.Join(g.dir, "dmesg.log"), []byte(strings.Join(out.dmesg, "\n")+"\n"), 0o644)
	if g.quirk != nil {
		g.judgeQuirks(out, modem.Log())
		g.r.wall = time.Since(t0)
		return g.r, nil
	}
	if g.lock != nil {
		g.judgeLocks()
		g.judgeKernel(out.dmesg)
		g.r.wall = time.Since(t0)
		return g.r, nil
	}
	g.judgeGuest(out)
	g.judgeModem(modem.Log(), modemLogPath, out.crashes)
	g.judgeKernel(out.dmesg)
	g.r.wall = time.Since(t0)
	return g.r, nil
}

// newGuestRun finds the kernel, makes the run's directory and starts the
// blob server the TCP checks use (tcp.go); the caller closes it.
func newGuestRun(c config, k kernelDir, profile string, pbl bool, quirk *quirkRun, lock *lockRun) (*guestRun, error) {
	p, _ := mhi.Lookup(profile)
	g := &guestRun{c: c, k: k, p: p, pbl: pbl, r: &result{kernel: k.label, profile: profile},
		modemArgs: []string{"sim", "serve", "-profile", profile, "-once", "-strict", "-no-profile-quirks"}, quirk: quirk}
	if quirk != nil {
		g.modemArgs = quirk.modemArgs()
	}
	if pbl {
		g.r.profile += "+pbl"
		g.modemArgs = append(g.modemArgs, "-boot", "pbl", "-lose-firmware-on-syserr")
		g.fw = firmware(p.FirmwareImage)
	}
	var err error
	if g.kernel, g.modDir, err = qh.FindKernel(k.dir); err != nil {
		return nil, err
	}
	if quirk != nil {
		g.r.profile += "+" + quirk.name
	}
	if lock != nil {
		g.lock = lock
		g.r.profile += "+locks"
		g.modemArgs = append(g.modemArgs, lock.serveArgs()...)
	}
	g.dir = filepath.Join(c.work, k.label+"-"+g.r.profile)
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return nil, err
	}
	g.r.logDir = g.dir
	g.tag = fmt.Sprintf("[%s] ", g.r.scope())
	// The carrier network on the pair the ping checks use, with a blob
	// for the guest to download through it (tcp.go).
	if g.blobs, err = qh.NewBlobServer(tcpBlobSize); err != nil {
		return nil, err
	}
	return g, nil
}

// say prints a progress line of the run.
func (g *guestRun) say(format string, args ...any) { fmt.Printf(g.tag+format+"\n", args...) }

// buildImage works out what the guest should find (from the kernel's own
// mhi_pci_generic), writes the initramfs with the init script for it and
// completes the modem's arguments; it returns the initramfs's path.
func (g *guestRun) buildImage() (string, error) {
	extra := map[string]initramfs.Entry{}
	if g.pbl {
		extra = firmwareFiles(g.p.FirmwareImage, g.fw)
	}
	initrd := filepath.Join(g.dir, "initramfs.cpio.gz")
	var scriptErr error
	if err := buildInitramfs(initrd, g.c.busybox, g.modDir, extra, func(ko []byte) string {
		g.exp = g.expectations(ko)
		switch {
		case g.c.initFile != "":
			return g.c.initScript
		case g.quirk != nil:
			var s string
			s, scriptErr = quirkScript(g.exp, g.c.wait, g.quirk.steps)
			return s
		case g.lock != nil:
			var s string
			s, scriptErr = lockScript(g.exp, g.c.wait, g.lock)
			return s
		}
		return script(g.exp, g.c.wait)
	}); err != nil {
		return "", err
	}
	if scriptErr != nil {
		return "", scriptErr
	}
	if pair := carrierPair(g.exp); pair != "" {
		g.modemArgs = append(g.modemArgs, "-function", pair+"=carrier")
	}
	return initrd, nil
}

// expectations is what the guest should find for the profile with the
// kernel whose mhi_pci_generic module is ko, and what its optional
// sections get (the QMI plan, the blob to download).
func (g *guestRun) expectations(ko []byte) expect {
	exp := expectFor(g.p, ko)
	exp.loseFirmware = g.pbl
	exp.stallDump = stallDumpAfter(g.c.checkTimeout)
	_, _, hasQMI := g.p.ChannelPair(mhi.ChannelQMI)
	_, err := os.Stat(qmicliPath)
	exp.qmiVerdict, exp.qmiReason = qmiPlan(exp, hasQMI, err == nil, os.Getenv(requireQMICLI) == "1")
	if carrierPair(exp) != "" {
		exp.tcpPort, exp.tcpSum = g.blobs.Port(), g.blobs.Sum
	}
	return exp
}

// boot runs QEMU with initrd and the vfio-user device on sock until the
// guest powers off (or the timeout), recording the verdicts it prints
// and doing what it asks of the modem; the modem is stopped when it
// returns. A missing prerequisite (QEMU would not start) is the error.
func (g *guestRun) boot(ctx context.Context, initrd, sock string, modem *qh.Modem) (guestOutput, error) {
	c, r := g.c, g.r
	var out guestOutput
	m := qh.Machine{
		QEMU: c.qemu, Firmware: true, Mem: c.mem, SMP: c.smp,
		// Guest RAM as a shared memfd: the vfio-user client then passes
		// it with DMA_MAP and the modem DMAs into it directly.
		SharedMemory: true,
		Kernel:       g.kernel, Initrd: initrd,
		Append:  "loglevel=4 log_buf_len=8M panic=-1",
		Devices: []string{fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"},"rombar":0}`, sock)},
	}
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stall := newStallWatch(c.checkTimeout, cancel)
	defer stall.stop()
	var stallDmesg []string
	serial, err := os.Create(filepath.Join(g.dir, "serial.log"))
	if err != nil {
		modem.Signal(syscall.SIGKILL)
		modem.Stop(0)
		return out, err
	}
	defer serial.Close()
	g.say("booting %s with %s emulated (logs in %s)", filepath.Base(g.kernel), g.p.Name, g.dir)
	inDmesg, done := false, false
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
			out.dmesg = append(out.dmesg, line)
			return
		}
		if l, ok := strings.CutPrefix(line, stallDmesgPrefix); ok {
			stallDmesg = append(stallDmesg, l)
			return
		}
		if c.verbose {
			fmt.Printf("%sguest| %s\n", g.tag, line)
		}
		if m := qh.InitRE.FindStringSubmatch(line); m != nil && r.boot == 0 {
			r.boot = time.Since(qStart)
		}
		if v, ok := strings.CutPrefix(line, "MHISTACK-INFO kernel-config "); ok {
			out.kernelConfig = v
		}
		if name, st, detail, ok := qh.ParseCheck(line); ok {
			stall.progress(name)
			r.add(name, st != qh.Fail, detail)
			if st == qh.Skip {
				r.skipped(name)
			}
			g.say("%s %s %s", st, name, detail)
		}
		if strings.Contains(line, "MHISTACK-REQUEST syserr") {
			out.crashes++
			g.say("crashing the modem (SIGUSR1: SYS_ERR)")
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
		return out, qerr
	}
	stall.stop()
	out.stallDmesg = stallDmesg
	if len(stallDmesg) > 0 {
		os.WriteFile(filepath.Join(g.dir, "stall-dmesg.log"), []byte(strings.Join(stallDmesg, "\n")+"\n"), 0o644)
	}
	if last, stalled := stall.stalled(); ctx.Err() != nil {
		r.add("guest-finished", false, "interrupted")
	} else if stalled {
		r.add("guest-finished", false, stallDetail(c.checkTimeout, last, r, len(stallDmesg)))
	} else if qctx.Err() != nil {
		r.add("guest-finished", false, fmt.Sprintf("timeout after %v", c.timeout))
	} else if !done {
		r.add("guest-finished", false, fmt.Sprintf("the guest stopped before the end of its checks (qemu: %v)", qerr))
	}
	modem.Stop(15 * time.Second)
	return out, nil
}

// judgeGuest completes the guest's verdicts: the kernel's configuration
// and the channels it lacks in their details, and every check the guest
// never reported failed as "not reached".
func (g *guestRun) judgeGuest(out guestOutput) {
	r := g.r
	if ch, ok := r.checks["mission-mode"]; ok && out.kernelConfig != "" {
		ch.detail += fmt.Sprintf(" [kernel config %s]", out.kernelConfig)
		r.checks["mission-mode"] = ch
	}
	if ch, ok := r.checks["channels"]; ok && len(g.exp.absent) > 0 {
		ch.detail += fmt.Sprintf("(profile channels this kernel's mhi_pci_generic does not know: %s)", strings.Join(g.exp.absent, " "))
		r.checks["channels"] = ch
	}
	for _, name := range guestChecks {
		if _, ok := r.checks[name]; !ok {
			r.add(name, false, "not reached")
		}
	}
}

// judgeModem adds the modem's verdicts from its log mlog (kept at
// logPath): no host protocol violation and no refused DMA, the SYS_ERR
// cycle, the firmware it received in PBL runs (once per crash and at
// power-up), and what it saw of the guest's checks (DB_MODE watchdog,
// QMI identity, DL aggregation, bytes moved).
func (g *guestRun) judgeModem(mlog, logPath string, crashes int) {
	r := g.r
	if m := qh.SummaryRE.FindStringSubmatch(mlog); m == nil {
		r.add("modem-verdict", false, "the modem printed no summary (crashed?); see "+logPath)
	} else {
		ok := m[1] == "0" && m[2] == "0"
		detail := fmt.Sprintf("%s host protocol violations, %s refused DMAs", m[1], m[2])
		if !ok {
			detail += ": " + qh.FirstLines(mlog, `msg=violation|msg="dma fault"|msg="host protocol violation"`, 3)
		}
		r.add("modem-verdict", ok, detail)
	}
	r.add("modem-syserr-cycle", qh.SysErrCycle(mlog), qh.StateTrail(mlog, 16))
	if m := wpWithoutDoorbellRE.FindStringSubmatch(mlog); m != nil {
		r.amend("ping-burst", func(ch *check) {
			ch.detail += fmt.Sprintf("; modem: %s burst-channel write pointers moved without a doorbell in doorbell mode (found by its DB_MODE watchdog)", m[1])
		})
	}
	qmiIdentity(r, mlog)
	r.amend("tcp-download", func(ch *check) {
		agg, ok := aggregation(mlog)
		ch.detail += fmt.Sprintf("; the host served %d bytes; modem: %s", g.blobs.Served.Load(), agg)
		ch.pass = ch.pass && ok
	})
	r.amend("tcp-upload", func(ch *check) {
		ch.detail += fmt.Sprintf("; the host received %d bytes", g.blobs.Received.Load())
	})
	if g.exp.pingDev == "mhi_hwip0" {
		// QMAP: mhi_net's raw-IP netdev with rmnet on top (tcp.go).
		if ok, why := rmnetSupport(g.k.dir, g.modDir); !ok {
			r.add("qmap-rmnet", true, why)
			r.skipped("qmap-rmnet")
		} else {
			r.add("qmap-rmnet", false, "rmnet is there ("+why+") but the guest's rmnet check is not written: no Debian kernel the harness ran had rmnet")
		}
	}
	if g.pbl {
		// The modem loses its firmware with every crash.
		ok, detail := firmwareDownloads(mlog, g.fw, 1+crashes)
		r.add("firmware-download", ok, detail)
	}
}

// judgeKernel adds dmesg-clean: no complaint of the kernel about the MHI
// stack but the known ones (dmesg.go).
func (g *guestRun) judgeKernel(dmesg []string) {
	complaints, tolerated := dmesgErrors(dmesg)
	detail := strings.Join(qh.Limit(complaints, 5), " | ")
	if len(tolerated) > 0 {
		detail = strings.TrimSpace(detail + " tolerated: " + strings.Join(qh.Limit(tolerated, 3), " | "))
	}
	g.r.add("dmesg-clean", len(complaints) == 0, detail)
}

// wpWithoutDoorbellRE: the modem's count of burst channels whose context
// write pointer its doorbell-mode watchdog found moved with no doorbell
// (the host lost its doorbell-mode flag, docs/KERNEL-CROSSCHECK.md §4).
var wpWithoutDoorbellRE = regexp.MustCompile(`msg=summary .*\bwp_without_doorbell=(\d+)`)
