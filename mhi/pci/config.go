package pci

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// Config-space offsets and bits (PCI Local Bus 3.0 §6.1, §6.8.1).
const (
	CfgVendorID     = 0x00
	CfgDeviceID     = 0x02
	CfgCommand      = 0x04
	CfgStatus       = 0x06
	CfgRevision     = 0x08
	CfgClass        = 0x09 // 3 bytes: prog-if, subclass, class
	CfgHeaderType   = 0x0E
	CfgBAR0         = 0x10
	CfgSubVendorID  = 0x2C
	CfgSubSystemID  = 0x2E
	CfgCapPtr       = 0x34
	CfgInterruptPin = 0x3D

	CmdMemory    = 1 << 1
	CmdBusMaster = 1 << 2
	CmdIntxOff   = 1 << 10

	StatusCapList = 1 << 4

	CapIDMSI = 0x05

	// MSI capability layout (64-bit address, per-vector masking).
	MSICtrl    = 0x02
	MSIAddrLo  = 0x04
	MSIAddrHi  = 0x08
	MSIData    = 0x0C
	MSIMask    = 0x10
	MSIPending = 0x14
	msiCapLen  = 0x18

	MSICtrlEnable = 1 << 0
	MSICtrl64     = 1 << 7
	MSICtrlPVM    = 1 << 8

	// ClassWirelessOther is the class code modems usually report (0x0d80:
	// wireless controller, other). Some report 0xff0000.
	ClassWirelessOther = 0x0d8000

	// ConfigSize is the size of conventional config space.
	ConfigSize = 256
)

// Identity is what a device model tells a bus about itself; the bus builds
// a standard type-0 config space from it. A model never sees config space.
type Identity struct {
	Vendor, Device    uint16
	SubVendor, SubDev uint16
	Class             uint32
	Revision          uint8
	// BARSize[i] is the size of 32-bit memory BAR i (a power of two ≥ 16),
	// 0 when absent.
	BARSize [6]uint32
	// MSIVectors is the number of MSI vectors the device asks for (rounded
	// up to a power of two, at most 32).
	MSIVectors int
}

// MSICapOffset is where ConfigSpace places the MSI capability.
const MSICapOffset = 0x50

// ConfigSpace emulates a type-0 config space: read-only IDs, a writable
// command register, BAR sizing (all-ones writes read back the size mask),
// and one MSI capability. It is safe for concurrent use.
type ConfigSpace struct {
	mu    sync.Mutex
	b     [ConfigSize]byte
	sizes [6]uint32
	msiN  int // log2 of supported vectors
}

// NewConfigSpace builds config space for id.
func NewConfigSpace(id Identity) (*ConfigSpace, error) {
	c := &ConfigSpace{sizes: id.BARSize}
	le := binary.LittleEndian
	le.PutUint16(c.b[CfgVendorID:], id.Vendor)
	le.PutUint16(c.b[CfgDeviceID:], id.Device)
	le.PutUint16(c.b[CfgStatus:], StatusCapList)
	c.b[CfgRevision] = id.Revision
	c.b[CfgClass] = byte(id.Class)
	c.b[CfgClass+1] = byte(id.Class >> 8)
	c.b[CfgClass+2] = byte(id.Class >> 16)
	le.PutUint16(c.b[CfgSubVendorID:], id.SubVendor)
	le.PutUint16(c.b[CfgSubSystemID:], id.SubDev)
	for i, s := range id.BARSize {
		if s != 0 && (s < 16 || s&(s-1) != 0) {
			return nil, fmt.Errorf("pci: BAR%d size %#x is not a power of two ≥ 16", i, s)
		}
	}
	n := id.MSIVectors
	if n < 1 || n > 32 {
		return nil, fmt.Errorf("pci: %d MSI vectors requested, want 1..32", n)
	}
	for 1<<c.msiN < n {
		c.msiN++
	}
	c.b[CfgCapPtr] = MSICapOffset
	c.b[CfgInterruptPin] = 1
	m := c.b[MSICapOffset:]
	m[0] = CapIDMSI
	m[1] = 0 // end of list
	le.PutUint16(m[MSICtrl:], uint16(c.msiN<<1)|MSICtrl64|MSICtrlPVM)
	return c, nil
}

// Read reads len(p) bytes at off; bytes beyond the space read as 0xff.
func (c *ConfigSpace) Read(off int, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range p {
		if o := off + i; o >= 0 && o < ConfigSize {
			p[i] = c.b[o]
		} else {
			p[i] = 0xff
		}
	}
}

// Write applies a config write with the writable-bit rules of each register.
func (c *ConfigSpace) Write(off int, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, v := range p {
		c.writeByte(off+i, v)
	}
}

