package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
)

var (
	beginRE  = regexp.MustCompile(`^MHISTACK-BEGIN (\S+)`)
	windowRE = regexp.MustCompile(`^MHISTACK-WINDOW (begin|end) (\S+)`)
	faultRE  = regexp.MustCompile(`^time=(\S+) level=WARN msg="DMA refused" .*fault="([^"]*)"`)
)

// window is a span of host time in which the harness itself made the
// kernel turn the modem's bus mastering off under running traffic (kill
// -9 of mhiproxy, hot-unplug): the modem's DMA refused for that reason in
// it is expected, not a host protocol violation.
type window struct {
	name       string
	begin, end time.Time // end zero: to the end of the run
}

// judgeFaults splits the modem's refused DMAs into those inside a window
// with bus mastering off (tolerated) and the rest.
func judgeFaults(log string, windows []window) (tolerated, other []string) {
	for _, line := range strings.Split(log, "\n") {
		m := faultRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		in := ""
		for _, w := range windows {
			if err == nil && !at.Before(w.begin.Add(-time.Second)) && (w.end.IsZero() || !at.After(w.end.Add(time.Second))) {
				in = w.name
			}
		}
		if in != "" && strings.Contains(m[2], "bus master disabled") {
			tolerated = append(tolerated, in)
			continue
		}
		other = append(other, m[2])
	}
	return tolerated, other
}

// carrierFunction is the mhictl sim serve -function argument that puts
// the carrier network on the data pair mhiproxy's stack.Open uses on p
// (mhi.Profile.DataPath): with the pair's own framing, or QMAPv5 (what
// the host's QMI session asks WDA for) when the session runs on QMI.
func carrierFunction(p *mhi.Profile) (string, error) {
	dp, err := p.DataPath("", "")
	if err != nil {
		return "", err
	}
	if dp.Framing == mhi.FramingQMAP {
		return dp.Channel + "=carrier-qmap5", nil
	}
	return dp.Channel + "=carrier", nil
}

// selftestPair is the pair mhictl selftest loops on: the modem's LOOPBACK,
// or DIAG with a loopback function behind it (-function DIAG=loopback).
func selftestPair(p *mhi.Profile) (pair string, modemArgs []string) {
	if _, _, ok := p.ChannelPair(mhi.ChannelLoopback); ok {
		return mhi.ChannelLoopback, nil
	}
	return "DIAG", []string{"-function", "DIAG=loopback"}
}

