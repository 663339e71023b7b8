//go:build linux

package vfio

import (
	"encoding/binary"
	"fmt"
)

// Capability chains (vfio.h "Capability chains"): an *_INFO ioctl whose
// struct has the CAPS flag appends headers {id u16, version u16, next u32}
// after the fixed struct; cap_offset and every next are offsets from the
// start of the whole buffer, and 0 ends the chain. These parsers take the
// raw buffer so they can be tested with byte dumps from real kernels.

// walkCaps calls fn for each capability, with body starting at the header.
// It rejects offsets outside buf and chains that loop.
func walkCaps(buf []byte, first uint32, fn func(id, version uint16, body []byte) error) error {
	off := first
	for n := 0; off != 0; n++ {
		if n > len(buf)/8 {
			return fmt.Errorf("vfio: capability chain loops")
		}
		if uint64(off)+8 > uint64(len(buf)) || off%4 != 0 {
			return fmt.Errorf("vfio: capability at %d outside the %d-byte info buffer", off, len(buf))
		}
		id := binary.LittleEndian.Uint16(buf[off:])
		ver := binary.LittleEndian.Uint16(buf[off+2:])
		next := binary.LittleEndian.Uint32(buf[off+4:])
		end := uint32(len(buf))
		if next > off && next < end {
			end = next
		}
		if err := fn(id, ver, buf[off:end]); err != nil {
			return err
		}
		off = next
	}
	return nil
}

// SparseArea is a part of a region that may be mmap'ed, relative to the
// region start.
type SparseArea struct{ Offset, Size uint64 }

// Region describes one vfio-pci region (a BAR, the ROM or config space).
type Region struct {
	Index  int
	Flags  uint32 // VFIO_REGION_INFO_FLAG_*
	Size   uint64
	Offset uint64 // file offset of the region in the device fd
	// Sparse lists the mmap-able parts when the kernel restricts mmap to
	// them (VFIO_REGION_INFO_CAP_SPARSE_MMAP); nil means the whole
	// region when Mmap is true.
	Sparse []SparseArea
	// MSIXMappable is set when the region holds the MSI-X table and the
	// kernel still allows mmap of it (VFIO_REGION_INFO_CAP_MSIX_MAPPABLE).
	// Interrupts must be configured through SET_IRQS regardless.
	MSIXMappable bool
	// Type and Subtype identify device-specific regions (index ≥ 9).
	Type, Subtype uint32
	HasType       bool
}

// Readable reports VFIO_REGION_INFO_FLAG_READ.
func (r Region) Readable() bool { return r.Flags&regionRead != 0 }

// Writable reports VFIO_REGION_INFO_FLAG_WRITE.
func (r Region) Writable() bool { return r.Flags&regionWrite != 0 }

// Mappable reports VFIO_REGION_INFO_FLAG_MMAP.
func (r Region) Mappable() bool { return r.Flags&regionMmap != 0 }

func (r Region) String() string {
	s := fmt.Sprintf("region %d flags=%#x size=%#x offset=%#x", r.Index, r.Flags, r.Size, r.Offset)
	if r.Sparse != nil {
		s += fmt.Sprintf(" sparse=%v", r.Sparse)
	}
	if r.MSIXMappable {
		s += " msix-mappable"
	}
	if r.HasType {
		s += fmt.Sprintf(" type=%d/%d", r.Type, r.Subtype)
	}
	return s
}

// parseRegionInfo decodes a vfio_region_info buffer with its capabilities.
func parseRegionInfo(buf []byte) (Region, error) {
	if len(buf) < 32 {
		return Region{}, fmt.Errorf("vfio: region info of %d bytes, want ≥ 32", len(buf))
	}
	le := binary.LittleEndian
	r := Region{
		Flags:  le.Uint32(buf[4:]),
		Index:  int(le.Uint32(buf[8:])),
		Size:   le.Uint64(buf[16:]),
		Offset: le.Uint64(buf[24:]),
	}
	if r.Flags&regionCaps == 0 {
		return r, nil
	}
	err := walkCaps(buf, le.Uint32(buf[12:]), func(id, _ uint16, c []byte) error {
		switch id {
		case capSparseMmap:
			if len(c) < 16 {
				return fmt.Errorf("vfio: short sparse mmap capability")
			}
			n := le.Uint32(c[8:])
			if uint64(n) > uint64(len(c)-16)/16 {
				return fmt.Errorf("vfio: sparse mmap capability claims %d areas in %d bytes", n, len(c))
			}
			r.Sparse = make([]SparseArea, 0, n)
			for i := 0; i < int(n); i++ {
				a := c[16+16*i:]
				r.Sparse = append(r.Sparse, SparseArea{le.Uint64(a), le.Uint64(a[8:])})
			}
		case capRegionType:
			if len(c) < 16 {
				return fmt.Errorf("vfio: short region type capability")
			}
			r.Type, r.Subtype, r.HasType = le.Uint32(c[8:]), le.Uint32(c[12:]), true
		case capMSIXMappable:
			r.MSIXMappable = true
		}
		return nil
	})
	return r, err
}

// IOVARange is an inclusive range of I/O virtual addresses the IOMMU can map.
type IOVARange struct{ Start, End uint64 }

// IOMMUInfo is what VFIO_IOMMU_GET_INFO (or the iommufd equivalent) reports.
type IOMMUInfo struct {
	// PageSizes is a bitmap of supported IOMMU page sizes; the lowest set
	// bit is the mapping granule.
	PageSizes uint64
	// Ranges are the usable IOVA ranges; nil means unrestricted.
	Ranges []IOVARange
	// DMAAvail is the number of further mappings allowed, when known.
	DMAAvail    uint32
	HasDMAAvail bool
}

// parseIOMMUInfo decodes a vfio_iommu_type1_info buffer.
func parseIOMMUInfo(buf []byte) (IOMMUInfo, error) {
	if len(buf) < 24 {
		return IOMMUInfo{}, fmt.Errorf("vfio: IOMMU info of %d bytes, want ≥ 24", len(buf))
	}
	le := binary.LittleEndian
	flags := le.Uint32(buf[4:])
	var info IOMMUInfo
	if flags&iommuInfoPgsizes != 0 {
		info.PageSizes = le.Uint64(buf[8:])
	}
	if flags&iommuInfoCaps == 0 {
		return info, nil
	}
	err := walkCaps(buf, le.Uint32(buf[16:]), func(id, _ uint16, c []byte) error {
		switch id {
		case iommuCapIOVA:
			if len(c) < 16 {
				return fmt.Errorf("vfio: short IOVA range capability")
			}
			n := le.Uint32(c[8:])
			if uint64(n) > uint64(len(c)-16)/16 {
				return fmt.Errorf("vfio: IOVA capability claims %d ranges in %d bytes", n, len(c))
			}
			info.Ranges = make([]IOVARange, 0, n)
			for i := 0; i < int(n); i++ {
				a := c[16+16*i:]
				info.Ranges = append(info.Ranges, IOVARange{le.Uint64(a), le.Uint64(a[8:])})
			}
		case iommuCapDMAAvail:
			if len(c) < 12 {
				return fmt.Errorf("vfio: short DMA avail capability")
			}
			info.DMAAvail, info.HasDMAAvail = le.Uint32(c[8:]), true
		}
		return nil
	})
	return info, err
}
