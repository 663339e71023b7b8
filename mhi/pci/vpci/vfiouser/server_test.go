package vfiouser

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vpcitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client is the test's vfio-user client: the QEMU side of the socket.
type client struct {
	t  *testing.T
	c  *net.UnixConn
	id uint16
}

// rig is a server with a model, serving one end of a socketpair.
type rig struct {
	srv    *Server
	model  *vpcitest.Regs
	cl     *client
	done   chan error
	faults chan vpci.Fault
}

func socketpair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	a, b, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{model: &vpcitest.Regs{}, done: make(chan error, 1), faults: make(chan vpci.Fault, 64)}
	srv, err := New(r.model, WithFaultHandler(func(f vpci.Fault) {
		select {
		case r.faults <- f:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	r.connect(t)
	t.Cleanup(func() {
		r.cl.c.Close()
		srv.Close()
		if !r.model.Detached.Load() {
			t.Error("model not detached by Close")
		}
	})
	return r
}

// connect serves a fresh socketpair and makes it the rig's client.
func (r *rig) connect(t *testing.T) {
	s, c := socketpair(t)
	r.done = make(chan error, 1)
	go func() { r.done <- r.srv.ServeConn(s) }()
	r.cl = &client{t: t, c: c}
}

func (c *client) send(cmd uint16, flags uint32, payload []byte, fds ...int) uint16 {
	c.t.Helper()
	c.id++
	b := make([]byte, vuwire.HeaderSize+len(payload))
	vuwire.Header{ID: c.id, Cmd: cmd, Size: uint32(len(b)), Flags: flags}.Put(b)
	copy(b[vuwire.HeaderSize:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.c.WriteMsgUnix(b, oob, nil); err != nil {
		c.t.Fatalf("send %s: %v", vuwire.CmdName(cmd), err)
	}
	return c.id
}

func (c *client) recv() (vuwire.Header, []byte) {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hb [vuwire.HeaderSize]byte
	if _, err := readFull(c.c, hb[:]); err != nil {
		c.t.Fatalf("recv header: %v", err)
	}
	h := vuwire.Header{ID: le.Uint16(hb[0:]), Cmd: le.Uint16(hb[2:]), Size: le.Uint32(hb[4:]), Flags: le.Uint32(hb[8:]), Error: le.Uint32(hb[12:])}
	body := make([]byte, h.Size-vuwire.HeaderSize)
	if _, err := readFull(c.c, body); err != nil {
		c.t.Fatalf("recv body: %v", err)
	}
	return h, body
}

func readFull(c *net.UnixConn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// call sends a request and returns the reply payload, failing the test on
// an error reply or a mismatched id/command.
func (c *client) call(cmd uint16, payload []byte, fds ...int) []byte {
	c.t.Helper()
	b, errno := c.try(cmd, payload, fds...)
	if errno != 0 {
		c.t.Fatalf("%s: error reply %v", vuwire.CmdName(cmd), errno)
	}
	return b
}

// try is call that returns the errno of an error reply.
func (c *client) try(cmd uint16, payload []byte, fds ...int) ([]byte, syscall.Errno) {
	c.t.Helper()
	id := c.send(cmd, 0, payload, fds...)
	h, b := c.recv()
	if h.ID != id || h.Cmd != cmd || h.Flags&vuwire.FlagTypeMask != vuwire.TypeReply {
		c.t.Fatalf("%s: reply header %+v for request id %d", vuwire.CmdName(cmd), h, id)
	}
	if h.Flags&vuwire.FlagError != 0 {
		if len(b) != 0 {
			c.t.Errorf("%s: error reply carries %d payload bytes", vuwire.CmdName(cmd), len(b))
		}
		return nil, syscall.Errno(h.Error)
	}
	return b, 0
}

func u32s(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		le.PutUint32(b[4*i:], v)
	}
	return b
}

func access(region uint32, off uint64, data []byte, count int) []byte {
	b := make([]byte, vuwire.RegionAccessSize+len(data))
	le.PutUint64(b[0:], off)
	le.PutUint32(b[8:], region)
	le.PutUint32(b[12:], uint32(count))
	copy(b[vuwire.RegionAccessSize:], data)
	return b
}

func (c *client) read(region uint32, off uint64, n int) []byte {
	c.t.Helper()
	b := c.call(vuwire.CmdRegionRead, access(region, off, nil, n))
	if len(b) != vuwire.RegionAccessSize+n {
		c.t.Fatalf("REGION_READ reply of %d bytes, want %d", len(b), vuwire.RegionAccessSize+n)
	}
	if got := le.Uint32(b[12:]); got != uint32(n) {
		c.t.Fatalf("REGION_READ reply count %d, want %d", got, n)
	}
	return b[vuwire.RegionAccessSize:]
}

func (c *client) read32(region uint32, off uint64) uint32 {
	return le.Uint32(c.read(region, off, 4))
}

func (c *client) write32(region uint32, off uint64, v uint32) {
	c.t.Helper()
	c.call(vuwire.CmdRegionWrite, access(region, off, u32s(v), 4))
}

// post writes without asking for a reply, as QEMU 10.2 posts BAR writes.
func (c *client) post32(region uint32, off uint64, v uint32) {
	c.t.Helper()
	c.send(vuwire.CmdRegionWrite, vuwire.FlagNoReply, access(region, off, u32s(v), 4))
}

// enableDevice turns on memory decoding and bus mastering, as the guest's
// pci_enable_device + pci_set_master do.
func (c *client) enableDevice() {
	c.t.Helper()
	c.call(vuwire.CmdRegionWrite, access(vuwire.RegionConfig, pci.CfgCommand, []byte{pci.CmdMemory | pci.CmdBusMaster, 0}, 2))
}

func (c *client) negotiate() {
	c.t.Helper()
	js := `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"migration":{"pgsize":4096,"max_bitmap_size":1048576},"write_multiple":true}}`
	b := make([]byte, 4+len(js)+1)
	copy(b[4:], js)
	r := c.call(vuwire.CmdVersion, b)
	if len(r) > len(b) {
		c.t.Fatalf("VERSION reply of %d bytes is longer than the request (%d): QEMU would reject it", len(r), len(b))
	}
}

func TestVersionReplyFitsTheRequestAndIsNULTerminatedJSON(t *testing.T) {
	r := newRig(t)
	for _, js := range []string{
		`{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"migration":{"pgsize":4096,"max_bitmap_size":1048576},"write_multiple":true}}`,
		`{"capabilities":{}}`,
		``,
	} {
		req := make([]byte, 4)
		if js != "" {
			req = append(req, js...)
			req = append(req, 0)
		}
		rep := r.cl.call(vuwire.CmdVersion, req)
		if len(rep) > len(req) && js != "" {
			t.Errorf("reply %q longer than request %q", rep, req)
		}
		if len(rep) < 4 || le.Uint16(rep) != 0 || le.Uint16(rep[2:]) != 0 {
			t.Fatalf("reply %q: want version 0.0", rep)
		}
		if len(rep) > 4 {
			if rep[len(rep)-1] != 0 {
				t.Fatalf("reply JSON %q not NUL-terminated", rep[4:])
			}
			var doc map[string]any
			if err := json.Unmarshal(rep[4:len(rep)-1], &doc); err != nil {
				t.Fatalf("reply JSON %q: %v", rep[4:], err)
			}
		}
	}
	full := []byte(versionReplies[0])
	var doc struct {
		Capabilities map[string]any `json:"capabilities"`
	}
	if err := json.Unmarshal(full, &doc); err != nil || doc.Capabilities["max_msg_fds"] != float64(vuwire.MaxMsgFDs) {
		t.Fatalf("full capabilities %s: %v", full, err)
	}
	// QEMU 10.2 proposes max_dma_maps 65535 and fails the device when
	// the server announces more.
	if m, _ := doc.Capabilities["max_dma_maps"].(float64); m < 1 || m > 65535 {
		t.Errorf("max_dma_maps %v: QEMU's client accepts 1..65535", doc.Capabilities["max_dma_maps"])
	}
	if _, errno := r.cl.try(vuwire.CmdVersion, []byte{1, 0, 0, 0}); errno != syscall.ENOTSUP {
		t.Errorf("major 1: errno %v, want ENOTSUP", errno)
	}
	if _, errno := r.cl.try(vuwire.CmdVersion, []byte{0, 0, 0, 0, '{', '}'}); errno != syscall.EINVAL {
		t.Errorf("JSON without NUL: errno %v, want EINVAL", errno)
	}
}

func TestDeviceRegionAndIRQInfoDescribeTheModel(t *testing.T) {
	r := newRig(t)
	r.cl.negotiate()
	info := r.cl.call(vuwire.CmdDeviceGetInfo, u32s(16, 0, 0, 0))
	if want := u32s(16, vuwire.DeviceFlagPCI|vuwire.DeviceFlagReset, vuwire.NumRegions, vuwire.NumIRQs); string(info) != string(want) {
		t.Errorf("DEVICE_GET_INFO %x, want %x", info, want)
	}
	for idx, want := range map[uint32]struct {
		size  uint64
		flags uint32
	}{
		0: {4096, vuwire.RegionFlagRead | vuwire.RegionFlagWrite}, 1: {}, 5: {}, vuwire.RegionROM: {}, vuwire.RegionVGA: {},
		vuwire.RegionConfig: {pci.ConfigSize, vuwire.RegionFlagRead | vuwire.RegionFlagWrite},
	} {
		b := r.cl.call(vuwire.CmdRegionInfo, u32s(32, 0, idx, 0, 0, 0, 0, 0))
		if len(b) != vuwire.RegionInfoSize || le.Uint32(b[8:]) != idx || le.Uint64(b[16:]) != want.size || le.Uint32(b[4:]) != want.flags {
			t.Errorf("region %d info %x, want size %d flags %#x", idx, b, want.size, want.flags)
		}
	}
	if _, errno := r.cl.try(vuwire.CmdRegionInfo, u32s(32, 0, vuwire.NumRegions, 0, 0, 0, 0, 0)); errno != syscall.EINVAL {
		t.Errorf("region %d: errno %v, want EINVAL", vuwire.NumRegions, errno)
	}
	if _, errno := r.cl.try(vuwire.CmdRegionInfo, u32s(16, 0, 0, 0)); errno != syscall.EINVAL {
		t.Errorf("argsz 16: errno %v, want EINVAL", errno)
	}
	for idx := uint32(0); idx < vuwire.NumIRQs; idx++ {
		b := r.cl.call(vuwire.CmdIRQInfo, u32s(16, 0, idx, 0))
		count := le.Uint32(b[12:])
		if want := map[bool]uint32{true: 4, false: 0}[idx == vuwire.IRQMSI]; count != want {
			t.Errorf("IRQ index %d count %d, want %d", idx, count, want)
		}
	}
}

func TestConfigSpaceHasIDsMSICapabilityNoPinAndBARSizing(t *testing.T) {
	r := newRig(t)
	c := r.cl
	if id := c.read32(vuwire.RegionConfig, 0); id != 0x0306_17cb {
		t.Errorf("vendor/device %#x", id)
	}
	if pin := c.read(vuwire.RegionConfig, pci.CfgInterruptPin, 1)[0]; pin != 0 {
		t.Errorf("Interrupt Pin %d, want 0 (MSI only)", pin)
	}
	// The capability list, as a kernel walks it: PM, then MSI.
	caps := map[byte]uint64{}
	for ptr, n := c.read(vuwire.RegionConfig, pci.CfgCapPtr, 1)[0], 0; ptr != 0 && n < 48; n++ {
		hdr := c.read(vuwire.RegionConfig, uint64(ptr), 2)
		caps[hdr[0]] = uint64(ptr)
		ptr = hdr[1]
	}
	if len(caps) != 2 || caps[pmCapID] == 0 || caps[pci.CapIDMSI] == 0 {
		t.Fatalf("capabilities %v, want PM and MSI", caps)
	}
	msi := c.read(vuwire.RegionConfig, caps[pci.CapIDMSI], 4)
	if ctrl := le.Uint16(msi[2:]); ctrl&pci.MSICtrl64 == 0 || (ctrl>>1)&7 != 2 {
		t.Errorf("MSI control %#x: want 64-bit, 4 vectors capable", ctrl)
	}
	// PME from D3hot is what makes Linux's mhi_pci_generic use runtime PM.
	if pmc := le.Uint16(c.read(vuwire.RegionConfig, caps[pmCapID]+pmPMC, 2)); pmc&(1<<14) == 0 || pmc&7 != 3 {
		t.Errorf("PMC %#x: want PM 1.2 with PME from D3hot", pmc)
	}
	c.write32(vuwire.RegionConfig, pci.CfgBAR0, 0xffffffff)
	if got := c.read32(vuwire.RegionConfig, pci.CfgBAR0); got != 0xfffff000 {
		t.Errorf("BAR0 after sizing write %#x, want %#x (4 KiB, 32-bit memory)", got, 0xfffff000)
	}
	c.write32(vuwire.RegionConfig, pci.CfgBAR0+4, 0xffffffff)
	if got := c.read32(vuwire.RegionConfig, pci.CfgBAR0+4); got != 0 {
		t.Errorf("absent BAR1 reads %#x, want 0", got)
	}
	if _, errno := c.try(vuwire.CmdRegionRead, access(vuwire.RegionConfig, 254, nil, 4)); errno != syscall.EINVAL {
		t.Errorf("config read past 256: errno %v, want EINVAL", errno)
	}
}

func TestD3hotStopsBARDecodingAndMSIsUntilD0(t *testing.T) {
	r := newRig(t)
	c, h := r.cl, r.model.Host
	c.negotiate()
	c.enableDevice()
	e := eventfd(t)
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 1), e)
	c.write32(0, 0, 7)
	pmcsr := uint64(pmCapOffset + pmPMCSR)
	// D3hot with PME_En, as pci_set_power_state after pci_wake_from_d3.
	c.call(vuwire.CmdRegionWrite, access(vuwire.RegionConfig, pmcsr, []byte{stateD3hot, pmcsrPMEEn >> 8}, 2))
	if v := le.Uint16(c.read(vuwire.RegionConfig, pmcsr, 2)); v&pmcsrStateMask != stateD3hot || v&pmcsrNoSoftReset == 0 || v&pmcsrPMEEn == 0 {
		t.Errorf("PMCSR %#x after the D3hot write", v)
	}
	if got := c.read32(0, 0); got != 0xffffffff {
		t.Errorf("BAR read in D3hot %#x, want all-ones", got)
	}
	h.RaiseMSI(0)
	if count(t, e) != 0 {
		t.Error("MSI delivered in D3hot")
	}
	// D1 is not supported: ignored.
	c.call(vuwire.CmdRegionWrite, access(vuwire.RegionConfig, pmcsr, []byte{1}, 1))
	c.call(vuwire.CmdRegionWrite, access(vuwire.RegionConfig, pmcsr, []byte{stateD0}, 1))
	// No_Soft_Reset: the function kept its state.
	if got := c.read32(0, 0); got != 7 {
		t.Errorf("register 0 after D3hot → D0 reads %d, want 7", got)
	}
	h.RaiseMSI(0)
	if count(t, e) != 1 {
		t.Error("MSI not delivered back in D0")
	}
}

func TestBARAccessesReachTheModelOnlyWithMemoryDecoding(t *testing.T) {
	r := newRig(t)
	c := r.cl
	r.model.Set(1, 0x1234)
	if got := c.read32(0, 4); got != 0xffffffff {
		t.Errorf("read with memory decoding off %#x, want all-ones", got)
	}
	c.enableDevice()
	if got := c.read32(0, 4); got != 0x1234 {
		t.Errorf("register 4 reads %#x, want 0x1234", got)
	}
	// Posted writes: no reply, applied in order before the next read.
	for i := range 10 {
		c.post32(0, 8, uint32(i))
	}
	if got := c.read32(0, 8); got != 9 {
		t.Errorf("after 10 posted writes register 8 reads %d, want 9", got)
	}
	// Sub-dword and misaligned accesses are not claimed.
	if got := c.read(0, 4, 2); got[0] != 0xff || got[1] != 0xff {
		t.Errorf("2-byte read %x, want all-ones", got)
	}
	c.call(vuwire.CmdRegionWrite, access(0, 6, u32s(7), 4))
	if _, errno := c.try(vuwire.CmdRegionRead, access(0, 4094, nil, 4)); errno != syscall.EINVAL {
		t.Errorf("read past the BAR: errno %v, want EINVAL", errno)
	}
	if _, errno := c.try(vuwire.CmdRegionRead, access(1, 0, nil, 4)); errno != syscall.EINVAL {
		t.Errorf("read of absent BAR1: errno %v, want EINVAL", errno)
	}
	st := r.srv.Stats()
	if st.MMIOWrites != 10 || st.MMIOReads != 2 || st.MMIOUnclaimed != 3 {
		t.Errorf("stats %+v: want 10 writes, 2 reads, 3 unclaimed", st)
	}
}

// memfd returns a memfd of size bytes, as QEMU's memory-backend-memfd.
func memfd(t *testing.T, size int) (int, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	view, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(view); unix.Close(fd) })
	return fd, view
}

func mapReq(flags uint32, offset, iova, size uint64) []byte {
	b := make([]byte, vuwire.DMAMapSize)
	le.PutUint32(b[0:], vuwire.DMAMapSize)
	le.PutUint32(b[4:], flags)
	le.PutUint64(b[8:], offset)
	le.PutUint64(b[16:], iova)
	le.PutUint64(b[24:], size)
	return b
}

func unmapReq(flags uint32, iova, size uint64) []byte {
	b := make([]byte, vuwire.DMAUnmapSize)
	le.PutUint32(b[0:], vuwire.DMAUnmapSize)
	le.PutUint32(b[4:], flags)
	le.PutUint64(b[8:], iova)
	le.PutUint64(b[16:], size)
	return b
}

func (r *rig) expectFault(t *testing.T, err error, reason string) {
	t.Helper()
	var f vpci.Fault
	if !errors.As(err, &f) || f.Reason != reason || !errors.Is(err, vpci.ErrDMAFault) {
		t.Fatalf("error %v, want a vpci.Fault %q", err, reason)
	}
	select {
	case got := <-r.faults:
		if got.Reason != reason {
			t.Errorf("fault handler got %v, want reason %q", got, reason)
		}
	default:
		t.Errorf("fault handler not called for %v", err)
	}
}

func TestDMAGoesToTheMappedMemfdAndIsCheckedLikeTheVirtualBus(t *testing.T) {
	r := newRig(t)
	c, h := r.cl, r.model.Host
	c.negotiate()
	fd, ram := memfd(t, 0x4000)
	// Guest RAM at IOVA 0x100000 from file offset 0x1000; a ROM with no
	// descriptor at 0xc0000.
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, 0x1000, 0x100000, 0x2000), fd)
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead, 0, 0xc0000, 0x1000))

	buf := make([]byte, 8)
	r.expectFault(t, h.DMARead(0x100000, buf), "bus master disabled")
	c.enableDevice()

	if err := h.DMAWrite(0x100010, []byte("mhistack")); err != nil {
		t.Fatal(err)
	}
	if got := string(ram[0x1010:0x1018]); got != "mhistack" {
		t.Errorf("guest RAM at file offset 0x1010 holds %q", got)
	}
	binary.LittleEndian.PutUint32(ram[0x1020:], 0xdeadbeef)
	if v, err := h.DMARead32(0x100020); err != nil || v != 0xdeadbeef {
		t.Errorf("DMARead32 = %#x, %v", v, err)
	}
	if err := h.DMAWrite32(0x101ffc, 42); err != nil || le.Uint32(ram[0x2ffc:]) != 42 {
		t.Errorf("DMAWrite32 at the window's last word: %v, RAM %d", err, le.Uint32(ram[0x2ffc:]))
	}
	if err := h.DMARead(0x100008, buf); err != nil || string(buf) != "\x00\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("DMARead = %q, %v", buf, err)
	}
	r.expectFault(t, h.DMARead(0x101ffc, buf), "unmapped") // crosses the end
	r.expectFault(t, h.DMAWrite(0x200000, buf), "unmapped")
	r.expectFault(t, h.DMAWrite32(0x100002, 1), "unaligned")
	r.expectFault(t, h.DMARead(0xc0000, buf), reasonNoFD)

	// A read-only window refuses writes.
	fd2, _ := memfd(t, 0x1000)
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead, 0, 0x300000, 0x1000), fd2)
	r.expectFault(t, h.DMAWrite(0x300000, buf), reasonReadOnly)
	if err := h.DMARead(0x300000, buf); err != nil {
		t.Error(err)
	}

	if _, errno := c.try(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead, 0, 0x101000, 0x2000)); errno != syscall.EEXIST {
		t.Errorf("overlapping map: errno %v, want EEXIST", errno)
	}
	if _, errno := c.try(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, 0x3000, 0x400000, 0x2000), fd); errno != syscall.EINVAL {
		t.Errorf("window past the end of the file: errno %v, want EINVAL", errno)
	}
	// An unmap of part of a window removes that part (the rest stays).
	c.call(vuwire.CmdDMAUnmap, unmapReq(0, 0x100000, 0x1000))
	r.expectFault(t, h.DMARead(0x100010, buf), "unmapped")
	if err := h.DMARead(0x101000, buf); err != nil {
		t.Errorf("the window's other page after a partial unmap: %v", err)
	}
	rep := c.call(vuwire.CmdDMAUnmap, unmapReq(0, 0x100000, 0x2000))
	if string(rep) != string(unmapReq(0, 0x100000, 0x2000)) {
		t.Errorf("DMA_UNMAP reply %x does not echo the request", rep)
	}
	r.expectFault(t, h.DMARead(0x101000, buf), "unmapped")
	c.call(vuwire.CmdDMAUnmap, unmapReq(vuwire.DMAUnmapAll, 0, 0))
	r.expectFault(t, h.DMARead(0x300000, buf), "unmapped")
	if st := r.srv.Stats(); st.DMAMaps != 3 || st.DMAFaults != 9 || st.DMAWindows != 0 {
		t.Errorf("stats %+v: want 3 maps, 9 faults, no window left", st)
	}
}

