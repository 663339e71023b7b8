package firehose_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/firehose"
	"github.com/mhistack/mhistack/mhi/sim"
)

// loadSet parses the rawprogram and patch files (told apart by a name
// starting with "patch") and plans the programs against the images in dir.
func loadSet(t *testing.T, dir string, files ...string) ([]firehose.Step, []firehose.Patch) {
	t.Helper()
	var progs []firehose.Program
	var patches []firehose.Patch
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(filepath.Base(f), "patch") {
			p, err := firehose.ParsePatches(b)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			patches = append(patches, p...)
			continue
		}
		p, err := firehose.ParseRawprogram(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		progs = append(progs, p...)
	}
	steps, err := firehose.Plan(progs, dir)
	if err != nil {
		t.Fatal(err)
	}
	return steps, patches
}

// TestFlashWritesRawprogramAndPatchSetOntoEmulatedUFS flashes the test set
// (testdata/, modelled on qdl's tests/data) through the emulated modem's
// EDL programmer onto two 4 KiB-sector UFS LUNs: every partition is
// byte-exact (the last sector of rootfs zero-filled, the untouched misc
// entry left alone), the patched GPT passes an independent UEFI check, the
// LUN of xbl_a is made bootable, and the payload was negotiated down to
// what the target supports.
func TestFlashWritesRawprogramAndPatchSetOntoEmulatedUFS(t *testing.T) {
	const n = 8192
	st := mustStorage(t, sim.StorageUFS, n, 1024)
	fh := &sim.Firehose{Storage: st, MaxPayload: 256 << 10}
	f := newFPRig(t, fh)
	c := f.client(10 * time.Second)
	ctx := context.Background()
	cfg, err := c.Configure(ctx, firehose.MemoryUFS)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxPayload != 256<<10 || c.Payload() != 256<<10 {
		t.Errorf("payload %d / %d, want the target's 256 KiB", cfg.MaxPayload, c.Payload())
	}
	dir := t.TempDir()
	imgs := writeImages(t, dir)
	steps, patches := loadSet(t, dir, "testdata/rawprogram0.xml", "testdata/rawprogram1.xml", "testdata/patch0.xml")
	var progress int
	sum, err := firehose.Flash(ctx, c, steps, patches, firehose.FlashOptions{Verify: true, OnProgress: func(string, int64, int64) { progress++ }})
	if err != nil {
		t.Fatalf("Flash: %v (target errors %v)", err, fh.Errors())
	}
	if sum.Programmed != 5 || sum.Patched != 13 || sum.PatchesSkipped != 1 || sum.Bootable != 1 || progress == 0 {
		t.Errorf("summary %+v, %d progress calls", sum, progress)
	}
	read := func(lun int, lba uint64, count int) []byte {
		b := make([]byte, count*sector)
		if err := st.ReadSectors(lun, lba, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	checkGPT(t, testParts, n, func(lba uint64, count int) []byte { return read(0, lba, count) })
	if !bytes.Equal(read(0, 6, 16), imgs["efi.bin"]) {
		t.Error("efi differs")
	}
	root := read(0, 22, 38)
	if !bytes.Equal(root[:len(imgs["rootfs.img"])], imgs["rootfs.img"]) || !bytes.Equal(root[len(imgs["rootfs.img"]):], make([]byte, 38*sector-len(imgs["rootfs.img"]))) {
		t.Error("rootfs differs or its last sector is not zero-filled")
	}
	if !bytes.Equal(read(0, 0, 1), imgs["gpt_main0.bin"][:sector]) {
		t.Error("protective MBR differs")
	}
	if !bytes.Equal(read(1, 6, 5), imgs["xbl.elf"]) || st.Bootable() != 1 {
		t.Errorf("xbl_a differs or bootable LUN %d", st.Bootable())
	}
	if !bytes.Equal(read(0, 100, 16), make([]byte, 16*sector)) {
		t.Error("misc (no filename) was written")
	}
	if errs := fh.Errors(); len(errs) != 0 {
		t.Errorf("target saw host errors: %v", errs)
	}
}

// TestPlanRefusesBeforeWriting: an image larger than its partition, a
// sparse image and a filename leaving the directory are refused by Plan.
func TestPlanRefusesBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "big.bin"), make([]byte, 3*sector), 0o600)
	for name, p := range map[string]firehose.Program{
		"too big": {SectorSize: sector, StartSector: "0", NumSectors: 2, Filename: "big.bin", Label: "x"},
		"sparse":  {SectorSize: sector, StartSector: "0", Filename: "big.bin", Sparse: true},
		"escape":  {SectorSize: sector, StartSector: "0", Filename: "../big.bin"},
		"missing": {SectorSize: sector, StartSector: "0", Filename: "nope.bin"},
	} {
		if _, err := firehose.Plan([]firehose.Program{p}, dir); !errors.Is(err, firehose.ErrPlan) {
			t.Errorf("%s: %v, want ErrPlan", name, err)
		}
	}
}

