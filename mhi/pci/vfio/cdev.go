//go:build linux

package vfio

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioas is the iommufd interface (Linux ≥ 6.6 with CONFIG_IOMMUFD and
// CONFIG_VFIO_DEVICE_CDEV): the device cdev /dev/vfio/devices/vfioN is
// bound to an iommufd (/dev/iommu) and attached to an I/O address space
// allocated there; DMA is mapped into that IOAS (iommufd.h, vfio.h
// VFIO_DEVICE_BIND_IOMMUFD; Documentation/driver-api/vfio.rst, "VFIO
// Device cdev"). Debian's kernels lack it, so it is exercised by a fake
// kernel in cdev_test.go.
type ioas struct {
	iommufd int
	id      uint32
	inf     IOMMUInfo
}

func openIOMMUFD(devRoot, addr, cdev string) (fd int, _ iommu, err error) {
	if cdev == "" {
		return -1, nil, fmt.Errorf("vfio: %s has no VFIO cdev (kernel without CONFIG_VFIO_DEVICE_CDEV, or not bound to vfio-pci)", addr)
	}
	a := &ioas{iommufd: -1}
	fd = -1
	defer func() {
		if err != nil {
			err = errors.Join(err, closeFD(fd), a.close())
			fd = -1
		}
	}()
	ipath := filepath.Join(devRoot, "iommu")
	if a.iommufd, err = openFile(ipath); err != nil {
		return -1, nil, fmt.Errorf("vfio: iommufd: %s", errnoHint(err, ipath))
	}
	dpath := filepath.Join(devRoot, "vfio/devices", cdev)
	if fd, err = openFile(dpath); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return -1, nil, fmt.Errorf("%w: %s is open in another process", ErrBusy, dpath)
		}
		return -1, nil, fmt.Errorf("vfio: %s", errnoHint(err, dpath))
	}
	bind := &bindIOMMUFD{Argsz: uint32(unsafe.Sizeof(bindIOMMUFD{})), IOMMUFD: int32(a.iommufd)}
	if _, err := ioctl(fd, ioctlDeviceBindIOMMUFD, unsafe.Pointer(bind)); err != nil {
		return fd, nil, fmt.Errorf("vfio: VFIO_DEVICE_BIND_IOMMUFD(%s): %w", dpath, err)
	}
	alloc := &ioasAlloc{Size: uint32(unsafe.Sizeof(ioasAlloc{}))}
	if _, err := ioctl(a.iommufd, ioctlIOASAlloc, unsafe.Pointer(alloc)); err != nil {
		return fd, nil, fmt.Errorf("vfio: IOMMU_IOAS_ALLOC: %w", err)
	}
	a.id = alloc.OutIOASID
	att := &attachPT{Argsz: uint32(unsafe.Sizeof(attachPT{})), PtID: a.id}
	if _, err := ioctl(fd, ioctlDeviceAttachPT, unsafe.Pointer(att)); err != nil {
		return fd, nil, fmt.Errorf("vfio: VFIO_DEVICE_ATTACH_IOMMUFD_PT(ioas %d): %w", a.id, err)
	}
	if a.inf, err = a.ranges(); err != nil {
		return fd, nil, err
	}
	return fd, a, nil
}

// ranges reads the allowed IOVA ranges. The kernel answers EMSGSIZE with
// the count when the array is too small, so ask with none first.
func (a *ioas) ranges() (IOMMUInfo, error) {
	q := &ioasIOVARanges{Size: uint32(unsafe.Sizeof(ioasIOVARanges{})), IOASID: a.id}
	_, err := ioctl(a.iommufd, ioctlIOASIOVARanges, unsafe.Pointer(q))
	for try := 0; errors.Is(err, unix.EMSGSIZE) && q.NumIOVAs > 0 && try < 4; try++ {
		rs := make([]iovaRange, q.NumIOVAs)
		// The struct carries a user pointer to Go memory: pin it so
		// the kernel writes where the slice still is.
		var pin runtime.Pinner
		pin.Pin(&rs[0])
		q.AllowedIOVAs = uint64(uintptr(unsafe.Pointer(&rs[0])))
		_, err = ioctl(a.iommufd, ioctlIOASIOVARanges, unsafe.Pointer(q))
		pin.Unpin()
		if err == nil {
			inf := IOMMUInfo{PageSizes: q.OutIOVAAlignment}
			for _, r := range rs[:q.NumIOVAs] {
				inf.Ranges = append(inf.Ranges, IOVARange(r))
			}
			return inf, nil
		}
	}
	if err != nil {
		return IOMMUInfo{}, fmt.Errorf("vfio: IOMMU_IOAS_IOVA_RANGES: %w", err)
	}
	// Zero ranges: nothing is mappable.
	return IOMMUInfo{PageSizes: q.OutIOVAAlignment, Ranges: []IOVARange{}}, nil
}

func (a *ioas) info() IOMMUInfo { return a.inf }
func (a *ioas) name() string    { return fmt.Sprintf("iommufd (ioas %d)", a.id) }

func (a *ioas) mapDMA(vaddr uintptr, iova, size uint64) error {
	m := &ioasMap{
		Size:   uint32(unsafe.Sizeof(ioasMap{})),
		Flags:  ioasMapFixedIOVA | ioasMapReadable | ioasMapWriteable,
		IOASID: a.id, UserVA: uint64(vaddr), Length: size, IOVA: iova,
	}
	_, err := ioctl(a.iommufd, ioctlIOASMap, unsafe.Pointer(m))
	return err
}

func (a *ioas) unmapDMA(iova, size uint64) error {
	u := &ioasUnmap{Size: uint32(unsafe.Sizeof(ioasUnmap{})), IOASID: a.id, IOVA: iova, Length: size}
	if _, err := ioctl(a.iommufd, ioctlIOASUnmap, unsafe.Pointer(u)); err != nil {
		return fmt.Errorf("vfio: IOMMU_IOAS_UNMAP %#x+%#x: %w", iova, size, err)
	}
	return nil
}

// close destroys the IOAS and closes the iommufd; the device fd, whose
// close detaches it from the IOAS, must be closed first.
func (a *ioas) close() error {
	if a.iommufd < 0 {
		return nil
	}
	var errs []error
	if a.id != 0 {
		d := &iommuDestroy{Size: uint32(unsafe.Sizeof(iommuDestroy{})), ID: a.id}
		if _, err := ioctl(a.iommufd, ioctlIOMMUDestroy, unsafe.Pointer(d)); err != nil {
			errs = append(errs, fmt.Errorf("vfio: IOMMU_DESTROY(%d): %w", a.id, err))
		}
	}
	errs = append(errs, closeFD(a.iommufd))
	a.iommufd = -1
	return errors.Join(errs...)
}