func eventfd(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// count drains an eventfd: how many times it was written since the last call.
func count(t *testing.T, fd int) uint64 {
	t.Helper()
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err == unix.EAGAIN {
		return 0
	} else if err != nil {
		t.Fatal(err)
	}
	return le.Uint64(b[:])
}

func irqSetReq(flags, index, start, cnt uint32, bools ...byte) []byte {
	return append(u32s(uint32(vuwire.IRQSetSize+len(bools)), flags, index, start, cnt), bools...)
}

func TestMSIsGoToTheInstalledEventfdsWithSharedVectorAliasing(t *testing.T) {
	r := newRig(t)
	c, h := r.cl, r.model.Host
	c.negotiate()
	c.enableDevice()
	h.RaiseMSI(0) // no eventfd yet: dropped
	e0 := eventfd(t)
	// One vector, as an x86 guest without interrupt remapping grants.
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 1), e0)
	for v := range 4 {
		h.RaiseMSI(v)
	}
	if n := count(t, e0); n != 4 {
		t.Errorf("shared vector fired %d times, want 4", n)
	}

	// Four vectors, installed two per message as a client splits them.
	e := []int{e0, eventfd(t), eventfd(t), eventfd(t)}
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 2), e[0], e[1])
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 2, 2), e[2], e[3])
	for v := range 4 {
		h.RaiseMSI(v)
		h.RaiseMSI(v + 4) // aliases to v
	}
	for v := range 4 {
		if n := count(t, e[v]); n != 2 {
			t.Errorf("vector %d fired %d times, want 2", v, n)
		}
	}
	// De-assigning vectors 2..3 (a message with no descriptors) leaves
	// two enabled: vector 3 aliases to 1.
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 2, 2))
	h.RaiseMSI(3)
	if n := count(t, e[1]); n != 1 {
		t.Errorf("vector 3 with two vectors left reached vector 1 %d times, want 1", n)
	}
	// The client may fire vectors itself.
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataBool|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 2, 0, 1))
	if count(t, e[0]) != 0 || count(t, e[1]) != 1 {
		t.Error("DATA_BOOL trigger did not fire exactly vector 1")
	}
	// Bus mastering off drops MSIs.
	c.call(vuwire.CmdRegionWrite, access(vuwire.RegionConfig, pci.CfgCommand, []byte{pci.CmdMemory, 0}, 2))
	h.RaiseMSI(0)
	if n := count(t, e[0]); n != 0 {
		t.Errorf("MSI with bus mastering off delivered %d times", n)
	}
	c.enableDevice()
	// Disable: DATA_NONE|TRIGGER, count 0.
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataNone|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 0))
	h.RaiseMSI(0)
	if n := count(t, e[0]); n != 0 {
		t.Errorf("MSI after disable delivered %d times", n)
	}
	st := r.srv.Stats()
	if st.MSIRaised != 16 || st.MSIDelivered != 13 || st.MSIDropped != 3 {
		t.Errorf("stats %+v: want 16 raised, 13 delivered, 3 dropped", st)
	}

	// Refused: a non-eventfd descriptor, a mismatched count, masking,
	// vectors past the capability, INTx.
	sock, other := socketpair(t)
	defer sock.Close()
	defer other.Close()
	sf, _ := sock.File()
	defer sf.Close()
	for name, tc := range map[string]struct {
		req []byte
		fds []int
	}{
		"socket as eventfd": {irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 1), []int{int(sf.Fd())}},
		"2 fds for 1":       {irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 1), []int{e[0], e[1]}},
		"mask":              {irqSetReq(vuwire.IRQSetDataNone|vuwire.IRQSetActionMask, vuwire.IRQMSI, 0, 1), nil},
		"past the cap":      {irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 3, 2), []int{e[0], e[1]}},
		"INTx eventfd":      {irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQINTx, 0, 1), []int{e[0]}},
		"two data flags":    {irqSetReq(vuwire.IRQSetDataNone|vuwire.IRQSetDataBool|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 1), nil},
		"bools missing":     {irqSetReq(vuwire.IRQSetDataBool|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 3, 1), nil},
	} {
		if _, errno := c.try(vuwire.CmdSetIRQs, tc.req, tc.fds...); errno != syscall.EINVAL {
			t.Errorf("%s: errno %v, want EINVAL", name, errno)
		}
	}
	// Disabling the other indexes is accepted (QEMU does it at reset).
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataNone|vuwire.IRQSetActionTrig, vuwire.IRQMSIX, 0, 0))
}

