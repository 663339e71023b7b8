package main

// The guest image: busybox, the MHI/WWAN modules, mbimcli and qmicli with
// their libraries, the firmware of PBL runs and the /init script, packed
// as one initramfs per run.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
)

// buildInitramfs packs busybox, the modules and init (made from the
// mhi_pci_generic module by makeInit) into path.
func buildInitramfs(path, busybox, modDir string, extra map[string]initramfs.Entry, makeInit func(pciGeneric []byte) string) error {
	files, err := qh.BaseFiles(busybox)
	if err != nil {
		return err
	}
	if _, err := qh.AddModules(files, modDir, moduleNames(), nil); err != nil {
		return err
	}
	// mbimcli and its libraries for the MBIM section (mbim.go),
	if err := addMbimcli(files); err != nil {
		return err
	}
	// qmicli and its libraries for the QMI section (qmi.go).
	if err := addQmicli(files); err != nil {
		return err
	}
	for name, e := range extra {
		files[name] = e
	}
	files["init"] = initramfs.Entry{Mode: initramfs.Exec, Data: []byte(makeInit(files["lib/modules/mhi_pci_generic.ko"].Data))}
	return qh.WriteInitramfs(path, files)
}

// addTool puts the dynamically linked program at path, every shared
// library ldd lists for it and the loader into files, at their host
// paths, so that it runs in the guest as on the host (mbimcli, qmicli).
func addTool(files map[string]initramfs.Entry, path string) error {
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", path, err)
	}
	paths := []string{path}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libx.so.1 => /lib/…/libx.so.1 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				paths = append(paths, f)
				break
			}
		}
	}
	for _, p := range paths {
		data, err := os.ReadFile(p) // follows symlinks: the loader finds the real bytes under the soname
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, "/")
		for d := filepath.Dir(rel); d != "." && d != "/"; d = filepath.Dir(d) {
			if _, ok := files[d]; !ok {
				files[d] = initramfs.Entry{Mode: initramfs.Dir}
			}
		}
		files[rel] = initramfs.Entry{Mode: initramfs.Exec, Data: data}
	}
	return nil
}