// TestNAKCarriesTheTargetsReason: a NAK is ErrNAK with the target's log
// line, which OnLog also saw.
func TestNAKCarriesTheTargetsReason(t *testing.T) {
	fh := &sim.Firehose{}
	f := newFPRig(t, fh)
	c := f.client(5 * time.Second)
	ctx := context.Background()
	if _, err := c.Configure(ctx, firehose.MemoryUFS); err != nil {
		t.Fatal(err)
	}
	fh.NAKNext("program", "ERROR: write protected")
	err := c.Program(ctx, firehose.Sectors{SectorSize: sector, LUN: 0, StartSector: "10", NumSectors: 1}, "x", bytes.NewReader(make([]byte, sector)), nil)
	var nak *firehose.NAKError
	if !errors.Is(err, firehose.ErrNAK) || !errors.As(err, &nak) || !strings.Contains(err.Error(), "write protected") {
		t.Fatalf("Program = %v, want a NAK with the reason", err)
	}
	if len(f.logs) == 0 || f.logs[len(f.logs)-1] != "ERROR: write protected" {
		t.Errorf("logs %q", f.logs)
	}
	// A LUN the device lacks and a wrong memory name are NAKed by the
	// target's own checks.
	if err := c.Erase(ctx, firehose.Sectors{SectorSize: sector, LUN: 7}); !errors.Is(err, firehose.ErrNAK) {
		t.Errorf("erase of LUN 7 = %v", err)
	}
	if _, err := c.Configure(ctx, firehose.MemoryNAND); !errors.Is(err, firehose.ErrNAK) {
		t.Errorf("configure nand on UFS = %v", err)
	}
	// The session goes on.
	if err := c.Nop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStalledWriteEndsAtTheBound: a programmer that stops answering in
// the raw phase makes Program fail with the deadline, not hang.
func TestStalledWriteEndsAtTheBound(t *testing.T) {
	fh := &sim.Firehose{}
	f := newFPRig(t, fh)
	c := f.client(300 * time.Millisecond)
	ctx := context.Background()
	if _, err := c.Configure(ctx, firehose.MemoryUFS); err != nil {
		t.Fatal(err)
	}
	fh.StallAfter(3 * sector)
	err := c.Program(ctx, firehose.Sectors{SectorSize: sector, StartSector: "0", NumSectors: 8}, "x", bytes.NewReader(pattern(8*sector, 5)), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Program into a stalled target = %v, want DeadlineExceeded", err)
	}
}

// TestPowerLossMidProgramLeavesWrittenSectorsAndVerifyFindsTheEnd: power
// fails 10½ sectors into a 40-sector program. Program fails at its bound;
// after the programmer comes back (the pair restarts), the ten whole
// sectors are on the disk, the half sector and the rest are not, and
// Verify names sector 10 as the first that differs.
func TestPowerLossMidProgramLeavesWrittenSectorsAndVerifyFindsTheEnd(t *testing.T) {
	st := mustStorage(t, sim.StorageUFS, 1024)
	fh := &sim.Firehose{Storage: st}
	f := newFPRig(t, fh)
	c := f.client(300 * time.Millisecond)
	ctx := context.Background()
	if _, err := c.Configure(ctx, firehose.MemoryUFS); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	img := pattern(40*sector, 6)
	os.WriteFile(filepath.Join(dir, "p.bin"), img, 0o600)
	steps, err := firehose.Plan([]firehose.Program{{SectorSize: sector, StartSector: "100", Filename: "p.bin", Label: "p"}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	fh.PowerLossAfter(10*sector + sector/2)
	if _, err := firehose.Flash(ctx, c, steps, nil, firehose.FlashOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flash through a power loss = %v, want DeadlineExceeded", err)
	}
	f.conn.Close()
	f.open(t)
	c = f.client(5 * time.Second)
	if _, err := c.Configure(ctx, firehose.MemoryUFS); err != nil {
		t.Fatal(err)
	}
	err = firehose.Verify(ctx, c, steps[0])
	if !errors.Is(err, firehose.ErrVerify) || !strings.Contains(err.Error(), "sector 10 of 40") {
		t.Fatalf("Verify = %v, want the difference at sector 10", err)
	}
	got := make([]byte, 11*sector)
	st.ReadSectors(0, 100, got)
	if !bytes.Equal(got[:10*sector], img[:10*sector]) || !bytes.Equal(got[10*sector:], make([]byte, sector)) {
		t.Error("storage after the power loss is not the ten whole sectors and nothing more")
	}
}

// TestNANDNeedsEraseBeforeProgramAndReportsGeometry: NAND pages program
// once per erase; getstorageinfo reports pages and blocks.
func TestNANDNeedsEraseBeforeProgramAndReportsGeometry(t *testing.T) {
	st := mustStorage(t, sim.StorageNAND, 4096)
	f := newFPRig(t, &sim.Firehose{Storage: st})
	c := f.client(5 * time.Second)
	ctx := context.Background()
	if _, err := c.Configure(ctx, firehose.MemoryNAND); err != nil {
		t.Fatal(err)
	}
	si, err := c.GetStorageInfo(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if si.PageSize != 4096 || si.BlockSize != 64*4096 || si.TotalBlocks != 64 || si.MemType != "NAND" {
		t.Errorf("storage info %+v", si)
	}
	sec := firehose.Sectors{SectorSize: 4096, StartSector: "64", NumSectors: 2}
	data := pattern(2*4096, 7)
	if err := c.Program(ctx, sec, "a", bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Program(ctx, sec, "a", bytes.NewReader(data), nil); !errors.Is(err, firehose.ErrNAK) || !strings.Contains(err.Error(), "not erased") {
		t.Fatalf("programming a page twice = %v, want NAK not erased", err)
	}
	if err := c.Erase(ctx, firehose.Sectors{SectorSize: 4096, StartSector: "64", NumSectors: 64}); err != nil {
		t.Fatal(err)
	}
	if err := c.Program(ctx, sec, "a", bytes.NewReader(data), nil); err != nil {
		t.Fatalf("after erase: %v", err)
	}
	var back bytes.Buffer
	if err := c.Read(ctx, sec, &back, nil); err != nil || !bytes.Equal(back.Bytes(), data) {
		t.Fatalf("read back: %v, equal %v", err, bytes.Equal(back.Bytes(), data))
	}
}

// TestPowerResetIsAcknowledged: power reset is ACKed and obeyed.
func TestPowerResetIsAcknowledged(t *testing.T) {
	fh := &sim.Firehose{}
	f := newFPRig(t, fh)
	c := f.client(time.Second)
	if err := c.Power(context.Background(), "reset", 0); err != nil {
		t.Fatal(err)
	}
	if fh.Resets() != 1 {
		t.Errorf("resets %d", fh.Resets())
	}
}
