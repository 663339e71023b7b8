//go:build linux

package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
)

// fakeKernel answers the iommufd and VFIO device ioctls the way Linux ≥ 6.6
// documents them, so the cdev path, which no Debian kernel offers, runs in
// tests. The "device node" is a regular file: config space and BAR0 live in
// it at their region offsets, so pread/pwrite and mmap work for real.
type fakeKernel struct {
	t        *testing.T
	iommuFD  string // paths, to recognise fds
	deviceFD string

	mu       sync.Mutex
	calls    []string
	bound    bool
	attached bool
	ioasID   uint32
	maps     map[uint64]uint64 // iova -> length
	eventfds []int32
	resets   int
	destroy  int
	// reqIRQ offers the request interrupt index; reqFD is the eventfd
	// installed on it (-1: none).
	reqIRQ bool
	reqFD  int32
}

const (
	fakeCfgOffset  = 0x10000
	fakeBAR0Size   = 0x1000
	fakeMSIXCount  = 8
	fakeIOASID     = 7
	fakeVendorID   = 0x17cb
	fakeDeviceID   = 0x0306
	fakeDeviceFile = "vfio0"
)

func (k *fakeKernel) path(fd int) string {
	p, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return p
}

func (k *fakeKernel) ioctl(fd int, req uintptr, arg unsafe.Pointer) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch k.path(fd) {
	case k.iommuFD:
		return k.iommufd(req, arg)
	case k.deviceFD:
		return k.device(req, arg)
	}
	return -1, unix.ENOTTY
}

func (k *fakeKernel) ioctlValue(fd int, req, arg uintptr) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.path(fd) == k.deviceFD && req == ioctlDeviceReset && k.bound {
		k.resets++
		k.calls = append(k.calls, "RESET")
		return 0, nil
	}
	return -1, unix.ENOTTY
}

func (k *fakeKernel) iommufd(req uintptr, arg unsafe.Pointer) (int, error) {
	switch req {
	case ioctlIOASAlloc:
		a := (*ioasAlloc)(arg)
		if a.Size != 12 || a.Flags != 0 {
			return -1, unix.EINVAL
		}
		k.ioasID, a.OutIOASID = fakeIOASID, fakeIOASID
		k.calls = append(k.calls, "IOAS_ALLOC")
	case ioctlIOASIOVARanges:
		q := (*ioasIOVARanges)(arg)
		if q.Size != 32 || q.IOASID != k.ioasID || !k.attached {
			return -1, unix.EINVAL
		}
		ranges := []iovaRange{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}
		q.OutIOVAAlignment = 4096
		if q.NumIOVAs < uint32(len(ranges)) {
			q.NumIOVAs = uint32(len(ranges))
			k.calls = append(k.calls, "IOVA_RANGES(EMSGSIZE)")
			return -1, unix.EMSGSIZE
		}
		// The kernel writes through the user pointer in the struct.
		dst := unsafe.Slice((*iovaRange)(*(*unsafe.Pointer)(unsafe.Pointer(&q.AllowedIOVAs))), q.NumIOVAs)
		copy(dst, ranges)
		q.NumIOVAs = uint32(len(ranges))
		k.calls = append(k.calls, "IOVA_RANGES")
	case ioctlIOASMap:
		m := (*ioasMap)(arg)
		want := uint32(ioasMapFixedIOVA | ioasMapReadable | ioasMapWriteable)
		if m.Size != 40 || m.IOASID != k.ioasID || m.Flags != want || m.Reserved != 0 || m.IOVA%4096 != 0 || m.Length%4096 != 0 || m.UserVA == 0 {
			return -1, unix.EINVAL
		}
		k.maps[m.IOVA] = m.Length
		k.calls = append(k.calls, fmt.Sprintf("IOAS_MAP(%#x,%#x)", m.IOVA, m.Length))
	case ioctlIOASUnmap:
		u := (*ioasUnmap)(arg)
		if u.Size != 24 || u.IOASID != k.ioasID || k.maps[u.IOVA] != u.Length {
			return -1, unix.ENOENT
		}
		delete(k.maps, u.IOVA)
		k.calls = append(k.calls, "IOAS_UNMAP")
	case ioctlIOMMUDestroy:
		d := (*iommuDestroy)(arg)
		if d.Size != 8 || d.ID != k.ioasID {
			return -1, unix.ENOENT
		}
		k.destroy++
		k.calls = append(k.calls, "DESTROY")
	default:
		return -1, unix.ENOTTY
	}
	return 0, nil
}

