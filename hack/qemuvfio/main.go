// Command qemuvfio runs the mhi/pci/vfio guest tests against the real Linux
// vfio-pci driver: it builds the package's tests as a static binary, packs
// it with busybox and the VFIO modules of a Debian kernel into an
// initramfs, boots QEMU (TCG, q35, intel-iommu with interrupt remapping,
// edu and nvme devices), and judges the guest's go test output. It is
// called by hack/qemu-vfio-test.sh; the recipe is docs/VFIO.md §7.
//
// Exit status: 0 pass, 1 test failure or timeout, 2 missing prerequisite.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
)

type config struct {
	repo, cache, kernelPkg string
	kernel, moduleDir      string
	qemu, busybox          string
	timeout                time.Duration
	nvme                   bool
	run                    string
	keep                   bool
}

func main() {
	var c config
	flag.StringVar(&c.repo, "repo", ".", "module root of mhistack")
	flag.StringVar(&c.cache, "cache", defaultCache(), "where downloaded and extracted kernel packages are kept")
	flag.StringVar(&c.kernelPkg, "kernel-package", "", "Debian kernel package to download (default: what linux-image-amd64 depends on)")
	flag.StringVar(&c.kernel, "kernel", "", "use this bzImage instead of a downloaded package (with -modules)")
	flag.StringVar(&c.moduleDir, "modules", "", "module tree (lib/modules/VERSION) matching -kernel")
	flag.StringVar(&c.qemu, "qemu", "qemu-system-x86_64", "QEMU binary")
	flag.StringVar(&c.busybox, "busybox", "/bin/busybox", "a statically linked busybox (Debian: busybox-static)")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "limit for the whole guest run")
	flag.BoolVar(&c.nvme, "nvme", true, "add an NVMe device and require its MSI-X test")
	flag.StringVar(&c.run, "run", "", "-test.run pattern for the guest (default: all tests)")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory")
	flag.Parse()

	qh.Exit("qemu-vfio", run(c))
}

func defaultCache() string {
	if d := os.Getenv("MHISTACK_CACHE"); d != "" {
		return filepath.Join(d, "qemu-vfio")
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "mhistack/qemu-vfio")
	}
	if os.Geteuid() == 0 {
		return "/var/cache/mhistack/qemu-vfio"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "mhistack/qemu-vfio")
	}
	return filepath.Join(os.TempDir(), "mhistack-qemu-vfio")
}

func run(c config) error {
	start := time.Now()
	qemu, err := exec.LookPath(c.qemu)
	if err != nil {
		return qh.Prereqf("%s not found: install it (Debian: apt-get install qemu-system-x86)", c.qemu)
	}
	if c.kernel == "" {
		logf := func(format string, args ...any) { fmt.Printf("qemu-vfio: "+format+"\n", args...) }
		if c.kernel, c.moduleDir, err = qh.DebianKernel(c.cache, c.kernelPkg, logf); err != nil {
			return err
		}
	}
	fmt.Printf("qemu-vfio: kernel %s\n", c.kernel)

	work, err := os.MkdirTemp("", "qemu-vfio-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Printf("qemu-vfio: work directory %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}

	t := time.Now()
	testBin := filepath.Join(work, "vfio.test")
	build := exec.Command("go", "test", "-c", "-o", testBin, "./mhi/pci/vfio")
	build.Dir = c.repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the guest tests: %v\n%s", err, out)
	}
	fmt.Printf("qemu-vfio: guest test binary built in %v\n", time.Since(t).Round(time.Millisecond))

	initrd := filepath.Join(work, "initramfs.cpio.gz")
	if err := buildInitramfs(initrd, c, testBin); err != nil {
		return err
	}
	m := qh.Machine{
		QEMU: qemu, Mem: "512M", SMP: 2,
		// Without interrupt remapping type1 refuses the container (EPERM).
		IOMMU:   true,
		Devices: []string{"edu"},
		Kernel:  c.kernel, Initrd: initrd,
		Append: "intel_iommu=on loglevel=4 panic=-1",
	}
	required := []string{"TestGuestEdu"}
	if c.nvme {
		disk := filepath.Join(work, "nvme.img")
		if err := os.WriteFile(disk, make([]byte, 1<<20), 0o644); err != nil {
			return err
		}
		m.Devices = append(m.Devices, "nvme,serial=deadbeef,drive=d0")
		m.Extra = append(m.Extra, "-drive", "file="+disk+",if=none,id=d0,format=raw")
		required = append(required, "TestGuestNVMeMSIX")
	}
	return boot(m, c.timeout, required, start)
}

