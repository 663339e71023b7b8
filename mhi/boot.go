package mhi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
)

// pblTransition handles a device found in PBL/EDL/PTHRU at power-up or
// after a SYS_ERR reset (mhi-protocol.md §4.4): record the serial number
// and, in PBL or EDL, download the boot image over BHI. Without an image
// the device is left to reach READY on its own (recent Linux behaviour).
func (c *Controller) pblTransition(ctx context.Context, ee EE) error {
	serial := c.read(c.bhiOff + BHISerialNum)
	c.mu.Lock()
	c.ee, c.serial = ee, serial
	c.mu.Unlock()
	if ee == EEPTHRU {
		return nil
	}
	name := c.prof.FirmwareImage
	if ee == EEEDL {
		name = c.prof.EDLImage
	}
	if name == "" || c.opts.Firmware == nil {
		c.log.Info("device in PBL and no boot image configured; waiting for READY", "dev", c.name, "ee", ee)
		return nil
	}
	img, err := c.opts.Firmware(name)
	if err != nil {
		return fmt.Errorf("mhi: %s: load boot image %s: %w", c.name, name, err)
	}
	return c.LoadBHI(ctx, img)
}

// LoadBHI downloads img through BHI (§4.4): copy it into one DMA buffer,
// program BHI_IMGADDR (high word first) and BHI_IMGSIZE, start with a
// random session id in BHI_IMGTXDB, and wait for BHI_STATUS. The buffer is
// freed only after the device reported a result.
func (c *Controller) LoadBHI(ctx context.Context, img []byte) error {
	if len(img) == 0 {
		return fmt.Errorf("mhi: %s: empty BHI image: %w", c.name, ErrFirmware)
	}
	dma := c.dev.DMA()
	buf, err := dma.Alloc(len(img), 4096)
	if err != nil {
		return fmt.Errorf("mhi: %s: BHI image buffer (%d bytes): %w", c.name, len(img), err)
	}
	defer dma.Free(buf)
	copy(buf.Mem, img)
	b := c.bhiOff
	c.write(b+BHIStatus, 0)
	c.write(b+BHIImgAddrHigh, uint32(buf.IOVA>>32))
	c.write(b+BHIImgAddrLow, uint32(buf.IOVA))
	c.write(b+BHIImgSize, uint32(len(img)))
	c.write(b+BHIImgTxDB, sessionID())
	var status uint32
	err = c.waitFor(ctx, c.timeout, "BHI transfer", func() (bool, error) {
		v := c.read(b + BHIStatus)
		if v == 0xFFFFFFFF {
			return false, nil
		}
		status = Field(v, BHIStatusMask, BHIStatusShift)
		if State(Field(c.read(RegMHISTATUS), StatusStateMask, StatusStateShift)) == StateSysErr {
			return false, ErrSysErr
		}
		return status != BHIStatusReset, nil
	})
	if err != nil {
		return err
	}
	if status != BHIStatusSuccess {
		return fmt.Errorf("mhi: %s: BHI status %d, error code %#x (dbg %#x %#x %#x): %w", c.name, status,
			c.read(b+BHIErrCode), c.read(b+BHIErrDbg1), c.read(b+BHIErrDbg2), c.read(b+BHIErrDbg3), ErrFirmware)
	}
	return nil
}

// sessionID returns a random non-zero 30-bit BHI session / BHIe sequence.
func sessionID() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint32(b[:]) & BHISessionMask; v != 0 {
			return v
		}
	}
}