func TestDeviceResetResetsModelConfigAndInterruptsButKeepsDMA(t *testing.T) {
	r := newRig(t)
	c, h := r.cl, r.model.Host
	c.negotiate()
	fd, _ := memfd(t, 0x1000)
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, 0, 0x10000, 0x1000), fd)
	c.enableDevice()
	e := eventfd(t)
	c.call(vuwire.CmdSetIRQs, irqSetReq(vuwire.IRQSetDataEventfd|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 1), e)
	c.write32(0, 0, 5)
	c.call(vuwire.CmdDeviceReset, nil)
	if r.model.Resets.Load() != 1 {
		t.Errorf("model reset %d times, want 1", r.model.Resets.Load())
	}
	if cmd := le.Uint16(c.read(vuwire.RegionConfig, pci.CfgCommand, 2)); cmd != 0 {
		t.Errorf("command register %#x after reset, want 0", cmd)
	}
	c.enableDevice()
	if got := c.read32(0, 0); got != 0 {
		t.Errorf("register 0 after reset %d, want 0", got)
	}
	h.RaiseMSI(0)
	if n := count(t, e); n != 0 {
		t.Errorf("MSI after reset reached the old eventfd %d times", n)
	}
	if err := h.DMAWrite(0x10000, []byte{1}); err != nil {
		t.Errorf("DMA after reset: %v (maps belong to the client and survive)", err)
	}
}