func (r *runner) run(ctx context.Context) error {
	t0 := time.Now()
	r.begun, r.host, r.hostBad = map[string]time.Time{}, map[string]string{}, map[string]string{}
	p, _ := mhi.Lookup(r.profile)
	dir := filepath.Join(r.c.work, r.scope())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	blobs, err := qh.NewBlobServer(r.c.size)
	if err != nil {
		return err
	}
	defer blobs.Close()

	sock, ctl := filepath.Join(dir, "modem.sock"), filepath.Join(dir, "control.sock")
	modemArgs := []string{"sim", "serve", "-profile", r.profile, "-once", "-strict", "-no-profile-quirks", "-socket", sock, "-control", ctl}
	stPair, stArgs := selftestPair(p)
	var fw []byte
	var flashFiles, flashWant map[string][]byte
	switch {
	case r.pbl:
		modemArgs = append(modemArgs, "-boot", "pbl", "-full-boot-chain")
		fw = qh.Firmware(p.FirmwareImage, 640<<10+321) // several BHIe segments, not a multiple of a page
	case r.flash:
		modemArgs = append(modemArgs, "-function", "FIREHOSE=firehose")
		flashFiles, flashWant = flashSet()
	default:
		fn, err := carrierFunction(p)
		if err != nil {
			return err
		}
		modemArgs = append(modemArgs, "-function", fn)
		modemArgs = append(modemArgs, stArgs...)
	}

	files, err := qh.BaseFiles(r.c.busybox)
	if err != nil {
		return err
	}
	mods, err := qh.AddModules(files, r.modDir, qh.VFIOModules, func(m string) bool { return m != "vfio-pci" })
	if err != nil {
		return err
	}
	for name, path := range map[string]string{"bin/mhictl": r.c.mhictl, "bin/mhiproxy": r.c.mhiproxy} {
		b, err := os.ReadFile(path)
		if err != nil {
			return qh.PrereqError{Msg: err.Error()}
		}
		files[name] = initramfs.Entry{Mode: initramfs.Exec, Data: b}
	}
	if flashFiles != nil {
		files["flash"] = initramfs.Entry{Mode: initramfs.Dir}
		files["flash/want"] = initramfs.Entry{Mode: initramfs.Dir}
	}
	for name, b := range flashFiles {
		files[name] = initramfs.Entry{Mode: initramfs.File, Data: b}
	}
	for name, b := range flashWant {
		files["flash/want/"+name] = initramfs.Entry{Mode: initramfs.File, Data: b}
	}
	fwSum := ""
	if fw != nil {
		files["fw.img"] = initramfs.Entry{Mode: initramfs.File, Data: fw}
		fwSum = fmt.Sprintf("%x", sha256.Sum256(fw))
	}
	id := p.IDs[0]
	files["init"] = initramfs.Entry{Mode: initramfs.Exec, Data: []byte(script(guestVars{
		vendor: fmt.Sprintf("%04x", id.Vendor), device: fmt.Sprintf("%04x", id.Device),
		pbl: r.pbl, flash: r.flash, modules: mods, port: blobs.Port(), sum: blobs.Sum, size: r.c.size,
		selftestCh: stPair, fwSum: fwSum,
	}))}
	initrd := filepath.Join(dir, "initramfs.cpio.gz")
	if err := qh.WriteInitramfs(initrd, files); err != nil {
		return err
	}

	var echo func(string)
	if r.c.verbose {
		echo = func(line string) { r.say("modem| %s", line) }
	}
	modemLog := filepath.Join(dir, "modem.log")
	modem, err := qh.StartModem(ctx, r.c.mhictl, modemArgs, sock, modemLog, echo)
	if err != nil {
		return err
	}
	qmp := filepath.Join(dir, "qmp.sock")
	m := qh.Machine{
		QEMU: r.c.qemu, Firmware: true, Mem: r.c.mem, SMP: r.c.smp,
		SharedMemory: true, IOMMU: true, CachingMode: true, QMP: qmp,
		Kernel: r.kernel, Initrd: initrd,
		Append: "intel_iommu=on loglevel=4 panic=-1",
		// Behind a PCIe root port, so that device_del can unplug it
		// (pciehp); the root bus of q35 does not hotplug.
		Devices: []string{
			"pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1",
			fmt.Sprintf(`{"driver":"vfio-user-pci","id":"modem","bus":"rp1","socket":{"path":%q,"type":"unix"},"rombar":0}`, sock),
		},
	}
	serial, err := os.Create(filepath.Join(dir, "serial.log"))
	if err != nil {
		return err
	}
	defer serial.Close()
	qctx, cancel := context.WithTimeout(ctx, r.c.timeout)
	defer cancel()
	r.say("booting %s against the emulated %s (logs in %s)", filepath.Base(r.kernel), r.scope(), dir)
	done := false
	var initAt time.Duration
	var helpers []chan struct{}
	guest := map[string]qh.Row{}
	var lastLines []string // the serial console's tail, for a guest that stopped early
	_, qerr := qh.Boot(qctx, m, serial, func(line string) {
		if lastLines = append(lastLines, line); len(lastLines) > 12 {
			lastLines = lastLines[1:]
		}
		if r.c.verbose {
			r.say("guest| %s", line)
		}
		now := time.Now()
		if qh.InitRE.MatchString(line) && initAt == 0 {
			initAt = now.Sub(t0)
		}
		if w := windowRE.FindStringSubmatch(line); w != nil {
			r.mu.Lock()
			if w[1] == "begin" {
				r.windows = append(r.windows, window{name: w[2], begin: now})
			} else {
				for i := range r.windows {
					if r.windows[i].name == w[2] && r.windows[i].end.IsZero() {
						r.windows[i].end = now
					}
				}
			}
			r.mu.Unlock()
		}
		if b := beginRE.FindStringSubmatch(line); b != nil {
			r.mu.Lock()
			r.begun[b[1]] = now
			r.mu.Unlock()
		}
		if name, st, detail, ok := qh.ParseCheck(line); ok {
			r.mu.Lock()
			took := time.Duration(0)
			if b, ok := r.begun[name]; ok {
				took = now.Sub(b)
			}
			r.mu.Unlock()
			guest[name] = qh.Row{Scope: r.scope(), Name: name, Status: st, Detail: detail, Took: took}
			r.say("%s %s %v %s", st, name, took.Round(10*time.Millisecond), detail)
		}
		switch {
		case strings.Contains(line, "MHISTACK-REQUEST syserr-mid-download"):
			h := make(chan struct{})
			helpers = append(helpers, h)
			go func() { defer close(h); r.syserrMidDownload(blobs, ctl) }()
		case strings.Contains(line, "MHISTACK-REQUEST unplug"):
			h := make(chan struct{})
			helpers = append(helpers, h)
			go func() { defer close(h); r.unplug(qmp) }()
		case strings.HasPrefix(line, "MHISTACK-DONE"):
			done = true
		case strings.Contains(line, "Kernel panic"):
			r.note("run", line, true)
		}
	})
	for _, h := range helpers {
		<-h
	}
	if qh.IsPrereq(qerr) {
		modem.Signal(9)
		modem.Stop(0)
		return qerr
	}
	modem.Stop(15 * time.Second)
	mlog := modem.Log()

	names := checks
	switch {
	case r.pbl:
		names = pblChecks
	case r.flash:
		names = flashChecks
	}
	for _, name := range names {
		row, ok := guest[name]
		if !ok {
			row = qh.Row{Scope: r.scope(), Name: name, Status: qh.Fail, Detail: "not reached"}
		}
		r.mu.Lock()
		if h := r.host[name]; h != "" {
			row.Detail = strings.TrimSpace(row.Detail + "; harness: " + h)
		}
		if bad := r.hostBad[name]; bad != "" {
			row.Status = qh.Fail
			row.Detail = strings.TrimSpace(row.Detail + "; harness: " + bad)
		}
		r.mu.Unlock()
		r.rep.Add(row)
	}
	// The modem's side.
	switch {
	case r.pbl:
		ok, detail := bhieImage(mlog, fw)
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-got-image", Status: pass(ok), Detail: detail})
	case r.flash:
	default:
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-syserr-cycle", Status: pass(qh.SysErrCycle(mlog)), Detail: qh.StateTrail(mlog, 24)})
	}
	if s := qh.SummaryRE.FindStringSubmatch(mlog); s == nil {
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-verdict", Status: qh.Fail, Detail: "the modem printed no summary (crashed?); see " + modemLog})
	} else {
		// A DMA refused with bus mastering off inside a window is also
		// one "host protocol violation" of the strict modem: both are
		// forgiven together.
		r.mu.Lock()
		tolerated, other := judgeFaults(mlog, r.windows)
		r.mu.Unlock()
		violations, _ := strconv.Atoi(s[1])
		violations -= len(tolerated)
		ok := violations <= 0 && len(other) == 0
		detail := fmt.Sprintf("%d host protocol violations, %d DMAs refused (outside every DMA map or with bus mastering off)", max(violations, 0), len(other))
		if len(tolerated) > 0 {
			detail += fmt.Sprintf("; %d DMAs refused with bus mastering off after the kernel took the device back (%s), tolerated",
				len(tolerated), strings.Join(slices.Compact(tolerated), ", "))
		}
		if !ok {
			detail += ": " + qh.FirstLines(mlog, `msg=violation|msg="dma fault"|msg="host protocol violation"|DMA refused`, 3)
		}
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-verdict", Status: pass(ok), Detail: detail})
	}
	runDetail := fmt.Sprintf("boot to /init %v, run %v", initAt.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
	switch {
	case ctx.Err() != nil:
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: qh.Fail, Detail: "interrupted"})
	case qctx.Err() != nil:
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: qh.Fail, Detail: fmt.Sprintf("timeout after %v; %s", r.c.timeout, runDetail)})
	case !done:
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: qh.Fail, Detail: fmt.Sprintf("the guest stopped before the end (qemu: %v); %s; last serial lines: %s",
			qerr, runDetail, strings.Join(lastLines, " | "))})
	default:
		st := qh.Pass
		r.mu.Lock()
		if bad := r.hostBad["run"]; bad != "" {
			st, runDetail = qh.Fail, bad+"; "+runDetail
		}
		r.mu.Unlock()
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: st, Detail: runDetail, Took: time.Since(t0)})
	}
	return nil
}

