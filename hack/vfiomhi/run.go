package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
)

var (
	beginRE = regexp.MustCompile(`^MHISTACK-BEGIN (\S+)`)
)

// dataPair is the pair mhiproxy's stack.Open uses on p: IP_HW0 (raw IP)
// when the profile has it, else IP_HW0_MBIM (MBIM NTB16).
func dataPair(p *mhi.Profile) string {
	if _, _, ok := p.ChannelPair("IP_HW0"); ok {
		return "IP_HW0"
	}
	return "IP_HW0_MBIM"
}

// selftestPair is the pair mhictl selftest loops on: the modem's LOOPBACK,
// or DIAG with a loopback function behind it (-function DIAG=loopback).
func selftestPair(p *mhi.Profile) (pair string, modemArgs []string) {
	if _, _, ok := p.ChannelPair("LOOPBACK"); ok {
		return "LOOPBACK", nil
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
	modemArgs := []string{"sim", "serve", "-profile", r.profile, "-once", "-strict", "-socket", sock, "-control", ctl}
	stPair, stArgs := selftestPair(p)
	var fw []byte
	if r.pbl {
		modemArgs = append(modemArgs, "-boot", "pbl", "-full-boot-chain")
		fw = qh.Firmware(p.FirmwareImage, 640<<10+321) // several BHIe segments, not a multiple of a page
	} else {
		modemArgs = append(modemArgs, "-function", dataPair(p)+"=carrier")
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
	fwSum := ""
	if fw != nil {
		files["fw.img"] = initramfs.Entry{Mode: initramfs.File, Data: fw}
		fwSum = fmt.Sprintf("%x", sha256.Sum256(fw))
	}
	id := p.IDs[0]
	files["init"] = initramfs.Entry{Mode: initramfs.Exec, Data: []byte(script(guestVars{
		vendor: fmt.Sprintf("%04x", id.Vendor), device: fmt.Sprintf("%04x", id.Device),
		pbl: r.pbl, modules: mods, port: blobs.Port(), sum: blobs.Sum, size: r.c.size,
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
	_, qerr := qh.Boot(qctx, m, serial, func(line string) {
		if r.c.verbose {
			r.say("guest| %s", line)
		}
		now := time.Now()
		if qh.InitRE.MatchString(line) && initAt == 0 {
			initAt = now.Sub(t0)
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
	if r.pbl {
		names = pblChecks
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
	if r.pbl {
		ok, detail := bhieImage(mlog, fw)
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-got-image", Status: pass(ok), Detail: detail})
	} else {
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-syserr-cycle", Status: pass(qh.SysErrCycle(mlog)), Detail: qh.StateTrail(mlog, 24)})
	}
	if s := qh.SummaryRE.FindStringSubmatch(mlog); s == nil {
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-verdict", Status: qh.Fail, Detail: "the modem printed no summary (crashed?); see " + modemLog})
	} else {
		detail := fmt.Sprintf("%s host protocol violations, %s DMAs refused (outside every DMA map)", s[1], s[2])
		if s[1] != "0" || s[2] != "0" {
			detail += ": " + qh.FirstLines(mlog, `msg=violation|msg="dma fault"|msg="host protocol violation"|DMA refused`, 3)
		}
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "modem-verdict", Status: pass(s[1] == "0" && s[2] == "0"), Detail: detail})
	}
	runDetail := fmt.Sprintf("boot to /init %v, run %v", initAt.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
	switch {
	case ctx.Err() != nil:
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: qh.Fail, Detail: "interrupted"})
	case qctx.Err() != nil:
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: qh.Fail, Detail: fmt.Sprintf("timeout after %v; %s", r.c.timeout, runDetail)})
	case !done:
		r.rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: qh.Fail, Detail: fmt.Sprintf("the guest stopped before the end (qemu: %v); %s", qerr, runDetail)})
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
