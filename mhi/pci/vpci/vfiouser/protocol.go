package vfiouser

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// The wire format: qemu docs/interop/vfio-user.rst ("Header", "Commands"
// and one section per command), and the QEMU 10.2 client's behaviour as
// measured in docs/KERNEL-CROSSCHECK.md §6. Everything is in
// host byte order; mhistack only runs on little-endian hosts (amd64,
// arm64), like every client it talks to.
var le = binary.LittleEndian

// Commands (vfio-user.rst "Commands").
const (
	cmdVersion          = 1
	cmdDMAMap           = 2
	cmdDMAUnmap         = 3
	cmdDeviceGetInfo    = 4
	cmdRegionInfo       = 5
	cmdRegionIOFDs      = 6
	cmdIRQInfo          = 7
	cmdSetIRQs          = 8
	cmdRegionRead       = 9
	cmdRegionWrite      = 10
	cmdDMARead          = 11
	cmdDMAWrite         = 12
	cmdDeviceReset      = 13
	cmdRegionWriteMulti = 15
	cmdDeviceFeature    = 16
)

var cmdNames = map[uint16]string{
	cmdVersion: "VERSION", cmdDMAMap: "DMA_MAP", cmdDMAUnmap: "DMA_UNMAP",
	cmdDeviceGetInfo: "DEVICE_GET_INFO", cmdRegionInfo: "DEVICE_GET_REGION_INFO",
	cmdRegionIOFDs: "DEVICE_GET_REGION_IO_FDS", cmdIRQInfo: "DEVICE_GET_IRQ_INFO",
	cmdSetIRQs: "DEVICE_SET_IRQS", cmdRegionRead: "REGION_READ", cmdRegionWrite: "REGION_WRITE",
	cmdDMARead: "DMA_READ", cmdDMAWrite: "DMA_WRITE", cmdDeviceReset: "DEVICE_RESET",
	cmdRegionWriteMulti: "REGION_WRITE_MULTI", cmdDeviceFeature: "DEVICE_FEATURE",
}

func cmdName(c uint16) string {
	if n, ok := cmdNames[c]; ok {
		return n
	}
	return fmt.Sprintf("command %d", c)
}

// Header (vfio-user.rst "Header"): id u16, command u16, size u32 (the whole
// message, header included), flags u32, error u32.
const (
	headerSize = 16

	flagTypeMask = 0xf
	typeCommand  = 0
	typeReply    = 1
	flagNoReply  = 1 << 4
	flagError    = 1 << 5
)

// Limits the server announces in its VERSION reply and enforces.
const (
	// maxDataXfer bounds the data of one REGION_READ/WRITE (the spec's
	// default max_data_xfer_size).
	maxDataXfer = 1 << 20
	// maxMessage bounds a whole incoming message: the largest legal one
	// is a REGION_WRITE of maxDataXfer bytes. A bigger size field is a
	// framing error: the stream cannot be resynchronised.
	maxMessage = headerSize + regionAccessSize + maxDataXfer
	// maxMsgFDs is how many descriptors one message may carry (QEMU
	// proposes 16 and splits SET_IRQS accordingly).
	maxMsgFDs = 16
	// maxDMAMaps bounds the DMA table. Without a vIOMMU QEMU maps a few
	// dozen RAM sections; behind intel-iommu with caching-mode=on it maps
	// every guest IOMMU page on its own (4 KiB each): 65535 windows are
	// 256 MiB of scattered guest pages (adjacent ones merge), about 3 MiB
	// of table. QEMU's client proposes 65535 and refuses a server
	// announcing more ("max_dma_maps too large": the device fails to
	// realize).
	maxDMAMaps = 65535
	// pageSize is the only DMA page size announced (pgsizes).
	pageSize = 4096
)

// Region and IRQ indexes of a PCI device (linux/vfio.h VFIO_PCI_*_INDEX,
// which vfio-user reuses).
const (
	regionBAR0   = 0
	regionROM    = 6
	regionConfig = 7
	regionVGA    = 8
	numRegions   = 9

	irqINTx = 0
	irqMSI  = 1
	irqMSIX = 2
	irqErr  = 3
	irqReq  = 4
	numIRQs = 5
)

