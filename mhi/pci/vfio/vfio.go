//go:build linux

// Package vfio drives a real PCI function from user space through Linux
// VFIO: it implements pci.Device with BARs mapped into the process, a DMA
// arena pinned and mapped into the IOMMU below 4 GiB, and MSI/MSI-X vectors
// delivered to eventfds on the Go netpoller.
//
// The device must be bound to vfio-pci first (hack/vfio-bind.sh, or
// Sysfs.Bind). Then:
//
//	dev, err := vfio.Open("0000:01:00.0", nil) // container/group or iommufd
//	bar, _ := dev.BAR(0)
//	vecs, _ := dev.Interrupts().Enable(4)
//
// Open uses the iommufd + VFIO cdev interface when the kernel offers it and
// otherwise the type1 container/group interface. Errors say what to fix and
// match the sentinels of errors.go with errors.Is. See docs/VFIO.md.
package vfio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mhistack/mhistack/mhi/pci"
)

// Backend selects the kernel interface Open uses.
type Backend int

const (
	// BackendAuto uses iommufd + cdev when /dev/iommu and the device's
	// cdev exist and work, and type1 otherwise.
	BackendAuto Backend = iota
	// BackendType1 forces the legacy container/group interface.
	BackendType1
	// BackendIOMMUFD forces iommufd + VFIO device cdev.
	BackendIOMMUFD
)

func (b Backend) String() string {
	switch b {
	case BackendType1:
		return "type1"
	case BackendIOMMUFD:
		return "iommufd"
	}
	return "auto"
}

// HugePages selects the page size of the DMA arena.
type HugePages int

const (
	// HugePagesAuto tries 2 MiB hugetlb pages and falls back to normal
	// pages when none are reserved.
	HugePagesAuto HugePages = iota
	// HugePagesOff uses normal pages.
	HugePagesOff
	// HugePagesRequire fails Open when no hugetlb pages are free.
	HugePagesRequire
)

// Options tune Open. The zero value (or nil) is the right choice for a modem.
type Options struct {
	Backend   Backend
	HugePages HugePages
	// DMASize is the size of the DMA arena, mapped once into the IOMMU
	// and sub-allocated by DMA().Alloc (default 16 MiB). It is pinned and
	// counts against RLIMIT_MEMLOCK. The arena does not grow: size it
	// from what will be allocated (ArenaSize of mhi.DMASize plus
	// link.DMASize, as stack.Open does).
	DMASize int
	// DMASizeFor, when set, is called once the function's IDs are read
	// and before the arena is created; a positive result replaces
	// DMASize. It lets a caller size the arena from the modem profile
	// the IDs select.
	DMASizeFor func(pci.Info) int
	// IOVABase is the lowest IOVA the arena may use (default 1 MiB, so a
	// zero or small garbage address written by a buggy driver faults).
	// The arena always ends at or below 4 GiB.
	IOVABase uint64
	// IOVALimit lowers the 4 GiB ceiling, for devices with a narrower DMA
	// mask (QEMU's edu has 28 bits).
	IOVALimit uint64
	// Sysfs and DevRoot locate /sys and /dev (for tests).
	Sysfs   Sysfs
	DevRoot string
}

const defaultDMASize = 16 << 20

// ArenaSize returns the arena size for need bytes of DMA allocations
// (each counted with its alignment padding, as mhi.DMAFootprint does):
// need plus an eighth and 1 MiB of headroom for the fragmentation of
// buffers freed and allocated again, rounded up to whole 2 MiB hugepages.
func ArenaSize(need int) int {
	return int(alignUp(uint64(need+need/8+1<<20), hugePageSize))
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.DMASize <= 0 {
		r.DMASize = defaultDMASize
	}
	if r.IOVABase == 0 {
		r.IOVABase = 1 << 20
	}
	if r.IOVALimit == 0 || r.IOVALimit > pci.Limit4G {
		r.IOVALimit = pci.Limit4G
	}
	if r.DevRoot == "" {
		r.DevRoot = "/dev"
	}
	return r
}

// Open opens the PCI function at addr ("0000:01:00.0"), which must be bound
// to vfio-pci, and prepares its DMA arena. Close releases everything.
func Open(addr string, opts *Options) (*Device, error) {
	o := opts.withDefaults()
	addr, err := NormalizeAddress(addr)
	if err != nil {
		return nil, err
	}
	sys := o.Sysfs
	if !sys.Exists(addr) {
		return nil, fmt.Errorf("%w: %s (lspci -D lists the addresses)", ErrNoDevice, addr)
	}
	group, err := sys.IOMMUGroup(addr)
	if err != nil {
		return nil, err
	}
	drv, err := sys.Driver(addr)
	if err != nil {
		return nil, err
	}
	if drv != VFIODriver {
		now := "no driver"
		if drv != "" {
			now = "driver " + drv
		}
		return nil, fmt.Errorf("%w: %s is bound to %s; run 'hack/vfio-bind.sh bind %s' (as root)", ErrNotBound, addr, now, addr)
	}

	var (
		fd  int
		mmu iommu
	)
	cdev := sys.VFIODevice(addr)
	_, iommuErr := os.Stat(filepath.Join(o.DevRoot, "iommu"))
	switch {
	case o.Backend == BackendIOMMUFD:
		fd, mmu, err = openIOMMUFD(o.DevRoot, addr, cdev)
	case o.Backend == BackendAuto && cdev != "" && iommuErr == nil:
		fd, mmu, err = openIOMMUFD(o.DevRoot, addr, cdev)
		if err != nil {
			cdevErr := err
			fd, mmu, err = openType1(o.DevRoot, sys, addr, group)
			if err != nil {
				err = fmt.Errorf("%w (iommufd also failed: %v)", err, cdevErr)
			}
		}
	default:
		fd, mmu, err = openType1(o.DevRoot, sys, addr, group)
	}
	if err != nil {
		return nil, err
	}
	d, err := newDevice(addr, fd, mmu, o)
	if err != nil {
		return nil, errors.Join(err, closeFD(fd), mmu.close())
	}
	return d, nil
}

// iommu is the DMA-mapping half of a backend: type1 container or iommufd
// IOAS.
type iommu interface {
	info() IOMMUInfo
	mapDMA(vaddr uintptr, iova, size uint64) error
	unmapDMA(iova, size uint64) error
	close() error
	name() string
}

// errnoHint turns an errno from opening a VFIO node into advice.
func errnoHint(err error, path string) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return path + " does not exist"
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("no permission on %s: run as root or give your user the device node (see docs/VFIO.md)", path)
	}
	return strings.TrimPrefix(err.Error(), "open "+path+": ")
}
