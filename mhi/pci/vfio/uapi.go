//go:build linux

package vfio

// The Linux VFIO and iommufd user API: ioctl numbers, flags and structs,
// from include/uapi/linux/vfio.h and include/uapi/linux/iommufd.h (checked
// by uapi_test.go). All are little-endian with natural alignment; every u64
// sits at an 8-aligned offset.

// VFIO ioctls are _IO(';', 100+n): they carry no size or direction bits;
// the argsz field of each struct tells the kernel its size.
const vfioBase = ';'<<8 | 100

// Container, group and device ioctls (vfio.h).
const (
	ioctlGetAPIVersion       = vfioBase + 0  // 0x3b64
	ioctlCheckExtension      = vfioBase + 1  // 0x3b65
	ioctlSetIOMMU            = vfioBase + 2  // 0x3b66
	ioctlGroupGetStatus      = vfioBase + 3  // 0x3b67
	ioctlGroupSetContainer   = vfioBase + 4  // 0x3b68
	ioctlGroupUnsetContainer = vfioBase + 5  // 0x3b69
	ioctlGroupGetDeviceFD    = vfioBase + 6  // 0x3b6a
	ioctlDeviceGetInfo       = vfioBase + 7  // 0x3b6b
	ioctlDeviceGetRegion     = vfioBase + 8  // 0x3b6c
	ioctlDeviceGetIRQInfo    = vfioBase + 9  // 0x3b6d
	ioctlDeviceSetIRQs       = vfioBase + 10 // 0x3b6e
	ioctlDeviceReset         = vfioBase + 11 // 0x3b6f
	ioctlIOMMUGetInfo        = vfioBase + 12 // 0x3b70, on the container fd
	ioctlIOMMUMapDMA         = vfioBase + 13 // 0x3b71
	ioctlIOMMUUnmapDMA       = vfioBase + 14 // 0x3b72
	ioctlDeviceBindIOMMUFD   = vfioBase + 18 // 0x3b76, on a cdev device fd
	ioctlDeviceAttachPT      = vfioBase + 19 // 0x3b77
	ioctlDeviceDetachPT      = vfioBase + 20 // 0x3b78
)

// iommufd ioctls on /dev/iommu (iommufd.h): _IO(';', 0x80+n).
const (
	ioctlIOMMUDestroy   = ';'<<8 | 0x80 // 0x3b80
	ioctlIOASAlloc      = ';'<<8 | 0x81 // 0x3b81
	ioctlIOASIOVARanges = ';'<<8 | 0x84 // 0x3b84
	ioctlIOASMap        = ';'<<8 | 0x85 // 0x3b85
	ioctlIOASUnmap      = ';'<<8 | 0x86 // 0x3b86
)

const (
	apiVersion = 0 // VFIO_API_VERSION

	// VFIO_CHECK_EXTENSION / VFIO_SET_IOMMU values.
	extType1     = 1
	extType1v2   = 3
	extDMACC     = 4
	extNoIOMMU   = 8
	extUnmapAll  = 9
	extUpdateVA  = 10
	groupViable  = 1 << 0 // VFIO_GROUP_FLAGS_VIABLE
	groupContSet = 1 << 1 // VFIO_GROUP_FLAGS_CONTAINER_SET

	// vfio_device_info.flags
	devFlagReset = 1 << 0
	devFlagPCI   = 1 << 1
	devFlagCaps  = 1 << 7

	// vfio_region_info.flags
	regionRead  = 1 << 0
	regionWrite = 1 << 1
	regionMmap  = 1 << 2
	regionCaps  = 1 << 3

	// Region capability IDs.
	capSparseMmap   = 1
	capRegionType   = 2
	capMSIXMappable = 3

	// vfio_irq_info.flags
	irqEventfd    = 1 << 0
	irqMaskable   = 1 << 1
	irqAutomasked = 1 << 2
	irqNoResize   = 1 << 3

	// vfio_irq_set.flags
	irqSetDataNone      = 1 << 0
	irqSetDataBool      = 1 << 1
	irqSetDataEventfd   = 1 << 2
	irqSetActionMask    = 1 << 3
	irqSetActionUnmask  = 1 << 4
	irqSetActionTrigger = 1 << 5

	// vfio_iommu_type1_info.flags and capability IDs.
	iommuInfoPgsizes = 1 << 0
	iommuInfoCaps    = 1 << 1
	iommuCapIOVA     = 1
	iommuCapMigr     = 2
	iommuCapDMAAvail = 3

	// vfio_iommu_type1_dma_map.flags
	dmaMapRead  = 1 << 0
	dmaMapWrite = 1 << 1

	// iommu_ioas_map.flags
	ioasMapFixedIOVA = 1 << 0
	ioasMapWriteable = 1 << 1
	ioasMapReadable  = 1 << 2
)

// Fixed vfio-pci region and IRQ indexes.
const (
	RegionBAR0   = 0
	RegionROM    = 6
	RegionConfig = 7
	RegionVGA    = 8
	numPCIRegion = 9

	IRQINTx = 0
	IRQMSI  = 1
	IRQMSIX = 2
	IRQErr  = 3
	IRQReq  = 4
)

type groupStatus struct{ Argsz, Flags uint32 }

type deviceInfo struct {
	Argsz, Flags, NumRegions, NumIRQs, CapOffset, Pad uint32
}

type regionInfo struct {
	Argsz, Flags, Index, CapOffset uint32
	Size, Offset                   uint64
}

type capHeader struct {
	ID, Version uint16
	Next        uint32
}

type sparseArea struct{ Offset, Size uint64 }

type irqInfo struct{ Argsz, Flags, Index, Count uint32 }

// irqSetHdr is followed by Count data items (int32 eventfds or u8 bools).
type irqSetHdr struct{ Argsz, Flags, Index, Start, Count uint32 }

type iommuType1Info struct {
	Argsz, Flags uint32
	IOVAPgsizes  uint64
	CapOffset    uint32
	Pad          uint32
}

type iovaRange struct{ Start, End uint64 } // End inclusive in both APIs

type dmaMap struct {
	Argsz, Flags      uint32
	Vaddr, IOVA, Size uint64
}

type dmaUnmap struct {
	Argsz, Flags uint32
	IOVA, Size   uint64
}

// iommufd and cdev structs. The first field is "size" rather than argsz,
// and the kernel rejects unknown non-zero trailing bytes with E2BIG.

// bindIOMMUFD is the 16-byte form every cdev kernel accepts; newer
// kernels append an optional token pointer.
type bindIOMMUFD struct {
	Argsz, Flags uint32
	IOMMUFD      int32
	OutDevID     uint32
}

type attachPT struct{ Argsz, Flags, PtID, Pasid uint32 }

type detachPT struct{ Argsz, Flags uint32 }

type ioasAlloc struct{ Size, Flags, OutIOASID uint32 }

type ioasMap struct {
	Size, Flags, IOASID, Reserved uint32
	UserVA, Length, IOVA          uint64
}

type ioasUnmap struct {
	Size, IOASID uint32
	IOVA, Length uint64
}

type ioasIOVARanges struct {
	Size, IOASID, NumIOVAs, Reserved uint32
	AllowedIOVAs                     uint64 // user pointer to []iovaRange
	OutIOVAAlignment                 uint64
}

type iommuDestroy struct{ Size, ID uint32 }
