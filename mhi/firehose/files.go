package firehose

import (
	"fmt"
	"strconv"
	"strings"
)

// Bounds of rawprogram*.xml and patch*.xml files.
const (
	MaxFileBytes    = 8 << 20
	MaxFileEntries  = 16384
	maxLUN          = 127
	maxSectorSize   = 64 << 10
	minSectorSize   = 512
	maxPatchBytes   = 8
	maxFilenameLen  = 255
	maxAttrValueLen = 1024
)

// Program is one <program> (or, with Erase, <erase>) of a rawprogram*.xml
// file, in qdl's format (tests/data/rawprogram0.xml): SECTOR_SIZE_IN_BYTES,
// physical_partition_number, start_sector (an expression),
// num_partition_sectors (0: from the file), filename (empty: nothing to
// write), label, file_sector_offset, sparse. The informational attributes
// (size_in_KB, start_byte_hex, partofsingleimage, readbackverify) are
// not kept.
type Program struct {
	Erase            bool
	SectorSize       int
	LUN              int
	StartSector      string
	NumSectors       uint64
	Filename         string
	Label            string
	FileSectorOffset uint64
	Sparse           bool
}

// Patch is one <patch> of a patch*.xml file: write Value (an expression,
// little-endian, SizeInBytes bytes) at ByteOffset of StartSector. Only
// Filename "DISK" patches the device; the others patch host files and are
// skipped by Flash, as qdl does.
type Patch struct {
	SectorSize  int
	LUN         int
	StartSector string
	ByteOffset  uint64
	SizeInBytes int
	Value       string
	Filename    string
	What        string
}

// ParseRawprogram reads a rawprogram*.xml file.
func ParseRawprogram(b []byte) ([]Program, error) {
	es, err := parseElements(b, "data", MaxFileBytes, MaxFileEntries)
	if err != nil {
		return nil, err
	}
	var out []Program
	for i, e := range es {
		if e.Name != "program" && e.Name != "erase" {
			return nil, fmt.Errorf("%w: entry %d is <%s>, want <program> or <erase>", ErrSyntax, i, e.Name)
		}
		p := Program{Erase: e.Name == "erase", Filename: e.Value("filename"), Label: e.Value("label"), StartSector: e.Value("start_sector")}
		var err error
		if p.SectorSize, err = sectorSize(e); err == nil {
			if p.LUN, err = lun(e); err == nil {
				if p.NumSectors, err = optUint(e, "num_partition_sectors"); err == nil {
					p.FileSectorOffset, err = optUint(e, "file_sector_offset")
				}
			}
		}
		if err == nil {
			err = checkStrings(e)
		}
		if err == nil && p.StartSector == "" {
			err = fmt.Errorf("no start_sector")
		}
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d (%s): %v", ErrSyntax, i, p.Label, err)
		}
		p.Sparse = strings.EqualFold(e.Value("sparse"), "true")
		out = append(out, p)
	}
	return out, nil
}

// ParsePatches reads a patch*.xml file.
func ParsePatches(b []byte) ([]Patch, error) {
	es, err := parseElements(b, "patches", MaxFileBytes, MaxFileEntries)
	if err != nil {
		return nil, err
	}
	var out []Patch
	for i, e := range es {
		if e.Name != "patch" {
			return nil, fmt.Errorf("%w: entry %d is <%s>, want <patch>", ErrSyntax, i, e.Name)
		}
		p := Patch{StartSector: e.Value("start_sector"), Value: e.Value("value"), Filename: e.Value("filename"), What: e.Value("what")}
		var n uint64
		var err error
		if p.SectorSize, err = sectorSize(e); err == nil {
			if p.LUN, err = lun(e); err == nil {
				if p.ByteOffset, err = optUint(e, "byte_offset"); err == nil {
					n, err = optUint(e, "size_in_bytes")
				}
			}
		}
		if err == nil && (n == 0 || n > maxPatchBytes) {
			err = fmt.Errorf("size_in_bytes %d outside 1..%d", n, maxPatchBytes)
		}
		if err == nil {
			err = checkStrings(e)
		}
		if err == nil && (p.StartSector == "" || p.Value == "") {
			err = fmt.Errorf("start_sector or value missing")
		}
		if err != nil {
			return nil, fmt.Errorf("%w: patch %d (%s): %v", ErrSyntax, i, p.What, err)
		}
		p.SizeInBytes = int(n)
		out = append(out, p)
	}
	return out, nil
}

