// Package vuwire is the vfio-user wire format (qemu
// docs/interop/vfio-user.rst "Header", "Commands" and one section per
// command): the message header and the payload codecs that both sides of
// mhistack use, the server (mhi/pci/vpci/vfiouser) and the client
// (mhi/pci/vfiouserclient). Decoders bound every field they return;
// nothing here panics on peer input.
//
// Everything is in host byte order; mhistack only runs on little-endian
// hosts (amd64, arm64), like every peer it talks to.
package vuwire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

var le = binary.LittleEndian

// Commands (vfio-user.rst "Commands").
const (
	CmdVersion          = 1
	CmdDMAMap           = 2
	CmdDMAUnmap         = 3
	CmdDeviceGetInfo    = 4
	CmdRegionInfo       = 5
	CmdRegionIOFDs      = 6
	CmdIRQInfo          = 7
	CmdSetIRQs          = 8
	CmdRegionRead       = 9
	CmdRegionWrite      = 10
	CmdDMARead          = 11
	CmdDMAWrite         = 12
	CmdDeviceReset      = 13
	CmdRegionWriteMulti = 15
	CmdDeviceFeature    = 16
)

var cmdNames = map[uint16]string{
	CmdVersion: "VERSION", CmdDMAMap: "DMA_MAP", CmdDMAUnmap: "DMA_UNMAP",
	CmdDeviceGetInfo: "DEVICE_GET_INFO", CmdRegionInfo: "DEVICE_GET_REGION_INFO",
	CmdRegionIOFDs: "DEVICE_GET_REGION_IO_FDS", CmdIRQInfo: "DEVICE_GET_IRQ_INFO",
	CmdSetIRQs: "DEVICE_SET_IRQS", CmdRegionRead: "REGION_READ", CmdRegionWrite: "REGION_WRITE",
	CmdDMARead: "DMA_READ", CmdDMAWrite: "DMA_WRITE", CmdDeviceReset: "DEVICE_RESET",
	CmdRegionWriteMulti: "REGION_WRITE_MULTI", CmdDeviceFeature: "DEVICE_FEATURE",
}

// CmdName names a command for logs and errors.
func CmdName(c uint16) string {
	if n, ok := cmdNames[c]; ok {
		return n
	}
	return fmt.Sprintf("command %d", c)
}

// Header (vfio-user.rst "Header"): id u16, command u16, size u32 (the whole
// message, header included), flags u32, error u32.
const (
	HeaderSize = 16

	FlagTypeMask = 0xf
	TypeCommand  = 0
	TypeReply    = 1
	FlagNoReply  = 1 << 4
	FlagError    = 1 << 5
)

// Limits of mhistack's peers.
const (
	// MaxDataXfer bounds the data of one REGION_READ/WRITE (the spec's
	// default max_data_xfer_size).
	MaxDataXfer = 1 << 20
	// MaxMessage bounds a whole message: the largest legal one is a
	// REGION_READ reply or REGION_WRITE of MaxDataXfer bytes. A bigger
	// size field is a framing error: the stream cannot be
	// resynchronised.
	MaxMessage = HeaderSize + RegionAccessSize + MaxDataXfer
	// MaxMsgFDs is how many descriptors one message may carry (QEMU
	// proposes 16 and splits SET_IRQS accordingly).
	MaxMsgFDs = 16
	// PageSize is the only DMA page size mhistack uses (pgsizes).
	PageSize = 4096
)

// Region and IRQ indexes of a PCI device (linux/vfio.h VFIO_PCI_*_INDEX,
// which vfio-user reuses).
const (
	RegionBAR0   = 0
	RegionROM    = 6
	RegionConfig = 7
	RegionVGA    = 8
	NumRegions   = 9

	IRQINTx = 0
	IRQMSI  = 1
	IRQMSIX = 2
	IRQErr  = 3
	IRQReq  = 4
	NumIRQs = 5
)

// Flags of the info replies and requests (linux/vfio.h).
const (
	DeviceFlagReset = 1 << 0
	DeviceFlagPCI   = 1 << 1

	RegionFlagRead  = 1 << 0
	RegionFlagWrite = 1 << 1

	IRQInfoEventfd  = 1 << 0
	IRQInfoNoResize = 1 << 3

	IRQSetDataNone      = 1 << 0
	IRQSetDataBool      = 1 << 1
	IRQSetDataEventfd   = 1 << 2
	IRQSetActionMask    = 1 << 3
	IRQSetActionUnmask  = 1 << 4
	IRQSetActionTrig    = 1 << 5
	IRQSetDataMask      = IRQSetDataNone | IRQSetDataBool | IRQSetDataEventfd
	IRQSetActionMaskAll = IRQSetActionMask | IRQSetActionUnmask | IRQSetActionTrig

	DMAFlagRead  = 1 << 0
	DMAFlagWrite = 1 << 1
)

