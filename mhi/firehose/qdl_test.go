package firehose_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
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

// qdl's test set (testdata/qdl/README.md): the images its
// generate_flat_build.sh makes, by size, and the GPT layouts its
// rawprogram files place.
var (
	qdlImageSizes = map[string]int{
		"efi.bin": 8192 << 10, "rootfs.img": 8192 << 10, "xbl.elf": 800 << 10, "xbl_config.elf": 320 << 10,
	}
	qdlParts = [][]gptPart{
		{{"efi", 6, 2053}, {"rootfs", 2054, 0}},
		{{"xbl_a", 6, 906}, {"xbl_config_a", 907, 1034}, {"xbl_b", 1035, 1935}, {"xbl_config_b", 1936, 2063}, {"last_parti", 2064, 0}},
	}
	qdlFiles = []string{"testdata/qdl/rawprogram0.xml", "testdata/qdl/rawprogram1.xml", "testdata/qdl/patch0.xml", "testdata/qdl/patch1.xml"}
)

// writeQDLImages writes the images qdl's set names into dir: the
// partition images of qdl's sizes filled with seeded random bytes, and
// the GPT images of both LUNs (24 and 20 KiB, as qdl's).
func writeQDLImages(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	imgs := map[string][]byte{}
	seed := uint64(1)
	for name, n := range qdlImageSizes {
		b := make([]byte, n)
		rng := rand.New(rand.NewPCG(seed, uint64(n)))
		for i := 0; i < n; i += 8 {
			v := rng.Uint64()
			for j := 0; j < 8 && i+j < n; j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		imgs[name] = b
		seed++
	}
	for lun, parts := range qdlParts {
		imgs[fmt.Sprintf("gpt_main%d.bin", lun)], imgs[fmt.Sprintf("gpt_backup%d.bin", lun)] = gptImages(parts, sector)
	}
	for name, b := range imgs {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return imgs
}

// TestFlashQDLTestSet flashes qdl's own test set (testdata/qdl, copied
// unchanged from linux-msm/qdl tests/data) through the emulated
// qcom-sdx55m's EDL programmer onto two 4096-byte-sector UFS LUNs and
// reads both LUNs back whole:
//
//   - every byte outside the fields the DISK patches write equals the
//     images where the rawprogram files place them and is untouched
//     (zero) elsewhere, including the partitions without a file;
//   - the GPTs pass this package's UEFI check (gpt_test.go) and GPT
//     fdisk's sgdisk --verify on a loop device of 4096-byte sectors,
//     which lists the partitions where the rawprogram files put them.
func TestFlashQDLTestSet(t *testing.T) {
	n := []uint64{4608, 2560} // 18 and 10 MiB
	st := mustStorage(t, sim.StorageUFS, n...)
	fh := &sim.Firehose{Storage: st}
	f := newFPRig(t, fh)
	c := f.client(30 * time.Second)
	ctx := context.Background()
	if _, err := c.Configure(ctx, firehose.MemoryUFS); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	imgs := writeQDLImages(t, dir)
	steps, patches := loadSet(t, dir, qdlFiles...)
	sum, err := firehose.Flash(ctx, c, steps, patches, firehose.FlashOptions{Verify: true})
	if err != nil {
		t.Fatalf("Flash: %v (target errors %v)", err, fh.Errors())
	}
	// 4 programs with a file per LUN; 13 DISK patches and 13 of the host's
	// GPT files per patch file; xbl_a's LUN made bootable.
	if sum.Programmed != 8 || sum.Patched != 26 || sum.PatchesSkipped != 26 || sum.Bootable != 1 {
		t.Errorf("summary %+v", sum)
	}
	if errs := fh.Errors(); len(errs) != 0 {
		t.Errorf("target saw host errors: %v", errs)
	}

	disks := make([][]byte, len(n))
	for lun := range n {
		disks[lun] = make([]byte, n[lun]*sector)
		if err := st.ReadSectors(lun, 0, disks[lun]); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, len(disks[lun]))
		placed := 0
		for _, s := range steps {
			if s.LUN != lun {
				continue
			}
			at, err := firehose.Eval(s.StartSector, firehose.Env{NumDiskSectors: n[lun]})
			if err != nil {
				t.Fatal(err)
			}
			copy(want[at*sector:], imgs[filepath.Base(s.Path)])
			placed++
		}
		if placed != 4 {
			t.Fatalf("LUN %d: %d images placed, want 4", lun, placed)
		}
		// The patched fields are what the GPT checks judge.
		patched := 0
		for _, p := range patches {
			if p.Filename != "DISK" || p.LUN != lun {
				continue
			}
			at, err := firehose.Eval(p.StartSector, firehose.Env{NumDiskSectors: n[lun]})
			if err != nil {
				t.Fatal(err)
			}
			o := at*sector + p.ByteOffset
			copy(want[o:o+uint64(p.SizeInBytes)], disks[lun][o:])
			patched++
		}
		if patched != 13 {
			t.Fatalf("LUN %d: %d DISK patches, want 13", lun, patched)
		}
		if i := firstDiff(disks[lun], want); i >= 0 {
			t.Errorf("LUN %d differs from the placed images first at byte %d (sector %d)", lun, i, i/sector)
		}
		checkGPT(t, qdlParts[lun], n[lun], func(lba uint64, count int) []byte {
			return disks[lun][lba*sector : (lba+uint64(count))*sector]
		})
	}

	t.Run("sgdisk", func(t *testing.T) {
		sgdisk := hostSgdisk(t)
		for lun := range n {
			img := filepath.Join(t.TempDir(), fmt.Sprintf("lun%d.img", lun))
			if err := os.WriteFile(img, disks[lun], 0o600); err != nil {
				t.Fatal(err)
			}
			out := sgdiskCheck(t, sgdisk, loopDevice(t, img, sector))
			var want []string
			for i, p := range qdlParts[lun] {
				last := p.last
				if last == 0 {
					last = n[lun] - 6
				}
				want = append(want, fmt.Sprintf("%d %d %d %s", i+1, p.first, last, p.name))
			}
			if got := sgdiskPartitions(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("LUN %d: sgdisk -p lists\n%s\nwant\n%s\nfull output:\n%s", lun, strings.Join(got, "\n"), strings.Join(want, "\n"), out)
			}
			if !bytes.Contains(out, []byte("Sector size (logical/physical): 4096/4096 bytes")) {
				t.Errorf("LUN %d: sgdisk -p did not read 4096-byte sectors:\n%s", lun, out)
			}
		}
	})
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// loopDevice attaches file read-only as a loop device of ss-byte logical
// sectors (losetup -b) and detaches it at cleanup. sgdisk takes the
// sector size from the block device, and assumes 512 bytes for a plain
// file. It needs root; without it the test skips (fails with
// MHISTACK_REQUIRE_SGDISK=1, which CI, running as root, sets).
func loopDevice(t *testing.T, file string, ss int) string {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("MHISTACK_REQUIRE_SGDISK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; run as root (CI sets MHISTACK_REQUIRE_SGDISK=1)")
	}
	losetup, err := exec.LookPath("losetup")
	if err != nil {
		losetup = "/usr/sbin/losetup"
		if _, err := os.Stat(losetup); err != nil {
			fail("no losetup (util-linux mount): %v", err)
		}
	}
	if os.Geteuid() != 0 {
		fail("a loop device of %d-byte sectors needs root", ss)
	}
	out, err := exec.Command(losetup, "--find", "--show", "--read-only", "--sector-size", strconv.Itoa(ss), file).CombinedOutput()
	if err != nil {
		fail("losetup --sector-size %d %s: %v: %s", ss, file, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command(losetup, "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	return dev
}