func TestMalformedRequestsGetErrorRepliesAndTheConnectionSurvives(t *testing.T) {
	r := newRig(t)
	c := r.cl
	c.negotiate()
	for name, tc := range map[string]struct {
		cmd  uint16
		body []byte
		want syscall.Errno
	}{
		"short DMA_MAP":         {vuwire.CmdDMAMap, make([]byte, 8), syscall.EINVAL},
		"zero-size DMA_MAP":     {vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead, 0, 0x1000, 0), syscall.EINVAL},
		"wrapping DMA_MAP":      {vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead, 0, ^uint64(0)-10, 0x1000), syscall.EINVAL},
		"short DMA_UNMAP":       {vuwire.CmdDMAUnmap, make([]byte, 4), syscall.EINVAL},
		"dirty bitmap":          {vuwire.CmdDMAUnmap, unmapReq(vuwire.DMAUnmapDirty, 0, 0x1000), syscall.ENOTSUP},
		"short GET_INFO":        {vuwire.CmdDeviceGetInfo, nil, syscall.EINVAL},
		"small argsz GET_INFO":  {vuwire.CmdDeviceGetInfo, u32s(8, 0, 0, 0), syscall.EINVAL},
		"short IRQ_INFO":        {vuwire.CmdIRQInfo, u32s(16), syscall.EINVAL},
		"IRQ index 9":           {vuwire.CmdIRQInfo, u32s(16, 0, 9, 0), syscall.EINVAL},
		"short SET_IRQS":        {vuwire.CmdSetIRQs, u32s(20, 0x24), syscall.EINVAL},
		"short REGION_READ":     {vuwire.CmdRegionRead, make([]byte, 12), syscall.EINVAL},
		"huge REGION_READ":      {vuwire.CmdRegionRead, access(vuwire.RegionConfig, 0, nil, vuwire.MaxDataXfer+1), syscall.EINVAL},
		"REGION_WRITE w/o data": {vuwire.CmdRegionWrite, access(vuwire.RegionConfig, 0, nil, 4), syscall.EINVAL},
		"region 200":            {vuwire.CmdRegionRead, access(200, 0, nil, 4), syscall.EINVAL},
		"DMA_READ from client":  {vuwire.CmdDMARead, make([]byte, 16), syscall.EINVAL},
		"WRITE_MULTI":           {vuwire.CmdRegionWriteMulti, make([]byte, 8), syscall.ENOTSUP},
		"unknown command":       {999, nil, syscall.ENOTSUP},
	} {
		if _, errno := c.try(tc.cmd, tc.body); errno != tc.want {
			t.Errorf("%s: errno %v, want %v", name, errno, tc.want)
		}
	}
	// A stray reply is ignored; the next request is answered.
	c.send(vuwire.CmdVersion, vuwire.TypeReply, nil)
	if id := c.read32(vuwire.RegionConfig, 0); id != 0x0306_17cb {
		t.Errorf("after a stray reply vendor/device reads %#x", id)
	}
	if st := r.srv.Stats(); st.BadMessages != 17 {
		t.Errorf("BadMessages %d, want 17", st.BadMessages)
	}
}