// Flags of the info replies (linux/vfio.h).
const (
	deviceFlagReset = 1 << 0
	deviceFlagPCI   = 1 << 1

	regionFlagRead  = 1 << 0
	regionFlagWrite = 1 << 1

	irqInfoEventfd  = 1 << 0
	irqInfoNoResize = 1 << 3

	irqSetDataNone      = 1 << 0
	irqSetDataBool      = 1 << 1
	irqSetDataEventfd   = 1 << 2
	irqSetActionMask    = 1 << 3
	irqSetActionUnmask  = 1 << 4
	irqSetActionTrig    = 1 << 5
	irqSetDataMask      = irqSetDataNone | irqSetDataBool | irqSetDataEventfd
	irqSetActionMaskAll = irqSetActionMask | irqSetActionUnmask | irqSetActionTrig

	dmaFlagRead  = 1 << 0
	dmaFlagWrite = 1 << 1
)

// header is the 16-byte message header.
type header struct {
	ID    uint16
	Cmd   uint16
	Size  uint32
	Flags uint32
	Error uint32
}

func parseHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("short header: %d bytes", len(b))
	}
	h := header{
		ID:    le.Uint16(b[0:]),
		Cmd:   le.Uint16(b[2:]),
		Size:  le.Uint32(b[4:]),
		Flags: le.Uint32(b[8:]),
		Error: le.Uint32(b[12:]),
	}
	if h.Size < headerSize {
		return h, fmt.Errorf("message size %d is smaller than the header", h.Size)
	}
	if h.Size > maxMessage {
		return h, fmt.Errorf("message size %d exceeds the %d-byte limit", h.Size, maxMessage)
	}
	return h, nil
}

func (h header) put(b []byte) {
	le.PutUint16(b[0:], h.ID)
	le.PutUint16(b[2:], h.Cmd)
	le.PutUint32(b[4:], h.Size)
	le.PutUint32(b[8:], h.Flags)
	le.PutUint32(b[12:], h.Error)
}

// errShort is returned by a payload decoder given fewer bytes than its
// fixed part.
var errShort = errors.New("payload too short")

// version is the VERSION payload: major, minor, then an optional
// NUL-terminated JSON object.
type version struct {
	Major, Minor uint16
	Caps         capabilities
}

// capabilities are the VERSION JSON's "capabilities" members the server
// reads; unknown members are ignored, as the spec allows.
type capabilities struct {
	MaxMsgFDs       *uint64 `json:"max_msg_fds,omitempty"`
	MaxDataXferSize *uint64 `json:"max_data_xfer_size,omitempty"`
	PgSizes         *uint64 `json:"pgsizes,omitempty"`
	MaxDMAMaps      *uint64 `json:"max_dma_maps,omitempty"`
}

func decodeVersion(b []byte) (version, error) {
	if len(b) < 4 {
		return version{}, errShort
	}
	v := version{Major: le.Uint16(b[0:]), Minor: le.Uint16(b[2:])}
	js := b[4:]
	if len(js) == 0 {
		return v, nil
	}
	if js[len(js)-1] != 0 {
		return v, errors.New("version data is not NUL-terminated")
	}
	var doc struct {
		Capabilities *capabilities `json:"capabilities"`
	}
	if err := json.Unmarshal(js[:len(js)-1], &doc); err != nil {
		return v, fmt.Errorf("version data: %w", err)
	}
	if doc.Capabilities != nil {
		v.Caps = *doc.Capabilities
	}
	return v, nil
}

// versionReplies are the server's VERSION JSON, most complete first. The
// QEMU client receives the reply into a buffer the size of its own request
// (docs/KERNEL-CROSSCHECK.md §6), so the server sends the first that fits.
var versionReplies = []string{
	fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d,"max_data_xfer_size":%d,"pgsizes":%d,"max_dma_maps":%d}}`,
		maxMsgFDs, maxDataXfer, pageSize, maxDMAMaps),
	fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d}}`, maxMsgFDs),
	`{}`,
}

