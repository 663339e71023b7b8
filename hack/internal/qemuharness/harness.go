// Package qemuharness is what the QEMU-based checks under hack/ share
// (hack/qemuvfio, hack/kernelcheck, hack/vfiomhi): prerequisite errors and
// exit statuses, Debian kernels unpacked from their packages, the guest's
// kernel modules and busybox initramfs, the QEMU command line, the boot
// loop that reads the guest's serial console, the verdict lines the guest
// prints ("MHISTACK-CHECK name PASS|FAIL|SKIP detail") and a PASS/FAIL
// report with timings.
package qemuharness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	"github.com/mhistack/mhistack/mhi"
)

// PrereqError is a missing tool, file or download: exit status 2.
type PrereqError struct{ Msg string }

func (e PrereqError) Error() string { return e.Msg }

// Prereqf returns a PrereqError.
func Prereqf(format string, args ...any) error { return PrereqError{fmt.Sprintf(format, args...)} }

// IsPrereq reports whether err is (or wraps) a PrereqError.
func IsPrereq(err error) bool {
	var pe PrereqError
	return errors.As(err, &pe)
}

// Exit prints the outcome of a harness as "prog: PASS", "prog: FAIL: err"
// or "prog: cannot run: err" and exits 0, 1 or 2.
func Exit(prog string, err error) {
	switch {
	case IsPrereq(err):
		fmt.Fprintf(os.Stderr, "%s: cannot run: %v\n", prog, err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: FAIL: %v\n", prog, err)
		os.Exit(1)
	}
	fmt.Printf("%s: PASS\n", prog)
	os.Exit(0)
}

// VFIOModules are the modules vfio-pci needs, in load order (dependencies
// first, from modinfo); vfio_virqfd is built into newer kernels.
var VFIOModules = []string{"irqbypass", "vfio_virqfd", "vfio", "vfio_iommu_type1", "vfio-pci-core", "vfio-pci"}

// FindKernel returns the vmlinuz and module tree of an unpacked Debian
// linux-image package.
func FindKernel(dir string) (kernel, modDir string, err error) {
	kernels, _ := filepath.Glob(filepath.Join(dir, "boot/vmlinuz-*"))
	mods, _ := filepath.Glob(filepath.Join(dir, "lib/modules/*"))
	if len(kernels) != 1 || len(mods) != 1 {
		return "", "", Prereqf("%s: want one boot/vmlinuz-* and one lib/modules/*, found %v and %v", dir, kernels, mods)
	}
	return kernels[0], mods[0], nil
}

// DebianKernel returns a vmlinuz and module tree from the Debian kernel
// package pkg (default: what linux-image-amd64 depends on), downloaded
// with apt-get download and unpacked with dpkg-deb -x into cache (no
// kernel is installed, no initramfs generated). logf reports progress.
func DebianKernel(cache, pkg string, logf func(format string, args ...any)) (kernel, modDir string, err error) {
	if pkg == "" {
		out, err := exec.Command("apt-cache", "depends", "linux-image-amd64").Output()
		if err != nil {
			return "", "", Prereqf("apt-cache depends linux-image-amd64: %v (run apt-get update, or pass a kernel package or -kernel/-modules)", err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
				pkg = f[1]
				break
			}
		}
		if pkg == "" {
			return "", "", Prereqf("cannot tell which kernel linux-image-amd64 depends on (run apt-get update)")
		}
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", "", Prereqf("cache %s: %v", cache, err)
	}
	debs, _ := filepath.Glob(filepath.Join(cache, pkg+"_*.deb"))
	if len(debs) == 0 {
		logf("downloading %s into %s", pkg, cache)
		dl := exec.Command("apt-get", "download", pkg)
		dl.Dir = cache
		if out, err := dl.CombinedOutput(); err != nil {
			return "", "", Prereqf("apt-get download %s: %v\n%s", pkg, err, out)
		}
		if debs, _ = filepath.Glob(filepath.Join(cache, pkg+"_*.deb")); len(debs) == 0 {
			return "", "", Prereqf("apt-get download %s left no .deb in %s", pkg, cache)
		}
	}
	deb := debs[len(debs)-1]
	dir := strings.TrimSuffix(deb, ".deb")
	if _, err := os.Stat(filepath.Join(dir, ".extracted")); err != nil {
		logf("extracting %s", filepath.Base(deb))
		_ = os.RemoveAll(dir)
		if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			return "", "", Prereqf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, ".extracted"), nil, 0o644); err != nil {
			return "", "", err
		}
	}
	return FindKernel(dir)
}

