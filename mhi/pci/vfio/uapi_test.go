//go:build linux

package vfio

import (
	"testing"
	"unsafe"
)

// The kernel values below were computed with gcc against the Debian 6.1
// uapi headers (include/uapi/linux/vfio.h and iommufd.h) and checked
// against upstream.

func TestIoctlNumbersMatchKernel(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"VFIO_GET_API_VERSION", ioctlGetAPIVersion, 0x3b64},
		{"VFIO_CHECK_EXTENSION", ioctlCheckExtension, 0x3b65},
		{"VFIO_SET_IOMMU", ioctlSetIOMMU, 0x3b66},
		{"VFIO_GROUP_GET_STATUS", ioctlGroupGetStatus, 0x3b67},
		{"VFIO_GROUP_SET_CONTAINER", ioctlGroupSetContainer, 0x3b68},
		{"VFIO_GROUP_UNSET_CONTAINER", ioctlGroupUnsetContainer, 0x3b69},
		{"VFIO_GROUP_GET_DEVICE_FD", ioctlGroupGetDeviceFD, 0x3b6a},
		{"VFIO_DEVICE_GET_INFO", ioctlDeviceGetInfo, 0x3b6b},
		{"VFIO_DEVICE_GET_REGION_INFO", ioctlDeviceGetRegion, 0x3b6c},
		{"VFIO_DEVICE_GET_IRQ_INFO", ioctlDeviceGetIRQInfo, 0x3b6d},
		{"VFIO_DEVICE_SET_IRQS", ioctlDeviceSetIRQs, 0x3b6e},
		{"VFIO_DEVICE_RESET", ioctlDeviceReset, 0x3b6f},
		{"VFIO_IOMMU_GET_INFO", ioctlIOMMUGetInfo, 0x3b70},
		{"VFIO_IOMMU_MAP_DMA", ioctlIOMMUMapDMA, 0x3b71},
		{"VFIO_IOMMU_UNMAP_DMA", ioctlIOMMUUnmapDMA, 0x3b72},
		{"VFIO_DEVICE_BIND_IOMMUFD", ioctlDeviceBindIOMMUFD, 0x3b76},
		{"VFIO_DEVICE_ATTACH_IOMMUFD_PT", ioctlDeviceAttachPT, 0x3b77},
		{"VFIO_DEVICE_DETACH_IOMMUFD_PT", ioctlDeviceDetachPT, 0x3b78},
		{"IOMMU_DESTROY", ioctlIOMMUDestroy, 0x3b80},
		{"IOMMU_IOAS_ALLOC", ioctlIOASAlloc, 0x3b81},
		{"IOMMU_IOAS_IOVA_RANGES", ioctlIOASIOVARanges, 0x3b84},
		{"IOMMU_IOAS_MAP", ioctlIOASMap, 0x3b85},
		{"IOMMU_IOAS_UNMAP", ioctlIOASUnmap, 0x3b86},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func TestStructLayoutsMatchKernel(t *testing.T) {
	type field struct {
		name      string
		got, want uintptr
	}
	for _, c := range []struct {
		name   string
		size   uintptr
		want   uintptr
		fields []field
	}{
		{"vfio_group_status", unsafe.Sizeof(groupStatus{}), 8, nil},
		{"vfio_device_info", unsafe.Sizeof(deviceInfo{}), 24, []field{
			{"flags", unsafe.Offsetof(deviceInfo{}.Flags), 4},
			{"num_regions", unsafe.Offsetof(deviceInfo{}.NumRegions), 8},
			{"num_irqs", unsafe.Offsetof(deviceInfo{}.NumIRQs), 12},
			{"cap_offset", unsafe.Offsetof(deviceInfo{}.CapOffset), 16},
		}},
		{"vfio_region_info", unsafe.Sizeof(regionInfo{}), 32, []field{
			{"index", unsafe.Offsetof(regionInfo{}.Index), 8},
			{"cap_offset", unsafe.Offsetof(regionInfo{}.CapOffset), 12},
			{"size", unsafe.Offsetof(regionInfo{}.Size), 16},
			{"offset", unsafe.Offsetof(regionInfo{}.Offset), 24},
		}},
		{"vfio_info_cap_header", unsafe.Sizeof(capHeader{}), 8, []field{
			{"version", unsafe.Offsetof(capHeader{}.Version), 2},
			{"next", unsafe.Offsetof(capHeader{}.Next), 4},
		}},
		{"vfio_region_sparse_mmap_area", unsafe.Sizeof(sparseArea{}), 16, nil},
		{"vfio_irq_info", unsafe.Sizeof(irqInfo{}), 16, []field{
			{"index", unsafe.Offsetof(irqInfo{}.Index), 8},
			{"count", unsafe.Offsetof(irqInfo{}.Count), 12},
		}},
		{"vfio_irq_set", unsafe.Sizeof(irqSetHdr{}), 20, []field{
			{"start", unsafe.Offsetof(irqSetHdr{}.Start), 12},
			{"count", unsafe.Offsetof(irqSetHdr{}.Count), 16},
		}},
		{"vfio_iommu_type1_info", unsafe.Sizeof(iommuType1Info{}), 24, []field{
			{"iova_pgsizes", unsafe.Offsetof(iommuType1Info{}.IOVAPgsizes), 8},
			{"cap_offset", unsafe.Offsetof(iommuType1Info{}.CapOffset), 16},
		}},
		{"vfio_iova_range", unsafe.Sizeof(iovaRange{}), 16, nil},
		{"vfio_iommu_type1_dma_map", unsafe.Sizeof(dmaMap{}), 32, []field{
			{"vaddr", unsafe.Offsetof(dmaMap{}.Vaddr), 8},
			{"iova", unsafe.Offsetof(dmaMap{}.IOVA), 16},
			{"size", unsafe.Offsetof(dmaMap{}.Size), 24},
		}},
		{"vfio_iommu_type1_dma_unmap", unsafe.Sizeof(dmaUnmap{}), 24, []field{
			{"iova", unsafe.Offsetof(dmaUnmap{}.IOVA), 8},
			{"size", unsafe.Offsetof(dmaUnmap{}.Size), 16},
		}},
		{"vfio_device_bind_iommufd (through out_devid)", unsafe.Sizeof(bindIOMMUFD{}), 16, []field{
			{"iommufd", unsafe.Offsetof(bindIOMMUFD{}.IOMMUFD), 8},
			{"out_devid", unsafe.Offsetof(bindIOMMUFD{}.OutDevID), 12},
		}},
		{"vfio_device_attach_iommufd_pt", unsafe.Sizeof(attachPT{}), 16, []field{
			{"pt_id", unsafe.Offsetof(attachPT{}.PtID), 8},
			{"pasid", unsafe.Offsetof(attachPT{}.Pasid), 12},
		}},
		{"vfio_device_detach_iommufd_pt (without pasid)", unsafe.Sizeof(detachPT{}), 8, nil},
		{"iommu_ioas_alloc", unsafe.Sizeof(ioasAlloc{}), 12, []field{
			{"out_ioas_id", unsafe.Offsetof(ioasAlloc{}.OutIOASID), 8},
		}},
		{"iommu_ioas_map", unsafe.Sizeof(ioasMap{}), 40, []field{
			{"ioas_id", unsafe.Offsetof(ioasMap{}.IOASID), 8},
			{"user_va", unsafe.Offsetof(ioasMap{}.UserVA), 16},
			{"length", unsafe.Offsetof(ioasMap{}.Length), 24},
			{"iova", unsafe.Offsetof(ioasMap{}.IOVA), 32},
		}},
		{"iommu_ioas_unmap", unsafe.Sizeof(ioasUnmap{}), 24, []field{
			{"iova", unsafe.Offsetof(ioasUnmap{}.IOVA), 8},
			{"length", unsafe.Offsetof(ioasUnmap{}.Length), 16},
		}},
		{"iommu_ioas_iova_ranges", unsafe.Sizeof(ioasIOVARanges{}), 32, []field{
			{"num_iovas", unsafe.Offsetof(ioasIOVARanges{}.NumIOVAs), 8},
			{"allowed_iovas", unsafe.Offsetof(ioasIOVARanges{}.AllowedIOVAs), 16},
			{"out_iova_alignment", unsafe.Offsetof(ioasIOVARanges{}.OutIOVAAlignment), 24},
		}},
		{"iommu_destroy", unsafe.Sizeof(iommuDestroy{}), 8, nil},
	} {
		if c.size != c.want {
			t.Errorf("sizeof(%s) = %d, want %d", c.name, c.size, c.want)
		}
		for _, f := range c.fields {
			if f.got != f.want {
				t.Errorf("offsetof(%s.%s) = %d, want %d", c.name, f.name, f.got, f.want)
			}
		}
	}
}
