package mhi

// DMA memory sizing. A VFIO device maps one arena into the IOMMU when it
// is opened (mhi/pci/vfio), before anything is allocated from it, so the
// caller must know how much the engine and its clients will need. The
// engine's share is computed here, from the same constants and profile
// fields the allocations use; link.DMASize adds the data path's pools.

// DMAUse describes what a controller will stage besides its own rings
// and control ports.
type DMAUse struct {
	// Firmware is the size of the largest image loaded over BHI or BHIe
	// (0: none).
	Firmware int
	// SegLen is the BHIe segment length (0: DefaultSegLen).
	SegLen int
	// CrashDump is the size of an RDDM crash dump collected over BHIe
	// (Profile.CrashDumpSize; 0: none). It is staged while no firmware
	// is, so the larger of the two counts.
	CrashDump int
}

// DMASize returns an upper bound of the DMA memory, in bytes, a
// controller for p allocates at once: the channel, event-ring and command
// contexts, the command ring, every event ring, the transfer ring of every
// channel in the profile, a ControlPort with default options on every
// channel pair (the data pair's included, an over-estimate of a few
// hundred KiB), and the staging of u.Firmware bytes of firmware. Each
// allocation is counted with its worst-case alignment padding
// (DMAFootprint). Buffers of other clients (the link's RX and TX pools)
// are not included.
func DMASize(p *Profile, u DMAUse) int {
	n := DMAFootprint(MaxChannels*ContextSize, 64) +
		DMAFootprint(len(p.EventRings)*ContextSize, 64) +
		DMAFootprint(ContextSize, 64) +
		ringFootprint(cmdRingElements)
	for _, e := range p.EventRings {
		n += ringFootprint(e.Elements)
	}
	for _, c := range p.Channels {
		n += ringFootprint(c.Elements)
		if c.Dir != ChanTypeInbound {
			continue
		}
		ul, dl, ok := p.ChannelPair(c.Name)
		if !ok || dl.Num != c.Num {
			continue
		}
		o := ControlOptions{}.withDefaults(ul, dl)
		n += (o.RxBuffers + o.TxBuffers) * DMAFootprint(o.BufSize, 64)
	}
	return n + max(firmwareFootprint(u), bhieFootprint(u.CrashDump, u.SegLen))
}

// DMAFootprint is the most IOVA space one allocation of size bytes
// aligned to align takes from a first-fit window: the size rounded to the
// 8-byte granule of the virtual bus, plus the padding the alignment can
// leave in front of it.
func DMAFootprint(size, align int) int {
	return (size+7)&^7 + max(align, 8) - 8
}

func ringFootprint(elements int) int {
	return DMAFootprint(elements*ElementSize, elements*ElementSize)
}

// firmwareFootprint is the larger of a BHI download (one buffer) and a
// BHIe download (vector table plus segments) of u.Firmware bytes; the
// full-boot chain does one after the other, each freed before the next.
func firmwareFootprint(u DMAUse) int {
	if u.Firmware <= 0 {
		return 0
	}
	return max(DMAFootprint(u.Firmware, 4096), bhieFootprint(u.Firmware, u.SegLen))
}

// bhieFootprint is a BHIe vector table and its segments for size bytes.
func bhieFootprint(size, segLen int) int {
	if size <= 0 {
		return 0
	}
	if segLen <= 0 {
		segLen = DefaultSegLen
	}
	segs := (size + segLen - 1) / segLen
	return DMAFootprint(16*segs, 4096) + segs*(4096-8) + (size + 8*segs)
}

// ChannelMRU returns the receive buffer size of a data channel of p: the
// override if positive, else the profile's MRU, else DefaultMRU.
func (p *Profile) ChannelMRU(override int) int {
	switch {
	case override > 0:
		return override
	case p.MRU > 0:
		return p.MRU
	}
	return DefaultMRU
}
