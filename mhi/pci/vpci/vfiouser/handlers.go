package vfiouser

import (
	"syscall"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
)

// handle executes one request and returns the reply payload, or an errno
// for an error reply. It never panics on client input: every field is
// bounds-checked by the decoders before use.
func (c *conn) handle(m *message) ([]byte, syscall.Errno) {
	s := c.s
	switch m.hdr.Cmd {
	case vuwire.CmdVersion:
		return c.version(m)
	case vuwire.CmdDMAMap:
		return s.dmaMap(m)
	case vuwire.CmdDMAUnmap:
		return s.dmaUnmap(m)
	case vuwire.CmdDeviceGetInfo:
		if _, err := vuwire.DecodeArgSz(m.body, vuwire.DeviceInfoSize); err != nil {
			return nil, syscall.EINVAL
		}
		return vuwire.DeviceInfo{Flags: vuwire.DeviceFlagPCI | vuwire.DeviceFlagReset, NumRegions: vuwire.NumRegions, NumIRQs: vuwire.NumIRQs}.Encode(), 0
	case vuwire.CmdRegionInfo:
		return s.regionInfo(m)
	case vuwire.CmdIRQInfo:
		return s.irqInfo(m)
	case vuwire.CmdSetIRQs:
		return s.setIRQs(m)
	case vuwire.CmdRegionRead:
		return s.regionRead(m)
	case vuwire.CmdRegionWrite:
		return s.regionWrite(m)
	case vuwire.CmdDeviceReset:
		s.resetFunction()
		return nil, 0
	case vuwire.CmdDMARead, vuwire.CmdDMAWrite:
		// Server-to-client requests; a client may not send them.
		return nil, syscall.EINVAL
	default:
		// REGION_IO_FDS, REGION_WRITE_MULTI (write_multiple is not
		// announced), DEVICE_FEATURE (no migration), and anything newer.
		return nil, syscall.ENOTSUP
	}
}

// version answers VERSION: major 0 (the only one defined; a client
// proposing another gets an error), minor 0, and the server's capabilities
// in a reply no longer than the request (docs/KERNEL-CROSSCHECK.md §6).
func (c *conn) version(m *message) ([]byte, syscall.Errno) {
	v, err := vuwire.DecodeVersion(m.body)
	if err != nil {
		c.s.log.Warn("VERSION request malformed", "err", err)
		return nil, syscall.EINVAL
	}
	if v.Major != 0 {
		c.s.log.Warn("client proposes an unknown vfio-user major version", "major", v.Major, "minor", v.Minor)
		return nil, syscall.ENOTSUP
	}
	if v.Caps.PgSizes != nil && *v.Caps.PgSizes&vuwire.PageSize == 0 {
		c.s.log.Warn("client does not support 4 KiB DMA pages", "pgsizes", *v.Caps.PgSizes)
		return nil, syscall.ENOTSUP
	}
	reply := encodeVersion(int(m.hdr.Size) - vuwire.HeaderSize)
	if reply == nil {
		// Not even "{}" fits: answer the bare version numbers.
		reply = make([]byte, 4)
	}
	c.s.log.Info("vfio-user version negotiated", "major", 0, "minor", 0)
	return reply, 0
}

// regionInfo answers DEVICE_GET_REGION_INFO. Every region is trapped (no
// MMAP flag): each register access reaches the model as a message, and the
// client may post BAR writes (docs/KERNEL-CROSSCHECK.md §6).
func (s *Server) regionInfo(m *message) ([]byte, syscall.Errno) {
	r, err := vuwire.DecodeRegionInfoRequest(m.body)
	if err != nil || r.ArgSz < vuwire.RegionInfoSize {
		return nil, syscall.EINVAL
	}
	if r.Index >= vuwire.NumRegions {
		return nil, syscall.EINVAL
	}
	info := vuwire.RegionInfo{Index: r.Index}
	switch {
	case r.Index < vuwire.RegionROM:
		if size := s.id.BARSize[r.Index]; size != 0 {
			info.Size = uint64(size)
			info.Flags = vuwire.RegionFlagRead | vuwire.RegionFlagWrite
		}
	case r.Index == vuwire.RegionConfig:
		// Conventional config space: QEMU then presents the function
		// as conventional PCI, which is what was tested.
		info.Size = pci.ConfigSize
		info.Flags = vuwire.RegionFlagRead | vuwire.RegionFlagWrite
	}
	// The ROM and VGA regions, and absent BARs, have size 0.
	return info.Encode(), 0
}

