package link

// GSOMode selects who cuts TCP's large segments into MSS-sized packets.
type GSOMode int

const (
	// GSOSegment (the default) advertises host GSO: TCP hands the
	// endpoint one segment of up to GSOMaxSize bytes with a partial
	// checksum, and WritePackets cuts it into MSS-sized packets while it
	// copies them into the TX DMA buffers, like a driver doing software
	// GSO just before the descriptors are written. The stack builds,
	// routes and accounts one packet per 64 KiB instead of one per MSS,
	// and the frames of a batch go out with one doorbell.
	GSOSegment GSOMode = iota
	// GSOGVisor advertises gVisor GSO: TCP builds large segments but
	// splits them itself, and each MSS-sized packet comes down the stack
	// (IP, NIC, WritePackets, doorbell) on its own.
	GSOGVisor
	// GSOOff advertises no GSO: TCP hands over MTU-sized segments.
	GSOOff
)

func (m GSOMode) String() string {
	switch m {
	case GSOSegment:
		return "segment"
	case GSOGVisor:
		return "gvisor"
	case GSOOff:
		return "off"
	}
	return "gso-?"
}
