// Command vfiomhi is the end-to-end check of the path users run:
// mhistack's own binaries (mhictl, mhiproxy) drive a modem through Linux's
// vfio-pci behind an IOMMU. The modem is the emulated one (mhictl sim serve,
// a vfio-user server); everything between it and mhistack is real: a Debian
// kernel in QEMU (TCG, q35) with intel-iommu (interrupt remapping, caching
// mode), vfio-pci bound with driver_override, VFIO type1 DMA mapping through
// the guest IOMMU, MSIs, and QEMU's vfio-user client forwarding each IOMMU
// mapping to the modem. The guest checks are in guest.go; docs/VFIO.md says
// what this proves and what it cannot. It is called by
// hack/vfio-mhi-e2e.sh, which obtains QEMU, the kernel and the binaries.
//
// Exit status: 0 every check passed, 1 a check failed, 2 a prerequisite is
// missing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
)

type config struct {
	qemu, mhictl, mhiproxy, busybox string
	kernel                          string // LABEL=DIR
	profiles                        []string
	pbl                             []string
	flash                           []string
	timeout                         time.Duration
	mem                             string
	smp                             int
	size                            int
	keep, verbose                   bool
	work                            string
}

func main() {
	var c config
	var profiles, pbl, flash string
	flag.StringVar(&c.qemu, "qemu", "", "QEMU ≥ 10.1 with the vfio-user-pci device (required)")
	flag.StringVar(&c.mhictl, "mhictl", "", "statically linked mhictl (CGO_ENABLED=0; required): the guest's toolbox and the host's modem")
	flag.StringVar(&c.mhiproxy, "mhiproxy", "", "statically linked mhiproxy (CGO_ENABLED=0; required)")
	flag.StringVar(&c.busybox, "busybox", "/bin/busybox", "a statically linked busybox (Debian: busybox-static)")
	flag.StringVar(&c.kernel, "kernel", "", "`LABEL=DIR` of an unpacked Debian linux-image package (required)")
	flag.StringVar(&profiles, "profiles", "qcom-sdx55m,foxconn-t99w175,sierra-em919x", "comma-separated modem profiles: every check runs on each")
	flag.StringVar(&pbl, "pbl", "qcom-sdx55m", "comma-separated profiles (with a firmware image) also booted in PBL for the mhictl fw load -bhie check")
	flag.StringVar(&flash, "flash", "qcom-sdx55m", "comma-separated profiles (with the EDL trigger and a FIREHOSE pair) also booted for the flash run: mhictl backup, flash (rawprogram and patch) and a read-back through EDL and Firehose (empty: none)")
	flag.DurationVar(&c.timeout, "timeout", 4*time.Minute, "limit for one guest run")
	flag.StringVar(&c.mem, "mem", "1024M", "guest RAM")
	flag.IntVar(&c.smp, "smp", 2, "guest CPUs")
	flag.IntVar(&c.size, "size", 16<<20, "bytes moved each way by the transfer checks")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory (initramfs, serial, modem logs)")
	flag.BoolVar(&c.verbose, "v", false, "echo the guest's serial console and the modem's log")
	flag.Parse()
	c.profiles, c.pbl, c.flash = qh.SplitList(profiles), qh.SplitList(pbl), qh.SplitList(flash)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	qh.Exit("vfio-mhi-e2e", err)
}

func run(ctx context.Context, c config) error {
	start := time.Now()
	if c.qemu == "" || c.mhictl == "" || c.mhiproxy == "" || c.kernel == "" {
		return qh.Prereqf("need -qemu, -mhictl, -mhiproxy and -kernel LABEL=DIR (hack/vfio-mhi-e2e.sh passes them)")
	}
	for _, bin := range []string{c.mhictl, c.mhiproxy} {
		if err := initramfs.CheckStatic(bin); err != nil {
			return qh.Prereqf("%v: build it with CGO_ENABLED=0", err)
		}
	}
	label, dir, ok := strings.Cut(c.kernel, "=")
	if !ok {
		return qh.Prereqf("-kernel: want LABEL=DIR, got %q", c.kernel)
	}
	if err := checkFlashProfiles(c.flash); err != nil {
		return err
	}
	work, cleanup, err := qh.Prepare("vfio-mhi-e2e", c.keep, c.profiles, c.pbl, false)
	if err != nil {
		return err
	}
	defer cleanup()
	c.work = work
	kernel, modDir, err := qh.FindKernel(dir)
	if err != nil {
		return err
	}
	type job struct {
		profile    string
		pbl, flash bool
	}
	var jobs []job
	for _, p := range c.pbl {
		jobs = append(jobs, job{profile: p, pbl: true})
	}
	for _, p := range c.flash {
		jobs = append(jobs, job{profile: p, flash: true})
	}
	for _, p := range c.profiles {
		jobs = append(jobs, job{profile: p})
	}
	var rep qh.Report
	for _, j := range jobs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r := &runner{c: c, label: label, kernel: kernel, modDir: modDir, profile: j.profile, pbl: j.pbl, flash: j.flash, rep: &rep}
		if err := r.run(ctx); err != nil {
			if qh.IsPrereq(err) {
				return err
			}
			rep.Add(qh.Row{Scope: r.scope(), Name: "run", Status: qh.Fail, Detail: err.Error()})
		}
	}
	fmt.Printf("\nvfio-mhi-e2e: results (kernel %s, %s)\n", label, filepath.Base(kernel))
	rep.Print(os.Stdout)
	fmt.Printf("vfio-mhi-e2e: %d runs in %v\n", len(jobs), time.Since(start).Round(time.Second))
	if n := rep.Failed(); n > 0 {
		return fmt.Errorf("%d checks failed", n)
	}
	return nil
}

// checkFlashProfiles refuses a flash-run profile that cannot be flashed
// over MHI: no EDL trigger, or no FIREHOSE pair.
func checkFlashProfiles(names []string) error {
	for _, n := range names {
		p, ok := mhi.Lookup(n)
		if !ok {
			return qh.Prereqf("-flash: unknown profile %q (mhictl list -profiles)", n)
		}
		if _, _, fh := p.ChannelPair("FIREHOSE"); !fh || !p.EDLTrigger {
			return qh.Prereqf("-flash: profile %s has no EDL trigger or no FIREHOSE pair", n)
		}
	}
	return nil
}

// runner is one guest boot against one emulated profile.
type runner struct {
	c                     config
	label, kernel, modDir string
	profile               string
	pbl                   bool // booted in PBL for mhictl fw load -bhie (pblChecks)
	flash                 bool // the flash run (flashChecks)
	rep                   *qh.Report

	mu      sync.Mutex
	begun   map[string]time.Time // check name → when the guest began it
	host    map[string]string    // check name → what the harness adds to the detail
	hostBad map[string]string    // check name → why the harness fails it
	windows []window             // when bus mastering went off on purpose
}

func (r *runner) scope() string {
	switch {
	case r.pbl:
		return r.profile + "+pbl"
	case r.flash:
		return r.profile + "+flash"
	}
	return r.profile
}

func (r *runner) note(check, detail string, bad bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if bad {
		r.hostBad[check] = strings.TrimSpace(r.hostBad[check] + " " + detail)
	} else {
		r.host[check] = strings.TrimSpace(r.host[check] + " " + detail)
	}
}

func (r *runner) say(format string, args ...any) {
	fmt.Printf("[%s] "+format+"\n", append([]any{r.scope()}, args...)...)
}