// Header is the 16-byte message header.
type Header struct {
	ID    uint16
	Cmd   uint16
	Size  uint32
	Flags uint32
	Error uint32
}

// ParseHeader decodes a header and checks its size field against
// HeaderSize and MaxMessage.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("short header: %d bytes", len(b))
	}
	h := Header{
		ID:    le.Uint16(b[0:]),
		Cmd:   le.Uint16(b[2:]),
		Size:  le.Uint32(b[4:]),
		Flags: le.Uint32(b[8:]),
		Error: le.Uint32(b[12:]),
	}
	if h.Size < HeaderSize {
		return h, fmt.Errorf("message size %d is smaller than the header", h.Size)
	}
	if h.Size > MaxMessage {
		return h, fmt.Errorf("message size %d exceeds the %d-byte limit", h.Size, MaxMessage)
	}
	return h, nil
}

// Put encodes h into b[:HeaderSize].
func (h Header) Put(b []byte) {
	le.PutUint16(b[0:], h.ID)
	le.PutUint16(b[2:], h.Cmd)
	le.PutUint32(b[4:], h.Size)
	le.PutUint32(b[8:], h.Flags)
	le.PutUint32(b[12:], h.Error)
}

// ErrShort is returned by a payload decoder given fewer bytes than its
// fixed part.
var ErrShort = errors.New("payload too short")

// Version is the VERSION payload: major, minor, then an optional
// NUL-terminated JSON object.
type Version struct {
	Major, Minor uint16
	Caps         Capabilities
}

// Capabilities are the VERSION JSON's "capabilities" members mhistack
// reads; unknown members are ignored, as the spec allows.
type Capabilities struct {
	MaxMsgFDs       *uint64 `json:"max_msg_fds,omitempty"`
	MaxDataXferSize *uint64 `json:"max_data_xfer_size,omitempty"`
	PgSizes         *uint64 `json:"pgsizes,omitempty"`
	MaxDMAMaps      *uint64 `json:"max_dma_maps,omitempty"`
}

// DecodeVersion decodes a VERSION request or reply.
func DecodeVersion(b []byte) (Version, error) {
	if len(b) < 4 {
		return Version{}, ErrShort
	}
	v := Version{Major: le.Uint16(b[0:]), Minor: le.Uint16(b[2:])}
	js := b[4:]
	if len(js) == 0 {
		return v, nil
	}
	if js[len(js)-1] != 0 {
		return v, errors.New("version data is not NUL-terminated")
	}
	var doc struct {
		Capabilities *Capabilities `json:"capabilities"`
	}
	if err := json.Unmarshal(js[:len(js)-1], &doc); err != nil {
		return v, fmt.Errorf("version data: %w", err)
	}
	if doc.Capabilities != nil {
		v.Caps = *doc.Capabilities
	}
	return v, nil
}

// EncodeVersion returns a VERSION payload: major and minor 0 (the only
// version the spec defines) and the JSON document js, NUL-terminated.
func EncodeVersion(js string) []byte {
	b := make([]byte, 4+len(js)+1)
	copy(b[4:], js)
	return b
}

// DMAMap is the DMA_MAP payload (32 bytes).
type DMAMap struct {
	ArgSz, Flags uint32
	Offset       uint64 // file offset of the region in the fd
	Addr, Size   uint64 // IOVA range
}

const DMAMapSize = 32

func DecodeDMAMap(b []byte) (DMAMap, error) {
	if len(b) < DMAMapSize {
		return DMAMap{}, ErrShort
	}
	return DMAMap{
		ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]),
		Offset: le.Uint64(b[8:]), Addr: le.Uint64(b[16:]), Size: le.Uint64(b[24:]),
	}, nil
}

func (m DMAMap) Encode() []byte {
	b := make([]byte, DMAMapSize)
	le.PutUint32(b[0:], DMAMapSize)
	le.PutUint32(b[4:], m.Flags)
	le.PutUint64(b[8:], m.Offset)
	le.PutUint64(b[16:], m.Addr)
	le.PutUint64(b[24:], m.Size)
	return b
}

// DMAUnmap is the DMA_UNMAP payload (24 bytes); the reply echoes it.
type DMAUnmap struct {
	ArgSz, Flags uint32
	Addr, Size   uint64
}

