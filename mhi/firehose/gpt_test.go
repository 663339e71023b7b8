package firehose_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf16"
)

// This file builds the GPT images of testdata/rawprogram0.xml (and of
// qdl's set, qdl_test.go) as a partition tool does (fields that depend on
// the disk's size left for the patches) and checks a written disk
// independently of the emulated programmer: every field and both CRC32s recomputed here with
// hash/crc32 from the UEFI specification's layout (UEFI 2.10 §5.3.2 GPT
// header, §5.3.3 partition entry array).

const (
	sector     = 4096
	entrySize  = 128
	numEntries = 32 // one 4096-byte sector of entries, as patch0.xml's CRC32(2,4096)
)

type gptPart struct {
	name        string
	first, last uint64 // last 0: patched to NUM_DISK_SECTORS-6
}

var testParts = []gptPart{{"efi", 6, 21}, {"rootfs", 22, 0}}

func guid(b byte) []byte { return bytes.Repeat([]byte{b}, 16) }

// entries is the partition entry array of parts on a disk of ss-byte
// sectors: the 4096-byte layout scaled by 4096/ss, so that every
// partition keeps its byte offset and size.
func entries(parts []gptPart, ss int) []byte {
	k := uint64(sector / ss)
	a := make([]byte, numEntries*entrySize)
	for i, p := range parts {
		e := a[i*entrySize:]
		copy(e[0:], guid(0xA0+byte(i)))  // type GUID
		copy(e[16:], guid(0xB0+byte(i))) // unique GUID
		binary.LittleEndian.PutUint64(e[32:], p.first*k)
		if p.last != 0 { // 0: left for the patch
			binary.LittleEndian.PutUint64(e[40:], (p.last+1)*k-1)
		}
		for j, u := range utf16.Encode([]rune(p.name)) {
			binary.LittleEndian.PutUint16(e[56+2*j:], u)
		}
	}
	return a
}

func header(ss int, current, backup, entriesLBA uint64) []byte {
	h := make([]byte, ss)
	copy(h, "EFI PART")
	binary.LittleEndian.PutUint32(h[8:], 0x00010000)
	binary.LittleEndian.PutUint32(h[12:], 92)
	binary.LittleEndian.PutUint64(h[24:], current)
	binary.LittleEndian.PutUint64(h[32:], backup)
	binary.LittleEndian.PutUint64(h[40:], 6*uint64(sector/ss)) // first usable
	copy(h[56:], guid(0xC0))
	binary.LittleEndian.PutUint64(h[72:], entriesLBA)
	binary.LittleEndian.PutUint32(h[80:], numEntries)
	binary.LittleEndian.PutUint32(h[84:], entrySize)
	return h
}

// writeImages writes the images of the test set into dir and returns
// them by file name.
func writeImages(t *testing.T, dir string) map[string][]byte {
	return writeImagesSized(t, dir, sector)
}

// writeImagesSized writes the test set for ss-byte sectors: the GPT
// regions of 24 KiB (main) and 20 KiB (backup) and the partitions at the
// byte offsets of the 4096-byte set.
func writeImagesSized(t *testing.T, dir string, ss int) map[string][]byte {
	t.Helper()
	main, backup := gptImages(testParts, ss)
	imgs := map[string][]byte{
		"gpt_main0.bin": main, "gpt_backup0.bin": backup,
		"efi.bin":    pattern(16*sector, 1),
		"rootfs.img": pattern(37*sector+1234, 2), // not a whole sector: zero-filled
		"xbl.elf":    pattern(5*sector, 3),
	}
	for name, b := range imgs {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return imgs
}

// gptImages returns the primary (protective MBR, header, entries: 24
// KiB) and backup (entries, header in the last sector: 20 KiB) GPT images
// of parts for ss-byte sectors, as a partition tool writes them before the
// disk's size is known: the backup's own LBA, the primary's backup LBA,
// the last usable LBA, the last partition's end and the CRCs are the
// patches' work.
func gptImages(parts []gptPart, ss int) (main, backup []byte) {
	mbr := make([]byte, ss)
	mbr[446+4] = 0xEE // protective partition type
	binary.LittleEndian.PutUint32(mbr[446+8:], 1)
	binary.LittleEndian.PutUint32(mbr[446+12:], 0xFFFFFFFF)
	mbr[510], mbr[511] = 0x55, 0xAA
	main = append(append(mbr, header(ss, 1, 0, 2)...), entries(parts, ss)...)
	main = append(main, make([]byte, 6*sector-len(main))...)
	backup = append(entries(parts, ss), make([]byte, 5*sector-numEntries*entrySize-ss)...)
	backup = append(backup, header(ss, 0, 1, 0)...)
	return main, backup
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed<<4 ^ byte(i>>12)
	}
	return b
}

// checkGPT checks a LUN of n sectors holding parts, read through
// readSectors, as a
// UEFI firmware would: both headers (signature, size, CRC over
// header_size bytes with the CRC field zeroed, current/backup LBAs,
// usable range, entry array location and CRC over count × size bytes),
// and the partitions' ranges.
func checkGPT(t *testing.T, parts []gptPart, n uint64, readSectors func(lba uint64, count int) []byte) {
	t.Helper()
	check := func(which string, lba, wantBackup, wantEntries uint64) {
		h := readSectors(lba, 1)
		le64 := func(o int) uint64 { return binary.LittleEndian.Uint64(h[o:]) }
		le32 := func(o int) uint32 { return binary.LittleEndian.Uint32(h[o:]) }
		if string(h[:8]) != "EFI PART" || le32(12) != 92 {
			t.Fatalf("%s header at LBA %d: signature %q size %d", which, lba, h[:8], le32(12))
		}
		hc := bytes.Clone(h[:92])
		binary.LittleEndian.PutUint32(hc[16:], 0)
		if got, want := le32(16), crc32.ChecksumIEEE(hc); got != want {
			t.Errorf("%s header CRC32 %#x, recomputed %#x", which, got, want)
		}
		if le64(24) != lba || le64(32) != wantBackup || le64(40) != 6 || le64(48) != n-6 || le64(72) != wantEntries {
			t.Errorf("%s header: current %d backup %d usable %d..%d entries at %d; want %d, %d, 6..%d, %d",
				which, le64(24), le64(32), le64(40), le64(48), le64(72), lba, wantBackup, n-6, wantEntries)
		}
		count, size := le32(80), le32(84)
		arr := readSectors(wantEntries, int((uint64(count)*uint64(size)+sector-1)/sector))[:count*size]
		if got, want := le32(88), crc32.ChecksumIEEE(arr); got != want {
			t.Errorf("%s entry array CRC32 %#x, recomputed %#x", which, got, want)
		}
		for i, p := range parts {
			e := arr[i*int(size):]
			last := p.last
			if last == 0 {
				last = n - 6
			}
			if f, l := binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:]); f != p.first || l != last {
				t.Errorf("%s entry %s: LBAs %d..%d, want %d..%d", which, p.name, f, l, p.first, last)
			}
		}
	}
	check("primary", 1, n-1, 2)
	check("backup", n-1, 1, n-5)
}
