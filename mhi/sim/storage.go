package sim

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
)

// Storage is the emulated flash behind the emulated flash programmer
// (Firehose): LUNs of fixed-size sectors, kept sparse (a sector never
// written reads as the erased value: zeros on UFS and eMMC, 0xFF on
// NAND). It outlives the programmer: a power loss mid-program leaves the
// sectors written so far and nothing else, and a new session sees them.
// Safe for concurrent use.
type Storage struct {
	kind          string
	sectorSize    int
	pagesPerBlock int

	mu       sync.Mutex
	luns     []lun
	bootable int
	writes   uint64
}

type lun struct {
	sectors uint64
	data    map[uint64][]byte // written sectors
}

// Storage kinds, as configure's MemoryName names them.
const (
	StorageUFS  = "ufs"
	StorageEMMC = "emmc"
	StorageNAND = "nand"
)

// NAND geometry of the emulation: 4 KiB pages, 64 pages per erase block.
const nandPagesPerBlock = 64

// ErrNotErased: a NAND page programmed twice without an erase between.
var ErrNotErased = errors.New("sim: NAND page not erased")

// NewStorage returns storage of kind (StorageUFS: 4096-byte sectors;
// StorageEMMC: 512; StorageNAND: 4096-byte pages) with one LUN per entry
// of lunSectors, each that many sectors. UFS and eMMC start zeroed, NAND
// erased.
func NewStorage(kind string, lunSectors ...uint64) (*Storage, error) {
	s := &Storage{kind: strings.ToLower(kind), bootable: -1}
	switch s.kind {
	case StorageUFS:
		s.sectorSize = 4096
	case StorageEMMC:
		s.sectorSize = 512
	case StorageNAND:
		s.sectorSize, s.pagesPerBlock = 4096, nandPagesPerBlock
	default:
		return nil, fmt.Errorf("sim: storage kind %q (want ufs, emmc or nand)", kind)
	}
	if len(lunSectors) == 0 || len(lunSectors) > 8 {
		return nil, fmt.Errorf("sim: %d LUNs (want 1..8)", len(lunSectors))
	}
	for _, n := range lunSectors {
		if n == 0 || n > 1<<40 || (s.pagesPerBlock > 0 && n%uint64(s.pagesPerBlock) != 0) {
			return nil, fmt.Errorf("sim: LUN of %d sectors", n)
		}
		s.luns = append(s.luns, lun{sectors: n, data: map[uint64][]byte{}})
	}
	return s, nil
}

// Kind returns the storage's MemoryName.
func (s *Storage) Kind() string { return s.kind }

// SectorSize returns the bytes per sector (NAND: per page).
func (s *Storage) SectorSize() int { return s.sectorSize }

// LUNs returns the number of LUNs.
func (s *Storage) LUNs() int { return len(s.luns) }

// Sectors returns the size of lun in sectors (0 for no such LUN).
func (s *Storage) Sectors(lun int) uint64 {
	if lun < 0 || lun >= len(s.luns) {
		return 0
	}
	return s.luns[lun].sectors
}

// Bootable returns the LUN setbootablestoragedrive chose (-1: none).
func (s *Storage) Bootable() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bootable
}

func (s *Storage) setBootable(l int) {
	s.mu.Lock()
	s.bootable = l
	s.mu.Unlock()
}

// SectorWrites returns how many sectors were written so far.
func (s *Storage) SectorWrites() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func (s *Storage) erasedByte() byte {
	if s.kind == StorageNAND {
		return 0xFF
	}
	return 0
}

func (s *Storage) check(l int, sector, n uint64) error {
	if l < 0 || l >= len(s.luns) {
		return fmt.Errorf("no LUN %d (storage has %d)", l, len(s.luns))
	}
	if sector > s.luns[l].sectors || n > s.luns[l].sectors-sector {
		return fmt.Errorf("sectors %d+%d outside LUN %d's %d", sector, n, l, s.luns[l].sectors)
	}
	return nil
}

