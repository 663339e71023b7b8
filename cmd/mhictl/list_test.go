package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysfs builds the part of /sys that list reads: PCI functions with
// their IDs, driver links and IOMMU groups.
func fakeSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	fn := func(addr, vendor, device, subV, subD, driver string, group string) {
		dir := filepath.Join(root, "bus/pci/devices", addr)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"vendor": vendor, "device": device, "subsystem_vendor": subV, "subsystem_device": subD} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if driver != "" {
			d := filepath.Join(root, "bus/pci/drivers", driver)
			os.MkdirAll(d, 0o755)
			if err := os.Symlink(d, filepath.Join(dir, "driver")); err != nil {
				t.Fatal(err)
			}
		}
		if group != "" {
			g := filepath.Join(root, "kernel/iommu_groups", group)
			os.MkdirAll(filepath.Join(g, "devices"), 0o755)
			os.WriteFile(filepath.Join(g, "devices", addr), nil, 0o644)
			if err := os.Symlink(g, filepath.Join(dir, "iommu_group")); err != nil {
				t.Fatal(err)
			}
		}
	}
	fn("0000:01:00.0", "0x17cb", "0x0306", "0x17cb", "0x010c", "mhi-pci-generic", "7") // Foxconn SDX55, kernel driver
	fn("0000:02:00.0", "0x1eac", "0x1007", "0x1eac", "0x5001", "vfio-pci", "8")        // Quectel RM520N, ready
	fn("0000:03:00.0", "0x1269", "0x00b3", "0x1269", "0x00b3", "", "")                 // Cinterion MV31, no IOMMU
	fn("0000:00:1f.0", "0x8086", "0x1234", "0x8086", "0x0000", "lpc_ich", "1")         // not a modem
	return root
}

func TestListFindsKnownModemsInSysfs(t *testing.T) {
	root := fakeSysfs(t)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"list", "-sysfs", root}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"0000:01:00.0", "foxconn-sdx55", "mhi-pci-generic", "hack/vfio-bind.sh bind 0000:01:00.0",
		"0000:02:00.0", "quectel-rm5xx", "ready",
		"0000:03:00.0", "cinterion-mv31", "enable the IOMMU",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("list output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "0000:00:1f.0") {
		t.Errorf("list shows a function that is no modem:\n%s", s)
	}

	out.Reset()
	if code := run(context.Background(), []string{"list", "-sysfs", root, "-json"}, &out, &errb); code != 0 {
		t.Fatalf("-json exit %d: %s", code, errb.String())
	}
	var mods []modemEntry
	if err := json.Unmarshal(out.Bytes(), &mods); err != nil {
		t.Fatalf("-json output: %v\n%s", err, out.String())
	}
	if len(mods) != 3 || !mods[1].VFIOReady || mods[0].VFIOReady || mods[1].IOMMUGroup == nil || *mods[1].IOMMUGroup != 8 || mods[2].IOMMUGroup != nil {
		t.Errorf("-json: %+v", mods)
	}
}

func TestListSaysSoWhenThereIsNoModem(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bus/pci/devices"), 0o755)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"list", "-sysfs", root}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "no known MHI modem found") {
		t.Errorf("output %q", out.String())
	}
	out.Reset()
	run(context.Background(), []string{"list", "-sysfs", root, "-json"}, &out, &errb)
	if strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("-json with no modem = %q, want []", out.String())
	}
	if code := run(context.Background(), []string{"list", "-sysfs", filepath.Join(root, "nope")}, &out, &errb); code != 1 {
		t.Errorf("missing sysfs: exit %d, want 1", code)
	}
	out.Reset()
	if code := run(context.Background(), []string{"list", "-profiles"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "foxconn-t99w175") {
		t.Errorf("-profiles: exit %d, output %q", code, out.String())
	}
}