// BaseFiles starts an initramfs: the usual directories and a statically
// linked busybox as bin/busybox (GuestPreamble installs its applets).
func BaseFiles(busybox string) (map[string]initramfs.Entry, error) {
	if err := initramfs.CheckStatic(busybox); err != nil {
		return nil, PrereqError{err.Error()}
	}
	files := map[string]initramfs.Entry{}
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "lib", "lib/modules"} {
		files[d] = initramfs.Entry{Mode: initramfs.Dir}
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return nil, PrereqError{err.Error()}
	}
	files["bin/busybox"] = initramfs.Entry{Mode: initramfs.Exec, Data: bb}
	return files, nil
}

// AddModules puts the named modules of modDir at lib/modules/NAME.ko and
// returns the names it added, in order. A module the kernel has built in
// (none under modDir) is skipped when optional says so, else an error.
func AddModules(files map[string]initramfs.Entry, modDir string, names []string, optional func(name string) bool) ([]string, error) {
	var added []string
	for _, m := range names {
		data, err := initramfs.Module(modDir, m)
		if errors.Is(err, initramfs.ErrNoModule) && optional != nil && optional(m) {
			continue
		}
		if err != nil {
			return nil, Prereqf("module %s: %v", m, err)
		}
		files["lib/modules/"+m+".ko"] = initramfs.Entry{Mode: initramfs.File, Data: data}
		added = append(added, m)
	}
	return added, nil
}

