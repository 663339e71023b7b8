package firehose_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/firehose"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestFlashedGPTPassesSgdiskVerify flashes the test set, in its
// 512-byte-sector form, onto an emulated eMMC LUN, writes the LUN to a
// file and has GPT fdisk's sgdisk, a partition tool written apart from
// this project, check it: --verify finds no problem (both headers, both
// CRC32s, the backup where the patches put it) and -p lists the
// partitions of the rawprogram set at their sectors with their names.
//
// eMMC, not the UFS LUNs of the other tests: sgdisk takes the sector size
// from the block device (BLKSSZGET) and assumes 512 bytes for a plain
// file, so a 4096-byte-sector image would need a loop device made with
// losetup -b 4096, which needs root. The 512-byte set keeps the byte
// layout of the 4096-byte one (writeImagesSized).
func TestFlashedGPTPassesSgdiskVerify(t *testing.T) {
	sgdisk := hostSgdisk(t)
	const (
		ss       = 512
		n        = 16384 // 8 MiB
		k        = sector / ss
		backupAt = 5 * k // the backup GPT region: entries, then the header in the last sector
	)
	st := mustStorage(t, sim.StorageEMMC, n)
	fh := &sim.Firehose{Storage: st}
	f := newFPRig(t, fh)
	c := f.client(10 * time.Second)
	ctx := context.Background()
	if _, err := c.Configure(ctx, firehose.MemoryEMMC); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeImagesSized(t, dir, ss)
	last := fmt.Sprintf("NUM_DISK_SECTORS-%d.", backupAt+1)
	backupEntries := fmt.Sprintf("NUM_DISK_SECTORS-%d.", backupAt)
	progs := []firehose.Program{
		{SectorSize: ss, StartSector: "48", NumSectors: 16 * k, Filename: "efi.bin", Label: "efi"},
		{SectorSize: ss, StartSector: "176", Filename: "rootfs.img", Label: "rootfs"},
		{SectorSize: ss, StartSector: "0", NumSectors: 6 * k, Filename: "gpt_main0.bin", Label: "PrimaryGPT"},
		{SectorSize: ss, StartSector: backupEntries, NumSectors: backupAt, Filename: "gpt_backup0.bin", Label: "BackupGPT"},
	}
	patch := func(start string, off uint64, size int, value string) firehose.Patch {
		return firehose.Patch{SectorSize: ss, StartSector: start, ByteOffset: off, SizeInBytes: size, Value: value, Filename: "DISK"}
	}
	const hdr = "NUM_DISK_SECTORS-1."
	patches := []firehose.Patch{
		patch("2", entrySize+40, 8, last), // rootfs's last LBA, primary array
		patch(backupEntries, entrySize+40, 8, last),
		patch("1", 48, 8, last), // last usable LBA
		patch(hdr, 48, 8, last),
		patch("1", 32, 8, hdr), // backup header LBA
		patch(hdr, 24, 8, hdr), // backup's own LBA
		patch(hdr, 72, 8, backupEntries),
		patch("1", 88, 4, fmt.Sprintf("CRC32(2,%d)", numEntries*entrySize)),
		patch(hdr, 88, 4, fmt.Sprintf("CRC32(%s,%d)", backupEntries, numEntries*entrySize)),
		patch("1", 16, 4, "0"),
		patch("1", 16, 4, "CRC32(1,92)"),
		patch(hdr, 16, 4, "0"),
		patch(hdr, 16, 4, "CRC32(NUM_DISK_SECTORS-1.,92)"),
	}
	steps, err := firehose.Plan(progs, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := firehose.Flash(ctx, c, steps, patches, firehose.FlashOptions{Verify: true}); err != nil {
		t.Fatalf("Flash: %v (target errors %v)", err, fh.Errors())
	}
	disk := make([]byte, n*ss)
	if err := st.ReadSectors(0, 0, disk); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "lun0.img")
	if err := os.WriteFile(img, disk, 0o600); err != nil {
		t.Fatal(err)
	}

	out := sgdiskCheck(t, sgdisk, img)
	want := []string{
		fmt.Sprintf("1 %d %d efi", 6*k, 22*k-1),
		fmt.Sprintf("2 %d %d rootfs", 22*k, n-backupAt-1),
	}
	if got := sgdiskPartitions(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sgdisk -p lists\n%s\nwant\n%s\nfull output:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out)
	}
	if !bytes.Contains(out, []byte("Sector size (logical): 512 bytes")) {
		t.Errorf("sgdisk -p did not read 512-byte sectors:\n%s", out)
	}
}

// sgdiskCheck has sgdisk verify the GPT on path (a file or a block
// device) and returns what sgdisk -p prints.
//
// sgdisk repairs what it loads (a bad backup header is rebuilt from the
// main one) and then verifies the repaired copy, so its load-time
// cautions count as failures too. The warnings it gives about the test
// sets' own shape (the gap before the first usable sector, a 32-entry
// array, a partition's end not on a 16-sector boundary) do not.
func sgdiskCheck(t *testing.T, sgdisk, path string) []byte {
	t.Helper()
	out, err := exec.Command(sgdisk, "--verify", path).CombinedOutput()
	bad := err != nil || !bytes.Contains(out, []byte("No problems found"))
	for _, s := range []string{"Problem", "CRC", "invalid", "corrupt", "ERROR", "regenerating", "Creating new GPT"} {
		bad = bad || bytes.Contains(out, []byte(s))
	}
	if bad {
		t.Errorf("sgdisk --verify %s: %v\n%s", path, err, out)
	}
	out, err = exec.Command(sgdisk, "-p", path).CombinedOutput()
	if err != nil {
		t.Fatalf("sgdisk -p %s: %v\n%s", path, err, out)
	}
	return out
}

// sgdiskPartitions returns the rows of sgdisk -p's partition table as
// "number start end name".
func sgdiskPartitions(out []byte) []string {
	var rows []string
	table := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "Number" {
			table = true
			continue
		}
		// Number, Start, End, Size (two fields: "64.0 KiB"), Code, Name.
		if !table || len(f) < 7 {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err != nil {
			continue
		}
		rows = append(rows, strings.Join([]string{f[0], f[1], f[2], strings.Join(f[6:], " ")}, " "))
	}
	return rows
}

// hostSgdisk is the path of sgdisk(8), or the test skips (fails with
// MHISTACK_REQUIRE_SGDISK=1) when it is not installed. Debian puts it in
// /usr/sbin, which a user's PATH may lack.
func hostSgdisk(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sgdisk")
	if err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/sgdisk", "/sbin/sgdisk"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("MHISTACK_REQUIRE_SGDISK") == "1" {
		t.Fatalf("sgdisk: %v", err)
	}
	t.Skip("no sgdisk (apt-get install gdisk); CI sets MHISTACK_REQUIRE_SGDISK=1")
	return ""
}
