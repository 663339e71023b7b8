//go:build linux

package vfio

import "errors"

// Sentinel errors. Open wraps them with the device, the cause and the
// command that fixes it; match them with errors.Is.
var (
	// ErrNoVFIO: the kernel offers neither /dev/vfio/vfio nor /dev/iommu.
	ErrNoVFIO = errors.New("vfio: VFIO not available (/dev/vfio/vfio missing): load it with 'modprobe vfio-pci'")
	// ErrNoIOMMUGroup: the device has no IOMMU group, so the IOMMU is off.
	ErrNoIOMMUGroup = errors.New("vfio: device has no IOMMU group: enable the IOMMU (VT-d/AMD-Vi in firmware, intel_iommu=on or amd_iommu=on on the kernel command line)")
	// ErrNotBound: the device is bound to another driver, or to none.
	ErrNotBound = errors.New("vfio: device not bound to vfio-pci")
	// ErrGroupNotViable: another device of the IOMMU group is bound to a
	// host driver.
	ErrGroupNotViable = errors.New("vfio: IOMMU group not viable")
	// ErrBusy: another process (or another Open) holds the group or device.
	ErrBusy = errors.New("vfio: device busy")
	// ErrMemlock: pinning the DMA arena exceeds RLIMIT_MEMLOCK.
	ErrMemlock = errors.New("vfio: locked memory limit too low")
	// ErrNoInterruptRemapping: type1 refused the container because the
	// platform cannot isolate MSIs.
	ErrNoInterruptRemapping = errors.New("vfio: no interrupt remapping")
	// ErrNoDevice: no PCI function at that address.
	ErrNoDevice = errors.New("vfio: no such PCI device")
)
