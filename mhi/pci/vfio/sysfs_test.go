//go:build linux

package vfio

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeSysfs builds the parts of /sys the helpers read, shaped like the real
// tree: bus/pci/devices/ADDR are links into devices/, with iommu_group and
// driver links.
type fakeSysfs struct {
	t    *testing.T
	root string
}

func newFakeSysfs(t *testing.T) *fakeSysfs {
	f := &fakeSysfs{t: t, root: t.TempDir()}
	for _, d := range []string{"bus/pci/devices", "bus/pci/drivers/vfio-pci", "bus/pci/drivers/mhi-pci-generic", "kernel/iommu_groups", "devices/pci0000:00"} {
		f.mkdir(d)
	}
	f.touch("bus/pci/drivers_probe")
	for _, drv := range []string{"vfio-pci", "mhi-pci-generic"} {
		f.touch("bus/pci/drivers/" + drv + "/bind")
		f.touch("bus/pci/drivers/" + drv + "/unbind")
	}
	return f
}

func (f *fakeSysfs) path(p string) string { return filepath.Join(f.root, p) }
func (f *fakeSysfs) mkdir(p string) {
	if err := os.MkdirAll(f.path(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
}
func (f *fakeSysfs) touch(p string) { f.write(p, "") }
func (f *fakeSysfs) write(p, s string) {
	if err := os.WriteFile(f.path(p), []byte(s), 0o644); err != nil {
		f.t.Fatal(err)
	}
}
func (f *fakeSysfs) read(p string) string {
	b, err := os.ReadFile(f.path(p))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}
func (f *fakeSysfs) link(target, p string) {
	_ = os.Remove(f.path(p))
	if err := os.Symlink(target, f.path(p)); err != nil {
		f.t.Fatal(err)
	}
}

// addDevice adds a function in IOMMU group (-1: none) bound to drv ("": none).
func (f *fakeSysfs) addDevice(addr string, vendor, device string, group int, drv string) {
	dev := "devices/pci0000:00/" + addr
	f.mkdir(dev)
	f.write(dev+"/vendor", vendor+"\n")
	f.write(dev+"/device", device+"\n")
	f.write(dev+"/driver_override", "(null)\n")
	f.link("../../../"+dev, "bus/pci/devices/"+addr)
	if group >= 0 {
		g := "kernel/iommu_groups/" + itoa(group)
		f.mkdir(g + "/devices")
		f.link("../../../../kernel/iommu_groups/"+itoa(group), dev+"/iommu_group")
		f.link("../../../../"+dev, g+"/devices/"+addr)
	}
	f.setDriver(addr, drv)
}

func (f *fakeSysfs) setDriver(addr, drv string) {
	p := "devices/pci0000:00/" + addr + "/driver"
	_ = os.Remove(f.path(p))
	if drv != "" {
		f.link("../../../bus/pci/drivers/"+drv, p)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestNormalizeAddress(t *testing.T) {
	for in, want := range map[string]string{
		"0000:01:00.0": "0000:01:00.0", "01:00.0": "0000:01:00.0", " 0000:0A:1f.7 ": "0000:0a:1f.7",
	} {
		if got, err := NormalizeAddress(in); err != nil || got != want {
			t.Errorf("NormalizeAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1:0.0", "0000:01:20.0", "0000:01:00.8", "../../etc"} {
		if _, err := NormalizeAddress(bad); err == nil {
			t.Errorf("NormalizeAddress(%q) accepted", bad)
		}
	}
}

func TestSysfsReadsGroupDriverAndIDs(t *testing.T) {
	f := newFakeSysfs(t)
	f.addDevice("0000:01:00.0", "0x17cb", "0x0306", 7, "mhi-pci-generic")
	f.addDevice("0000:01:00.1", "0x17cb", "0x0307", 7, "")
	f.addDevice("0000:02:00.0", "0x8086", "0x1234", -1, "")
	s := Sysfs{Root: f.root}

	if g, err := s.IOMMUGroup("0000:01:00.0"); err != nil || g != 7 {
		t.Errorf("IOMMUGroup = %d, %v", g, err)
	}
	if _, err := s.IOMMUGroup("0000:02:00.0"); !errors.Is(err, ErrNoIOMMUGroup) || !strings.Contains(err.Error(), "intel_iommu=on") {
		t.Errorf("IOMMUGroup without a group: %v", err)
	}
	if _, err := s.IOMMUGroup("0000:09:00.0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("IOMMUGroup of a missing device: %v", err)
	}
	if d, err := s.Driver("0000:01:00.0"); err != nil || d != "mhi-pci-generic" {
		t.Errorf("Driver = %q, %v", d, err)
	}
	if d, err := s.Driver("0000:01:00.1"); err != nil || d != "" {
		t.Errorf("Driver of an unbound device = %q, %v", d, err)
	}
	if devs, err := s.GroupDevices(7); err != nil || !reflect.DeepEqual(devs, []string{"0000:01:00.0", "0000:01:00.1"}) {
		t.Errorf("GroupDevices = %v, %v", devs, err)
	}
	if v, d, err := s.ID("0000:01:00.0"); err != nil || v != 0x17cb || d != 0x0306 {
		t.Errorf("ID = %04x:%04x, %v", v, d, err)
	}
	if got, err := s.Find(0x17cb, 0x0307); err != nil || !reflect.DeepEqual(got, []string{"0000:01:00.1"}) {
		t.Errorf("Find = %v, %v", got, err)
	}
	if s.VFIODevice("0000:01:00.0") != "" {
		t.Error("VFIODevice found a cdev that is not there")
	}
	f.mkdir("devices/pci0000:00/0000:01:00.0/vfio-dev/vfio3")
	if got := s.VFIODevice("0000:01:00.0"); got != "vfio3" {
		t.Errorf("VFIODevice = %q", got)
	}
}

// kernel plays the kernel's part of a bind: when drivers_probe names addr,
// bind addr to the driver in its driver_override.
func (f *fakeSysfs) kernel(addr string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
		probe, _ := os.ReadFile(f.path("bus/pci/drivers_probe"))
		if string(probe) != addr {
			continue
		}
		ov, _ := os.ReadFile(f.path("devices/pci0000:00/" + addr + "/driver_override"))
		f.setDriver(addr, strings.TrimSpace(string(ov)))
		_ = os.WriteFile(f.path("bus/pci/drivers_probe"), nil, 0o644)
	}
}

func TestBindUnbindsHostDriverAndProbesVFIO(t *testing.T) {
	f := newFakeSysfs(t)
	f.addDevice("0000:01:00.0", "0x17cb", "0x0306", 7, "mhi-pci-generic")
	s := Sysfs{Root: f.root, BindTimeout: 2 * time.Second}
	stop := make(chan struct{})
	defer close(stop)
	go f.kernel("0000:01:00.0", stop)

	prev, err := s.Bind("0000:01:00.0")
	if err != nil || prev != "mhi-pci-generic" {
		t.Fatalf("Bind = %q, %v", prev, err)
	}
	if got := f.read("devices/pci0000:00/0000:01:00.0/driver_override"); got != "vfio-pci" {
		t.Errorf("driver_override = %q", got)
	}
	if got := f.read("bus/pci/drivers/mhi-pci-generic/unbind"); got != "0000:01:00.0" {
		t.Errorf("host driver unbind got %q", got)
	}
	if d, _ := s.Driver("0000:01:00.0"); d != VFIODriver {
		t.Errorf("driver after Bind = %q", d)
	}
	// Binding again is a no-op that reports vfio-pci.
	if prev, err := s.Bind("0000:01:00.0"); err != nil || prev != VFIODriver {
		t.Errorf("second Bind = %q, %v", prev, err)
	}
}

func TestRestoreClearsOverrideAndRebindsOriginalDriver(t *testing.T) {
	f := newFakeSysfs(t)
	f.addDevice("0000:01:00.0", "0x17cb", "0x0306", 7, "vfio-pci")
	f.write("devices/pci0000:00/0000:01:00.0/driver_override", "vfio-pci\n")
	s := Sysfs{Root: f.root, BindTimeout: 50 * time.Millisecond}

	// The fake kernel does not bind on "bind", so Restore must time out
	// naming the driver; the writes before that are what we check.
	err := s.Restore("0000:01:00.0", "mhi-pci-generic")
	if err == nil || !strings.Contains(err.Error(), "did not bind to mhi-pci-generic") {
		t.Errorf("Restore error = %v", err)
	}
	if got := f.read("devices/pci0000:00/0000:01:00.0/driver_override"); got != "\n" {
		t.Errorf("driver_override = %q, want a lone newline", got)
	}
	if got := f.read("bus/pci/drivers/vfio-pci/unbind"); got != "0000:01:00.0" {
		t.Errorf("vfio-pci unbind got %q", got)
	}
	if got := f.read("bus/pci/drivers/mhi-pci-generic/bind"); got != "0000:01:00.0" {
		t.Errorf("mhi-pci-generic bind got %q", got)
	}
}

func TestBindFailsClearlyWithoutVFIODriver(t *testing.T) {
	f := newFakeSysfs(t)
	f.addDevice("0000:01:00.0", "0x17cb", "0x0306", 7, "")
	if err := os.RemoveAll(f.path("bus/pci/drivers/vfio-pci")); err != nil {
		t.Fatal(err)
	}
	_, err := Sysfs{Root: f.root}.Bind("0000:01:00.0")
	if err == nil || !strings.Contains(err.Error(), "modprobe vfio-pci") {
		t.Fatalf("Bind without vfio-pci: %v", err)
	}
}

func TestOpenExplainsBindingAndIOMMUProblems(t *testing.T) {
	f := newFakeSysfs(t)
	f.addDevice("0000:01:00.0", "0x17cb", "0x0306", 7, "mhi-pci-generic")
	f.addDevice("0000:02:00.0", "0x17cb", "0x0306", -1, "")
	f.addDevice("0000:03:00.0", "0x17cb", "0x0306", 8, "vfio-pci")
	opts := &Options{Sysfs: Sysfs{Root: f.root}, DevRoot: t.TempDir()}

	_, err := Open("0000:01:00.0", opts)
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "hack/vfio-bind.sh bind 0000:01:00.0") || !strings.Contains(err.Error(), "mhi-pci-generic") {
		t.Errorf("Open of a device on a host driver: %v", err)
	}
	if _, err := Open("02:00.0", opts); !errors.Is(err, ErrNoIOMMUGroup) {
		t.Errorf("Open without IOMMU group: %v", err)
	}
	if _, err := Open("0000:04:00.0", opts); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open of a missing device: %v", err)
	}
	if _, err := Open("0000:03:00.0", opts); !errors.Is(err, ErrNoVFIO) || !strings.Contains(err.Error(), "modprobe vfio-pci") {
		t.Errorf("Open without /dev/vfio: %v", err)
	}
}

func TestNotViableNamesTheOtherDevices(t *testing.T) {
	f := newFakeSysfs(t)
	f.addDevice("0000:01:00.0", "0x17cb", "0x0306", 7, "vfio-pci")
	f.addDevice("0000:01:00.1", "0x8086", "0x1111", 7, "snd_hda_intel")
	f.addDevice("0000:01:00.2", "0x8086", "0x2222", 7, "")
	err := notViable(Sysfs{Root: f.root}, 7, "0000:01:00.0")
	if !errors.Is(err, ErrGroupNotViable) || !strings.Contains(err.Error(), "0000:01:00.1 (driver snd_hda_intel)") || strings.Contains(err.Error(), "01:00.2") {
		t.Fatalf("notViable = %v", err)
	}
}
