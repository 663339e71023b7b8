//go:build linux

package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// type1 is the legacy VFIO interface: a container (/dev/vfio/vfio) holding
// the device's group (/dev/vfio/N) with a type1 IOMMU; the device fd comes
// from the group (Documentation/driver-api/vfio.rst: its usage example gives
// the exact order).
type type1 struct {
	container, group int
	groupN           int
	inf              IOMMUInfo
}

func openFile(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &pathError{path, err}
	}
	return fd, nil
}

// pathError is os.PathError without importing os into every call site.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

func closeFD(fd int) error {
	if fd < 0 {
		return nil
	}
	return unix.Close(fd)
}

func openType1(devRoot string, sys Sysfs, addr string, groupN int) (fd int, _ iommu, err error) {
	t := &type1{container: -1, group: -1, groupN: groupN}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.close())
		}
	}()
	cpath := filepath.Join(devRoot, "vfio/vfio")
	if t.container, err = openFile(cpath); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, nil, fmt.Errorf("%w (%s)", ErrNoVFIO, cpath)
		}
		return -1, nil, fmt.Errorf("vfio: %s", errnoHint(err, cpath))
	}
	if v, err := ioctlValue(t.container, ioctlGetAPIVersion, 0); err != nil || v != apiVersion {
		return -1, nil, fmt.Errorf("vfio: %s: API version %d (err %v), want %d", cpath, v, err, apiVersion)
	}
	iommuType := uintptr(extType1v2)
	if ok, _ := ioctlValue(t.container, ioctlCheckExtension, extType1v2); ok != 1 {
		iommuType = extType1
		if ok, _ := ioctlValue(t.container, ioctlCheckExtension, extType1); ok != 1 {
			return -1, nil, fmt.Errorf("vfio: no type1 IOMMU driver: run 'modprobe vfio_iommu_type1'")
		}
	}

	gpath := filepath.Join(devRoot, "vfio", strconv.Itoa(groupN))
	if t.group, err = openFile(gpath); err != nil {
		switch {
		case errors.Is(err, unix.EBUSY):
			return -1, nil, fmt.Errorf("%w: IOMMU group %d (%s) is open in another process", ErrBusy, groupN, gpath)
		case errors.Is(err, unix.ENOENT):
			return -1, nil, fmt.Errorf("%w: %s missing; run 'hack/vfio-bind.sh bind %s'", ErrNotBound, gpath, addr)
		}
		return -1, nil, fmt.Errorf("vfio: %s", errnoHint(err, gpath))
	}
	st := &groupStatus{Argsz: uint32(unsafe.Sizeof(groupStatus{}))}
	if _, err := ioctl(t.group, ioctlGroupGetStatus, unsafe.Pointer(st)); err != nil {
		return -1, nil, fmt.Errorf("vfio: group %d status: %w", groupN, err)
	}
	if st.Flags&groupViable == 0 {
		return -1, nil, notViable(sys, groupN, addr)
	}
	cfd := int32(t.container)
	if _, err := ioctl(t.group, ioctlGroupSetContainer, unsafe.Pointer(&cfd)); err != nil {
		return -1, nil, fmt.Errorf("vfio: attach group %d to container: %w", groupN, err)
	}
	if _, err := ioctlValue(t.container, ioctlSetIOMMU, iommuType); err != nil {
		if errors.Is(err, unix.EPERM) {
			return -1, nil, fmt.Errorf("%w: VFIO_SET_IOMMU: EPERM: the platform cannot remap interrupts; enable interrupt remapping (firmware, intremap=on in QEMU) or, accepting the risk, load vfio_iommu_type1 with allow_unsafe_interrupts=1", ErrNoInterruptRemapping)
		}
		return -1, nil, fmt.Errorf("vfio: VFIO_SET_IOMMU(%d): %w", iommuType, err)
	}
	if t.inf, err = type1Info(t.container); err != nil {
		return -1, nil, err
	}
	name := append([]byte(addr), 0)
	dfd, err := ioctl(t.group, ioctlGroupGetDeviceFD, unsafe.Pointer(&name[0]))
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return -1, nil, fmt.Errorf("%w: %s is already open", ErrBusy, addr)
		}
		return -1, nil, fmt.Errorf("vfio: VFIO_GROUP_GET_DEVICE_FD(%s): %w", addr, err)
	}
	return dfd, t, nil
}

