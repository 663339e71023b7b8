package mhi

import (
	"context"
	"fmt"
	"time"
)

// RDDM crash dumps (§1.3, §4.4 "RDDM"; Linux drivers/bus/mhi/host/boot.c
// mhi_rddm_prepare / mhi_download_rddm_image, delivered by pci_generic-style
// drivers through devcoredump). When the firmware crashes it enters EE RDDM
// and raises SYS_ERR; the host then hands it an RX vector table of
// Profile.CrashDumpSize bytes over BHIe (RXVECADDR, RXVECSIZE, RXVECDB with
// a random sequence), the device writes its RAM dump into the segments and
// reports RXVECSTATUS = transfer complete. Only then does recovery reset the
// device. The table is allocated when a dump is due (as Linux does without
// rddm_prealloc), so a controller holds no dump memory until a crash.

// CrashDump is a RAM dump collected from a crashed modem.
type CrashDump struct {
	// Device names the controller: PCI address and profile.
	Device string
	// Time is when the upload completed.
	Time time.Time
	// Data is the whole RX vector table, Profile.CrashDumpSize bytes:
	// the firmware's dump image from the start (it carries its own
	// table of contents); bytes the device did not write are zero.
	Data []byte
}

// LastCrashDump returns the latest dump collected since New, if any.
func (c *Controller) LastCrashDump() (CrashDump, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastDump == nil {
		return CrashDump{}, false
	}
	return *c.lastDump, true
}

// collectCrashDump collects the RAM dump of a device that reports EE RDDM
// (BHI_EXECENV read now) and delivers it: LastCrashDump, OnCrashDump,
// EventCrashDump. Any other EE: nothing. A failed upload is logged and
// reported in EventCrashDump.Err; the caller recovers the device either way.
func (c *Controller) collectCrashDump(ctx context.Context) {
	if EE(c.read(c.bhiOff+BHIExecEnv)) != EERDDM {
		return
	}
	c.log.Warn("firmware crashed into RDDM; collecting the RAM dump", "dev", c.name, "bytes", c.prof.CrashDumpSize())
	d, err := c.uploadRDDM(ctx)
	if err != nil {
		c.log.Error("RDDM crash dump not collected", "dev", c.name, "err", err)
		c.emit(Event{Kind: EventCrashDump, EE: EERDDM, Err: err})
		return
	}
	c.stats.CrashDumps.Add(1)
	c.mu.Lock()
	c.lastDump = &d
	c.mu.Unlock()
	c.log.Warn("RDDM crash dump collected", "dev", c.name, "bytes", len(d.Data))
	if c.opts.OnCrashDump != nil {
		c.opts.OnCrashDump(d)
	}
	c.emit(Event{Kind: EventCrashDump, EE: EERDDM})
}

// uploadRDDM runs the BHIe RX transfer of the dump.
func (c *Controller) uploadRDDM(ctx context.Context) (CrashDump, error) {
	if c.bhieOff == 0 {
		return CrashDump{}, fmt.Errorf("mhi: %s: device in RDDM advertises no BHIe block (BHIEOFF 0): %w", c.name, ErrProtocol)
	}
	size := c.prof.CrashDumpSize()
	v, err := c.newBHIeVector(size, c.opts.Boot.SegLen, nil)
	if err != nil {
		return CrashDump{}, fmt.Errorf("RDDM dump of %d bytes: %w", size, err)
	}
	defer v.free(c.dev.DMA())
	// The RX registers' power-on values are undefined: clear them first
	// (Linux does at prepare time).
	for off := uint64(BHIERxVecAddrLow); off <= BHIERxVecStatus; off += 4 {
		c.write(c.bhieOff+off, 0)
	}
	st, err := c.runBHIe(ctx, bhieRX, v)
	if err != nil {
		return CrashDump{}, err
	}
	if Field(st.status, BHIEStatusMask, BHIEStatusShift) != BHIEStatusXferDone {
		return CrashDump{}, fmt.Errorf("mhi: %s: RDDM upload ended with BHIe %s: %w", c.name, st, ErrProtocol)
	}
	data := make([]byte, 0, size)
	for _, s := range v.segs {
		data = append(data, s.Mem...)
	}
	return CrashDump{Device: c.name, Time: time.Now(), Data: data}, nil
}
