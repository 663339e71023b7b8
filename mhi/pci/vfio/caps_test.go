//go:build linux

package vfio

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// le builds a little-endian buffer from (offset, width, value) triples.
func le(size int, fields ...uint64) []byte {
	b := make([]byte, size)
	for i := 0; i+2 < len(fields); i += 3 {
		off, w, v := fields[i], fields[i+1], fields[i+2]
		switch w {
		case 2:
			binary.LittleEndian.PutUint16(b[off:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(b[off:], uint32(v))
		case 8:
			binary.LittleEndian.PutUint64(b[off:], v)
		}
	}
	return b
}

// The chain QEMU intel-iommu reported under Linux 6.1 (seen by
// hack/qemu-vfio-test.sh, docs/VFIO.md §7): MIGRATION at 24, DMA_AVAIL at
// 56, IOVA_RANGE at 68; argsz 116.
func TestParseIOMMUInfoOfQEMUIntelIOMMU(t *testing.T) {
	buf := le(116,
		0, 4, 116, 4, 4, 0x3, 8, 8, 0x40201000, 16, 4, 24,
		24, 2, iommuCapMigr, 26, 2, 1, 28, 4, 56,
		56, 2, iommuCapDMAAvail, 58, 2, 1, 60, 4, 68, 64, 4, 65535,
		68, 2, iommuCapIOVA, 70, 2, 1, 72, 4, 0, 76, 4, 2,
		84, 8, 0, 92, 8, 0xfedfffff, 100, 8, 0xfef00000, 108, 8, 0x7fffffffff,
	)
	got, err := parseIOMMUInfo(buf)
	if err != nil {
		t.Fatal(err)
	}
	want := IOMMUInfo{
		PageSizes: 0x40201000,
		Ranges:    []IOVARange{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}},
		DMAAvail:  65535, HasDMAAvail: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseIOMMUInfo = %+v, want %+v", got, want)
	}
}

// QEMU NVMe BAR0 (seen by hack/qemu-vfio-test.sh): argsz 40, flags 0xf,
// one MSIX_MAPPABLE cap.
func TestParseRegionInfoWithMSIXMappable(t *testing.T) {
	buf := le(40, 0, 4, 40, 4, 4, 0xf, 8, 4, 0, 12, 4, 32, 16, 8, 0x4000, 24, 8, 0,
		32, 2, capMSIXMappable, 34, 2, 1, 36, 4, 0)
	r, err := parseRegionInfo(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !r.MSIXMappable || !r.Mappable() || !r.Readable() || !r.Writable() || r.Size != 0x4000 || r.Sparse != nil {
		t.Fatalf("region = %v", r)
	}
}

func TestParseRegionInfoWithSparseMmapAndType(t *testing.T) {
	buf := le(32+16+32+16,
		0, 4, 96, 4, 4, regionRead|regionMmap|regionCaps, 8, 4, 2, 12, 4, 32, 16, 8, 0x10000, 24, 8, 2<<40,
		32, 2, capSparseMmap, 34, 2, 1, 36, 4, 80, 40, 4, 2,
		48, 8, 0, 56, 8, 0x2000, 64, 8, 0x3000, 72, 8, 0xd000,
		80, 2, capRegionType, 82, 2, 1, 84, 4, 0, 88, 4, 0x80000001, 92, 4, 7,
	)
	r, err := parseRegionInfo(buf)
	if err != nil {
		t.Fatal(err)
	}
	want := Region{Index: 2, Flags: regionRead | regionMmap | regionCaps, Size: 0x10000, Offset: 2 << 40,
		Sparse: []SparseArea{{0, 0x2000}, {0x3000, 0xd000}}, Type: 0x80000001, Subtype: 7, HasType: true}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("region = %+v, want %+v", r, want)
	}
	if r.Writable() {
		t.Error("read-only region reported writable")
	}
}

func TestParseRegionInfoWithoutCapsIgnoresCapOffset(t *testing.T) {
	// edu config space: flags 0x3, no CAPS; a stale cap_offset must not
	// be followed.
	r, err := parseRegionInfo(le(32, 0, 4, 32, 4, 4, 3, 8, 4, 7, 12, 4, 999, 16, 8, 0x100, 24, 8, 0x70000000000))
	if err != nil || r.Index != 7 || r.Size != 0x100 || r.Offset != 0x70000000000 {
		t.Fatalf("region = %+v, %v", r, err)
	}
}

func TestCapabilityChainErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		buf  []byte
		want string
	}{
		{"offset past end", le(32, 0, 4, 32, 4, 4, regionCaps, 12, 4, 64), "outside"},
		{"loop", le(48, 0, 4, 48, 4, 4, regionCaps, 12, 4, 32, 32, 2, 99, 36, 4, 32), "loops"},
		{"sparse count too big", le(48, 0, 4, 48, 4, 4, regionCaps, 12, 4, 32, 32, 2, capSparseMmap, 40, 4, 1000), "claims"},
		{"short", make([]byte, 16), "want ≥ 32"},
	} {
		_, err := parseRegionInfo(c.buf)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func FuzzParseRegionInfo(f *testing.F) {
	f.Add(le(40, 0, 4, 40, 4, 4, 0xf, 12, 4, 32, 32, 2, capMSIXMappable))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseRegionInfo(b)
		_, _ = parseIOMMUInfo(b)
	})
}
