//go:build linux

package vfio_test

// Tests against the real kernel vfio-pci driver. They run inside the QEMU
// guest that hack/qemu-vfio-test.sh boots (q35, intel-iommu with interrupt
// remapping, QEMU's edu and nvme devices), which sets MHISTACK_VFIO_GUEST=1;
// anywhere else they skip. They bind the devices themselves with Sysfs.Bind,
// so they exercise the sysfs helpers on a real kernel too.

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vfio"
)

// QEMU edu (docs/specs/edu.rst in QEMU): registers of BAR0.
const (
	eduID         = 0x00
	eduLiveness   = 0x04
	eduFactorial  = 0x08
	eduStatus     = 0x20
	eduIRQStatus  = 0x24
	eduIRQRaise   = 0x60
	eduIRQAck     = 0x64
	eduDMASrc     = 0x80
	eduDMADst     = 0x88
	eduDMACount   = 0x90
	eduDMACmd     = 0x98
	eduDMABuf     = 0x40000 // device address of edu's 4 KiB buffer
	eduStatusBusy = 0x01
	eduDMAStart   = 1
	eduDMAToRAM   = 2
	eduDMAIRQ     = 4
	eduDMADoneIRQ = 0x100
)

func guestDevice(t *testing.T, vendor, device uint16, name string) string {
	t.Helper()
	if os.Getenv("MHISTACK_VFIO_GUEST") == "" {
		t.Skip("runs inside the QEMU guest of hack/qemu-vfio-test.sh (set MHISTACK_VFIO_GUEST=1 on a machine with the devices)")
	}
	var sys vfio.Sysfs
	addrs, err := sys.Find(vendor, device)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("no %s (%04x:%04x) in the guest: %v", name, vendor, device, err)
	}
	addr := addrs[0]
	prev, err := sys.Bind(addr)
	if err != nil {
		t.Fatalf("bind %s %s: %v", name, addr, err)
	}
	t.Cleanup(func() {
		if err := sys.Restore(addr, prev); err != nil {
			t.Errorf("restore %s: %v", addr, err)
		}
		if d, _ := sys.Driver(addr); d != prev {
			t.Errorf("after Restore %s has driver %q, want %q", addr, d, prev)
		}
	})
	group, _ := sys.IOMMUGroup(addr)
	t.Logf("%s at %s, IOMMU group %d, was bound to %q", name, addr, group, prev)
	return addr
}

// wait waits for one vector with a timeout; the helper goroutine is
// released by Disable or Close if it gives up.
func wait(t *testing.T, v pci.Vector, what string) uint64 {
	t.Helper()
	type res struct {
		n   uint64
		err error
	}
	ch := make(chan res, 1)
	go func() { n, err := v.Wait(); ch <- res{n, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Wait: %v", what, r.err)
		}
		return r.n
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no interrupt within 10s", what)
	}
	return 0
}

