// Package initramfs builds the small initramfs images the QEMU harnesses
// boot: a gzip'ed "newc" cpio archive (Linux
// Documentation/driver-api/early-userspace/buffer-format.rst) written
// directly, so no cpio tool is needed, plus helpers to pick modules out of
// an unpacked Debian kernel package and to check that busybox is static.
//
//	files := map[string]initramfs.Entry{"bin": {Mode: initramfs.Dir}, "init": {Mode: initramfs.Exec, Data: script}}
//	ko, _ := initramfs.Module(modDir, "mhi_pci_generic") // .ko, .ko.xz or .ko.zst
//	err := initramfs.Write(w, files)
package initramfs

import (
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Modes of the entries (type and permission bits, as in st_mode).
const (
	Dir     = 0o040755
	Exec    = 0o100755
	File    = 0o100644
	Symlink = 0o120777
)

// Entry is one file, directory or symlink of the archive.
type Entry struct {
	Mode uint32
	Data []byte // file contents or symlink target
}

// Write writes files (path without a leading slash → entry) as a gzip'ed
// newc archive, in sorted order so that directories precede their contents.
func Write(w io.Writer, files map[string]Entry) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		if err := writeEntry(zw, uint32(i+1), n, files[n]); err != nil {
			return err
		}
	}
	if err := writeEntry(zw, 0, "TRAILER!!!", Entry{}); err != nil {
		return err
	}
	return zw.Close()
}

// writeEntry writes a 110-byte header of 13 eight-digit hex fields, the
// NUL-terminated name padded to 4 bytes, then the data padded to 4 bytes.
func writeEntry(w io.Writer, ino uint32, name string, e Entry) error {
	nlink := uint32(1)
	if e.Mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.Mode, 0, 0, nlink, 0, len(e.Data), 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = pad4(append(buf, 0))
	buf = pad4(append(buf, e.Data...))
	_, err := w.Write(buf)
	return err
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// ErrNoModule is returned by Module when the tree has no such module
// (it may be built into the kernel).
var ErrNoModule = errors.New("initramfs: module not found")

// Module returns the uncompressed contents of module name (dashes and
// underscores are the same, as for modprobe) from the module tree modDir
// (lib/modules/VERSION). Debian 6.1 ships .ko, 6.12 .ko.xz.
func Module(modDir, name string) ([]byte, error) {
	want := strings.ReplaceAll(name, "-", "_")
	var found string
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != "" {
			return err
		}
		base := strings.ReplaceAll(d.Name(), "-", "_")
		for _, ext := range []string{".ko", ".ko.xz", ".ko.zst"} {
			if base == want+ext {
				found = p
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == "" {
		return nil, fmt.Errorf("%w: %s under %s", ErrNoModule, name, modDir)
	}
	switch {
	case strings.HasSuffix(found, ".xz"):
		return decompress(found, "xz")
	case strings.HasSuffix(found, ".zst"):
		return decompress(found, "zstd")
	}
	return os.ReadFile(found)
}

func decompress(path, tool string) ([]byte, error) {
	out, err := exec.Command(tool, "-dc", path).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -dc %s: %w (install %s)", tool, path, err, tool)
	}
	return out, nil
}

// CheckStatic returns an error unless path is a statically linked ELF
// executable, which can run as /init with no libraries.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w (install a static busybox: Debian busybox-static)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (install busybox-static)", path)
		}
	}
	return nil
}