// encodeVersion returns the VERSION reply payload that fits in limit
// bytes (of payload), or nil when not even the smallest does.
func encodeVersion(limit int) []byte {
	for _, js := range versionReplies {
		n := 4 + len(js) + 1
		if n > limit {
			continue
		}
		b := make([]byte, n)
		// Major 0, minor 0: the only version the spec defines.
		copy(b[4:], js)
		return b
	}
	return nil
}

// dmaMap is the DMA_MAP payload (32 bytes).
type dmaMap struct {
	ArgSz, Flags uint32
	Offset       uint64 // file offset of the region in the fd
	Addr, Size   uint64 // IOVA range
}

const dmaMapSize = 32

func decodeDMAMap(b []byte) (dmaMap, error) {
	if len(b) < dmaMapSize {
		return dmaMap{}, errShort
	}
	return dmaMap{
		ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]),
		Offset: le.Uint64(b[8:]), Addr: le.Uint64(b[16:]), Size: le.Uint64(b[24:]),
	}, nil
}

// dmaUnmap is the DMA_UNMAP payload (24 bytes); the reply echoes it.
type dmaUnmap struct {
	ArgSz, Flags uint32
	Addr, Size   uint64
}

const (
	dmaUnmapSize  = 24
	dmaUnmapAll   = 1 << 1 // VFIO_DMA_UNMAP_FLAG_ALL
	dmaUnmapDirty = 1 << 0 // VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP: unsupported
	dmaUnmapKnown = dmaUnmapAll | dmaUnmapDirty
)

func decodeDMAUnmap(b []byte) (dmaUnmap, error) {
	if len(b) < dmaUnmapSize {
		return dmaUnmap{}, errShort
	}
	return dmaUnmap{ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Addr: le.Uint64(b[8:]), Size: le.Uint64(b[16:])}, nil
}

func (u dmaUnmap) encode() []byte {
	b := make([]byte, dmaUnmapSize)
	le.PutUint32(b[0:], dmaUnmapSize)
	le.PutUint32(b[4:], u.Flags)
	le.PutUint64(b[8:], u.Addr)
	le.PutUint64(b[16:], u.Size)
	return b
}

// argsz is the leading field of the info requests: the size of the reply
// payload the client can take.
func decodeArgSz(b []byte, min int) (uint32, error) {
	if len(b) < 4 {
		return 0, errShort
	}
	a := le.Uint32(b)
	if a < uint32(min) {
		return a, fmt.Errorf("argsz %d is below the %d-byte reply", a, min)
	}
	return a, nil
}

const deviceInfoSize = 16

func encodeDeviceInfo() []byte {
	b := make([]byte, deviceInfoSize)
	le.PutUint32(b[0:], deviceInfoSize)
	le.PutUint32(b[4:], deviceFlagPCI|deviceFlagReset)
	le.PutUint32(b[8:], numRegions)
	le.PutUint32(b[12:], numIRQs)
	return b
}

// regionInfo is struct vfio_region_info (32 bytes).
type regionInfo struct {
	ArgSz, Flags, Index, CapOffset uint32
	Size, Offset                   uint64
}

const regionInfoSize = 32

func decodeRegionInfo(b []byte) (regionInfo, error) {
	if len(b) < 12 {
		return regionInfo{}, errShort
	}
	return regionInfo{ArgSz: le.Uint32(b[0:]), Index: le.Uint32(b[8:])}, nil
}

func (r regionInfo) encode() []byte {
	b := make([]byte, regionInfoSize)
	le.PutUint32(b[0:], regionInfoSize)
	le.PutUint32(b[4:], r.Flags)
	le.PutUint32(b[8:], r.Index)
	le.PutUint32(b[12:], r.CapOffset)
	le.PutUint64(b[16:], r.Size)
	le.PutUint64(b[24:], r.Offset)
	return b
}

// irqInfo is struct vfio_irq_info (16 bytes).
type irqInfo struct {
	ArgSz, Flags, Index, Count uint32
}

