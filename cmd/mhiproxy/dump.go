package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/mhistack/mhistack/mhi"
)

// crashDumpWriter returns the mhi.Options.OnCrashDump of -dump-dir: every
// RDDM crash dump of device is written to dir as
// <device>-<UTC time>.rddm, and the path is logged.
func crashDumpWriter(dir, device string, log *slog.Logger) func(mhi.CrashDump) {
	return func(d mhi.CrashDump) {
		path, err := writeCrashDump(dir, device, d)
		if err != nil {
			log.Error("modem crashed; RDDM crash dump not written", "err", err, "bytes", len(d.Data))
			return
		}
		log.Warn("modem crashed; RDDM crash dump written", "file", path, "bytes", len(d.Data))
	}
}

// writeCrashDump writes d to dir and returns the file's path. The name
// is the device (a PCI address, "sim") and the dump's time, e.g.
// 0000:01:00.0-20261201T150405.123Z.rddm; an existing file is never
// overwritten.
func writeCrashDump(dir, device string, d mhi.CrashDump) (string, error) {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(device) + "-" + d.Time.UTC().Format("20060102T150405.000Z") + ".rddm"
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(d.Data); err != nil {
		f.Close()
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return path, f.Close()
}

// checkDumpDir checks -dump-dir names a writable directory.
func checkDumpDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("-dump-dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("-dump-dir %s: not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".mhiproxy-write-test-*")
	if err != nil {
		return fmt.Errorf("-dump-dir %s: not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
