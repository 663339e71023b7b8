package pci

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"
)

func mustAlloc(t *testing.T, s *IOVASpace, size, align uint64) uint64 {
	t.Helper()
	iova, err := s.Alloc(size, align)
	if err != nil {
		t.Fatalf("Alloc(%#x, %#x): %v", size, align, err)
	}
	return iova
}

func TestIOVASpaceAllocIsFirstFitAndAligned(t *testing.T) {
	s := NewIOVASpace(0x1000, 0x100000)
	if got := mustAlloc(t, s, 0x10, 1); got != 0x1000 {
		t.Errorf("first = %#x", got)
	}
	if got := mustAlloc(t, s, 0x10, 1); got != 0x1010 {
		t.Errorf("second = %#x, want adjacent", got)
	}
	// An aligned request skips to the boundary and leaves the gap free.
	if got := mustAlloc(t, s, 0x100, 0x1000); got != 0x2000 {
		t.Errorf("aligned = %#x", got)
	}
	if got := mustAlloc(t, s, 0x20, 0); got != 0x1020 {
		t.Errorf("gap fill = %#x, want 0x1020 (first fit)", got)
	}
	for _, align := range []uint64{8, 64, 4096, 1 << 16} {
		if iova := mustAlloc(t, s, 24, align); iova%align != 0 {
			t.Errorf("align %#x: got %#x", align, iova)
		}
	}
	if s.InUse() != 8 {
		t.Errorf("InUse = %d", s.InUse())
	}
}

func TestIOVASpaceFreeCoalesces(t *testing.T) {
	s := NewIOVASpace(0x1000, 0x5000)
	a := mustAlloc(t, s, 0x1000, 1)
	b := mustAlloc(t, s, 0x1000, 1)
	c := mustAlloc(t, s, 0x1000, 1)
	d := mustAlloc(t, s, 0x1000, 1)
	// Free out of order: middle, then its neighbours on each side.
	for _, iova := range []uint64{b, d, a, c} {
		if err := s.Free(iova); err != nil {
			t.Fatal(err)
		}
	}
	if want := []span{{0x1000, 0x5000}}; !slices.Equal(s.free, want) {
		t.Fatalf("free list %v, want %v", s.free, want)
	}
	if got := mustAlloc(t, s, 0x4000, 1); got != 0x1000 {
		t.Errorf("whole window at %#x", got)
	}
	if s.InUse() != 1 {
		t.Errorf("InUse = %d", s.InUse())
	}
}

