package main

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strconv"

	"github.com/mhistack/mhistack/mhi/firehose"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The flash run's set: two partitions on the emulated UFS (4096-byte
// sectors) of mhictl sim serve -function FIREHOSE=firehose, and one patch.
// Small on purpose: it proves the path (EDL entry, the programmer over
// BHI, Firehose on the FIREHOSE pair through vfio-pci and the IOMMU), not
// the rate, and keeps the run short.
const (
	flashSector  = 4096
	xblSectors   = 8
	patchValue   = 0x12345678
	patchOffset  = 8 // bytes into the modem partition's last sector
	flashSetSeed = 175
)

// flashSet returns the guest's /flash files and the read-backs the guest
// must find, by backup file name (cmd/mhictl backupFile: LUN<n>_<label>.bin):
// each partition whole, the image zero-filled to the partition's end, the
// patch applied.
func flashSet() (files, want map[string][]byte) {
	r := rand.New(rand.NewPCG(flashSetSeed, 0))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	amss := random(sim.AMSSSectors * flashSector)
	xbl := random(5*flashSector + 1234) // not a whole number of sectors
	raw := firehose.AppendRawprogram(nil, []firehose.Program{
		{SectorSize: flashSector, LUN: sim.AMSSLUN, StartSector: strconv.Itoa(sim.AMSSSector), NumSectors: sim.AMSSSectors, Filename: "amss.mbn", Label: "modem"},
		{SectorSize: flashSector, LUN: 1, StartSector: "6", NumSectors: xblSectors, Filename: "xbl.elf", Label: "xbl_a"},
	})
	patch := firehose.AppendPatches(nil, []firehose.Patch{{
		SectorSize: flashSector, LUN: sim.AMSSLUN, StartSector: strconv.Itoa(sim.AMSSSector + sim.AMSSSectors - 1),
		ByteOffset: patchOffset, SizeInBytes: 4, Value: strconv.Itoa(patchValue) + ".", Filename: "DISK",
		What: "A stamp in the modem partition's last sector.",
	}})
	files = map[string][]byte{
		"flash/prog_firehose.mbn": []byte("mhistack emulated flash programmer\n"),
		"flash/amss.mbn":          amss,
		"flash/xbl.elf":           xbl,
		"flash/rawprogram0.xml":   raw,
		"flash/patch0.xml":        patch,
	}
	wantAMSS := bytes.Clone(amss)
	binary.LittleEndian.PutUint32(wantAMSS[(sim.AMSSSectors-1)*flashSector+patchOffset:], patchValue)
	wantXBL := append(bytes.Clone(xbl), make([]byte, xblSectors*flashSector-len(xbl))...)
	want = map[string][]byte{"LUN0_modem.bin": wantAMSS, "LUN1_xbl_a.bin": wantXBL}
	return files, want
}
