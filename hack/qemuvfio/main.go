// Command qemuvfio runs the mhi/pci/vfio guest tests against the real Linux
// vfio-pci driver: it builds the package's tests as a static binary, packs
// it with busybox and the VFIO modules of a Debian kernel into an
// initramfs, boots QEMU (TCG, q35, intel-iommu with interrupt remapping,
// edu and nvme devices), and judges the guest's go test output. It is
// called by hack/qemu-vfio-test.sh; the recipe is shared/docs/vfio.md §3.1.
//
// Exit status: 0 pass, 1 test failure or timeout, 2 missing prerequisite.
package main

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
)

// modules are the VFIO modules, in load order (dependencies first, from
// modinfo); vfio_virqfd is built into newer kernels.
var modules = []string{"irqbypass", "vfio_virqfd", "vfio", "vfio_iommu_type1", "vfio-pci-core", "vfio-pci"}

type config struct {
	repo, cache, kernelPkg string
	kernel, moduleDir      string
	qemu, busybox          string
	timeout                time.Duration
	nvme                   bool
	run                    string
	keep                   bool
}

// prereqError is a missing tool or download: exit status 2.
type prereqError struct{ msg string }

func (e prereqError) Error() string { return e.msg }

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

	err := run(c)
	var pe prereqError
	switch {
	case errors.As(err, &pe):
		fmt.Fprintf(os.Stderr, "qemu-vfio: cannot run: %v\n", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "qemu-vfio: FAIL: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("qemu-vfio: PASS")
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
		return prereqError{fmt.Sprintf("%s not found: install it (Debian: apt-get install qemu-system-x86)", c.qemu)}
	}
	if err := checkStatic(c.busybox); err != nil {
		return err
	}
	if c.kernel == "" {
		if c.kernel, c.moduleDir, err = debianKernel(c); err != nil {
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
	args := []string{
		"-machine", "q35", "-accel", "tcg", "-cpu", "max", "-m", "512", "-smp", "2",
		// The IOMMU must precede the devices it translates; without
		// interrupt remapping type1 refuses the container (EPERM).
		"-device", "intel-iommu,intremap=on",
		"-device", "edu",
	}
	required := []string{"TestGuestEdu"}
	if c.nvme {
		disk := filepath.Join(work, "nvme.img")
		if err := os.WriteFile(disk, make([]byte, 1<<20), 0o644); err != nil {
			return err
		}
		args = append(args, "-drive", "file="+disk+",if=none,id=d0,format=raw", "-device", "nvme,serial=deadbeef,drive=d0")
		required = append(required, "TestGuestNVMeMSIX")
	}
	args = append(args,
		"-kernel", c.kernel, "-initrd", initrd,
		// /dev/kvm exists on these machines but cannot run a guest
		// (shared/docs/vfio.md §3): TCG only.
		"-append", "console=ttyS0 intel_iommu=on loglevel=4 panic=-1",
		"-display", "none", "-no-reboot", "-nodefaults", "-serial", "stdio",
	)
	return boot(qemu, args, c.timeout, required, start)
}

// checkStatic makes sure busybox can run as /init with no libraries.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return prereqError{fmt.Sprintf("%s: %v: install a static busybox (Debian: apt-get install busybox-static)", path, err)}
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return prereqError{fmt.Sprintf("%s is dynamically linked: install busybox-static", path)}
		}
	}
	return nil
}

