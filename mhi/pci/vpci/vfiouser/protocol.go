package vfiouser

import (
	"encoding/binary"
	"fmt"

	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
)

// The wire format is mhi/pci/internal/vuwire's (qemu
// docs/interop/vfio-user.rst), shared with the client
// (mhi/pci/vfiouserclient); the QEMU 10.2 client's behaviour is measured in
// docs/KERNEL-CROSSCHECK.md §6. Everything is in host byte order.
var le = binary.LittleEndian

// maxDMAMaps bounds the DMA table. Without a vIOMMU QEMU maps a few dozen
// RAM sections; behind intel-iommu with caching-mode=on it maps every guest
// IOMMU page on its own (4 KiB each): 65535 windows are 256 MiB of
// scattered guest pages (adjacent ones merge), about 3 MiB of table. QEMU's
// client proposes 65535 and refuses a server announcing more
// ("max_dma_maps too large": the device fails to realize).
const maxDMAMaps = 65535

// versionReplies are the server's VERSION JSON, most complete first. The
// QEMU client receives the reply into a buffer the size of its own request
// (docs/KERNEL-CROSSCHECK.md §6), so the server sends the first that fits.
var versionReplies = []string{
	fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d,"max_data_xfer_size":%d,"pgsizes":%d,"max_dma_maps":%d}}`,
		vuwire.MaxMsgFDs, vuwire.MaxDataXfer, vuwire.PageSize, maxDMAMaps),
	fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d}}`, vuwire.MaxMsgFDs),
	`{}`,
}

// encodeVersion returns the VERSION reply payload that fits in limit
// bytes (of payload), or nil when not even the smallest does.
func encodeVersion(limit int) []byte {
	for _, js := range versionReplies {
		if 4+len(js)+1 <= limit {
			return vuwire.EncodeVersion(js)
		}
	}
	return nil
}
