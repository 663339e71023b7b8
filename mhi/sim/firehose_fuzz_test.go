package sim

import (
	"testing"

	"github.com/mhistack/mhistack/mhi/firehose"
)

// FuzzFirehoseTargetAgainstHostileHost: the emulated programmer takes any
// host transfers (commands, raw data, garbage) without panicking, and
// never writes outside its storage.
func FuzzFirehoseTargetAgainstHostileHost(f *testing.F) {
	doc := func(e firehose.Element) []byte { return firehose.AppendDocument(nil, e) }
	cfg := doc(firehose.Elem("configure", "MemoryName", "ufs", "MaxPayloadSizeToTargetInBytes", "8192"))
	prog := doc(firehose.Elem("program", "SECTOR_SIZE_IN_BYTES", "4096", "num_partition_sectors", "1", "physical_partition_number", "0", "start_sector", "NUM_DISK_SECTORS-1."))
	patch := doc(firehose.Elem("patch", "SECTOR_SIZE_IN_BYTES", "4096", "byte_offset", "4090", "filename", "DISK", "physical_partition_number", "0", "size_in_bytes", "8", "start_sector", "NUM_DISK_SECTORS-1.", "value", "CRC32(0,92)"))
	f.Add(cfg, prog, make([]byte, 4096), patch)
	f.Add(prog, []byte("<data>"), []byte("</data>"), doc(firehose.Elem("erase", "SECTOR_SIZE_IN_BYTES", "4096", "physical_partition_number", "0")))
	f.Fuzz(func(t *testing.T, a, b, c, d []byte) {
		st, err := NewStorage(StorageUFS, 64)
		if err != nil {
			t.Fatal(err)
		}
		fh := &Firehose{Storage: st}
		fh.stallAt, fh.lossAt = -1, -1
		s := &fhSession{f: fh, payload: fh.maxPayload()}
		for _, m := range [][]byte{a, b, c, d} {
			s.input(m)
		}
		if w := st.SectorWrites(); w > 64+2 {
			t.Fatalf("%d sector writes from four transfers", w)
		}
	})
}