func TestBrokenFramingDropsTheClientAndTheNextOneStartsFromPowerOn(t *testing.T) {
	r := newRig(t)
	c := r.cl
	c.negotiate()
	fd, _ := memfd(t, 0x1000)
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, 0, 0x10000, 0x1000), fd)
	c.enableDevice()
	// A size field beyond the limit: the stream cannot be trusted.
	b := make([]byte, vuwire.HeaderSize)
	vuwire.Header{ID: 1, Cmd: vuwire.CmdRegionWrite, Size: vuwire.MaxMessage + 1}.Put(b)
	c.c.Write(b)
	select {
	case err := <-r.done:
		if err == nil {
			t.Error("ServeConn returned nil for a framing error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server kept the connection after a framing error")
	}
	c.c.Close()
	if r.model.Resets.Load() != 1 {
		t.Errorf("model reset %d times on disconnect, want 1", r.model.Resets.Load())
	}
	r.connect(t)
	r.cl.negotiate()
	r.cl.enableDevice()
	if err := r.model.Host.DMAWrite(0x10000, []byte{1}); !errors.Is(err, vpci.ErrDMAFault) {
		t.Errorf("DMA through the previous client's map: %v, want a fault", err)
	}
	<-r.faults
	// A clean disconnect returns nil.
	r.cl.c.Close()
	if err := <-r.done; err != nil {
		t.Errorf("ServeConn after a clean disconnect: %v", err)
	}
}

