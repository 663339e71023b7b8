//go:build linux

package vfio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysIoctl is the ioctl system call. The argument travels as an
// unsafe.Pointer down to the Syscall so the object it points to stays alive
// and, being passed through a function value, lives on the heap, which the
// garbage collector does not move. Tests replace it with a fake kernel.
var sysIoctl = func(fd int, req uintptr, arg unsafe.Pointer) (int, error) {
	// Syscall, not RawSyscall: MAP_DMA of a large arena pins pages for a
	// while and must let the scheduler run other goroutines.
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

// sysIoctlValue is an ioctl whose argument is a plain integer
// (VFIO_CHECK_EXTENSION, VFIO_SET_IOMMU, VFIO_DEVICE_RESET).
var sysIoctlValue = func(fd int, req, arg uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) (int, error) { return sysIoctl(fd, req, arg) }

func ioctlValue(fd int, req, arg uintptr) (int, error) { return sysIoctlValue(fd, req, arg) }