// WriteInitramfs writes files as a gzipped newc archive at path.
func WriteInitramfs(path string, files map[string]initramfs.Entry) error {
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

// GuestPreamble starts every guest /init (busybox sh): applets, the
// pseudo file systems, the MHISTACK-INIT marker (BootReport reads the boot
// time from it), and the helpers check NAME PASS|FAIL|SKIP DETAIL, up
// (uptime in seconds) and wait_for SECONDS COMMAND... (polls every 0.2 s
// until the guest's uptime has moved on SECONDS: a deadline, not a count
// of polls, which a loaded guest whose COMMAND takes a second would
// stretch fivefold).
const GuestPreamble = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
echo "MHISTACK-INIT uptime=$(cut -d' ' -f1 /proc/uptime)"
check() { echo "MHISTACK-CHECK $1 $2 $3"; }
up() { cut -d' ' -f1 /proc/uptime; }
wait_for() {
	local end=$(( $(cut -d. -f1 /proc/uptime) + $1 )); shift
	while [ $(cut -d. -f1 /proc/uptime) -lt $end ]; do
		"$@" && return 0
		sleep 0.2
	done
	"$@"
}
`

var (
	checkRE = regexp.MustCompile(`MHISTACK-CHECK (\S+) (PASS|FAIL|SKIP) ?(.*)`)
	// InitRE matches the preamble's marker.
	InitRE = regexp.MustCompile(`MHISTACK-INIT uptime=([\d.]+)`)
)

// ParseCheck reads a verdict line the guest's check helper printed.
func ParseCheck(line string) (name string, st Status, detail string, ok bool) {
	m := checkRE.FindStringSubmatch(line)
	if m == nil {
		return "", "", "", false
	}
	return m[1], Status(m[2]), strings.TrimSpace(m[3]), true
}

// Machine is a QEMU x86 guest: TCG on q35 (/dev/kvm may exist on these
// machines without being able to run a guest).
type Machine struct {
	QEMU   string
	Mem    string // e.g. "512M"
	SMP    int
	Kernel string
	Initrd string
	Append string // kernel command line after console=ttyS0
	// Firmware adds -L for Debian's seabios and qemu-system-data (a QEMU
	// built without its blobs needs them).
	Firmware bool
	// SharedMemory backs guest RAM with a shared memfd, which a vfio-user
	// device needs to DMA into it.
	SharedMemory bool
	// IOMMU adds intel-iommu with interrupt remapping (VFIO type1 refuses
	// a container without it); CachingMode also sets caching-mode=on,
	// which a vfio-user device behind it needs (QEMU forwards each guest
	// IOMMU mapping to the device as a DMA map).
	IOMMU, CachingMode bool
	// QMP, if set, is a UNIX socket path for the QMP monitor.
	QMP     string
	Devices []string // -device arguments, after the IOMMU
	Extra   []string // more arguments
}

// Args returns the command line (without the binary).
func (m Machine) Args() []string {
	var a []string
	if m.Firmware {
		a = append(a, "-L", "/usr/share/seabios", "-L", "/usr/share/qemu")
	}
	machine := "q35"
	if m.SharedMemory {
		machine += ",memory-backend=mem"
	}
	smp := max(m.SMP, 1)
	a = append(a, "-machine", machine, "-accel", "tcg", "-cpu", "max", "-smp", fmt.Sprint(smp), "-m", m.Mem)
	if m.SharedMemory {
		a = append(a, "-object", "memory-backend-memfd,id=mem,size="+m.Mem+",share=on")
	}
	if m.IOMMU {
		iommu := "intel-iommu,intremap=on"
		if m.CachingMode {
			iommu += ",caching-mode=on"
		}
		// The IOMMU must precede the devices it translates.
		a = append(a, "-device", iommu)
	}
	for _, d := range m.Devices {
		a = append(a, "-device", d)
	}
	if m.QMP != "" {
		a = append(a, "-qmp", "unix:"+m.QMP+",server=on,wait=off")
	}
	a = append(a,
		"-kernel", m.Kernel, "-initrd", m.Initrd,
		"-append", strings.TrimSpace("console=ttyS0 "+m.Append),
		"-display", "none", "-no-reboot", "-nodefaults", "-serial", "stdio", "-nic", "none")
	return append(a, m.Extra...)
}

// Boot runs the machine until QEMU exits or ctx ends, copying the serial
// console (CRs trimmed) to log when it is not nil and handing each line to
// onLine. It returns when QEMU started and its exit error; a QEMU that
// cannot start is a PrereqError.
func Boot(ctx context.Context, m Machine, log io.Writer, onLine func(line string)) (time.Time, error) {
	cmd := exec.CommandContext(ctx, m.QEMU, m.Args()...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return time.Time{}, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return t0, Prereqf("start %s: %v", m.QEMU, err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if log != nil {
			fmt.Fprintln(log, line)
		}
		onLine(line)
	}
	_, _ = io.Copy(io.Discard, out)
	return t0, cmd.Wait()
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// CheckProfiles checks that every name in profiles is a modem profile
// ("all" passes too when allowAll) and every one in pbl a profile with a
// firmware image.
func CheckProfiles(profiles, pbl []string, allowAll bool) error {
	for _, p := range profiles {
		if _, ok := mhi.Lookup(p); !ok && !(allowAll && p == "all") {
			return Prereqf("unknown profile %q", p)
		}
	}
	for _, p := range pbl {
		if pr, ok := mhi.Lookup(p); !ok || pr.FirmwareImage == "" {
			return Prereqf("-pbl %q: not a profile with a firmware image", p)
		}
	}
	return nil
}

// Prepare checks the run's profiles (CheckProfiles) and makes its work
// directory (WorkDir).
func Prepare(prog string, keep bool, profiles, pbl []string, allowAll bool) (dir string, cleanup func(), err error) {
	if err := CheckProfiles(profiles, pbl, allowAll); err != nil {
		return "", nil, err
	}
	return WorkDir(prog, keep)
}

// WorkDir makes the run's work directory and says where it is when keep
// is set; cleanup removes it otherwise.
func WorkDir(prog string, keep bool) (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", prog+"-")
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Printf("%s: work directory %s\n", prog, dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}
