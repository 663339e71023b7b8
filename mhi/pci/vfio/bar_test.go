//go:build linux

package vfio

import (
	"encoding/binary"
	"os"
	"testing"
)

// A VFIO BAR is an mmap of (or pread/pwrite on) the device fd at the
// region offset. A regular file stands in for the fd here: the same calls
// work on it, so both access paths and their bounds can be tested without
// a device.
func barFile(t *testing.T, size int) *os.File {
	f, err := os.Create(t.TempDir() + "/bar")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	// Place the BAR at a non-zero region offset, like BAR1 of vfio-pci
	// (1<<40 there; one page here).
	if err := f.Truncate(int64(4096 + size)); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestBARMmapAndPreadPathsAgree(t *testing.T) {
	const size = 8192
	for _, mapped := range []bool{true, false} {
		f := barFile(t, size)
		flags := uint32(regionRead | regionWrite)
		if mapped {
			flags |= regionMmap
		}
		b, err := mapBAR(int(f.Fd()), Region{Index: 1, Flags: flags, Size: size, Offset: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if b.Mapped() != mapped || b.Len() != size {
			t.Fatalf("mapped=%v: Mapped()=%v Len()=%d", mapped, b.Mapped(), b.Len())
		}
		b.Write32(0x10, 0x11223344)
		b.Write64(0x18, 0x0102030405060708)
		var raw [16]byte
		if _, err := f.ReadAt(raw[:], 4096+0x10); err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint32(raw[:]) != 0x11223344 || binary.LittleEndian.Uint64(raw[8:]) != 0x0102030405060708 {
			t.Errorf("mapped=%v: file holds % x", mapped, raw)
		}
		if _, err := f.WriteAt([]byte{0xef, 0xbe, 0xad, 0xde}, 4096+size-4); err != nil {
			t.Fatal(err)
		}
		if got := b.Read32(size - 4); got != 0xdeadbeef {
			t.Errorf("mapped=%v: Read32(last) = %#x", mapped, got)
		}
		if got := b.Read64(0x18); got != 0x0102030405060708 {
			t.Errorf("mapped=%v: Read64 = %#x", mapped, got)
		}
		// Outside or misaligned: all-ones, writes dropped.
		for _, off := range []uint64{size, size - 2, 0x11, 1 << 63} {
			if got := b.Read32(off); got != ^uint32(0) {
				t.Errorf("mapped=%v: Read32(%#x) = %#x, want all-ones", mapped, off, got)
			}
			b.Write32(off, 0)
		}
		if got := b.Read64(size - 4); got != ^uint64(0) {
			t.Errorf("mapped=%v: Read64 straddling the end = %#x", mapped, got)
		}
		// One run of 100 accesses: AllocsPerRun's average is an integer
		// division, which would read 99 allocations in 100 accesses as 0.
		if allocs := testing.AllocsPerRun(1, func() {
			for range 100 {
				b.Write32(0x20, b.Read32(0x20)+1)
			}
		}); allocs != 0 {
			t.Errorf("mapped=%v: %v allocations in 100 register read-modify-writes, want 0", mapped, allocs)
		}
		if err := b.unmap(); err != nil {
			t.Fatal(err)
		}
		if got := b.Read32(0x10); got != ^uint32(0) {
			t.Errorf("mapped=%v: Read32 after unmap = %#x", mapped, got)
		}
	}
}

func TestBARSparseAreasMixMmapAndPread(t *testing.T) {
	f := barFile(t, 3*4096)
	r := Region{Index: 0, Flags: regionRead | regionWrite | regionMmap | regionCaps, Size: 3 * 4096, Offset: 4096,
		Sparse: []SparseArea{{0, 4096}, {2 * 4096, 4096}}} // the middle page (an MSI-X table) is not mappable
	b, err := mapBAR(int(f.Fd()), r)
	if err != nil {
		t.Fatal(err)
	}
	defer b.unmap()
	if b.Mapped() || len(b.maps) != 2 {
		t.Fatalf("Mapped()=%v with %d maps", b.Mapped(), len(b.maps))
	}
	for _, off := range []uint64{0, 4096, 2 * 4096} {
		b.Write32(off+8, uint32(off)|1)
	}
	for _, off := range []uint64{0, 4096, 2 * 4096} {
		var raw [4]byte
		if _, err := f.ReadAt(raw[:], int64(4096+off+8)); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(raw[:]); got != uint32(off)|1 || b.Read32(off+8) != got {
			t.Errorf("offset %#x: file %#x, Read32 %#x", off, got, b.Read32(off+8))
		}
	}
}