const (
	DMAUnmapSize  = 24
	DMAUnmapAll   = 1 << 1 // VFIO_DMA_UNMAP_FLAG_ALL
	DMAUnmapDirty = 1 << 0 // VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP
	DMAUnmapKnown = DMAUnmapAll | DMAUnmapDirty
)

func DecodeDMAUnmap(b []byte) (DMAUnmap, error) {
	if len(b) < DMAUnmapSize {
		return DMAUnmap{}, ErrShort
	}
	return DMAUnmap{ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Addr: le.Uint64(b[8:]), Size: le.Uint64(b[16:])}, nil
}

func (u DMAUnmap) Encode() []byte {
	b := make([]byte, DMAUnmapSize)
	le.PutUint32(b[0:], DMAUnmapSize)
	le.PutUint32(b[4:], u.Flags)
	le.PutUint64(b[8:], u.Addr)
	le.PutUint64(b[16:], u.Size)
	return b
}

// DecodeArgSz decodes the leading field of the info requests: the size of
// the reply payload the client can take, at least min.
func DecodeArgSz(b []byte, min int) (uint32, error) {
	if len(b) < 4 {
		return 0, ErrShort
	}
	a := le.Uint32(b)
	if a < uint32(min) {
		return a, fmt.Errorf("argsz %d is below the %d-byte reply", a, min)
	}
	return a, nil
}

// ArgSz is an info request carrying only its argsz: DEVICE_GET_INFO.
func ArgSz(n uint32) []byte {
	b := make([]byte, n)
	le.PutUint32(b, n)
	return b
}

// DeviceInfo is struct vfio_device_info (16 bytes).
type DeviceInfo struct {
	Flags, NumRegions, NumIRQs uint32
}

const DeviceInfoSize = 16

func DecodeDeviceInfo(b []byte) (DeviceInfo, error) {
	if len(b) < DeviceInfoSize {
		return DeviceInfo{}, ErrShort
	}
	return DeviceInfo{Flags: le.Uint32(b[4:]), NumRegions: le.Uint32(b[8:]), NumIRQs: le.Uint32(b[12:])}, nil
}

func (d DeviceInfo) Encode() []byte {
	b := make([]byte, DeviceInfoSize)
	le.PutUint32(b[0:], DeviceInfoSize)
	le.PutUint32(b[4:], d.Flags)
	le.PutUint32(b[8:], d.NumRegions)
	le.PutUint32(b[12:], d.NumIRQs)
	return b
}

// RegionInfo is struct vfio_region_info (32 bytes).
type RegionInfo struct {
	ArgSz, Flags, Index, CapOffset uint32
	Size, Offset                   uint64
}

const RegionInfoSize = 32

// DecodeRegionInfoRequest decodes what a request needs: argsz and index.
func DecodeRegionInfoRequest(b []byte) (RegionInfo, error) {
	if len(b) < 12 {
		return RegionInfo{}, ErrShort
	}
	return RegionInfo{ArgSz: le.Uint32(b[0:]), Index: le.Uint32(b[8:])}, nil
}

// DecodeRegionInfo decodes a whole reply.
func DecodeRegionInfo(b []byte) (RegionInfo, error) {
	if len(b) < RegionInfoSize {
		return RegionInfo{}, ErrShort
	}
	return RegionInfo{ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Index: le.Uint32(b[8:]),
		CapOffset: le.Uint32(b[12:]), Size: le.Uint64(b[16:]), Offset: le.Uint64(b[24:])}, nil
}

// Encode encodes r with argsz RegionInfoSize.
func (r RegionInfo) Encode() []byte {
	b := make([]byte, RegionInfoSize)
	le.PutUint32(b[0:], RegionInfoSize)
	le.PutUint32(b[4:], r.Flags)
	le.PutUint32(b[8:], r.Index)
	le.PutUint32(b[12:], r.CapOffset)
	le.PutUint64(b[16:], r.Size)
	le.PutUint64(b[24:], r.Offset)
	return b
}

// IRQInfo is struct vfio_irq_info (16 bytes).
type IRQInfo struct {
	ArgSz, Flags, Index, Count uint32
}

const IRQInfoSize = 16

// DecodeIRQInfoRequest decodes what a request needs: argsz and index.
func DecodeIRQInfoRequest(b []byte) (IRQInfo, error) {
	if len(b) < 12 {
		return IRQInfo{}, ErrShort
	}
	return IRQInfo{ArgSz: le.Uint32(b[0:]), Index: le.Uint32(b[8:])}, nil
}

// DecodeIRQInfo decodes a whole reply.
func DecodeIRQInfo(b []byte) (IRQInfo, error) {
	if len(b) < IRQInfoSize {
		return IRQInfo{}, ErrShort
	}
	return IRQInfo{ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Index: le.Uint32(b[8:]), Count: le.Uint32(b[12:])}, nil
}