// notViable names the group members that keep the group from being usable.
func notViable(sys Sysfs, groupN int, addr string) error {
	devs, _ := sys.GroupDevices(groupN)
	var others []string
	for _, a := range devs {
		if a == addr {
			continue
		}
		drv, _ := sys.Driver(a)
		if drv == VFIODriver || drv == "pci-stub" || drv == "" {
			continue
		}
		others = append(others, fmt.Sprintf("%s (driver %s)", a, drv))
	}
	hint := "every device of the group must be bound to vfio-pci or have no driver"
	if len(others) > 0 {
		hint = fmt.Sprintf("the group also holds %s; bind each with 'hack/vfio-bind.sh bind ADDR' or unbind it (bridges and devices the host needs cannot be shared: use another slot or an ACS-capable port)", strings.Join(others, ", "))
	}
	return fmt.Errorf("%w: IOMMU group %d of %s: %s", ErrGroupNotViable, groupN, addr, hint)
}

// type1Info queries VFIO_IOMMU_GET_INFO. The kernel raises argsz to the
// size its capability chain needs, so ask twice.
func type1Info(container int) (IOMMUInfo, error) {
	size := uint32(unsafe.Sizeof(iommuType1Info{}))
	for range 2 {
		buf := make([]byte, size)
		binary.LittleEndian.PutUint32(buf, size)
		if _, err := ioctl(container, ioctlIOMMUGetInfo, unsafe.Pointer(&buf[0])); err != nil {
			return IOMMUInfo{}, fmt.Errorf("vfio: VFIO_IOMMU_GET_INFO: %w", err)
		}
		if need := binary.LittleEndian.Uint32(buf); need > size {
			size = need
			continue
		}
		return parseIOMMUInfo(buf)
	}
	return IOMMUInfo{}, fmt.Errorf("vfio: VFIO_IOMMU_GET_INFO keeps growing")
}

func (t *type1) info() IOMMUInfo { return t.inf }
func (t *type1) name() string    { return fmt.Sprintf("type1 (group %d)", t.groupN) }

func (t *type1) mapDMA(vaddr uintptr, iova, size uint64) error {
	m := &dmaMap{Argsz: uint32(unsafe.Sizeof(dmaMap{})), Flags: dmaMapRead | dmaMapWrite, Vaddr: uint64(vaddr), IOVA: iova, Size: size}
	_, err := ioctl(t.container, ioctlIOMMUMapDMA, unsafe.Pointer(m))
	return err
}

func (t *type1) unmapDMA(iova, size uint64) error {
	u := &dmaUnmap{Argsz: uint32(unsafe.Sizeof(dmaUnmap{})), IOVA: iova, Size: size}
	if _, err := ioctl(t.container, ioctlIOMMUUnmapDMA, unsafe.Pointer(u)); err != nil {
		return fmt.Errorf("vfio: VFIO_IOMMU_UNMAP_DMA %#x+%#x: %w", iova, size, err)
	}
	if u.Size != size {
		return fmt.Errorf("vfio: VFIO_IOMMU_UNMAP_DMA %#x: unmapped %#x bytes, want %#x", iova, u.Size, size)
	}
	return nil
}

// close detaches the group and closes both fds; the device fd must be
// closed first.
func (t *type1) close() error {
	var errs []error
	if t.group >= 0 {
		if t.container >= 0 {
			// Takes no argument; fails harmlessly when the group was never attached.
			_, _ = ioctl(t.group, ioctlGroupUnsetContainer, nil)
		}
		errs = append(errs, closeFD(t.group))
		t.group = -1
	}
	errs = append(errs, closeFD(t.container))
	t.container = -1
	return errors.Join(errs...)
}