func TestServeOverAListenerAndCloseWithAClientConnected(t *testing.T) {
	m := &vpcitest.Regs{}
	srv, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/vfu.sock"
	os.WriteFile(path, nil, 0o600)
	if _, err := Listen(path); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	os.Remove(path)
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := &client{t: t, c: nc.(*net.UnixConn)}
	cl.negotiate()
	if id := cl.read32(vuwire.RegionConfig, 0); id != 0x0306_17cb {
		t.Errorf("vendor/device %#x", id)
	}
	srv.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Close: %v, want ErrClosed", err)
	}
	if !m.Detached.Load() {
		t.Error("model not detached")
	}
	if err := srv.Serve(l); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve on a closed server: %v", err)
	}
	// A stale socket from this run is replaced by the next Listen.
	l2, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l2.Close()
}

func TestConcurrentDMAAndUnmapNeverTouchUnmappedMemory(t *testing.T) {
	r := newRig(t)
	c, h := r.cl, r.model.Host
	c.negotiate()
	c.enableDevice()
	fd, _ := memfd(t, 0x10000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0x1000)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = h.DMAWrite(0x40000, buf)
				_, _ = h.DMARead32(0x40ffc)
			}
		}()
	}
	for range 200 {
		c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, 0, 0x40000, 0x10000), fd)
		c.call(vuwire.CmdDMAUnmap, unmapReq(0, 0x40000, 0x10000))
	}
	close(stop)
	wg.Wait()
	for len(r.faults) > 0 {
		if f := <-r.faults; f.Reason != "unmapped" {
			t.Errorf("fault %v, want only unmapped", f)
		}
	}
}
