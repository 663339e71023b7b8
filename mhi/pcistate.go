package mhi

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mhistack/mhistack/mhi/pci"
)

// Config-space state kept across resets, like Linux pci_save_state /
// pci_restore_state: New saves it once the function is set up (BARs
// assigned, memory decoding and bus mastering on); after a SoC reset
// (EnterEDL) or a function-level reset (recovery) the device has lost it and
// restoreConfig writes it back before the registers are touched again.

// Capability IDs whose enable bits are restored (PCI Local Bus 3.0 §6.8,
// MSI-X: PCI 3.0 §6.8.2).
const (
	capIDMSIX = 0x11
	// msixCtrlEnable and msixCtrlMaskAll are bits of the MSI-X Message
	// Control register (capability offset 2).
	msixCtrlEnable  = 1 << 15
	msixCtrlMaskAll = 1 << 14
)

// savedConfig is the restorable part of a type-0 config space.
type savedConfig struct {
	valid bool
	bars  [6]uint32
	cmd   uint16
	// msi is the MSI capability from its Message Control word to the end
	// of its mask register (msiLen bytes), at msiOff; 0: no capability.
	msiOff int
	msi    [0x14]byte
	msiLen int
	// msixOff is the MSI-X capability offset (0: none) and msixCtrl its
	// Message Control word.
	msixOff  int
	msixCtrl uint16
}

// saveConfig reads the BARs, the Command register and the MSI / MSI-X
// capabilities. A backend that cannot read config space leaves nothing to
// restore (restoreConfig then only turns bus mastering on).
func (c *Controller) saveConfig() {
	var s savedConfig
	var b [4]byte
	for i := range s.bars {
		if err := c.dev.ConfigRead(pci.CfgBAR0+4*i, b[:]); err != nil {
			c.log.Warn("cannot save config space; a reset will restore bus mastering only", "dev", c.name, "err", err)
			return
		}
		s.bars[i] = binary.LittleEndian.Uint32(b[:])
	}
	if err := c.dev.ConfigRead(pci.CfgCommand, b[:2]); err != nil {
		return
	}
	s.cmd = binary.LittleEndian.Uint16(b[:2])
	// Walk the capability list, bounded: a broken device may loop it.
	if err := c.dev.ConfigRead(pci.CfgStatus, b[:2]); err == nil && binary.LittleEndian.Uint16(b[:2])&pci.StatusCapList != 0 {
		if err := c.dev.ConfigRead(pci.CfgCapPtr, b[:1]); err == nil {
			off := int(b[0]) &^ 3
			for n := 0; n < 48 && off >= 0x40 && off <= pci.ConfigSize-4; n++ {
				if err := c.dev.ConfigRead(off, b[:2]); err != nil {
					break
				}
				switch b[0] {
				case pci.CapIDMSI:
					s.msiOff = off
				case capIDMSIX:
					s.msixOff = off
				}
				off = int(b[1]) &^ 3
			}
		}
	}
	if s.msiOff != 0 {
		s.msiLen = min(len(s.msi), pci.ConfigSize-(s.msiOff+pci.MSICtrl))
		for i := 0; i < s.msiLen; i += 2 {
			if err := c.dev.ConfigRead(s.msiOff+pci.MSICtrl+i, s.msi[i:i+2]); err != nil {
				s.msiOff = 0
				break
			}
		}
	}
	if s.msixOff != 0 {
		if err := c.dev.ConfigRead(s.msixOff+2, b[:2]); err != nil {
			s.msixOff = 0
		} else {
			s.msixCtrl = binary.LittleEndian.Uint16(b[:2])
		}
	}
	s.valid = true
	c.savedCfg = s
}

// restoreConfig writes the saved config space back (Linux
// pci_restore_state): BARs, the MSI capability (address, data and mask
// before the enable bit) and MSI-X enables, then the Command register, so
// that memory decoding comes on with the BARs in place. Memory decoding
// and bus mastering are always turned on, as New did. It reports every
// write that failed.
//
// It takes no lock (savedCfg is written once, by New), so it may run inside
// a waitFor condition.
func (c *Controller) restoreConfig() error {
	s := &c.savedCfg
	var errs []error
	write := func(what string, off int, p []byte) {
		if err := c.dev.ConfigWrite(off, p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	var b [4]byte
	if s.valid {
		for i, v := range s.bars {
			binary.LittleEndian.PutUint32(b[:], v)
			write(fmt.Sprintf("BAR%d", i), pci.CfgBAR0+4*i, b[:])
		}
		if s.msiOff != 0 {
			// Everything after Message Control first, the enable last.
			for i := 2; i+2 <= s.msiLen; i += 2 {
				write("MSI capability", s.msiOff+pci.MSICtrl+i, s.msi[i:i+2])
			}
			write("MSI control", s.msiOff+pci.MSICtrl, s.msi[0:2])
		}
		if s.msixOff != 0 {
			binary.LittleEndian.PutUint16(b[:2], s.msixCtrl&(msixCtrlEnable|msixCtrlMaskAll))
			write("MSI-X control", s.msixOff+2, b[:2])
		}
		binary.LittleEndian.PutUint16(b[:2], s.cmd|pci.CmdMemory|pci.CmdBusMaster)
		write("command register", pci.CfgCommand, b[:2])
	}
	if err := c.dev.SetBusMaster(true); err != nil {
		errs = append(errs, fmt.Errorf("bus master: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mhi: %s: restore config space: %w", c.name, err)
	}
	return nil
}

// configLost reports whether the function's Command register no longer
// has memory decoding on, as after a reset that cleared config space. A
// function that does not answer config reads counts as lost.
func (c *Controller) configLost() bool {
	var b [2]byte
	if err := c.dev.ConfigRead(pci.CfgCommand, b[:]); err != nil {
		return true
	}
	cmd := binary.LittleEndian.Uint16(b[:])
	return cmd == 0xFFFF || cmd&pci.CmdMemory == 0
}