// pending reads a vector's eventfd without blocking: 0 when it has not
// fired.
func pending(t *testing.T, v pci.Vector) uint64 {
	t.Helper()
	fd := v.(interface{ Fd() int }).Fd()
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if errors.Is(err, unix.EAGAIN) {
		return 0
	}
	if err != nil || n != 8 {
		t.Fatalf("read eventfd: %d, %v", n, err)
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}

func TestGuestEdu(t *testing.T) {
	addr := guestDevice(t, 0x1234, 0x11e8, "edu")
	t0 := time.Now()
	dev, err := vfio.Open(addr, &vfio.Options{
		Backend:   vfio.BackendType1, // Debian kernels have no iommufd
		HugePages: vfio.HugePagesRequire,
		DMASize:   4 << 20,
		IOVALimit: 1 << 28, // edu's default 28-bit DMA mask
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Logf("Open took %v via %s", time.Since(t0), dev.Backend())
	closed := false
	defer func() {
		if !closed {
			dev.Close()
		}
	}()

	t.Run("Info", func(t *testing.T) {
		info := dev.Info()
		if info.Vendor != 0x1234 || info.Device != 0x11e8 || info.Address != addr {
			t.Errorf("Info = %v", info)
		}
		t.Logf("%v class %06x rev %#x", info, info.Class, info.Revision)
	})

	t.Run("IOMMU", func(t *testing.T) {
		in := dev.IOMMU()
		t.Logf("page sizes %#x, ranges %#x, dma avail %d", in.PageSizes, in.Ranges, in.DMAAvail)
		if in.PageSizes&4096 == 0 || len(in.Ranges) == 0 || !in.HasDMAAvail {
			t.Errorf("IOMMU info = %+v", in)
		}
	})

	t.Run("Regions", func(t *testing.T) {
		rs := dev.Regions()
		for _, r := range rs {
			if r.Size != 0 {
				t.Log(r)
			}
		}
		bar0 := rs[vfio.RegionBAR0]
		if bar0.Size != 1<<20 || !bar0.Mappable() || !bar0.Readable() || !bar0.Writable() {
			t.Errorf("BAR0 = %v", bar0)
		}
		if cfg := rs[vfio.RegionConfig]; cfg.Size != 256 || cfg.Mappable() {
			t.Errorf("config region = %v", cfg)
		}
	})

	t.Run("IRQInfo", func(t *testing.T) {
		irqs := dev.IRQs()
		t.Logf("%+v", irqs)
		if irqs[vfio.IRQMSI].Count != 1 || irqs[vfio.IRQMSIX].Count != 0 {
			t.Errorf("edu should have 1 MSI and no MSI-X: %+v", irqs)
		}
		if k := dev.InterruptKind(); k != "MSI" || dev.Interrupts().Max() != 1 {
			t.Errorf("interrupt kind %s, max %d", k, dev.Interrupts().Max())
		}
	})

	t.Run("ConfigAndBusMaster", func(t *testing.T) {
		var b [2]byte
		if err := dev.ConfigRead(pci.CfgCommand, b[:]); err != nil {
			t.Fatal(err)
		}
		before := uint16(b[0]) | uint16(b[1])<<8
		if err := dev.SetBusMaster(true); err != nil {
			t.Fatal(err)
		}
		if err := dev.ConfigRead(pci.CfgCommand, b[:]); err != nil {
			t.Fatal(err)
		}
		after := uint16(b[0]) | uint16(b[1])<<8
		t.Logf("command %#x -> %#x", before, after)
		if after&(pci.CmdBusMaster|pci.CmdMemory) != pci.CmdBusMaster|pci.CmdMemory {
			t.Errorf("bus master not enabled: command %#x", after)
		}
		var id [4]byte
		if err := dev.ConfigRead(pci.CfgVendorID, id[:]); err != nil || !bytes.Equal(id[:], []byte{0x34, 0x12, 0xe8, 0x11}) {
			t.Errorf("config vendor/device = % x, %v", id, err)
		}
		if err := dev.ConfigRead(250, make([]byte, 8)); err == nil {
			t.Error("config read past the end succeeded")
		}
	})

	bar, err := dev.BAR(0)
	if err != nil {
		t.Fatalf("BAR(0): %v", err)
	}
	b64 := bar.(*vfio.BAR)

	t.Run("MMIO", func(t *testing.T) {
		if !b64.Mapped() {
			t.Error("BAR0 not mmap'ed")
		}
		id := bar.Read32(eduID)
		t.Logf("edu ident %#08x", id)
		if id&0xff != 0xed {
			t.Errorf("ident = %#x, want 0x..ed", id)
		}
		bar.Write32(eduLiveness, 0x12345678)
		if got := bar.Read32(eduLiveness); got != 0xedcba987 {
			t.Errorf("liveness = %#x, want 0xedcba987", got)
		}
		// Write then read back at once: a compiler forwarding the store
		// would return 0x0f0f0f0f, the device returns its inverse.
		bar.Write32(eduLiveness, 0x0f0f0f0f)
		if got := bar.Read32(eduLiveness); got != 0xf0f0f0f0 {
			t.Errorf("liveness = %#x, want 0xf0f0f0f0", got)
		}
		bar.Write32(eduFactorial, 10)
		deadline := time.Now().Add(5 * time.Second)
		for bar.Read32(eduStatus)&eduStatusBusy != 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := bar.Read32(eduFactorial); got != 3628800 {
			t.Errorf("factorial(10) = %d", got)
		}
		b64.Write64(eduDMASrc, 0x1122334455667788)
		if got := b64.Read64(eduDMASrc); got != 0x1122334455667788 {
			t.Errorf("64-bit DMA source register = %#x", got)
		}
		if got := bar.Read32(1 << 20); got != ^uint32(0) {
			t.Errorf("read past the BAR = %#x", got)
		}
	})

	vecs, err := dev.Interrupts().Enable(1)
	if err != nil {
		t.Fatalf("enable MSI: %v", err)
	}
	if len(vecs) != 1 {
		t.Fatalf("got %d vectors", len(vecs))
	}
	msi := vecs[0]

	t.Run("MSIRaise", func(t *testing.T) {
		bar.Write32(eduIRQRaise, 0xabc)
		n := wait(t, msi, "edu raise")
		st := bar.Read32(eduIRQStatus)
		bar.Write32(eduIRQAck, st)
		t.Logf("eventfd count %d, irq status %#x", n, st)
		if st != 0xabc {
			t.Errorf("irq status %#x, want 0xabc", st)
		}
	})

	t.Run("MSILoopbackTrigger", func(t *testing.T) {
		if err := msi.Trigger(); err != nil {
			t.Fatal(err)
		}
		wait(t, msi, "loopback trigger")
	})

	t.Run("DMARoundTrip", func(t *testing.T) {
		a := dev.Arena()
		t.Logf("arena IOVA %#x size %#x hugepages %v", a.IOVA, a.Size, a.HugePages)
		if !a.HugePages || a.IOVA+a.Size > 1<<28 {
			t.Errorf("arena %+v: want hugepages below 256 MiB", a)
		}
		src, err := dev.DMA().Alloc(4096, 4096)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := dev.DMA().Alloc(4096, 64)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.DMA().Free(src)
		defer dev.DMA().Free(dst)
		const n = 4000 // QEMU 7.2's edu aborts on a transfer ending at the end of its buffer
		for i := range src.Mem[:n] {
			src.Mem[i] = byte(i*7 + 3)
		}
		transfer := func(from, to uint64, cmd uint32, what string) {
			t0 := time.Now()
			b64.Write64(eduDMASrc, from)
			b64.Write64(eduDMADst, to)
			b64.Write64(eduDMACount, n)
			b64.Write64(eduDMACmd, uint64(eduDMAStart|eduDMAIRQ|cmd))
			wait(t, msi, what)
			st := bar.Read32(eduIRQStatus)
			bar.Write32(eduIRQAck, st)
			if st&eduDMADoneIRQ == 0 {
				t.Errorf("%s: irq status %#x, want %#x", what, st, eduDMADoneIRQ)
			}
			t.Logf("%s: %d bytes in %v", what, n, time.Since(t0))
		}
		transfer(src.IOVA, eduDMABuf, 0, "DMA RAM->edu")
		transfer(eduDMABuf, dst.IOVA, eduDMAToRAM, "DMA edu->RAM")
		if !bytes.Equal(dst.Mem[:n], src.Mem[:n]) {
			bad := 0
			for i := range dst.Mem[:n] {
				if dst.Mem[i] != src.Mem[i] {
					bad++
				}
			}
			t.Errorf("DMA round trip: %d of %d bytes differ", bad, n)
		}
		if dst.Mem[n] != 0 {
			t.Errorf("device wrote past the transfer")
		}
	})

	t.Run("DMAAllocator", func(t *testing.T) {
		var bufs []*pci.Buffer
		for {
			b, err := dev.DMA().Alloc(256<<10, 4096)
			if errors.Is(err, pci.ErrNoIOVASpace) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.IOVA%4096 != 0 || b.IOVA+uint64(b.Len()) > 1<<28 {
				t.Errorf("buffer IOVA %#x", b.IOVA)
			}
			bufs = append(bufs, b)
		}
		if len(bufs) < 14 {
			t.Errorf("only %d 256 KiB buffers fit in a 4 MiB arena", len(bufs))
		}
		for _, b := range bufs {
			if err := dev.DMA().Free(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := dev.DMA().Free(&pci.Buffer{Mem: make([]byte, 8), IOVA: dev.Arena().IOVA}); err == nil {
			t.Error("Free of a foreign buffer succeeded")
		}
	})

	t.Run("Reset", func(t *testing.T) {
		err := dev.Reset()
		t.Logf("CanReset=%v Reset()=%v", dev.CanReset(), err)
		if dev.CanReset() {
			if err != nil {
				t.Fatal(err)
			}
			if id := bar.Read32(eduID); id&0xff != 0xed {
				t.Errorf("ident after reset = %#x", id)
			}
		} else if !errors.Is(err, pci.ErrNotSupported) {
			t.Errorf("Reset without FLAGS_RESET = %v, want ErrNotSupported", err)
		}
	})

	t.Run("Close", func(t *testing.T) {
		if err := dev.Interrupts().Disable(); err != nil {
			t.Fatal(err)
		}
		if _, err := msi.Wait(); !errors.Is(err, pci.ErrClosed) {
			t.Errorf("Wait after Disable = %v, want ErrClosed", err)
		}
		if err := msi.Trigger(); !errors.Is(err, pci.ErrClosed) {
			t.Errorf("Trigger after Disable = %v, want ErrClosed", err)
		}
		if _, err := vfio.Open(addr, &vfio.Options{Backend: vfio.BackendType1}); !errors.Is(err, vfio.ErrBusy) {
			t.Errorf("second Open of an open device = %v, want ErrBusy", err)
		}
		closed = true
		if err := dev.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := dev.Close(); !errors.Is(err, pci.ErrClosed) {
			t.Errorf("second Close = %v", err)
		}
		if got := bar.Read32(eduID); got != ^uint32(0) {
			t.Errorf("BAR read after Close = %#x, want all-ones", got)
		}
		// Everything was released: the device opens again.
		again, err := vfio.Open(addr, &vfio.Options{HugePages: vfio.HugePagesOff, DMASize: 1 << 20, IOVALimit: 1 << 28})
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		if a := again.Arena(); a.HugePages {
			t.Errorf("HugePagesOff arena uses hugepages")
		}
		if err := again.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestGuestNVMeMSIX(t *testing.T) {
	addr := guestDevice(t, 0x1b36, 0x0010, "nvme")
	dev, err := vfio.Open(addr, &vfio.Options{HugePages: vfio.HugePagesOff, DMASize: 1 << 20})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() {
		if err := dev.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	bar0 := dev.Regions()[vfio.RegionBAR0]
	t.Log(bar0)
	if !bar0.MSIXMappable || !bar0.Mappable() {
		t.Errorf("NVMe BAR0 should be mappable with the MSIX_MAPPABLE cap: %v", bar0)
	}
	if cfg := dev.Regions()[vfio.RegionConfig]; cfg.Size != 4096 {
		t.Errorf("PCIe config space size %#x", cfg.Size)
	}
	in := dev.Interrupts()
	t.Logf("%s, %d vectors, CanReset=%v", dev.InterruptKind(), in.Max(), dev.CanReset())
	if dev.InterruptKind() != "MSI-X" || in.Max() < 4 {
		t.Fatalf("want MSI-X with ≥ 4 vectors, have %s x%d", dev.InterruptKind(), in.Max())
	}
	bar, err := dev.BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	// NVMe CAP (offset 0) is a 64-bit register; VS at 8 is 1.x.
	if vs := bar.Read32(8); vs>>16 != 1 {
		t.Errorf("NVMe version register %#x", vs)
	}
	vecs, err := in.Enable(4)
	if err != nil || len(vecs) != 4 {
		t.Fatalf("Enable(4) = %d vectors, %v", len(vecs), err)
	}
	if err := vecs[1].Trigger(); err != nil {
		t.Fatal(err)
	}
	if n := wait(t, vecs[1], "MSI-X vector 1"); n != 1 {
		t.Errorf("vector 1 count %d", n)
	}
	for _, i := range []int{0, 2, 3} {
		if n := pending(t, vecs[i]); n != 0 {
			t.Errorf("vector %d fired %d times without a trigger", i, n)
		}
	}
	// Re-enable with a different count: VFIO needs disable + enable.
	vecs, err = in.Enable(2)
	if err != nil || len(vecs) != 2 {
		t.Fatalf("Enable(2) = %d vectors, %v", len(vecs), err)
	}
	if err := vecs[0].Trigger(); err != nil {
		t.Fatal(err)
	}
	wait(t, vecs[0], "MSI-X vector 0 after re-enable")

	// A device-raised MSI-X, through rings and doorbells like MHI's:
	// an NVMe Identify on the admin queue, completion on vector 0.
	t.Run("AdminIdentify", func(t *testing.T) { nvmeIdentify(t, dev, bar.(*vfio.BAR), vecs[0]) })

	if dev.CanReset() {
		if err := dev.Reset(); err != nil {
			t.Errorf("Reset: %v", err)
		}
		if vs := bar.Read32(8); vs>>16 != 1 {
			t.Errorf("NVMe version after reset %#x", vs)
		}
	}
}

// nvmeIdentify brings up the NVMe admin queue pair in DMA memory and runs
// Identify Controller (NVMe base spec 1.4 §3.1 registers, §5.15 Identify).
func nvmeIdentify(t *testing.T, dev *vfio.Device, bar *vfio.BAR, vec pci.Vector) {
	const (
		regCAP, regCC, regCSTS, regAQA, regASQ, regACQ = 0x00, 0x14, 0x1c, 0x24, 0x28, 0x30
		entries                                        = 4
	)
	if err := dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	alloc := func() *pci.Buffer {
		b, err := dev.DMA().Alloc(4096, 4096)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sq, cq, data := alloc(), alloc(), alloc()
	capReg := bar.Read64(regCAP)
	stride := uint64(4) << ((capReg >> 32) & 0xf)
	timeout := time.Duration((capReg>>24)&0xff)*500*time.Millisecond + time.Second

	waitReady := func(want uint32) {
		deadline := time.Now().Add(timeout)
		for bar.Read32(regCSTS)&1 != want {
			if time.Now().After(deadline) {
				t.Fatalf("CSTS.RDY did not become %d (CSTS %#x)", want, bar.Read32(regCSTS))
			}
			time.Sleep(time.Millisecond)
		}
	}
	bar.Write32(regCC, 0)
	waitReady(0)
	bar.Write32(regAQA, (entries-1)<<16|(entries-1))
	bar.Write64(regASQ, sq.IOVA)
	bar.Write64(regACQ, cq.IOVA)
	bar.Write32(regCC, 6<<16|4<<20|1) // IOSQES 64 B, IOCQES 16 B, EN
	waitReady(1)

	// Submission entry 0: opcode 0x06 (Identify), command id 0x42,
	// PRP1 = data, CDW10 CNS = 1 (controller).
	sq.Store32(0, 0x42<<16|0x06)
	sq.Store64(24, data.IOVA)
	sq.Store32(40, 1)
	bar.Write32(0x1000, 1) // SQ0 tail doorbell
	wait(t, vec, "NVMe admin completion")

	dw3 := cq.Load32(12)
	if dw3&0xffff != 0x42 || dw3>>16&1 != 1 || dw3>>17 != 0 {
		t.Fatalf("completion DW3 %#x: want command 0x42, phase 1, status 0", dw3)
	}
	bar.Write32(0x1000+uint64(stride), 1) // CQ0 head doorbell
	vid := uint16(data.Mem[0]) | uint16(data.Mem[1])<<8
	serial := strings.TrimSpace(string(data.Mem[4:24]))
	t.Logf("Identify: PCI vendor %#04x, serial %q, model %q", vid, serial, strings.TrimSpace(string(data.Mem[24:64])))
	if vid != 0x1b36 || serial != "deadbeef" {
		t.Errorf("Identify data: vendor %#x serial %q", vid, serial)
	}
	bar.Write32(regCC, 0)
	waitReady(0)
	for _, b := range []*pci.Buffer{sq, cq, data} {
		if err := dev.DMA().Free(b); err != nil {
			t.Error(err)
		}
	}
}

// Unbinding the function from vfio-pci while it is open: the kernel asks
// for it with the request interrupt (RemovalRequested), the owner calls
// Release, the Device releases it (Removed closes, the BAR reads
// all-ones), and the unbind completes instead of waiting for the process
// to close it.
func TestGuestEduReleasedOnTheKernelsRequest(t *testing.T) {
	addr := guestDevice(t, 0x1234, 0x11e8, "edu")
	dev, err := vfio.Open(addr, &vfio.Options{Backend: vfio.BackendType1, HugePages: vfio.HugePagesOff, DMASize: 1 << 20, IOVALimit: 1 << 28})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer dev.Close()
	if n := dev.IRQs()[vfio.IRQReq].Count; n < 1 {
		t.Fatalf("vfio-pci offers no request interrupt (count %d)", n)
	}
	bar, err := dev.BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	if id := bar.Read32(eduID); id == 0xffffffff {
		t.Fatalf("edu ID reads all-ones before any request")
	}
	unbound := make(chan error, 1)
	t0 := time.Now()
	go func() {
		var sys vfio.Sysfs
		unbound <- sys.Unbind(addr)
	}()
	select {
	case <-dev.RemovalRequested():
		t.Logf("the kernel asked for the device %v after the unbind began", time.Since(t0).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("no request within 5 s of the unbind")
	}
	dev.Release()
	select {
	case <-dev.Removed():
		t.Logf("released %v after the unbind began", time.Since(t0).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the device was not released within 5 s of the unbind")
	}
	select {
	case err := <-unbound:
		if err != nil {
			t.Fatalf("unbind: %v", err)
		}
		t.Logf("unbind done after %v", time.Since(t0).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the unbind did not complete within 5 s of the release")
	}
	if v := bar.Read32(eduID); v != 0xffffffff {
		t.Errorf("BAR read after the release = %#x, want all-ones", v)
	}
	var b [2]byte
	if err := dev.ConfigRead(0, b[:]); !errors.Is(err, pci.ErrRemoved) {
		t.Errorf("ConfigRead after the release = %v, want pci.ErrRemoved", err)
	}
}
