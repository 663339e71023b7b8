package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// flashSetDir writes the image of mhi/firehose/testdata/rawprogram1.xml
// (xbl_a on LUN 1) and returns the directory and the image.
func flashSetDir(t *testing.T) (string, []byte) {
	dir := t.TempDir()
	img := bytes.Repeat([]byte("xbl!"), 5*4096/4+100) // 5 sectors and a bit: zero-filled to 6
	if err := os.WriteFile(filepath.Join(dir, "xbl.elf"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, img
}

const rawprogram1 = "../../mhi/firehose/testdata/rawprogram1.xml"

// keepStorage makes the emulated modem's storage visible to the test.
func keepStorage(t *testing.T) **sim.Storage {
	var kept *sim.Storage
	orig := simStorage
	simStorage = func(kind string) (*sim.Storage, error) {
		s, err := orig(kind)
		kept = s
		return s, err
	}
	t.Cleanup(func() { simStorage = orig })
	return &kept
}

// TestFlashRefusesWithoutBackupThenWritesWithOne: flash refuses to write
// without -backup or -force (usage error, exit 2), backup reads the
// partition into a directory with a manifest, flash -backup accepts it
// and writes the image byte-exact (zero-filled to its last sector) onto
// the emulated UFS, makes LUN 1 bootable, and prints a summary with a
// rate; a backup that does not cover the set is refused.
func TestFlashRefusesWithoutBackupThenWritesWithOne(t *testing.T) {
	dir, img := flashSetDir(t)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"flash", "-images", dir, rawprogram1}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "without a backup") {
		t.Fatalf("flash without backup: exit %d, %s", code, errb.String())
	}
	bk := filepath.Join(t.TempDir(), "bk")
	errb.Reset()
	if code := run(context.Background(), []string{"backup", "-images", dir, "-o", bk, rawprogram1}, &out, &errb); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, errb.String())
	}
	var m backupManifest
	b, _ := os.ReadFile(filepath.Join(bk, "backup.json"))
	if err := json.Unmarshal(b, &m); err != nil || len(m.Partitions) != 1 || m.Partitions[0].Sectors != 8 || m.Serial == 0 {
		t.Fatalf("manifest %s (%v)", b, err)
	}
	if data, _ := os.ReadFile(filepath.Join(bk, "LUN1_xbl_a.bin")); len(data) != 8*4096 {
		t.Fatalf("backup file of %d bytes, want the 8-sector partition", len(data))
	}
	st := keepStorage(t)
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"flash", "-images", dir, rawprogram1, "-backup", bk, "-verify"}, &out, &errb); code != 0 {
		t.Fatalf("flash: exit %d: %s", code, errb.String())
	}
	got := make([]byte, 6*4096)
	if err := (*st).ReadSectors(1, 6, got); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(img), make([]byte, 6*4096-len(img))...)
	if !bytes.Equal(got, want) || (*st).Bootable() != 1 {
		t.Errorf("LUN 1 after flash differs from the image (bootable %d)", (*st).Bootable())
	}
	if !strings.Contains(out.String(), "1 partitions programmed") || !strings.Contains(out.String(), "MB/s") || !strings.Contains(errb.String(), "xbl_a: ") {
		t.Errorf("summary %q, progress %q", out.String(), errb.String())
	}
	// A backup of another partition does not cover this set.
	m.Partitions[0].StartSector = "7"
	b, _ = json.Marshal(m)
	os.WriteFile(filepath.Join(bk, "backup.json"), b, 0o644)
	errb.Reset()
	if code := run(context.Background(), []string{"flash", "-images", dir, rawprogram1, "-backup", bk}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no backup of xbl_a") {
		t.Errorf("flash with a non-matching backup: exit %d, %s", code, errb.String())
	}
}

// TestFlashDryRunPrintsThePlanWithoutADevice: the plan of qdl-style test
// files, with expressions kept for the target, and no device opened.
func TestFlashDryRunPrintsThePlanWithoutADevice(t *testing.T) {
	dir, _ := flashSetDir(t)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"flash", "-device", "0000:99:00.0", "-dry-run", "-images", dir, rawprogram1, "../../mhi/firehose/testdata/patch0.xml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"program  1", "xbl_a", "xbl.elf", "13 disk patches (1 patches of host files skipped)", "dry run"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFlashOverVFIOUser drives the non-emulated device path (the one a
// modem bound to vfio-pci takes, here a vfio-user server as mhictl sim
// serve -function FIREHOSE=firehose runs it): EDL entry, the programmer
// given with -programmer, the set written byte-exact.
func TestFlashOverVFIOUser(t *testing.T) {
	p, _ := mhi.Lookup("qcom-sdx55m")
	st, err := sim.NewStorage(sim.StorageUFS, 1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sim.New(p, sim.Options{Functions: map[string]sim.Function{"FIREHOSE": &sim.Firehose{Storage: st}}})
	if err != nil {
		t.Fatal(err)
	}
	path, stop := serveModem(t, m)
	defer stop()
	dir, img := flashSetDir(t)
	prog := filepath.Join(dir, "prog_firehose_sdx55.mbn")
	os.WriteFile(prog, []byte("programmer"), 0o644)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"flash", "-device", "vfio-user:" + path, "-programmer", prog, "-force", "-quiet", "-json", "-images", dir, rawprogram1}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := make([]byte, 6*4096)
	if err := st.ReadSectors(1, 6, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append(bytes.Clone(img), make([]byte, 6*4096-len(img))...)) || !strings.Contains(out.String(), `"programmed": 1`) {
		t.Errorf("LUN 1 differs, or output %s", out.String())
	}
}