// Encode encodes i with argsz IRQInfoSize.
func (i IRQInfo) Encode() []byte {
	b := make([]byte, IRQInfoSize)
	le.PutUint32(b[0:], IRQInfoSize)
	le.PutUint32(b[4:], i.Flags)
	le.PutUint32(b[8:], i.Index)
	le.PutUint32(b[12:], i.Count)
	return b
}

// IRQSet is struct vfio_irq_set (20 bytes), followed for DATA_BOOL by
// count bytes of booleans; eventfds travel as SCM_RIGHTS.
type IRQSet struct {
	ArgSz, Flags, Index, Start, Count uint32
	Bools                             []byte
}

const IRQSetSize = 20

// IRQMaxVectors bounds any SET_IRQS range (MSI has at most 32 vectors;
// MSI-X 2048).
const IRQMaxVectors = 2048

func DecodeIRQSet(b []byte) (IRQSet, error) {
	if len(b) < IRQSetSize {
		return IRQSet{}, ErrShort
	}
	s := IRQSet{
		ArgSz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Index: le.Uint32(b[8:]),
		Start: le.Uint32(b[12:]), Count: le.Uint32(b[16:]),
	}
	data, action := s.Flags&IRQSetDataMask, s.Flags&IRQSetActionMaskAll
	if s.Flags&^(IRQSetDataMask|IRQSetActionMaskAll) != 0 || !oneBit(data) || !oneBit(action) {
		return s, fmt.Errorf("SET_IRQS flags %#x: want one DATA and one ACTION flag", s.Flags)
	}
	if s.Start > IRQMaxVectors || s.Count > IRQMaxVectors-s.Start {
		return s, fmt.Errorf("SET_IRQS vectors [%d,+%d) out of range", s.Start, s.Count)
	}
	if data == IRQSetDataBool {
		if uint64(len(b)) < IRQSetSize+uint64(s.Count) {
			return s, fmt.Errorf("SET_IRQS DATA_BOOL: %d booleans announced, %d bytes sent", s.Count, len(b)-IRQSetSize)
		}
		s.Bools = b[IRQSetSize : IRQSetSize+s.Count]
	}
	return s, nil
}

// Encode encodes s with its booleans (DATA_BOOL).
func (s IRQSet) Encode() []byte {
	b := make([]byte, IRQSetSize+len(s.Bools))
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], s.Flags)
	le.PutUint32(b[8:], s.Index)
	le.PutUint32(b[12:], s.Start)
	le.PutUint32(b[16:], s.Count)
	copy(b[IRQSetSize:], s.Bools)
	return b
}

func oneBit(v uint32) bool { return v != 0 && v&(v-1) == 0 }

// RegionAccess is the fixed part of REGION_READ/WRITE: offset u64,
// region u32, count u32; REGION_WRITE data and the REGION_READ reply's
// data follow it.
type RegionAccess struct {
	Offset uint64
	Region uint32
	Count  uint32
	Data   []byte // with data only
}

const RegionAccessSize = 16

// DecodeRegionAccess decodes a REGION_READ/WRITE head; withData (a
// REGION_WRITE request, a REGION_READ reply) also takes its Count bytes of
// data, which must all be there.
func DecodeRegionAccess(b []byte, withData bool) (RegionAccess, error) {
	if len(b) < RegionAccessSize {
		return RegionAccess{}, ErrShort
	}
	a := RegionAccess{Offset: le.Uint64(b[0:]), Region: le.Uint32(b[8:]), Count: le.Uint32(b[12:])}
	if a.Count > MaxDataXfer {
		return a, fmt.Errorf("region access of %d bytes exceeds max_data_xfer_size %d", a.Count, MaxDataXfer)
	}
	if withData {
		if uint64(len(b)-RegionAccessSize) < uint64(a.Count) {
			return a, fmt.Errorf("region access announces %d bytes, carries %d", a.Count, len(b)-RegionAccessSize)
		}
		a.Data = b[RegionAccessSize : RegionAccessSize+int(a.Count)]
	}
	return a, nil
}

// Encode returns the head with room for n data bytes after it.
func (a RegionAccess) Encode(n int) []byte {
	b := make([]byte, RegionAccessSize+n)
	a.Put(b)
	return b
}

// Put writes the head into b[:RegionAccessSize] (no allocation: the
// client's doorbell path).
func (a RegionAccess) Put(b []byte) {
	le.PutUint64(b[0:], a.Offset)
	le.PutUint32(b[8:], a.Region)
	le.PutUint32(b[12:], a.Count)
}
