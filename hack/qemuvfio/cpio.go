package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"sort"
)

// An initramfs is a gzip'ed cpio archive in the "newc" format (Linux
// Documentation/driver-api/early-userspace/buffer-format.rst): per entry a
// 110-byte ASCII header of 13 eight-digit hex fields, the NUL-terminated
// name padded to 4 bytes, then the data padded to 4 bytes; a
// "TRAILER!!!" entry ends it. Writing it here saves a dependency on cpio.

// entry is one file, directory or symlink of the archive.
type entry struct {
	mode uint32 // type and permission bits (0o100755, 0o040755, 0o120777)
	data []byte // file contents or symlink target
}

const (
	modeDir     = 0o040755
	modeExec    = 0o100755
	modeFile    = 0o100644
	modeSymlink = 0o120777
)

// writeInitramfs writes files (path without leading slash → entry), in
// sorted order so that directories precede their contents.
func writeInitramfs(w io.Writer, files map[string]entry) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	ino := uint32(1)
	for _, n := range names {
		if err := writeEntry(zw, ino, n, files[n]); err != nil {
			return err
		}
		ino++
	}
	if err := writeEntry(zw, 0, "TRAILER!!!", entry{}); err != nil {
		return err
	}
	return zw.Close()
}

func writeEntry(w io.Writer, ino uint32, name string, e entry) error {
	nlink := uint32(1)
	if e.mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, e.data...)
	buf = pad4(buf)
	_, err := w.Write(buf)
	return err
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