// AppendRawprogram writes programs as a rawprogram*.xml file.
func AppendRawprogram(dst []byte, ps []Program) []byte {
	dst = append(dst, "<?xml version=\"1.0\" ?>\n<data>\n"...)
	for _, p := range ps {
		name := "program"
		if p.Erase {
			name = "erase"
		}
		e := Elem(name, "SECTOR_SIZE_IN_BYTES", itoa(p.SectorSize), "physical_partition_number", itoa(p.LUN),
			"start_sector", p.StartSector, "num_partition_sectors", utoa(p.NumSectors), "filename", p.Filename,
			"label", p.Label, "file_sector_offset", utoa(p.FileSectorOffset), "sparse", strconv.FormatBool(p.Sparse))
		dst = appendElement(append(dst, "  "...), e)
		dst = append(dst, '\n')
	}
	return append(dst, "</data>\n"...)
}

// AppendPatches writes patches as a patch*.xml file.
func AppendPatches(dst []byte, ps []Patch) []byte {
	dst = append(dst, "<?xml version=\"1.0\" ?>\n<patches>\n"...)
	for _, p := range ps {
		dst = appendElement(append(dst, "  "...), p.element())
		dst = append(dst, '\n')
	}
	return append(dst, "</patches>\n"...)
}

func (p Patch) element() Element {
	e := Elem("patch", "SECTOR_SIZE_IN_BYTES", itoa(p.SectorSize), "byte_offset", utoa(p.ByteOffset),
		"filename", p.Filename, "physical_partition_number", itoa(p.LUN), "size_in_bytes", itoa(p.SizeInBytes),
		"start_sector", p.StartSector, "value", p.Value)
	if p.What != "" {
		e.Attrs = append(e.Attrs, Attr{"what", p.What})
	}
	return e
}

func sectorSize(e Element) (int, error) {
	v, err := optUint(e, "SECTOR_SIZE_IN_BYTES")
	if err != nil {
		return 0, err
	}
	if v < minSectorSize || v > maxSectorSize || v&(v-1) != 0 {
		return 0, fmt.Errorf("SECTOR_SIZE_IN_BYTES %d is not a power of two in %d..%d", v, minSectorSize, maxSectorSize)
	}
	return int(v), nil
}

func lun(e Element) (int, error) {
	v, err := optUint(e, "physical_partition_number")
	if err != nil {
		return 0, err
	}
	if v > maxLUN {
		return 0, fmt.Errorf("physical_partition_number %d above %d", v, maxLUN)
	}
	return int(v), nil
}

// optUint reads a decimal attribute (trailing dot allowed); absent or
// empty is 0.
func optUint(e Element, name string) (uint64, error) {
	s := strings.TrimSuffix(strings.TrimSpace(e.Value(name)), ".")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not a decimal number", name, e.Value(name))
	}
	return v, nil
}

func checkStrings(e Element) error {
	for _, a := range e.Attrs {
		if len(a.Value) > maxAttrValueLen {
			return fmt.Errorf("attribute %s is %d bytes long", a.Name, len(a.Value))
		}
	}
	if f := e.Value("filename"); len(f) > maxFilenameLen {
		return fmt.Errorf("filename of %d bytes", len(f))
	}
	return nil
}

func appendElement(dst []byte, e Element) []byte {
	doc := AppendDocument(nil, e)
	return append(dst, doc[len(xmlHeader)+len("<data>"):len(doc)-len("</data>")]...)
}

func itoa(v int) string    { return strconv.Itoa(v) }
func utoa(v uint64) string { return strconv.FormatUint(v, 10) }
