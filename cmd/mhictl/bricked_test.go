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

// rawprogramAMSS writes the modem partition (LUN 0, sim.AMSSSector) from
// amss.mbn.
const rawprogramAMSS = `<?xml version="1.0" ?>
<data>
  <program start_sector="256" size_in_KB="64.0" physical_partition_number="0" partofsingleimage="false" file_sector_offset="0" num_partition_sectors="16" readbackverify="false" filename="amss.mbn" sparse="false" start_byte_hex="0x100000" SECTOR_SIZE_IN_BYTES="4096" label="modem"/>
</data>
`

// bootModem powers a modem of profile p, under its idx-th PCI ID, on over
// st (a boot: it reads the AMSS image there) and serves it over
// vfio-user; the returned func powers it off.
func bootModem(t *testing.T, p *mhi.Profile, idx int, st *sim.Storage) (path string, m *sim.Modem, off func()) {
	t.Helper()
	m, err := sim.New(p, sim.Options{IDIndex: idx, Functions: map[string]sim.Function{"FIREHOSE": &sim.Firehose{Storage: st}}})
	if err != nil {
		t.Fatal(err)
	}
	path, off = serveModem(t, m)
	return path, m, off
}

// flashAMSS runs mhictl flash of img into the modem partition.
func flashAMSS(t *testing.T, path string, img []byte) {
	t.Helper()
	dir := t.TempDir()
	for name, b := range map[string][]byte{"amss.mbn": img, "prog_firehose_sdx55.mbn": []byte("programmer"), "rawprogram0.xml": []byte(rawprogramAMSS)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	args := []string{"flash", "-device", "vfio-user:" + path, "-programmer", filepath.Join(dir, "prog_firehose_sdx55.mbn"),
		"-force", "-quiet", "-images", dir, filepath.Join(dir, "rawprogram0.xml")}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("mhictl flash: exit %d: %s", code, errb.String())
	}
}

// TestBrickedModemIsRecognisedAndReflashedThroughEDL plays the whole
// cycle on a Foxconn T99W175: a wrong image written to the modem
// partition makes the next boot enumerate as Qualcomm's 17cb:0306 and
// crash-loop; mhictl info -watch stops at the crash loop (ErrCrashLoop)
// and names mhictl flash; mhictl flash of the right image through EDL
// and Firehose makes the next boot reach mission mode as 105b:e0c3 and
// stay there.
func TestBrickedModemIsRecognisedAndReflashedThroughEDL(t *testing.T) {
	p, _ := mhi.Lookup("foxconn-t99w175")
	const e0c3 = 2 // p.IDs[2]: the X13s module of the report
	wrong, _ := mhi.Lookup("foxconn-t99w368")
	st, err := sim.NewStorage(sim.StorageUFS, 1024, 1024)
	if err != nil {
		t.Fatal(err)
	}

	// Boot 1: a healthy modem; the wrong image goes onto its flash.
	path, m, off := bootModem(t, p, e0c3, st)
	if m.AMSS() != "none" || m.Identity().Vendor != 0x105b {
		t.Fatalf("fresh flash: AMSS %s, ID %04x:%04x", m.AMSS(), m.Identity().Vendor, m.Identity().Device)
	}
	flashAMSS(t, path, sim.AMSSImage(wrong))
	off()

	// Boot 2: the bad image crash-loops under another PCI ID.
	path, m, off = bootModem(t, p, e0c3, st)
	if id := m.Identity(); m.AMSS() != "bad" || id.Vendor != 0x17cb || id.Device != 0x0306 {
		t.Fatalf("after the wrong image: AMSS %s, ID %04x:%04x, want bad, 17cb:0306", m.AMSS(), id.Vendor, id.Device)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"info", "-device", "vfio-user:" + path, "-watch", "50s", "-timeout", "1m"}, &out, &errb)
	msg := errb.String()
	if code != 1 {
		t.Fatalf("info -watch of a crash-looping modem: exit %d, want 1: %s%s", code, out.String(), msg)
	}
	for _, want := range []string{"17cb:0306", "recovery stopped", "crash loop", "mhictl flash -programmer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	flashAMSS(t, path, sim.AMSSImage(p))
	off()

	// Boot 3: the right image; the modem is back under its own ID.
	path, m, off = bootModem(t, p, e0c3, st)
	defer off()
	if m.AMSS() != "good" {
		t.Fatalf("after the right image: AMSS %s", m.AMSS())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"info", "-device", "vfio-user:" + path, "-watch", "300ms", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("info after the reflash: exit %d: %s", code, errb.String())
	}
	var got infoOut
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Profile != p.Name || !got.MissionMode || got.Crashes != 0 || !strings.Contains(got.PCI, "105b:e0c3") {
		t.Errorf("after the reflash: profile %s, mission mode %v, %d crashes, PCI %s; want %s in mission mode, no crash, 105b:e0c3",
			got.Profile, got.MissionMode, got.Crashes, got.PCI, p.Name)
	}
}

// patchAMSS sets 4 bytes at byte 8 of the modem partition's last sector
// to 0x12345678 (little-endian), as a patch*.xml does to a GPT.
const patchAMSS = `<?xml version="1.0" ?>
<patches>
  <patch start_sector="271" byte_offset="8" physical_partition_number="0" size_in_bytes="4" value="305419896." filename="DISK" SECTOR_SIZE_IN_BYTES="4096" what="A stamp in the modem partition."/>
</patches>
`

// TestBackupFlashReadBackOnOneServedModem runs what hack/vfio-mhi-e2e.sh's
// flash run does in its guest, in-process: backup, flash with that
// backup, and a second backup as the read-back, one after the other on
// one modem behind a vfio-user server (each enters EDL again: the server
// resets the function when a client leaves, as vfio-pci does at release,
// and that restarts the modem); the read-back is the image with the patch
// applied, byte for byte.
func TestBackupFlashReadBackOnOneServedModem(t *testing.T) {
	p, _ := mhi.Lookup("foxconn-t99w175")
	st, err := sim.NewStorage(sim.StorageUFS, 1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	path, m, off := bootModem(t, p, 0, st)
	defer off()
	dir := t.TempDir()
	img := bytes.Repeat([]byte("AMSS"), sim.AMSSSectors*4096/4)
	for name, b := range map[string][]byte{"amss.mbn": img, "prog.mbn": []byte("programmer"), "rawprogram0.xml": []byte(rawprogramAMSS), "patch0.xml": []byte(patchAMSS)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"-device", "vfio-user:" + path, "-programmer", filepath.Join(dir, "prog.mbn"), "-quiet"}
	xml := filepath.Join(dir, "rawprogram0.xml")
	for _, args := range [][]string{
		append(append([]string{"backup"}, common...), "-o", filepath.Join(dir, "bk"), xml),
		append(append([]string{"flash"}, common...), "-backup", filepath.Join(dir, "bk"), "-verify", xml, filepath.Join(dir, "patch0.xml")),
		append(append([]string{"backup"}, common...), "-o", filepath.Join(dir, "rb"), xml),
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("mhictl %s: exit %d: %s", args[0], code, errb.String())
		}
	}
	if n := m.EDLEntries(); n != 3 {
		t.Errorf("%d EDL entries, want 3", n)
	}
	want := bytes.Clone(img)
	copy(want[15*4096+8:], []byte{0x78, 0x56, 0x34, 0x12})
	got, err := os.ReadFile(filepath.Join(dir, "rb", "LUN0_modem.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("read-back: %d bytes (err %v), want the %d-byte image with the patch", len(got), err, len(img))
	}
}