// ReadSectors copies sectors [sector, sector+len(p)/SectorSize) of lun
// into p (a whole number of sectors).
func (s *Storage) ReadSectors(l int, sector uint64, p []byte) error {
	ss := s.sectorSize
	if len(p)%ss != 0 {
		return fmt.Errorf("sim: read of %d bytes is not whole %d-byte sectors", len(p), ss)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(l, sector, uint64(len(p)/ss)); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	for i := 0; i < len(p)/ss; i++ {
		dst := p[i*ss : (i+1)*ss]
		if b, ok := s.luns[l].data[sector+uint64(i)]; ok {
			copy(dst, b)
		} else {
			fill(dst, s.erasedByte())
		}
	}
	return nil
}

// WriteSectors writes whole sectors to lun at sector. On NAND each page
// must be erased since it was last programmed (ErrNotErased).
func (s *Storage) WriteSectors(l int, sector uint64, p []byte) error {
	ss := s.sectorSize
	if len(p)%ss != 0 {
		return fmt.Errorf("sim: write of %d bytes is not whole %d-byte sectors", len(p), ss)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := uint64(len(p) / ss)
	if err := s.check(l, sector, n); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if s.kind == StorageNAND {
		for i := uint64(0); i < n; i++ {
			if _, ok := s.luns[l].data[sector+i]; ok {
				return fmt.Errorf("%w: page %d of LUN %d", ErrNotErased, sector+i, l)
			}
		}
	}
	for i := uint64(0); i < n; i++ {
		s.luns[l].data[sector+i] = append([]byte(nil), p[i*uint64(ss):(i+1)*uint64(ss)]...)
	}
	s.writes += n
	return nil
}

// patchBytes rewrites len(v) bytes at byte offset off of lun
// (read-modify-write of the sectors it touches, NAND included: the
// emulated programmer does what a patch needs).
func (s *Storage) patchBytes(l int, off uint64, v []byte) error {
	ss := uint64(s.sectorSize)
	first, last := off/ss, (off+uint64(len(v))-1)/ss
	buf := make([]byte, (last-first+1)*ss)
	if err := s.ReadSectors(l, first, buf); err != nil {
		return err
	}
	copy(buf[off-first*ss:], v)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		s.luns[l].data[i] = buf[(i-first)*ss : (i-first+1)*ss]
	}
	s.writes += last - first + 1
	return nil
}

// erase returns sectors to the erased state; on NAND whole blocks only.
func (s *Storage) erase(l int, sector, n uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(l, sector, n); err != nil {
		return err
	}
	if ppb := uint64(s.pagesPerBlock); ppb > 0 && (sector%ppb != 0 || n%ppb != 0) {
		return fmt.Errorf("NAND erase of pages %d+%d is not whole %d-page blocks", sector, n, ppb)
	}
	d := s.luns[l].data
	if n >= uint64(len(d)) {
		for k := range d {
			if k >= sector && k < sector+n {
				delete(d, k)
			}
		}
		return nil
	}
	for i := uint64(0); i < n; i++ {
		delete(d, sector+i)
	}
	return nil
}

// maxCRCBytes bounds CRC32(…) in a patch: GPT arrays are 16 KiB.
const maxCRCBytes = 16 << 20

// crc32 is CRC32(start_sector, length) of the patch expressions: IEEE
// CRC-32 (as UEFI's GPT) of length bytes from the start of the sector.
func (s *Storage) crc32(l int, sector, length uint64) (uint32, error) {
	if length == 0 || length > maxCRCBytes {
		return 0, fmt.Errorf("CRC32 over %d bytes (at most %d)", length, maxCRCBytes)
	}
	ss := uint64(s.sectorSize)
	buf := make([]byte, (length+ss-1)/ss*ss)
	if err := s.ReadSectors(l, sector, buf); err != nil {
		return 0, err
	}
	return crc32.ChecksumIEEE(buf[:length]), nil
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}