// debianKernel returns a vmlinuz and module tree from the Debian kernel
// package, downloaded with apt-get download and unpacked with dpkg-deb -x
// into the cache (no kernel is installed, no initramfs generated).
func debianKernel(c config) (kernel, modDir string, err error) {
	pkg := c.kernelPkg
	if pkg == "" {
		out, err := exec.Command("apt-cache", "depends", "linux-image-amd64").Output()
		if err != nil {
			return "", "", prereqError{fmt.Sprintf("apt-cache depends linux-image-amd64: %v (run apt-get update, or pass -kernel-package or -kernel/-modules)", err)}
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
				pkg = f[1]
				break
			}
		}
		if pkg == "" {
			return "", "", prereqError{"cannot tell which kernel linux-image-amd64 depends on (run apt-get update)"}
		}
	}
	if err := os.MkdirAll(c.cache, 0o755); err != nil {
		return "", "", prereqError{fmt.Sprintf("cache %s: %v", c.cache, err)}
	}
	debs, _ := filepath.Glob(filepath.Join(c.cache, pkg+"_*.deb"))
	if len(debs) == 0 {
		fmt.Printf("qemu-vfio: downloading %s into %s\n", pkg, c.cache)
		dl := exec.Command("apt-get", "download", pkg)
		dl.Dir = c.cache
		if out, err := dl.CombinedOutput(); err != nil {
			return "", "", prereqError{fmt.Sprintf("apt-get download %s: %v\n%s", pkg, err, out)}
		}
		if debs, _ = filepath.Glob(filepath.Join(c.cache, pkg+"_*.deb")); len(debs) == 0 {
			return "", "", prereqError{fmt.Sprintf("apt-get download %s left no .deb in %s", pkg, c.cache)}
		}
	}
	deb := debs[len(debs)-1]
	dir := strings.TrimSuffix(deb, ".deb")
	if _, err := os.Stat(filepath.Join(dir, ".extracted")); err != nil {
		fmt.Printf("qemu-vfio: extracting %s\n", filepath.Base(deb))
		_ = os.RemoveAll(dir)
		if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			return "", "", prereqError{fmt.Sprintf("dpkg-deb -x %s: %v\n%s", deb, err, out)}
		}
		if err := os.WriteFile(filepath.Join(dir, ".extracted"), nil, 0o644); err != nil {
			return "", "", err
		}
	}
	kernels, _ := filepath.Glob(filepath.Join(dir, "boot/vmlinuz-*"))
	mods, _ := filepath.Glob(filepath.Join(dir, "lib/modules/*"))
	if len(kernels) != 1 || len(mods) != 1 {
		return "", "", prereqError{fmt.Sprintf("%s: want one boot/vmlinuz-* and one lib/modules/*, found %v and %v", dir, kernels, mods)}
	}
	return kernels[0], mods[0], nil
}

// findModule returns the uncompressed contents of module name, or nil if
// the kernel has none (built in).
func findModule(modDir, name string) ([]byte, error) {
	var found string
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != "" {
			return err
		}
		base := d.Name()
		for _, ext := range []string{".ko", ".ko.xz", ".ko.zst"} {
			if base == name+ext {
				found = p
			}
		}
		return nil
	})
	if err != nil || found == "" {
		return nil, err
	}
	switch {
	case strings.HasSuffix(found, ".xz"):
		return exec.Command("xz", "-dc", found).Output()
	case strings.HasSuffix(found, ".zst"):
		return exec.Command("zstd", "-dc", found).Output()
	}
	return os.ReadFile(found)
}

// initScript loads the modules (forwarding module.param= words from the
// kernel command line, which busybox insmod does not apply by itself),
// reserves hugepages for the arena test, and runs the tests.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
echo "MHISTACK-INIT uptime=$(cut -d' ' -f1 /proc/uptime)"
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
	files := map[string]initramfs.Entry{}
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "lib", "lib/modules"} {
		files[d] = initramfs.Entry{Mode: initramfs.Dir}
	}
	bb, err := os.ReadFile(c.busybox)
	if err != nil {
		return prereqError{err.Error()}
	}
	files["bin/busybox"] = initramfs.Entry{Mode: initramfs.Exec, Data: bb}
	var loaded []string
	for _, m := range modules {
		data, err := findModule(c.moduleDir, m)
		if err != nil {
			return prereqError{fmt.Sprintf("module %s: %v", m, err)}
		}
		if data == nil {
			continue
		}
		files["lib/modules/"+m+".ko"] = initramfs.Entry{Mode: initramfs.File, Data: data}
		loaded = append(loaded, m)
	}
	if !contains(loaded, "vfio-pci") {
		return prereqError{fmt.Sprintf("no vfio-pci module under %s", c.moduleDir)}
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
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := initramfs.Write(f, files); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// boot runs QEMU, echoes the serial console, and judges the result.
func boot(qemu string, args []string, timeout time.Duration, required []string, start time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	fmt.Printf("qemu-vfio: %s %s\n", qemu, strings.Join(args, " "))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	cmd.Stdin = nil
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return prereqError{fmt.Sprintf("start %s: %v", qemu, err)}
	}
	r := newResult()
	var initAt, endAt time.Duration
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Printf("guest| %s\n", strings.TrimRight(line, "\r"))
		r.line(line)
		if initAt == 0 && r.initUptime != 0 {
			initAt = time.Since(t0)
		}
		if endAt == 0 && r.exitCode >= 0 {
			endAt = time.Since(t0)
		}
	}
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
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