func TestIOVASpaceFreeKeepsListSortedAndSeparate(t *testing.T) {
	s := NewIOVASpace(0, 0x10000)
	var iovas []uint64
	for range 8 {
		iovas = append(iovas, mustAlloc(t, s, 0x1000, 1))
	}
	for _, i := range []int{5, 1, 3} {
		if err := s.Free(iovas[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := []span{{0x1000, 0x2000}, {0x3000, 0x4000}, {0x5000, 0x6000}, {0x8000, 0x10000}}
	if !slices.Equal(s.free, want) {
		t.Fatalf("free list %v, want %v", s.free, want)
	}
	if err := s.Free(iovas[2]); err != nil {
		t.Fatal(err)
	}
	want = []span{{0x1000, 0x4000}, {0x5000, 0x6000}, {0x8000, 0x10000}}
	if !slices.Equal(s.free, want) {
		t.Fatalf("free list %v, want %v", s.free, want)
	}
}

func TestIOVASpaceExhaustion(t *testing.T) {
	s := NewIOVASpace(0x1000, 0x3000)
	mustAlloc(t, s, 0x1000, 0x1000)
	x := mustAlloc(t, s, 0x800, 1)
	if _, err := s.Alloc(0x1000, 1); !errors.Is(err, ErrNoIOVASpace) {
		t.Errorf("Alloc past the window: %v", err)
	}
	// 0x800 bytes are free, but not at a 0x1000 boundary.
	if _, err := s.Alloc(0x100, 0x1000); !errors.Is(err, ErrNoIOVASpace) {
		t.Errorf("unalignable Alloc: %v", err)
	}
	if err := s.Free(x); err != nil {
		t.Fatal(err)
	}
	mustAlloc(t, s, 0x1000, 0x1000)
	// An alignment that would wrap around 2^64 must fail, not succeed at 0.
	big := NewIOVASpace(1, Limit4G)
	if _, err := big.Alloc(8, 1<<63); !errors.Is(err, ErrNoIOVASpace) {
		t.Errorf("huge alignment: %v", err)
	}
}

func TestIOVASpaceRejectsBadRequests(t *testing.T) {
	s := NewIOVASpace(0x1000, 0x10000)
	if _, err := s.Alloc(0, 1); err == nil {
		t.Error("zero-sized Alloc succeeded")
	}
	if _, err := s.Alloc(8, 3); err == nil {
		t.Error("Alloc with alignment 3 succeeded")
	}
	iova := mustAlloc(t, s, 8, 8)
	if err := s.Free(iova + 8); err == nil {
		t.Error("free of an unallocated IOVA succeeded")
	}
	if err := s.Free(iova); err != nil {
		t.Fatal(err)
	}
	if err := s.Free(iova); err == nil {
		t.Error("double free succeeded")
	}
}

var testID = Identity{
	Vendor: 0x17cb, Device: 0x0306, SubVendor: 0x1eac, SubDev: 0x1001,
	Class: ClassWirelessOther, Revision: 2,
	BARSize:    [6]uint32{0: 0x1000, 2: 0x100000},
	MSIVectors: 3,
}

func newCfg(t *testing.T, id Identity) *ConfigSpace {
	t.Helper()
	c, err := NewConfigSpace(id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func read32(c *ConfigSpace, off int) uint32 {
	var b [4]byte
	c.Read(off, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func read16(c *ConfigSpace, off int) uint16 {
	var b [2]byte
	c.Read(off, b[:])
	return binary.LittleEndian.Uint16(b[:])
}

func write32(c *ConfigSpace, off int, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	c.Write(off, b[:])
}

func write16(c *ConfigSpace, off int, v uint16) {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	c.Write(off, b[:])
}

func TestConfigSpaceIdentityIsReadOnly(t *testing.T) {
	c := newCfg(t, testID)
	check := func() {
		t.Helper()
		if v := read32(c, CfgVendorID); v != 0x0306_17cb {
			t.Errorf("IDs %#x", v)
		}
		if v := read32(c, CfgRevision); v != ClassWirelessOther<<8|2 {
			t.Errorf("class/revision %#x", v)
		}
		if v := read32(c, CfgSubVendorID); v != 0x1001_1eac {
			t.Errorf("subsystem %#x", v)
		}
		if v := read16(c, CfgStatus); v&StatusCapList == 0 {
			t.Errorf("status %#x lacks the capability list bit", v)
		}
		if c.b[CfgCapPtr] != MSICapOffset || c.b[MSICapOffset] != CapIDMSI || c.b[MSICapOffset+1] != 0 {
			t.Error("MSI capability not linked")
		}
	}
	check()
	for off := 0; off < ConfigSize; off += 4 {
		if off >= CfgBAR0 && off < CfgBAR0+24 || off == CfgCommand || off >= MSICapOffset {
			continue
		}
		write32(c, off, 0xa5a5a5a5)
	}
	write16(c, MSICapOffset, 0xffff) // capability ID and next pointer
	check()
	var p [4]byte
	c.Read(ConfigSize-2, p[:])
	if p[2] != 0xff || p[3] != 0xff {
		t.Errorf("read past config space = % x", p)
	}
}

func TestConfigSpaceBARSizing(t *testing.T) {
	c := newCfg(t, testID)
	for i, size := range testID.BARSize {
		off := CfgBAR0 + 4*i
		write32(c, off, 0xffffffff)
		want := ^(size - 1)
		if size == 0 {
			want = 0
		}
		if got := read32(c, off); got != want {
			t.Errorf("BAR%d sizing read %#x, want %#x", i, got, want)
		}
	}
	// Programming an address keeps the bits above the size only; the low
	// nibble (32-bit non-prefetchable memory) stays 0.
	write32(c, CfgBAR0, 0xfe80_1a3f)
	if got := read32(c, CfgBAR0); got != 0xfe80_1000 {
		t.Errorf("BAR0 = %#x", got)
	}
	// A byte write changes only its byte lane.
	write32(c, CfgBAR0+8, 0)
	c.Write(CfgBAR0+8+2, []byte{0xff})
	if got := read32(c, CfgBAR0+8); got != 0x00f0_0000 {
		t.Errorf("BAR2 after a byte write = %#x", got)
	}
}

func TestConfigSpaceCommandKeepsWritableBits(t *testing.T) {
	c := newCfg(t, testID)
	write16(c, CfgCommand, 0xffff)
	if got := c.Command(); got != CmdMemory|CmdBusMaster|CmdIntxOff {
		t.Errorf("command = %#x", got)
	}
	write16(c, CfgCommand, CmdMemory)
	if got := c.Command(); got != CmdMemory {
		t.Errorf("command = %#x", got)
	}
}

func TestConfigSpaceMSICapability(t *testing.T) {
	c := newCfg(t, testID)
	if c.MSICapable() != 4 {
		t.Errorf("MSICapable = %d, want 3 rounded up to 4", c.MSICapable())
	}
	ctrl := read16(c, MSICapOffset+MSICtrl)
	if ctrl != 2<<1|MSICtrl64|MSICtrlPVM {
		t.Errorf("MSI control at power-up = %#x", ctrl)
	}
	if on, n, mask := c.MSIState(); on || n != 1 || mask != 0 {
		t.Errorf("MSIState = %v, %d, %#x", on, n, mask)
	}
	// Multiple Message Enable is capped at Multiple Message Capable; MMC,
	// 64-bit and per-vector-masking bits are read-only.
	write16(c, MSICapOffset+MSICtrl, 7<<4|MSICtrlEnable)
	ctrl = read16(c, MSICapOffset+MSICtrl)
	if ctrl != 2<<4|2<<1|MSICtrl64|MSICtrlPVM|MSICtrlEnable {
		t.Errorf("MSI control = %#x", ctrl)
	}
	write16(c, MSICapOffset+MSICtrl, 1<<4|MSICtrlEnable)
	write32(c, MSICapOffset+MSIAddrLo, 0xfee0_1003)
	write32(c, MSICapOffset+MSIAddrHi, 0x1)
	write16(c, MSICapOffset+MSIData, 0x4021)
	write32(c, MSICapOffset+MSIMask, 0b10)
	if on, n, mask := c.MSIState(); !on || n != 2 || mask != 0b10 {
		t.Errorf("MSIState = %v, %d, %#x", on, n, mask)
	}
	if addr, data := c.MSIMessage(); addr != 0x1_fee0_1000 || data != 0x4021 {
		t.Errorf("MSIMessage = %#x, %#x (address must be dword aligned)", addr, data)
	}
	write32(c, MSICapOffset+MSIPending, 0xffffffff)
	if got := read32(c, MSICapOffset+MSIPending); got != 0 {
		t.Errorf("pending bits writable by the host: %#x", got)
	}
	one := newCfg(t, Identity{MSIVectors: 1})
	write16(one, MSICapOffset+MSICtrl, 5<<4|MSICtrlEnable)
	if _, n, _ := one.MSIState(); n != 1 || one.MSICapable() != 1 {
		t.Errorf("single-vector function enabled %d of %d", n, one.MSICapable())
	}
}

func TestConfigSpaceReset(t *testing.T) {
	c := newCfg(t, testID)
	write16(c, CfgCommand, CmdMemory|CmdBusMaster)
	write32(c, CfgBAR0, 0xfe800000)
	write16(c, MSICapOffset+MSICtrl, 2<<4|MSICtrlEnable)
	write32(c, MSICapOffset+MSIAddrLo, 0xfee00000)
	write32(c, MSICapOffset+MSIMask, 1)
	c.Reset()
	fresh := newCfg(t, testID)
	if c.b != fresh.b {
		t.Errorf("after Reset:\n% x\nwant\n% x", c.b, fresh.b)
	}
}

func TestNewConfigSpaceRejectsBadIdentity(t *testing.T) {
	for _, id := range []Identity{
		{MSIVectors: 0},
		{MSIVectors: 33},
		{MSIVectors: 1, BARSize: [6]uint32{0: 8}},
		{MSIVectors: 1, BARSize: [6]uint32{1: 0x3000}},
	} {
		if _, err := NewConfigSpace(id); err == nil {
			t.Errorf("NewConfigSpace(%+v) succeeded", id)
		}
	}
}

func TestBufferContains(t *testing.T) {
	b := &Buffer{Mem: make([]byte, 16), IOVA: 0x1000}
	for _, c := range []struct {
		iova uint64
		n    int
		want bool
	}{
		{0x1000, 16, true},
		{0x1008, 8, true},
		{0x1010, 0, true},
		{0x0fff, 1, false},
		{0x1008, 9, false},
		{0x1011, 0, false},
		{0x1000, -1, false},
		{^uint64(0), 2, false},
	} {
		if got := b.Contains(c.iova, c.n); got != c.want {
			t.Errorf("Contains(%#x, %d) = %v", c.iova, c.n, got)
		}
	}
}

func TestBufferWordAccess(t *testing.T) {
	b := &Buffer{Mem: make([]byte, 12)}
	b.Store32(8, 0xdeadbeef)
	if got := binary.LittleEndian.Uint32(b.Mem[8:]); got != 0xdeadbeef {
		t.Errorf("Store32 wrote %#x", got)
	}
	b.Store64(0, 0x1122334455667788)
	if got := b.Load64(0); got != 0x1122334455667788 {
		t.Errorf("Load64 = %#x", got)
	}
	if b.Load32(4) != 0x11223344 {
		t.Errorf("high word %#x", b.Load32(4))
	}
	for _, off := range []int{9, 12, -4} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Load32(%d) did not panic", off)
				}
			}()
			b.Load32(off)
		}()
	}
}

func TestEventVector(t *testing.T) {
	v, err := NewEventVector(3)
	if err != nil {
		t.Fatal(err)
	}
	if v.Index() != 3 || v.Fd() < 0 {
		t.Errorf("index %d fd %d", v.Index(), v.Fd())
	}
	v.Trigger()
	v.Trigger()
	if n, err := v.Wait(); n != 2 || err != nil {
		t.Errorf("Wait = %d, %v", n, err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := v.Wait()
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Wait after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Wait")
	}
	if err := v.Trigger(); !errors.Is(err, ErrClosed) {
		t.Errorf("Trigger after Close: %v", err)
	}
}

// TestBufferWordsAreLittleEndian: what the host stores in DMA memory (ring
// elements, contexts, the BHIe vector table) is little-endian in memory on
// any CPU, and Load reads it back (Linux boot.c "bus: mhi: host: Fix
// endianness of BHI vector table").
func TestBufferWordsAreLittleEndian(t *testing.T) {
	b := &Buffer{Mem: make([]byte, 16)}
	b.Store64(0, 0x0102030405060708)
	b.Store32(8, 0x0a0b0c0d)
	if got := binary.LittleEndian.Uint64(b.Mem); got != 0x0102030405060708 {
		t.Errorf("Store64 left %#x in memory read little-endian", got)
	}
	if got := binary.LittleEndian.Uint32(b.Mem[8:]); got != 0x0a0b0c0d {
		t.Errorf("Store32 left %#x in memory read little-endian", got)
	}
	if b.Load64(0) != 0x0102030405060708 || b.Load32(8) != 0x0a0b0c0d {
		t.Errorf("Load64/Load32 = %#x/%#x", b.Load64(0), b.Load32(8))
	}
}
