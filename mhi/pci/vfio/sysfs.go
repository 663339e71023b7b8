//go:build linux

package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sysfs reads and changes PCI driver binding through /sys, the way
// hack/vfio-bind.sh does from a shell: driver_override then drivers_probe,
// which binds one device without claiming every device of the same ID.
// Root is the sysfs mount point ("" means /sys); tests point it at a fake
// tree.
type Sysfs struct {
	Root string
	// BindTimeout bounds the wait for a probe to take effect (default 5s).
	BindTimeout time.Duration
}

// VFIODriver is the name of the vfio-pci driver in sysfs.
const VFIODriver = "vfio-pci"

var addrRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$`)

// NormalizeAddress returns addr in sysfs form ("0000:01:00.0"), adding the
// default domain to a short "01:00.0" and lower-casing hex digits.
func NormalizeAddress(addr string) (string, error) {
	a := strings.ToLower(strings.TrimSpace(addr))
	if strings.Count(a, ":") == 1 {
		a = "0000:" + a
	}
	if !addrRE.MatchString(a) {
		return "", fmt.Errorf("vfio: %q is not a PCI address like 0000:01:00.0", addr)
	}
	return a, nil
}

func (s Sysfs) root() string {
	if s.Root == "" {
		return "/sys"
	}
	return s.Root
}

func (s Sysfs) dev(addr string, elem ...string) string {
	return filepath.Join(append([]string{s.root(), "bus/pci/devices", addr}, elem...)...)
}

func (s Sysfs) drivers(elem ...string) string {
	return filepath.Join(append([]string{s.root(), "bus/pci/drivers"}, elem...)...)
}

// Exists reports whether a PCI function with that address is present.
func (s Sysfs) Exists(addr string) bool {
	_, err := os.Stat(s.dev(addr))
	return err == nil
}

// Driver returns the name of the driver bound to addr, or "" if none.
func (s Sysfs) Driver(addr string) (string, error) {
	if !s.Exists(addr) {
		return "", fmt.Errorf("%w: %s", ErrNoDevice, addr)
	}
	link, err := os.Readlink(s.dev(addr, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Base(link), nil
}

// IOMMUGroup returns the number of addr's IOMMU group. It wraps
// ErrNoIOMMUGroup when the device has none (the IOMMU is disabled).
func (s Sysfs) IOMMUGroup(addr string) (int, error) {
	if !s.Exists(addr) {
		return 0, fmt.Errorf("%w: %s", ErrNoDevice, addr)
	}
	link, err := os.Readlink(s.dev(addr, "iommu_group"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w (%s)", ErrNoIOMMUGroup, addr)
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(filepath.Base(link))
	if err != nil {
		return 0, fmt.Errorf("vfio: %s: odd iommu_group link %q", addr, link)
	}
	return n, nil
}

// GroupDevices lists the PCI addresses in IOMMU group n, sorted.
func (s Sysfs) GroupDevices(n int) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.root(), "kernel/iommu_groups", strconv.Itoa(n), "devices"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out, nil
}

// ID returns the vendor and device IDs of addr.
func (s Sysfs) ID(addr string) (vendor, device uint16, err error) {
	read := func(name string) (uint16, error) {
		b, err := os.ReadFile(s.dev(addr, name))
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 16)
		return uint16(v), err
	}
	if vendor, err = read("vendor"); err != nil {
		return 0, 0, err
	}
	device, err = read("device")
	return vendor, device, err
}

// Find returns the addresses of all functions with the given IDs, sorted.
func (s Sysfs) Find(vendor, device uint16) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.root(), "bus/pci/devices"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		v, d, err := s.ID(e.Name())
		if err == nil && v == vendor && d == device {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// VFIODevice returns the name of addr's VFIO character device ("vfio3",
// under /dev/vfio/devices), or "" when the kernel has no VFIO cdev support
// or the device is not bound to vfio-pci.
func (s Sysfs) VFIODevice(addr string) string {
	ents, err := os.ReadDir(s.dev(addr, "vfio-dev"))
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "vfio") {
			return e.Name()
		}
	}
	return ""
}

func (s Sysfs) write(path, val string) error {
	// Like a shell's "echo > file", but without O_CREATE: a sysfs
	// attribute exists or the operation is unsupported, and creating a
	// file would hide that.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("vfio: write %q to %s: %w", strings.TrimSpace(val), path, err)
	}
	return nil
}

// Unbind detaches addr from its driver, if any.
func (s Sysfs) Unbind(addr string) error {
	drv, err := s.Driver(addr)
	if err != nil || drv == "" {
		return err
	}
	return s.write(s.drivers(drv, "unbind"), addr)
}

// Bind binds addr to vfio-pci and returns the driver it had before ("" for
// none), for Restore. A device already on vfio-pci is left alone.
func (s Sysfs) Bind(addr string) (prev string, err error) {
	prev, err = s.Driver(addr)
	if err != nil || prev == VFIODriver {
		return prev, err
	}
	if _, err := os.Stat(s.drivers(VFIODriver)); err != nil {
		return prev, fmt.Errorf("vfio: driver vfio-pci is not loaded: run 'modprobe vfio-pci'")
	}
	if err := s.write(s.dev(addr, "driver_override"), VFIODriver); err != nil {
		return prev, err
	}
	if prev != "" {
		if err := s.write(s.drivers(prev, "unbind"), addr); err != nil {
			return prev, err
		}
	}
	if err := s.write(filepath.Join(s.root(), "bus/pci/drivers_probe"), addr); err != nil {
		return prev, err
	}
	return prev, s.waitDriver(addr, VFIODriver)
}

// Restore undoes Bind: it clears driver_override, unbinds vfio-pci and
// hands the device back to driver (or leaves it unbound for "").
func (s Sysfs) Restore(addr, driver string) error {
	// A lone newline clears the override (driver_override_store in the
	// kernel's drivers/base/driver.c treats it as empty).
	if err := s.write(s.dev(addr, "driver_override"), "\n"); err != nil {
		return err
	}
	if err := s.Unbind(addr); err != nil {
		return err
	}
	if driver == "" {
		return nil
	}
	if err := s.write(s.drivers(driver, "bind"), addr); err != nil {
		return err
	}
	return s.waitDriver(addr, driver)
}

// waitDriver polls until addr is bound to want. Probing through sysfs is
// usually synchronous, but a driver with asynchronous probing binds later.
func (s Sysfs) waitDriver(addr, want string) error {
	timeout := s.BindTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		got, err := s.Driver(addr)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			if got == "" {
				got = "no driver"
			}
			return fmt.Errorf("vfio: %s did not bind to %s within %v (now: %s); see dmesg", addr, want, timeout, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