// irqInfo answers DEVICE_GET_IRQ_INFO: MSI with the capability's vectors;
// INTx, MSI-X, ERR and REQ with none (Interrupt Pin reads 0, so the client
// never sets up INTx).
func (s *Server) irqInfo(m *message) ([]byte, syscall.Errno) {
	r, err := vuwire.DecodeIRQInfoRequest(m.body)
	if err != nil || r.ArgSz < vuwire.IRQInfoSize || r.Index >= vuwire.NumIRQs {
		return nil, syscall.EINVAL
	}
	info := vuwire.IRQInfo{Index: r.Index}
	if r.Index == vuwire.IRQMSI {
		info.Flags = vuwire.IRQInfoEventfd | vuwire.IRQInfoNoResize
		info.Count = uint32(s.irq.max)
	}
	return info.Encode(), 0
}

// regionRead answers REGION_READ: the request's 16 bytes, then the data.
func (s *Server) regionRead(m *message) ([]byte, syscall.Errno) {
	a, err := vuwire.DecodeRegionAccess(m.body, false)
	if err != nil {
		return nil, syscall.EINVAL
	}
	out := a.Encode(int(a.Count))
	if errno := s.access(a, out[vuwire.RegionAccessSize:], false); errno != 0 {
		return nil, errno
	}
	return out, 0
}

// regionWrite applies REGION_WRITE; the reply, when asked for, echoes the
// request's 16 bytes. BAR writes usually come posted (NO_REPLY).
func (s *Server) regionWrite(m *message) ([]byte, syscall.Errno) {
	a, err := vuwire.DecodeRegionAccess(m.body, true)
	if err != nil {
		return nil, syscall.EINVAL
	}
	if errno := s.access(a, a.Data, true); errno != 0 {
		return nil, errno
	}
	return a.Encode(0), 0
}

// access performs a region access into p (read) or from p (write).
func (s *Server) access(a vuwire.RegionAccess, p []byte, write bool) syscall.Errno {
	switch {
	case a.Region == vuwire.RegionConfig:
		return s.configAccess(a.Offset, p, write)
	case a.Region < vuwire.RegionROM && s.id.BARSize[a.Region] != 0:
		size := uint64(s.id.BARSize[a.Region])
		if a.Offset > size || uint64(len(p)) > size-a.Offset {
			return syscall.EINVAL
		}
		s.barAccess(int(a.Region), a.Offset, p, write)
		return 0
	}
	return syscall.EINVAL
}

// configAccess reads or writes config space: pci.ConfigSpace (IDs, BAR
// sizing, MSI) with the PM capability of pm.go in front of MSI. Interrupt
// Pin reads 0: MHI modems are driven with MSI only (docs/KERNEL-CROSSCHECK.md
// §6), and a pin would make the client set up INTx, whose level-triggered
// resampling this server does not implement. Writes refresh the Command
// mirror that gates DMA and MSIs (bus mastering) and BAR accesses (memory
// decoding).
func (s *Server) configAccess(off uint64, p []byte, write bool) syscall.Errno {
	if off > pci.ConfigSize || uint64(len(p)) > pci.ConfigSize-off {
		return syscall.EINVAL
	}
	o := int(off)
	if !write {
		s.stats.configReads.Add(1)
		s.cfg.Read(o, p)
		s.overlayRead(o, p)
		if o <= pci.CfgInterruptPin && o+len(p) > pci.CfgInterruptPin {
			p[pci.CfgInterruptPin-o] = 0
		}
		return 0
	}
	s.stats.configWrites.Add(1)
	s.cfgMu.Lock()
	if !s.overlayWrite(o, p) {
		s.cfg.Write(o, p)
	}
	s.cmd.Store(uint32(s.cfg.Command()))
	s.cfgMu.Unlock()
	return 0
}

// barAccess performs a BAR access. Like vpci, the function claims only
// naturally aligned 32-bit accesses while memory decoding is on (and, PM
// 1.2 §5.4.1, not in D3hot); anything
// else reads all-ones and drops writes, as an unclaimed PCIe transaction
// would (MHI registers are 32-bit, docs/PROTOCOL.md §1).
func (s *Server) barAccess(bar int, off uint64, p []byte, write bool) {
	s.life.RLock()
	defer s.life.RUnlock()
	if len(p) != 4 || off%4 != 0 || s.closed.Load() || s.cmd.Load()&pci.CmdMemory == 0 || s.pm.d3() {
		s.stats.mmioUnclaimed.Add(1)
		if !write {
			for i := range p {
				p[i] = 0xff
			}
		}
		return
	}
	if write {
		s.stats.mmioWrites.Add(1)
		s.model.MMIOWrite(bar, off, le.Uint32(p))
		return
	}
	s.stats.mmioReads.Add(1)
	le.PutUint32(p, s.model.MMIORead(bar, off))
}