func pass(ok bool) qh.Status {
	if ok {
		return qh.Pass
	}
	return qh.Fail
}

// syserrMidDownload crashes the modem once the host has sent a quarter of
// the blob the guest is downloading (so the transfer is in flight on
// every hop), through the modem's control socket.
func (r *runner) syserrMidDownload(blobs *qh.BlobServer, ctl string) {
	const check = "syserr-mid-transfer"
	start := blobs.Served.Load()
	want := start + int64(r.c.size/4)
	deadline := time.Now().Add(60 * time.Second)
	for blobs.Served.Load() < want {
		if time.Now().After(deadline) {
			r.note(check, fmt.Sprintf("the download never reached %d bytes (%d served)", r.c.size/4, blobs.Served.Load()-start), true)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	at := blobs.Served.Load() - start
	out, err := exec.Command(r.c.mhictl, "sim", "control", "-socket", ctl, "syserr").CombinedOutput()
	if err != nil {
		r.note(check, fmt.Sprintf("SYS_ERR injection failed: %v: %s", err, out), true)
		return
	}
	if at >= int64(r.c.size) {
		r.note(check, "SYS_ERR came after the host had sent the whole blob: not mid-transfer", true)
		return
	}
	r.say("SYS_ERR injected after %d of %d bytes served", at, r.c.size)
	r.note(check, fmt.Sprintf("SYS_ERR injected after %.1f MiB of %d MiB served", float64(at)/(1<<20), r.c.size>>20), false)
}

// unplug asks QEMU to unplug the modem (QMP device_del): the guest's
// pciehp removes the function, vfio-pci relays the request to mhiproxy.
func (r *runner) unplug(qmp string) {
	const check = "hot-unplug"
	t := time.Now()
	if _, err := qh.QMP(qmp, "device_del", map[string]string{"id": "modem"}, 10*time.Second); err != nil {
		r.note(check, fmt.Sprintf("QMP device_del: %v", err), true)
		return
	}
	r.say("QMP device_del modem: accepted in %v", time.Since(t).Round(time.Millisecond))
	r.note(check, "QMP device_del accepted", false)
}

// bhieImage checks the modem received fw intact over BHIe.
func bhieImage(log string, fw []byte) (bool, string) {
	sum := fmt.Sprintf("%x", sha256.Sum256(fw))
	var got []string
	ok := false
	for _, m := range qh.ImageRE.FindAllStringSubmatch(log, -1) {
		got = append(got, fmt.Sprintf("%s %s bytes sha256 %.12s", m[1], m[2], m[3]))
		ok = ok || (m[1] == "BHIe" && m[2] == fmt.Sprint(len(fw)) && m[3] == sum)
	}
	return ok, fmt.Sprintf("the modem received: %s (want BHIe %d bytes sha256 %.12s)", strings.Join(got, ", "), len(fw), sum)
}