func (k *fakeKernel) device(req uintptr, arg unsafe.Pointer) (int, error) {
	if req == ioctlDeviceBindIOMMUFD {
		b := (*bindIOMMUFD)(arg)
		if b.Argsz < 16 || b.Flags != 0 || k.path(int(b.IOMMUFD)) != k.iommuFD {
			return -1, unix.EINVAL
		}
		k.bound, b.OutDevID = true, 1
		k.calls = append(k.calls, "BIND_IOMMUFD")
		return 0, nil
	}
	if !k.bound {
		// Until bound, a cdev device fd refuses everything.
		return -1, unix.EINVAL
	}
	switch req {
	case ioctlDeviceAttachPT:
		a := (*attachPT)(arg)
		if a.Argsz < 12 || a.PtID != k.ioasID {
			return -1, unix.EINVAL
		}
		k.attached = true
		k.calls = append(k.calls, "ATTACH_PT")
	case ioctlDeviceGetInfo:
		d := (*deviceInfo)(arg)
		d.Flags, d.NumRegions, d.NumIRQs = devFlagPCI|devFlagReset, numPCIRegion, 5
	case ioctlDeviceGetRegion:
		r := (*regionInfo)(arg)
		switch r.Index {
		case 0:
			r.Flags, r.Size, r.Offset = regionRead|regionWrite|regionMmap, fakeBAR0Size, 0
		case RegionConfig:
			r.Flags, r.Size, r.Offset = regionRead|regionWrite, 0x100, fakeCfgOffset
		default:
			if r.Index >= numPCIRegion {
				return -1, unix.EINVAL
			}
			r.Flags, r.Size, r.Offset = 0, 0, 0
		}
	case ioctlDeviceGetIRQInfo:
		q := (*irqInfo)(arg)
		q.Flags, q.Count = 0, 0
		if q.Index == IRQMSIX {
			q.Flags, q.Count = irqEventfd|irqNoResize, fakeMSIXCount
		}
		if q.Index == IRQReq && k.reqIRQ {
			q.Flags, q.Count = irqEventfd, 1
		}
	case ioctlDeviceSetIRQs:
		h := (*irqSetHdr)(arg)
		if h.Index == IRQReq && k.reqIRQ && h.Flags == irqSetDataEventfd|irqSetActionTrigger && h.Count == 1 {
			k.reqFD = *(*int32)(unsafe.Add(arg, unsafe.Sizeof(*h)))
			k.calls = append(k.calls, "SET_IRQS(request eventfd)")
			return 0, nil
		}
		if h.Index != IRQMSIX || h.Flags&irqSetActionTrigger == 0 {
			return -1, unix.EINVAL
		}
		switch {
		case h.Flags&irqSetDataEventfd != 0:
			fds := unsafe.Slice((*int32)(unsafe.Add(arg, unsafe.Sizeof(*h))), h.Count)
			if h.Argsz != uint32(unsafe.Sizeof(*h))+4*h.Count || h.Start != 0 {
				return -1, unix.EINVAL
			}
			k.eventfds = append([]int32(nil), fds...)
			k.calls = append(k.calls, fmt.Sprintf("SET_IRQS(eventfd x%d)", h.Count))
		case h.Flags&irqSetDataNone != 0 && h.Count == 0:
			k.eventfds = nil
			k.calls = append(k.calls, "SET_IRQS(disable)")
		case h.Flags&irqSetDataNone != 0 && h.Count == 1:
			// Loopback: the kernel signals the vector's eventfd.
			if int(h.Start) >= len(k.eventfds) {
				return -1, unix.EINVAL
			}
			var one [8]byte
			one[0] = 1
			if _, err := unix.Write(int(k.eventfds[h.Start]), one[:]); err != nil {
				return -1, err
			}
			k.calls = append(k.calls, fmt.Sprintf("SET_IRQS(trigger %d)", h.Start))
		default:
			return -1, unix.EINVAL
		}
	default:
		return -1, unix.ENOTTY
	}
	return 0, nil
}

