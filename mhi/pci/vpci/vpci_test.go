package vpci

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ pci.Device = (*Device)(nil)

// newDevice hosts a fresh copyModel; Close runs at cleanup.
func newDevice(t testing.TB, vectors int, opts ...Option) (*Device, *copyModel) {
	t.Helper()
	m := newCopyModel(vectors)
	d, err := New(m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, m
}

// strict fails the test on any DMA fault.
func strict(t testing.TB) Option {
	return WithFaultHandler(func(f Fault) { t.Errorf("unexpected %v", f) })
}

func bar0(t testing.TB, d *Device) pci.BAR {
	t.Helper()
	b, err := d.BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func alloc(t testing.TB, d *Device, size, align int) *pci.Buffer {
	t.Helper()
	b, err := d.DMA().Alloc(size, align)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func enable(t testing.TB, d *Device, n int) []pci.Vector {
	t.Helper()
	v, err := d.Interrupts().Enable(n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fired drains a vector without blocking: how many times it fired since the
// last drain (reading the eventfd directly; nobody Waits on it).
func fired(t testing.TB, v pci.Vector) uint64 {
	t.Helper()
	var b [8]byte
	_, err := unix.Read(v.(*pci.EventVector).Fd(), b[:])
	if err == unix.EAGAIN {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// wait blocks on v.Wait for at most 5 s.
func wait(t testing.TB, v pci.Vector) (uint64, error) {
	t.Helper()
	type result struct {
		n   uint64
		err error
	}
	ch := make(chan result, 1)
	go func() {
		n, err := v.Wait()
		ch <- result{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("vector %d did not fire", v.Index())
		return 0, nil
	}
}

func cfg16(t testing.TB, d *Device, off int) uint16 {
	t.Helper()
	var b [2]byte
	if err := d.ConfigRead(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(b[:])
}

func cfg32(t testing.TB, d *Device, off int) uint32 {
	t.Helper()
	var b [4]byte
	if err := d.ConfigRead(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[:])
}

func setCfg32(t testing.TB, d *Device, off int, v uint32) {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	if err := d.ConfigWrite(off, b[:]); err != nil {
		t.Fatal(err)
	}
}

func TestNewAttachesModelAndBuildsConfigSpace(t *testing.T) {
	d, m := newDevice(t, 4)
	d2, _ := newDevice(t, 4)
	if m.attached.Load() != 1 {
		t.Fatalf("Attach called %d times", m.attached.Load())
	}
	info := d.Info()
	if !strings.HasPrefix(info.Address, "vpci:") || info.Address == d2.Info().Address {
		t.Errorf("addresses %q and %q, want distinct vpci:N", info.Address, d2.Info().Address)
	}
	want := pci.Info{Address: info.Address, Vendor: 0x17cb, Device: 0x0306, SubVendor: 0x17cb, SubDev: 0x010c, Class: pci.ClassWirelessOther, Revision: 3}
	if info != want {
		t.Errorf("Info = %+v, want %+v", info, want)
	}
	if v, dev := cfg16(t, d, pci.CfgVendorID), cfg16(t, d, pci.CfgDeviceID); v != 0x17cb || dev != 0x0306 {
		t.Errorf("config IDs %04x:%04x", v, dev)
	}
	if got := cfg32(t, d, pci.CfgRevision) >> 8; got != pci.ClassWirelessOther {
		t.Errorf("config class %#x", got)
	}
	if cmd := cfg16(t, d, pci.CfgCommand); cmd != 0 {
		t.Errorf("command after power-up = %#x, want 0", cmd)
	}
	if d.Interrupts().Max() != 4 {
		t.Errorf("Max = %d, want 4", d.Interrupts().Max())
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := New(newCopyModel(0)); err == nil {
		t.Error("New accepted a model with 0 MSI vectors")
	}
}

func TestConfigAccessChecks(t *testing.T) {
	d, _ := newDevice(t, 1)
	for _, c := range []struct{ off, n int }{{-1, 1}, {255, 2}, {256, 1}, {2, 4}, {1, 2}} {
		if err := d.ConfigRead(c.off, make([]byte, c.n)); err == nil {
			t.Errorf("ConfigRead(%#x, %d bytes) succeeded", c.off, c.n)
		}
		if err := d.ConfigWrite(c.off, make([]byte, c.n)); err == nil {
			t.Errorf("ConfigWrite(%#x, %d bytes) succeeded", c.off, c.n)
		}
	}
	// BAR sizing through the bus, as a host enumerates.
	setCfg32(t, d, pci.CfgBAR0, 0xffffffff)
	if got := cfg32(t, d, pci.CfgBAR0); got != ^uint32(4096-1) {
		t.Errorf("BAR0 sizing read %#x", got)
	}
}

func TestBARReadWriteRoundTrip(t *testing.T) {
	d, m := newDevice(t, 1)
	if err := d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b := bar0(t, d)
	if b.Len() != 4096 {
		t.Errorf("Len = %d", b.Len())
	}
	for i := uint64(0); i < 64; i++ {
		b.Write32(i*4, uint32(i)*0x01010101)
	}
	for i := uint64(0); i < 64; i++ {
		if got := b.Read32(i * 4); got != uint32(i)*0x01010101 {
			t.Fatalf("reg %d = %#x", i, got)
		}
	}
	if got := m.scratch[5].Load(); got != 0x05050505 {
		t.Errorf("model saw %#x", got)
	}
	b2, err := d.BAR(2)
	if err != nil || b2.Len() != 64 || b2.Read32(0) != 0xb2b2b2b2 {
		t.Errorf("BAR2: %v len %d", err, b2.Len())
	}
	for _, i := range []int{-1, 1, 3, 6} {
		if _, err := d.BAR(i); err == nil {
			t.Errorf("BAR(%d) succeeded", i)
		}
	}
	if s := d.Stats(); s.MMIOReads != 65 || s.MMIOWrites != 64 || s.MMIOUnclaimed != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestBARMemoryDecodingOffReadsAllOnes(t *testing.T) {
	d, m := newDevice(t, 1)
	b := bar0(t, d)
	m.lastOff.Store(-1)
	b.Write32(0, 42)
	if got := b.Read32(0); got != 0xffffffff {
		t.Errorf("read with memory decoding off = %#x", got)
	}
	if m.lastOff.Load() != -1 || m.scratch[0].Load() != 0 {
		t.Error("an access reached the model with memory decoding off")
	}
	d.SetBusMaster(true)
	b.Write32(0, 42)
	// Clearing bus mastering keeps memory decoding, so registers stay readable.
	d.SetBusMaster(false)
	if got := cfg16(t, d, pci.CfgCommand); got != pci.CmdMemory {
		t.Errorf("command = %#x, want memory only", got)
	}
	if got := b.Read32(0); got != 42 {
		t.Errorf("read = %d, want 42", got)
	}
	if s := d.Stats(); s.MMIOUnclaimed != 2 {
		t.Errorf("unclaimed = %d, want 2", s.MMIOUnclaimed)
	}
}

func TestBARMisalignedAndOutOfRangeAreUnclaimed(t *testing.T) {
	d, m := newDevice(t, 1)
	d.SetBusMaster(true)
	b := bar0(t, d)
	m.lastOff.Store(-1)
	for _, off := range []uint64{2, 4093, 4096, 1 << 40, ^uint64(0)} {
		if got := b.Read32(off); got != 0xffffffff {
			t.Errorf("Read32(%#x) = %#x", off, got)
		}
		b.Write32(off, 1)
	}
	if m.lastOff.Load() != -1 {
		t.Error("an unclaimed access reached the model")
	}
	if b.Read32(4092) != 0 {
		t.Error("last register unreadable")
	}
	if s := d.Stats(); s.MMIOUnclaimed != 10 {
		t.Errorf("unclaimed = %d, want 10", s.MMIOUnclaimed)
	}
}

func TestDMAEngineCopiesBetweenBuffersAndRaisesMSI(t *testing.T) {
	d, _ := newDevice(t, 4, strict(t))
	d.SetBusMaster(true)
	vecs := enable(t, d, 4)
	src, dst := alloc(t, d, 300, 64), alloc(t, d, 300, 64)
	for i := range src.Mem {
		src.Mem[i] = byte(i)
	}
	b := bar0(t, d)
	b.Write32(regSrc, uint32(src.IOVA))
	b.Write32(regDst, uint32(dst.IOVA))
	b.Write32(regLen, 300)
	b.Write32(regVec, 2)
	b.Write32(regGo, 1)
	if n, err := wait(t, vecs[2]); err != nil || n != 1 {
		t.Fatalf("Wait = %d, %v", n, err)
	}
	if st := b.Read32(regStatus); st != statusDone {
		t.Fatalf("status %d", st)
	}
	for i, v := range dst.Mem {
		if v != byte(i) {
			t.Fatalf("dst[%d] = %d", i, v)
		}
	}
	s := d.Stats()
	if s.DMABytesRead != 300 || s.DMABytesWritten != 300 || s.MSIRaised != 1 || s.MSIDelivered != 1 || s.DMAFaults != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestDMAOutsideMappingIsRefusedAndRecorded(t *testing.T) {
	var handled []Fault
	d, m := newDevice(t, 1, WithFaultHandler(func(f Fault) { handled = append(handled, f) }))
	d.SetBusMaster(true)
	buf := alloc(t, d, 64, 0)
	end := buf.IOVA + 64

	for _, c := range []struct {
		iova  uint64
		n     int
		write bool
	}{
		{0, 4, false},
		{end, 1, true},
		{end - 4, 8, false},
		{buf.IOVA - 8, 16, true},
		{1 << 40, 4, false},
	} {
		var err error
		if c.write {
			err = m.host.DMAWrite(c.iova, make([]byte, c.n))
		} else {
			err = m.host.DMARead(c.iova, make([]byte, c.n))
		}
		var f Fault
		if !errors.Is(err, ErrDMAFault) || !errors.As(err, &f) {
			t.Fatalf("DMA %d bytes at %#x: err %v, want a fault", c.n, c.iova, err)
		}
		if want := (Fault{c.iova, c.n, c.write, "unmapped"}); f != want {
			t.Errorf("fault %+v, want %+v", f, want)
		}
	}
	faults := d.Faults()
	if len(faults) != 5 || len(handled) != 5 || faults[0].IOVA != 0 || faults[4] != handled[4] {
		t.Errorf("Faults %v, handler saw %v", faults, handled)
	}
	if d.Stats().DMAFaults != 5 {
		t.Errorf("DMAFaults = %d", d.Stats().DMAFaults)
	}
	// The whole buffer, and its last byte, are reachable.
	if err := m.host.DMAWrite(buf.IOVA, make([]byte, 64)); err != nil {
		t.Error(err)
	}
	if err := m.host.DMARead(end-1, make([]byte, 1)); err != nil {
		t.Error(err)
	}
}

func TestDMAStraddlingTwoBuffersIsRefused(t *testing.T) {
	d, m := newDevice(t, 1)
	d.SetBusMaster(true)
	a, b := alloc(t, d, 64, 8), alloc(t, d, 64, 8)
	if b.IOVA != a.IOVA+64 {
		t.Fatalf("buffers at %#x and %#x are not IOVA-adjacent", a.IOVA, b.IOVA)
	}
	if err := m.host.DMAWrite(a.IOVA+60, make([]byte, 8)); !errors.Is(err, ErrDMAFault) {
		t.Errorf("write across two buffers: %v", err)
	}
	if err := m.host.DMARead(a.IOVA, make([]byte, 128)); !errors.Is(err, ErrDMAFault) {
		t.Errorf("read across two buffers: %v", err)
	}
}

func TestDMARefusedWhileBusMasterOff(t *testing.T) {
	d, m := newDevice(t, 1)
	buf := alloc(t, d, 16, 0)
	err := m.host.DMAWrite32(buf.IOVA, 7)
	var f Fault
	if !errors.As(err, &f) || f.Reason != "bus master disabled" || !f.Write {
		t.Fatalf("DMA before SetBusMaster: %v", err)
	}
	d.SetBusMaster(true)
	if err := m.host.DMAWrite32(buf.IOVA, 7); err != nil {
		t.Fatal(err)
	}
	d.SetBusMaster(false)
	if _, err := m.host.DMARead32(buf.IOVA); !errors.Is(err, ErrDMAFault) {
		t.Fatalf("DMA after SetBusMaster(false): %v", err)
	}
	if buf.Load32(0) != 7 {
		t.Error("word lost")
	}
}

func TestDMA32IsOneAlignedWord(t *testing.T) {
	d, m := newDevice(t, 1)
	d.SetBusMaster(true)
	buf := alloc(t, d, 5, 1) // odd size: Mem must still be 8-aligned
	if p := uintptr(unsafe.Pointer(&buf.Mem[0])); p%8 != 0 {
		t.Fatalf("Mem at %#x", p)
	}
	if err := m.host.DMAWrite32(buf.IOVA, 0xa1b2c3d4); err != nil {
		t.Fatal(err)
	}
	if got := buf.Load32(0); got != 0xa1b2c3d4 {
		t.Errorf("host Load32 = %#x", got)
	}
	buf.Store32(0, 0x11223344)
	if got, err := m.host.DMARead32(buf.IOVA); err != nil || got != 0x11223344 {
		t.Errorf("DMARead32 = %#x, %v", got, err)
	}
	for _, iova := range []uint64{buf.IOVA + 2, buf.IOVA + 4} {
		_, err := m.host.DMARead32(iova)
		if !errors.Is(err, ErrDMAFault) {
			t.Errorf("DMARead32(%#x): %v", iova, err)
		}
	}
	if f := d.Faults(); len(f) != 2 || f[0].Reason != "unaligned" || f[1].Reason != "unmapped" {
		t.Errorf("faults %v", f)
	}
}

func TestDMAAllocHonoursSizeAlignmentAndWindow(t *testing.T) {
	d, m := newDevice(t, 1, strict(t))
	d.SetBusMaster(true)
	for _, c := range []struct{ size, align int }{
		{1, 1}, {3, 0}, {7, 2}, {64, 64}, {100, 4096}, {4096, 4096}, {32768, 4096}, {1 << 20, 1 << 16}, {12, 1 << 21},
	} {
		b := alloc(t, d, c.size, c.align)
		if b.Len() != c.size || cap(b.Mem) != c.size {
			t.Errorf("Alloc(%d, %d): len %d cap %d", c.size, c.align, b.Len(), cap(b.Mem))
		}
		if c.align > 0 && b.IOVA%uint64(c.align) != 0 || b.IOVA%8 != 0 {
			t.Errorf("Alloc(%d, %d): IOVA %#x", c.size, c.align, b.IOVA)
		}
		if b.IOVA < iovaBase || b.IOVA+uint64(c.size) > pci.Limit4G {
			t.Errorf("Alloc(%d, %d): IOVA %#x outside the 32-bit window", c.size, c.align, b.IOVA)
		}
		if p := uintptr(unsafe.Pointer(&b.Mem[0])); p%8 != 0 {
			t.Errorf("Alloc(%d, %d): Mem at %#x", c.size, c.align, p)
		}
		for _, v := range b.Mem {
			if v != 0 {
				t.Fatalf("Alloc(%d, %d) not zeroed", c.size, c.align)
			}
		}
		// The device reaches exactly the buffer.
		if err := m.host.DMAWrite(b.IOVA, make([]byte, c.size)); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []struct{ size, align int }{{0, 1}, {-1, 1}, {8, 3}, {8, -4}} {
		if _, err := d.DMA().Alloc(c.size, c.align); err == nil {
			t.Errorf("Alloc(%d, %d) succeeded", c.size, c.align)
		}
	}
}

func TestDMAFreeUnmaps(t *testing.T) {
	d, m := newDevice(t, 1)
	d2, _ := newDevice(t, 1)
	d.SetBusMaster(true)
	buf := alloc(t, d, 4096, 4096)
	other := alloc(t, d2, 4096, 4096)
	if other.IOVA != buf.IOVA {
		t.Fatalf("test wants equal IOVAs on two devices, got %#x and %#x", buf.IOVA, other.IOVA)
	}
	if err := d.DMA().Free(other); err == nil {
		t.Error("freed another device's buffer")
	}
	if err := d.DMA().Free(&pci.Buffer{Mem: make([]byte, 4096), IOVA: buf.IOVA}); err == nil {
		t.Error("freed a buffer with a forged IOVA")
	}
	if err := d.DMA().Free(nil); err == nil {
		t.Error("freed nil")
	}
	if err := d.DMA().Free(buf); err != nil {
		t.Fatal(err)
	}
	if err := d.DMA().Free(buf); err == nil {
		t.Error("double free succeeded")
	}
	if err := m.host.DMAWrite(buf.IOVA, []byte{1}); !errors.Is(err, ErrDMAFault) {
		t.Errorf("DMA to a freed buffer: %v", err)
	}
	if again := alloc(t, d, 4096, 4096); again.IOVA != buf.IOVA {
		t.Errorf("freed IOVA %#x not reused (got %#x)", buf.IOVA, again.IOVA)
	}
}

func TestDMAExhaustionReturnsErrNoIOVASpace(t *testing.T) {
	d, _ := newDevice(t, 1, WithIOVALimit(iovaBase+4*4096))
	for range 4 {
		alloc(t, d, 4096, 4096)
	}
	if _, err := d.DMA().Alloc(8, 8); !errors.Is(err, pci.ErrNoIOVASpace) {
		t.Errorf("Alloc past the window: %v", err)
	}
	if _, err := New(newCopyModel(1), WithIOVALimit(1<<33)); err == nil {
		t.Error("IOVA limit above 4 GiB accepted")
	}
}

func TestMSIDeliveredToWait(t *testing.T) {
	d, m := newDevice(t, 4)
	d.SetBusMaster(true)
	vecs := enable(t, d, 4)
	if len(vecs) != 4 {
		t.Fatalf("%d vectors", len(vecs))
	}
	for i, v := range vecs {
		if v.Index() != i {
			t.Errorf("vector %d has index %d", i, v.Index())
		}
	}
	// Enable programs the capability as a host kernel does.
	ctrl := cfg16(t, d, pci.MSICapOffset+pci.MSICtrl)
	if ctrl&pci.MSICtrlEnable == 0 || (ctrl>>4)&7 != 2 {
		t.Errorf("MSI control %#x, want enabled with MME=2", ctrl)
	}
	if addr, _ := d.cfg.MSIMessage(); addr != msiAddr {
		t.Errorf("MSI address %#x", addr)
	}
	m.host.RaiseMSI(3)
	m.host.RaiseMSI(3)
	if n, err := wait(t, vecs[3]); err != nil || n != 2 {
		t.Errorf("Wait = %d, %v; want 2 (coalesced by the eventfd)", n, err)
	}
	if fired(t, vecs[0]) != 0 {
		t.Error("vector 0 fired")
	}
}

func TestMSIMaskedIsPendingUntilUnmasked(t *testing.T) {
	d, m := newDevice(t, 4)
	d.SetBusMaster(true)
	vecs := enable(t, d, 4)
	maskReg := pci.MSICapOffset + pci.MSIMask
	pendReg := pci.MSICapOffset + pci.MSIPending
	setCfg32(t, d, maskReg, 1<<1)
	m.host.RaiseMSI(1)
	m.host.RaiseMSI(1)
	m.host.RaiseMSI(2)
	if fired(t, vecs[1]) != 0 {
		t.Fatal("masked vector fired")
	}
	if fired(t, vecs[2]) != 1 {
		t.Error("unmasked vector 2 did not fire")
	}
	if p := cfg32(t, d, pendReg); p != 1<<1 {
		t.Errorf("pending = %#x, want bit 1", p)
	}
	var b [1]byte // the pending bits also read back byte by byte
	d.ConfigRead(pendReg, b[:])
	if b[0] != 2 {
		t.Errorf("pending byte = %#x", b[0])
	}
	// The host cannot clear pending bits; only delivery does.
	setCfg32(t, d, pendReg, 0)
	if p := cfg32(t, d, pendReg); p != 1<<1 {
		t.Errorf("pending after a host write = %#x", p)
	}
	setCfg32(t, d, maskReg, 0)
	if n, err := wait(t, vecs[1]); err != nil || n != 1 {
		t.Errorf("after unmask Wait = %d, %v; want one message for the pending bit", n, err)
	}
	if p := cfg32(t, d, pendReg); p != 0 {
		t.Errorf("pending after unmask = %#x", p)
	}
	if s := d.Stats(); s.MSIRaised != 3 || s.MSIMasked != 2 || s.MSIDelivered != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestMSIAliasesToEnabledVectors(t *testing.T) {
	d, m := newDevice(t, 4)
	d.SetBusMaster(true)
	vecs := enable(t, d, 1)
	if len(vecs) != 1 {
		t.Fatalf("%d vectors", len(vecs))
	}
	m.host.RaiseMSI(3)
	m.host.RaiseMSI(2)
	if n := fired(t, vecs[0]); n != 2 {
		t.Errorf("vector 0 fired %d times, want 2", n)
	}
	d.Interrupts().Disable()

	// Three requested, four granted (a power of two): 5 aliases to 1.
	vecs = enable(t, d, 3)
	if len(vecs) != 3 || (cfg16(t, d, pci.MSICapOffset+pci.MSICtrl)>>4)&7 != 2 {
		t.Fatalf("%d vectors, MME %d", len(vecs), (cfg16(t, d, pci.MSICapOffset+pci.MSICtrl)>>4)&7)
	}
	m.host.RaiseMSI(5)
	if n := fired(t, vecs[1]); n != 1 {
		t.Errorf("vector 1 fired %d times, want 1", n)
	}
}

func TestMSIEnableArguments(t *testing.T) {
	d, _ := newDevice(t, 4)
	irq := d.Interrupts()
	for _, n := range []int{0, -1, 5} {
		if _, err := irq.Enable(n); err == nil {
			t.Errorf("Enable(%d) succeeded", n)
		}
	}
	enable(t, d, 2)
	if _, err := irq.Enable(2); err == nil {
		t.Error("second Enable succeeded")
	}
	if err := irq.Disable(); err != nil {
		t.Fatal(err)
	}
	if err := irq.Disable(); err != nil {
		t.Errorf("second Disable: %v", err)
	}
	enable(t, d, 4)
}

func TestMSIDisableUnblocksWait(t *testing.T) {
	d, m := newDevice(t, 2)
	d.SetBusMaster(true)
	vecs := enable(t, d, 2)
	errc := make(chan error, 2)
	for _, v := range vecs {
		go func() {
			_, err := v.Wait()
			errc <- err
		}()
	}
	time.Sleep(10 * time.Millisecond) // let both park in the netpoller
	if err := d.Interrupts().Disable(); err != nil {
		t.Fatal(err)
	}
	for range vecs {
		select {
		case err := <-errc:
			if !errors.Is(err, pci.ErrClosed) {
				t.Errorf("Wait after Disable: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Wait still blocked after Disable")
		}
	}
	if cfg16(t, d, pci.MSICapOffset+pci.MSICtrl)&pci.MSICtrlEnable != 0 {
		t.Error("MSI Enable still set")
	}
	m.host.RaiseMSI(0)
	if s := d.Stats(); s.MSIDropped != 1 {
		t.Errorf("MSI while disabled: stats %+v", s)
	}
}

func TestMSIDroppedWithoutBusMasterOrEnable(t *testing.T) {
	d, m := newDevice(t, 1)
	m.host.RaiseMSI(0) // MSI never enabled
	vecs := enable(t, d, 1)
	m.host.RaiseMSI(0) // bus mastering off: an MSI is a memory write
	m.host.RaiseMSI(-1)
	if fired(t, vecs[0]) != 0 {
		t.Error("MSI delivered")
	}
	if s := d.Stats(); s.MSIRaised != 3 || s.MSIDropped != 3 {
		t.Errorf("stats %+v", s)
	}
}

func TestMSIFilterDropsAndDelays(t *testing.T) {
	d, m := newDevice(t, 1)
	d.SetBusMaster(true)
	vecs := enable(t, d, 1)
	var drops atomic.Int32
	drops.Store(2)
	d.SetMSIFilter(func(int) (bool, time.Duration) { return drops.Add(-1) >= 0, 0 })
	for range 3 {
		m.host.RaiseMSI(0)
	}
	if n := fired(t, vecs[0]); n != 1 {
		t.Errorf("fired %d, want 1 after dropping 2", n)
	}
	d.SetMSIFilter(func(int) (bool, time.Duration) { return false, 20 * time.Millisecond })
	start := time.Now()
	m.host.RaiseMSI(0)
	if n, err := wait(t, vecs[0]); err != nil || n != 1 {
		t.Fatalf("delayed MSI: %d, %v", n, err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Errorf("delayed MSI arrived after %v", el)
	}
	d.SetMSIFilter(nil)
	m.host.RaiseMSI(0)
	if n := fired(t, vecs[0]); n != 1 {
		t.Errorf("fired %d after removing the filter", n)
	}
	if s := d.Stats(); s.MSIRaised != 5 || s.MSIDropped != 2 || s.MSIDelivered != 3 {
		t.Errorf("stats %+v", s)
	}
}

func TestCloseCancelsDelayedMSIs(t *testing.T) {
	m := newCopyModel(1)
	d, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	d.SetBusMaster(true)
	enable(t, d, 1)
	d.SetMSIFilter(func(int) (bool, time.Duration) { return false, time.Hour })
	m.host.RaiseMSI(0)
	d.SetMSIFilter(func(int) (bool, time.Duration) { return false, time.Nanosecond })
	for range 100 {
		m.host.RaiseMSI(0) // some of these fire while Close runs
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t)
	if s := d.Stats(); s.MSIRaised != 101 || s.MSIDelivered+s.MSIDropped != 101 {
		t.Errorf("stats %+v: every MSI must be delivered or dropped, the cancelled one too", s)
	}
}

func TestSurpriseRemoval(t *testing.T) {
	d, m := newDevice(t, 1)
	d.SetBusMaster(true)
	vecs := enable(t, d, 1)
	b := bar0(t, d)
	b.Write32(0, 5)
	buf := alloc(t, d, 64, 0)

	d.Remove()
	m.lastOff.Store(-1)
	if got := b.Read32(0); got != 0xffffffff {
		t.Errorf("BAR read after removal = %#x", got)
	}
	b.Write32(4, 1)
	if m.lastOff.Load() != -1 {
		t.Error("MMIO reached a removed device")
	}
	if got := cfg32(t, d, pci.CfgVendorID); got != 0xffffffff {
		t.Errorf("config read after removal = %#x", got)
	}
	d.SetBusMaster(false) // lost, like every config write
	var f Fault
	if err := m.host.DMAWrite(buf.IOVA, []byte{1}); !errors.As(err, &f) || f.Reason != "device removed" {
		t.Errorf("DMA after removal: %v", err)
	}
	m.host.RaiseMSI(0)
	if fired(t, vecs[0]) != 0 {
		t.Error("MSI delivered after removal")
	}
	if s := d.Stats(); s.MSIDropped != 1 {
		t.Errorf("stats %+v", s)
	}
	// The host can still tear down cleanly.
	if err := d.DMA().Free(buf); err != nil {
		t.Error(err)
	}
	if err := d.Close(); err != nil {
		t.Error(err)
	}
}

func TestResetKeepsMappingsAndDisablesMSI(t *testing.T) {
	d, m := newDevice(t, 2, strict(t))
	d.SetBusMaster(true)
	vecs := enable(t, d, 2)
	b := bar0(t, d)
	b.Write32(0, 9)
	buf := alloc(t, d, 64, 0)
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	if m.resets.Load() != 1 || m.scratch[0].Load() != 0 {
		t.Error("model not reset")
	}
	if cmd := cfg16(t, d, pci.CfgCommand); cmd != 0 {
		t.Errorf("command after reset %#x", cmd)
	}
	if b.Read32(0) != 0xffffffff {
		t.Error("memory decoding survived the reset")
	}
	if _, err := vecs[0].Wait(); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Wait after reset: %v", err)
	}
	// The host restores the function as after probe; the IOMMU kept the buffer.
	d.SetBusMaster(true)
	if err := m.host.DMAWrite32(buf.IOVA, 1); err != nil {
		t.Fatalf("DMA to a buffer mapped before reset: %v", err)
	}
	vecs = enable(t, d, 2)
	m.host.RaiseMSI(1)
	if fired(t, vecs[1]) != 1 {
		t.Error("MSI after re-enable not delivered")
	}
}

func TestCloseIsIdempotentAndEverythingReturnsErrClosed(t *testing.T) {
	d, m := newDevice(t, 1)
	d.SetBusMaster(true)
	vecs := enable(t, d, 1)
	b := bar0(t, d)
	buf := alloc(t, d, 64, 0)
	errc := make(chan error, 1)
	go func() {
		_, err := vecs[0].Wait()
		errc <- err
	}()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if m.detached.Load() != 1 {
		t.Errorf("Detach called %d times", m.detached.Load())
	}
	if err := <-errc; !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Wait after Close: %v", err)
	}
	if b.Read32(0) != 0xffffffff {
		t.Error("BAR readable after Close")
	}
	checks := map[string]error{
		"ConfigRead":   d.ConfigRead(0, make([]byte, 4)),
		"ConfigWrite":  d.ConfigWrite(pci.CfgCommand, make([]byte, 2)),
		"SetBusMaster": d.SetBusMaster(true),
		"Reset":        d.Reset(),
		"Free":         d.DMA().Free(buf),
		"Disable":      d.Interrupts().Disable(),
		"DMAWrite":     m.host.DMAWrite(buf.IOVA, []byte{1}),
	}
	_, checks["BAR"] = d.BAR(0)
	_, checks["Alloc"] = d.DMA().Alloc(8, 8)
	_, checks["Enable"] = d.Interrupts().Enable(1)
	_, checks["DMARead32"] = m.host.DMARead32(buf.IOVA)
	for name, err := range checks {
		if !errors.Is(err, pci.ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if d.Stats().DMAFaults != 0 {
		t.Error("DMA after Close recorded as a fault")
	}
	if d.iommu.space.InUse() != 0 {
		t.Errorf("%d IOVA ranges still allocated", d.iommu.space.InUse())
	}
}

// TestConcurrentMSIAndTeardown raises MSIs from several goroutines while the
// host disables, re-enables and finally closes: no race, no panic, no write
// to a closed eventfd.
func TestConcurrentMSIAndTeardown(t *testing.T) {
	d, m := newDevice(t, 4)
	d.SetBusMaster(true)
	enable(t, d, 4)
	d.SetMSIFilter(func(v int) (bool, time.Duration) { return false, time.Duration(v%2) * time.Microsecond })
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					m.host.RaiseMSI(g + i)
					runtime.Gosched() // leave the host a share of one P under -cpu 1
				}
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := range 50 {
		d.Interrupts().Disable()
		d.Interrupts().Enable(1 + i%4)
		setCfg32(t, d, pci.MSICapOffset+pci.MSIMask, uint32(i*0x9e3779b9))
		// Let the raisers in while MSI is enabled, not only around it.
		for raised := d.Stats().MSIRaised; d.Stats().MSIRaised < raised+20 && time.Now().Before(deadline); {
			runtime.Gosched()
		}
	}
	if err := d.Close(); err != nil {
		t.Error(err)
	}
	close(stop)
	wg.Wait()
	if s := d.Stats(); s.MSIDelivered+s.MSIMasked == 0 {
		t.Errorf("the test raced nothing: %+v", s)
	} else {
		t.Logf("%+v", s)
	}
}

// TestDMAWord32RaceClean is the host/device pattern of a ring pointer: the
// device writes a payload with DMAWrite, then publishes it with DMAWrite32;
// the host polls the word with Load32 and then reads the payload plainly.
// Under -race this must be clean.
func TestDMAWord32RaceClean(t *testing.T) {
	d, m := newDevice(t, 1, strict(t))
	d.SetBusMaster(true)
	ptr := alloc(t, d, 8, 8)
	data := alloc(t, d, 4096, 8)
	const rounds = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		var payload [4]byte
		for i := uint32(1); i <= rounds; i++ {
			// Wait until the host consumed the previous round.
			for {
				v, err := m.host.DMARead32(ptr.IOVA + 4)
				if err != nil {
					t.Error(err)
					return
				}
				if v == i-1 {
					break
				}
				runtime.Gosched() // spinning goroutines must share one P under -cpu 1
			}
			binary.LittleEndian.PutUint32(payload[:], i*7)
			if err := m.host.DMAWrite(data.IOVA+uint64(i%1024)*4, payload[:]); err != nil {
				t.Error(err)
				return
			}
			if err := m.host.DMAWrite32(ptr.IOVA, i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := uint32(1); i <= rounds; i++ {
		for ptr.Load32(0) != i {
			select {
			case <-done:
				t.Fatal("device stopped")
			default:
				runtime.Gosched()
			}
		}
		if got := binary.LittleEndian.Uint32(data.Mem[(i%1024)*4:]); got != i*7 {
			t.Fatalf("round %d: payload %d", i, got)
		}
		ptr.Store32(4, i)
	}
	<-done
}

func BenchmarkDMAWrite(b *testing.B) {
	d, m := newDevice(b, 1)
	d.SetBusMaster(true)
	// A realistic table: ring buffers and a pool of RX buffers.
	var bufs []*pci.Buffer
	for range 512 {
		bufs = append(bufs, alloc(b, d, 2048, 64))
	}
	target := bufs[300]
	p := make([]byte, 1500)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if err := m.host.DMAWrite(target.IOVA+64, p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDMAWrite32(b *testing.B) {
	d, m := newDevice(b, 1)
	d.SetBusMaster(true)
	for range 512 {
		alloc(b, d, 2048, 64)
	}
	target := alloc(b, d, 64, 64)
	b.ReportAllocs()
	for b.Loop() {
		if err := m.host.DMAWrite32(target.IOVA+8, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMMIO(b *testing.B) {
	d, _ := newDevice(b, 1)
	d.SetBusMaster(true)
	bar := bar0(b, d)
	b.ReportAllocs()
	for b.Loop() {
		bar.Write32(regScratch+8, 1)
		_ = bar.Read32(regScratch + 8)
	}
}

func BenchmarkRaiseMSI(b *testing.B) {
	d, m := newDevice(b, 1)
	d.SetBusMaster(true)
	v := enable(b, d, 1)[0]
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.host.RaiseMSI(0)
		if i%1024 == 0 {
			fired(b, v) // keep the eventfd counter far from overflow
		}
	}
}

func TestSetDeadConfigAndBAR(t *testing.T) {
	d, m := newDevice(t, 1)
	d.SetBusMaster(true)
	b := bar0(t, d)
	b.Write32(0, 5)
	vendor := func() uint32 { return cfg32(t, d, pci.CfgVendorID) & 0xFFFF }
	want := vendor()

	d.SetDead(DeadConfigOnes)
	if got := vendor(); got != 0xFFFF {
		t.Errorf("vendor ID with DeadConfigOnes = %#x, want 0xffff", got)
	}
	if got := b.Read32(0); got != 5 {
		t.Errorf("BAR read with config dead only = %#x, want 5", got)
	}
	d.SetDead(DeadConfigZero | DeadBAR)
	if got := vendor(); got != 0 {
		t.Errorf("vendor ID with DeadConfigZero = %#x, want 0", got)
	}
	m.lastOff.Store(-1)
	if got := b.Read32(0); got != 0xFFFFFFFF {
		t.Errorf("BAR read with DeadBAR = %#x", got)
	}
	b.Write32(4, 1)
	if m.lastOff.Load() != -1 {
		t.Error("MMIO reached a dead BAR")
	}
	// A reset does not revive a plain death; it does with DeadUntilReset.
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := vendor(); got != 0 {
		t.Errorf("vendor ID after a reset = %#x, want 0 (still dead)", got)
	}
	d.SetDead(DeadConfigZero | DeadUntilReset)
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := vendor(); got != want {
		t.Errorf("vendor ID after a reviving reset = %#x, want %#x", got, want)
	}
	d.SetDead(DeadConfigOnes)
	d.SetDead(0)
	if got := vendor(); got != want {
		t.Errorf("vendor ID after SetDead(0) = %#x, want %#x", got, want)
	}
}
