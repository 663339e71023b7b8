// Command kernelcheck is the kernel cross-check harness
// (docs/KERNEL-CROSSCHECK.md): for each Debian kernel and modem
// profile it starts the emulated modem as a vfio-user server (mhictl sim
// serve), boots the kernel in QEMU with a vfio-user-pci device on it and a
// busybox initramfs holding the MHI/WWAN modules, and collects the checks
// the guest's /init runs (see guest.go) plus the modem's own verdict (no
// host protocol violation, no refused DMA, SYS_ERR seen through). It is
// called by hack/kernel-crosscheck.sh, which obtains QEMU and the kernels.
//
// The files follow a run's course: main.go the flags; run.go the runs
// (planned per kernel and profile, run, reported); runone.go one run
// (image, modem, boot, verdicts); image.go the initramfs; guest.go the
// init script and what the guest should find, with its sections in
// tcp.go, mbim.go and qmi.go; quirks.go and locks.go the quirk and lock
// runs; profiles.go the profiles a kernel drives;
// firmware.go the PBL runs' firmware; dmesg.go the kernel's complaints;
// result.go a run's verdicts. What hack/qemuvfio and hack/vfiomhi share
// with it (QEMU command line and boot loop, modem process, initramfs
// pieces, prerequisites, report) is hack/internal/qemuharness.
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
	"strings"
	"syscall"
	"time"

	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
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

// config is what the flags say.
type config struct {
	qemu, mhictl, busybox string
	kernels               kernelFlag
	profiles              []string
	pbl                   []string
	quirks                []string // behaviours the quirk runs judge (quirks.go)
	locks                 []string // profiles of the lock runs (locks.go)
	timeout               time.Duration
	checkTimeout          time.Duration
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
	var quirks string
	flag.StringVar(&quirks, "quirks", "all", "quirk runs: Linux against the emulated modem playing real modems' behaviours (docs/QUIRKS.md), one kernel and profile each, one verdict per behaviour: \"all\", a comma-separated list of slow-ready, no-inband-wake, one-msi, syserr-at-powerup, d3cold, or \"\" for none")
	var locks string
	flag.StringVar(&locks, "locks", "all", "lock runs: mbimcli and qmicli read an FCC-locked, PIN-locked modem (mhictl sim serve -fcc-lock -sim-pin), one kernel each:\n"+
		"\"all\", a comma-separated list of foxconn-t99w175 (FCC lock and PIN, mbimcli), qcom-sdx55m (PIN, mbimcli and qmicli), or \"\" for none")
	flag.DurationVar(&c.timeout, "timeout", 6*time.Minute, "limit for one guest run")
	flag.DurationVar(&c.checkTimeout, "check-timeout", 150*time.Second, "stop a guest when no check reported for this long (the first one counts from QEMU's start): a hung check fails the run in minutes, with the guest's kernel log tail its stall watcher printed; 0 turns it off")
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
	c.profiles, c.pbl, c.quirks, c.locks = qh.SplitList(profiles), qh.SplitList(pbl), qh.SplitList(quirks), qh.SplitList(locks)
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