func (c *ConfigSpace) writeByte(o int, v byte) {
	switch {
	case o == CfgCommand:
		c.b[o] = v & (CmdMemory | CmdBusMaster)
	case o == CfgCommand+1:
		c.b[o] = v & (CmdIntxOff >> 8)
	case o >= CfgBAR0 && o < CfgBAR0+24:
		bar, byteIdx := (o-CfgBAR0)/4, (o-CfgBAR0)%4
		size := c.sizes[bar]
		// Address bits below the size are hardwired to zero; bits 3:0
		// encode a 32-bit non-prefetchable memory BAR (all zero).
		mask := byte(^(size - 1) >> (8 * byteIdx))
		if size == 0 {
			mask = 0
		}
		if byteIdx == 0 {
			mask &^= 0x0f
		}
		c.b[o] = v & mask
	case o >= MSICapOffset+MSICtrl && o < MSICapOffset+msiCapLen:
		r := o - MSICapOffset
		switch {
		case r == MSICtrl:
			// Enable bit and Multiple Message Enable (bits 6:4), which
			// may not exceed Multiple Message Capable.
			mme := (v >> 4) & 7
			if int(mme) > c.msiN {
				mme = byte(c.msiN)
			}
			c.b[o] = c.b[o]&0x0e | v&MSICtrlEnable | mme<<4 | MSICtrl64
		case r == MSICtrl+1:
			// Per-vector masking capable bit is read-only.
		case r >= MSIPending:
			// Pending bits are read-only.
		case r >= MSIAddrLo && r < MSIAddrLo+4 && r == MSIAddrLo:
			c.b[o] = v &^ 3 // dword aligned
		default:
			c.b[o] = v
		}
	}
}

// Command returns the command register.
func (c *ConfigSpace) Command() uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.LittleEndian.Uint16(c.b[CfgCommand:])
}

// MSIState returns whether MSI is enabled, how many vectors are enabled,
// and the per-vector mask bits.
func (c *ConfigSpace) MSIState() (enabled bool, vectors int, mask uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctrl := binary.LittleEndian.Uint16(c.b[MSICapOffset+MSICtrl:])
	return ctrl&MSICtrlEnable != 0, 1 << ((ctrl >> 4) & 7), binary.LittleEndian.Uint32(c.b[MSICapOffset+MSIMask:])
}

// MSIMessage returns the programmed MSI address and data (used by buses
// that deliver MSIs as memory writes).
func (c *ConfigSpace) MSIMessage() (addr uint64, data uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.b[MSICapOffset:]
	le := binary.LittleEndian
	return uint64(le.Uint32(m[MSIAddrHi:]))<<32 | uint64(le.Uint32(m[MSIAddrLo:])), le.Uint16(m[MSIData:])
}

// MSICapable returns the number of vectors the capability advertises.
func (c *ConfigSpace) MSICapable() int { return 1 << c.msiN }

// Reset returns the writable registers to their power-on values.
func (c *ConfigSpace) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.b[CfgCommand : CfgCommand+2])
	clear(c.b[CfgBAR0 : CfgBAR0+24])
	m := c.b[MSICapOffset:]
	binary.LittleEndian.PutUint16(m[MSICtrl:], uint16(c.msiN<<1)|MSICtrl64|MSICtrlPVM)
	clear(m[MSIAddrLo:msiCapLen])
}

// ConfigAccessor reads and writes config space (a Device, or a backend
// before its Device is complete).
type ConfigAccessor interface {
	ConfigRead(off int, p []byte) error
	ConfigWrite(off int, p []byte) error
}

// SetBusMaster is Device.SetBusMaster for backends whose config space is
// the function's own (VFIO, vfio-user): it sets or clears the Memory Space
// and Bus Master bits of the Command register with a read-modify-write.
func SetBusMaster(c ConfigAccessor, on bool) error {
	var b [2]byte
	if err := c.ConfigRead(CfgCommand, b[:]); err != nil {
		return err
	}
	cmd := binary.LittleEndian.Uint16(b[:])
	if on {
		cmd |= CmdMemory | CmdBusMaster
	} else {
		cmd &^= CmdMemory | CmdBusMaster
	}
	binary.LittleEndian.PutUint16(b[:], cmd)
	return c.ConfigWrite(CfgCommand, b[:])
}

// ReadInfo reads the IDs, class and revision from the first 0x30 bytes of
// config space and returns them with addr.
func ReadInfo(c ConfigAccessor, addr string) (Info, error) {
	var cfg [0x30]byte
	if err := c.ConfigRead(0, cfg[:]); err != nil {
		return Info{}, err
	}
	le := binary.LittleEndian
	return Info{
		Address:   addr,
		Vendor:    le.Uint16(cfg[CfgVendorID:]),
		Device:    le.Uint16(cfg[CfgDeviceID:]),
		SubVendor: le.Uint16(cfg[CfgSubVendorID:]),
		SubDev:    le.Uint16(cfg[CfgSubSystemID:]),
		Class:     uint32(cfg[CfgClass+2])<<16 | uint32(cfg[CfgClass+1])<<8 | uint32(cfg[CfgClass]),
		Revision:  cfg[CfgRevision],
	}, nil
}