// installFakeKernel builds /sys and /dev for one function with a VFIO cdev
// and routes ioctls to a fakeKernel until the test ends.
func installFakeKernel(t *testing.T) (*fakeKernel, *Options) {
	f := newFakeSysfs(t)
	f.addDevice("0000:01:00.0", "0x17cb", "0x0306", 3, VFIODriver)
	f.mkdir("devices/pci0000:00/0000:01:00.0/vfio-dev/" + fakeDeviceFile)
	dev := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dev, "vfio/devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	k := &fakeKernel{t: t, iommuFD: filepath.Join(dev, "iommu"), deviceFD: filepath.Join(dev, "vfio/devices", fakeDeviceFile), maps: map[uint64]uint64{}, reqFD: -1}
	if err := os.WriteFile(k.iommuFD, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	node := make([]byte, fakeCfgOffset+0x100)
	cfg := node[fakeCfgOffset:]
	binary.LittleEndian.PutUint16(cfg[pci.CfgVendorID:], fakeVendorID)
	binary.LittleEndian.PutUint16(cfg[pci.CfgDeviceID:], fakeDeviceID)
	binary.LittleEndian.PutUint16(cfg[pci.CfgCommand:], 0x0)
	cfg[pci.CfgClass+2], cfg[pci.CfgClass+1] = 0x0d, 0x80
	binary.LittleEndian.PutUint32(node[0x10:], 0x12345678) // a BAR0 register
	if err := os.WriteFile(k.deviceFD, node, 0o644); err != nil {
		t.Fatal(err)
	}
	oldIoctl, oldValue := sysIoctl, sysIoctlValue
	sysIoctl, sysIoctlValue = k.ioctl, k.ioctlValue
	t.Cleanup(func() { sysIoctl, sysIoctlValue = oldIoctl, oldValue })
	return k, &Options{Sysfs: Sysfs{Root: f.root}, DevRoot: dev, HugePages: HugePagesOff, DMASize: 1 << 20}
}

func TestIOMMUFDPathOpensMapsInterruptsAndTearsDown(t *testing.T) {
	k, opts := installFakeKernel(t)
	d, err := Open("0000:01:00.0", opts) // BackendAuto: /dev/iommu and vfio-dev exist
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if !strings.HasPrefix(d.Backend(), "iommufd") {
		t.Errorf("backend %q", d.Backend())
	}
	if info := d.Info(); info.Vendor != fakeVendorID || info.Device != fakeDeviceID || info.Class != 0x0d8000 {
		t.Errorf("Info = %v class %06x", info, info.Class)
	}
	if got := d.IOMMU(); len(got.Ranges) != 2 || got.Ranges[1].Start != 0xfef00000 || got.PageSizes != 4096 {
		t.Errorf("IOMMU info %+v", got)
	}
	a := d.Arena()
	if a.IOVA != 1<<20 || a.Size != 1<<20 || k.maps[a.IOVA] != a.Size {
		t.Errorf("arena %+v, kernel maps %v", a, k.maps)
	}
	buf, err := d.DMA().Alloc(4096, 4096)
	if err != nil || buf.IOVA < a.IOVA || buf.IOVA+4096 > a.IOVA+a.Size {
		t.Fatalf("Alloc = %+v, %v", buf, err)
	}

	bar, err := d.BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	if !bar.(*BAR).Mapped() || bar.Read32(0x10) != 0x12345678 {
		t.Errorf("BAR0 mapped=%v reg=%#x", bar.(*BAR).Mapped(), bar.Read32(0x10))
	}
	if err := d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	var cmd [2]byte
	if err := d.ConfigRead(pci.CfgCommand, cmd[:]); err != nil || cmd[0] != pci.CmdMemory|pci.CmdBusMaster {
		t.Errorf("command after SetBusMaster = % x, %v", cmd, err)
	}

	in := d.Interrupts()
	if d.InterruptKind() != "MSI-X" || in.Max() != fakeMSIXCount {
		t.Errorf("interrupts %s x%d", d.InterruptKind(), in.Max())
	}
	vecs, err := in.Enable(3)
	if err != nil || len(vecs) != 3 {
		t.Fatalf("Enable(3) = %d, %v", len(vecs), err)
	}
	done := make(chan error, 1)
	go func() { _, err := vecs[2].Wait(); done <- err }()
	if err := vecs[2].Trigger(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("vector 2 did not fire")
	}
	if err := d.Reset(); err != nil || k.resets != 1 {
		t.Errorf("Reset = %v (%d resets)", err, k.resets)
	}

	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := vecs[0].Wait(); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Wait after Close = %v", err)
	}
	if _, err := d.DMA().Alloc(64, 1); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Alloc after Close = %v", err)
	}
	if len(k.maps) != 0 || k.destroy != 1 {
		t.Errorf("after Close: maps %v, destroys %d", k.maps, k.destroy)
	}
	want := "BIND_IOMMUFD IOAS_ALLOC ATTACH_PT IOVA_RANGES(EMSGSIZE) IOVA_RANGES IOAS_MAP(0x100000,0x100000) " +
		"SET_IRQS(eventfd x3) SET_IRQS(trigger 2) RESET SET_IRQS(disable) IOAS_UNMAP DESTROY"
	if got := strings.Join(k.calls, " "); got != want {
		t.Errorf("ioctl sequence\n got: %s\nwant: %s", got, want)
	}
}

func TestAutoFallsBackToType1WhenIOMMUFDFails(t *testing.T) {
	k, opts := installFakeKernel(t)
	// A kernel whose cdev refuses the bind (say, iommufd compiled out
	// behind a stale node): Auto must try type1 and report both.
	k.deviceFD = "/nonexistent"
	_, err := Open("0000:01:00.0", opts)
	if !errors.Is(err, ErrNoVFIO) || !strings.Contains(err.Error(), "iommufd also failed") {
		t.Fatalf("Open = %v; want the type1 error (no /dev/vfio/vfio) plus the iommufd one", err)
	}
	opts.Backend = BackendIOMMUFD
	if _, err := Open("0000:01:00.0", opts); err == nil || !strings.Contains(err.Error(), "BIND_IOMMUFD") {
		t.Fatalf("forced iommufd Open = %v", err)
	}
}

func TestIOMMUFDNeedsACdev(t *testing.T) {
	_, opts := installFakeKernel(t)
	opts.Backend = BackendIOMMUFD
	if err := os.RemoveAll(filepath.Join(opts.Sysfs.Root, "devices/pci0000:00/0000:01:00.0/vfio-dev")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("0000:01:00.0", opts); err == nil || !strings.Contains(err.Error(), "CONFIG_VFIO_DEVICE_CDEV") {
		t.Fatalf("Open without cdev = %v", err)
	}
}