// initScript loads the modules (forwarding module.param= words from the
// kernel command line, which busybox insmod does not apply by itself),
// reserves hugepages for the arena test, and runs the tests.
const initScript = qh.GuestPreamble + `
for m in @MODULES@; do
	[ -f /lib/modules/$m.ko ] || continue
	insmod /lib/modules/$m.ko $(tr ' ' '\n' < /proc/cmdline | grep "^$m\." | sed "s/^$m\.//") || echo "MHISTACK-INSMOD-FAIL $m"
done
echo 16 > /proc/sys/vm/nr_hugepages
echo "hugepages: $(cat /proc/sys/vm/nr_hugepages)"
MHISTACK_VFIO_GUEST=1 /vfio.test -test.v -test.count=1 @RUN@
echo "MHISTACK-TEST-EXIT=$? uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
`

func buildInitramfs(path string, c config, testBin string) error {
	files, err := qh.BaseFiles(c.busybox)
	if err != nil {
		return err
	}
	loaded, err := qh.AddModules(files, c.moduleDir, qh.VFIOModules, func(m string) bool { return m != "vfio-pci" })
	if err != nil {
		return err
	}
	script := strings.ReplaceAll(initScript, "@MODULES@", strings.Join(loaded, " "))
	runArg := ""
	if c.run != "" {
		runArg = "-test.run '" + c.run + "'"
	}
	script = strings.ReplaceAll(script, "@RUN@", runArg)
	files["init"] = initramfs.Entry{Mode: initramfs.Exec, Data: []byte(script)}
	tb, err := os.ReadFile(testBin)
	if err != nil {
		return err
	}
	files["vfio.test"] = initramfs.Entry{Mode: initramfs.Exec, Data: tb}
	return qh.WriteInitramfs(path, files)
}

// boot runs QEMU, echoes the serial console, and judges the result.
func boot(m qh.Machine, timeout time.Duration, required []string, start time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	fmt.Printf("qemu-vfio: %s %s\n", m.QEMU, strings.Join(m.Args(), " "))
	r := newResult()
	var initAt, endAt time.Duration
	t0 := time.Now()
	_, werr := qh.Boot(ctx, m, nil, func(line string) {
		fmt.Printf("guest| %s\n", line)
		r.line(line)
		if initAt == 0 && r.initUptime != 0 {
			initAt = time.Since(t0)
		}
		if endAt == 0 && r.exitCode >= 0 {
			endAt = time.Since(t0)
		}
	})
	if qh.IsPrereq(werr) {
		return werr
	}
	wall := time.Since(t0)
	fmt.Printf("qemu-vfio: guest reached /init at %.2fs guest uptime (%v wall), tests ended at %.2fs uptime (%v wall); QEMU ran %v, whole run %v\n",
		r.initUptime, initAt.Round(time.Millisecond), r.endUptime, endAt.Round(time.Millisecond), wall.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	fmt.Printf("qemu-vfio: %d passed, %d failed, %d skipped\n", len(r.pass), len(r.fail), len(r.skip))
	if ctx.Err() != nil {
		return fmt.Errorf("timeout after %v: %v", timeout, r.verdict(required))
	}
	if err := r.verdict(required); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("qemu: %v", werr)
	}
	return nil
}