const irqInfoSize = 16

func decodeIRQInfo(b []byte) (irqInfo, error) {
	if len(b) < 12 {
		return irqInfo{}, errShort
	}
	return irqInfo{ArgSz: le.Uint32(b[0:]), Index: le.Uint32(b[8:])}, nil
}

func (i irqInfo) encode() []byte {
	b := make([]byte, irqInfoSize)
	le.PutUint32(b[0:], irqInfoSize)
	le.PutUint32(b[4:], i.Flags)
	le.PutUint32(b[8:], i.Index)
	le.PutUint32(b[12:], i.Count)
	return b
}

// irqSet is struct vfio_irq_set (20 bytes), followed for DATA_BOOL by
// count bytes of booleans; eventfds travel as SCM_RIGHTS.
type irqSet struct {
	ArgSz, Flags, Index, Start, Count uint32
	Bools                             []byte
}

const irqSetSize = 20

func decodeIRQSet(b []byte) (irqSet, error) {
	if len(b) < irqSetSize {
		return irqSet{}, errShort
	}
	s := irqSet{
		ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Index: le.Uint32(b[8:]),
		Start: le.Uint32(b[12:]), Count: le.Uint32(b[16:]),
	}
	data, action := s.Flags&irqSetDataMask, s.Flags&irqSetActionMaskAll
	if s.Flags&^(irqSetDataMask|irqSetActionMaskAll) != 0 || !oneBit(data) || !oneBit(action) {
		return s, fmt.Errorf("SET_IRQS flags %#x: want one DATA and one ACTION flag", s.Flags)
	}
	if s.Start > irqMaxVectors || s.Count > irqMaxVectors-s.Start {
		return s, fmt.Errorf("SET_IRQS vectors [%d,+%d) out of range", s.Start, s.Count)
	}
	if data == irqSetDataBool {
		if uint64(len(b)) < irqSetSize+uint64(s.Count) {
			return s, fmt.Errorf("SET_IRQS DATA_BOOL: %d booleans announced, %d bytes sent", s.Count, len(b)-irqSetSize)
		}
		s.Bools = b[irqSetSize : irqSetSize+s.Count]
	}
	return s, nil
}

// irqMaxVectors bounds any SET_IRQS range (MSI has at most 32 vectors;
// MSI-X, which the server does not offer, 2048).
const irqMaxVectors = 2048

func oneBit(v uint32) bool { return v != 0 && v&(v-1) == 0 }

// regionAccess is the fixed part of REGION_READ/WRITE: offset u64,
// region u32, count u32; REGION_WRITE data and the REGION_READ reply's
// data follow it.
type regionAccess struct {
	Offset uint64
	Region uint32
	Count  uint32
	Data   []byte // REGION_WRITE only
}

const regionAccessSize = 16

func decodeRegionAccess(b []byte, write bool) (regionAccess, error) {
	if len(b) < regionAccessSize {
		return regionAccess{}, errShort
	}
	a := regionAccess{Offset: le.Uint64(b[0:]), Region: le.Uint32(b[8:]), Count: le.Uint32(b[12:])}
	if a.Count > maxDataXfer {
		return a, fmt.Errorf("region access of %d bytes exceeds max_data_xfer_size %d", a.Count, maxDataXfer)
	}
	if write {
		if uint64(len(b)-regionAccessSize) < uint64(a.Count) {
			return a, fmt.Errorf("REGION_WRITE announces %d bytes, carries %d", a.Count, len(b)-regionAccessSize)
		}
		a.Data = b[regionAccessSize : regionAccessSize+int(a.Count)]
	}
	return a, nil
}

// encodeRegionAccess returns the REGION_READ/WRITE reply head (and room
// for n data bytes after it).
func (a regionAccess) encode(n int) []byte {
	b := make([]byte, regionAccessSize+n)
	le.PutUint64(b[0:], a.Offset)
	le.PutUint32(b[8:], a.Region)
	le.PutUint32(b[12:], a.Count)
	return b
}
