package mhi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/mhistack/mhistack/mhi/pci"
)

// Boot: BHI download in PBL/EDL, BHIe vector-table download in SBL, the
// full-boot-chain sequence that combines them, and the EDL trigger that
// brings a modem into its flash programmer (docs/PROTOCOL.md §4.4, §6.4).

// BootOptions configure the boot paths of a Controller.
type BootOptions struct {
	// Image, when set, is the PBL image loaded at power-up whatever the
	// profile's FirmwareImage says (and without calling Firmware): a tool
	// that was handed a file uses it.
	Image []byte
	// FullBootChain: the PBL receives only the first SBLSize bytes of the
	// image over BHI; when the device reports EE SBL the whole image goes
	// over BHIe (Linux fbc_download).
	FullBootChain bool
	// SBLSize is the BHI part of a full-boot-chain image (0 or larger
	// than the image: the whole image).
	SBLSize int
	// SegLen is the BHIe segment length (default DefaultSegLen). Each
	// segment gets its own DMA buffer, as Linux's seg_len does.
	SegLen int
	// OnProgress is called as downloads advance. It runs on the goroutine
	// that drives the boot and must not block for long.
	OnProgress func(Progress)
}

// DefaultSegLen is the BHIe segment length when none is configured
// (Linux pci_generic-style controllers use 512 KiB).
const DefaultSegLen = 512 << 10

// maxBHIeSegments bounds the vector table (the table itself must fit one
// DMA buffer; 64 Ki entries are 1 MiB).
const maxBHIeSegments = 1 << 16

// Phase names a step of the boot paths in Progress.
type Phase string

const (
	PhaseBHI   Phase = "BHI"         // image to the PBL (or the flash programmer to EDL)
	PhaseBHIe  Phase = "BHIe"        // image to the SBL over the vector table
	PhaseEDL   Phase = "EDL trigger" // doorbell-91 cookie and SoC reset sent
	PhaseFP    Phase = "FP"          // flash programmer running (FIREHOSE usable)
	PhaseReady Phase = "READY"       // waiting for the device to come up
)

// Progress reports a boot step. Done counts bytes staged in DMA memory for
// the device; the device acknowledges a whole BHI or BHIe transfer at once,
// so Complete (with Done == Total) is set only when it reported success.
//
// A PhaseReady report is a power-up wait still running (the first after
// a second, then every few seconds): Waiting names what it waits for
// ("READY", "mission mode and M0", …), Waited is how long it has waited
// so far and Limit its bound (Profile.ReadyWait); Done and Total are 0.
type Progress struct {
	Phase    Phase
	Done     int
	Total    int
	Complete bool

	Waiting       string
	Waited, Limit time.Duration
}

// BHIeOptions override the controller's BootOptions for one LoadBHIe.
type BHIeOptions struct {
	SegLen     int
	OnProgress func(Progress)
}

// bootRun is the per-boot state: images waiting for a later step. Guarded
// by c.mu.
type bootRun struct {
	fbcImage  []byte // whole image for the SBL (full-boot-chain)
	edlImage  []byte // flash programmer for a device in EDL (EnterEDL)
	fpSkipped bool   // the last EnterEDL found the programmer running (FPSkipped)
	resumeFP  bool   // power-up may start from EE FP (startRunningProgrammer)
}

func (c *Controller) progress(fn func(Progress), p Progress) {
	if fn == nil {
		fn = c.opts.Boot.OnProgress
	}
	if fn != nil {
		fn(p)
	}
}

// pblTransition handles a device found in PBL/EDL/PTHRU at power-up or
// after a SYS_ERR reset (docs/PROTOCOL.md §4.4): record the serial number
// and, in PBL or EDL, download the boot image over BHI. Without an image
// the device is left to reach READY on its own (recent Linux behaviour).
func (c *Controller) pblTransition(ctx context.Context, ee EE) error {
	serial := c.read(c.bhiOff + BHISerialNum)
	c.mu.Lock()
	c.ee, c.serial = ee, serial
	edl := c.boot.edlImage
	c.mu.Unlock()
	if ee == EEPTHRU {
		return nil
	}
	if ee == EEEDL && edl != nil {
		return c.loadFlashProgrammer(ctx, edl)
	}
	img := c.opts.Boot.Image
	if ee == EEEDL {
		img = nil // the PBL image is no flash programmer
	}
	name := c.prof.FirmwareImage
	if ee == EEEDL {
		name = c.prof.EDLImage
	}
	if img == nil {
		if name == "" || c.opts.Firmware == nil {
			c.log.Info("device in PBL and no boot image configured; waiting for READY", "dev", c.name, "ee", ee)
			return nil
		}
		var err error
		if img, err = c.opts.Firmware(name); err != nil {
			return fmt.Errorf("mhi: %s: load boot image %s: %w", c.name, name, err)
		}
	}
	if ee == EEPBL && c.opts.Boot.FullBootChain {
		sbl := img
		if n := c.opts.Boot.SBLSize; n > 0 && n < len(img) {
			sbl = img[:n]
		}
		if err := c.LoadBHI(ctx, sbl); err != nil {
			return err
		}
		c.mu.Lock()
		c.boot.fbcImage = img
		c.mu.Unlock()
		return nil
	}
	if ee == EEEDL {
		return c.loadFlashProgrammer(ctx, img)
	}
	return c.LoadBHI(ctx, img)
}

// loadFlashProgrammer downloads the flash programmer to a device in EDL
// and waits until it runs (BHI_EXECENV = FP): the boot ROM may have MHI up
// (READY) before the download, and the programmer resets MHI and comes up
// READY again only after it (Linux pm.c, "bus: mhi: host: Wait for ready
// after an EDL firmware download"; docs/QUIRKS.md, "READY again after an
// EDL download"). The READY wait that follows is then the programmer's;
// asked for M0 before, the boot ROM drops the request with its MHI.
func (c *Controller) loadFlashProgrammer(ctx context.Context, img []byte) error {
	if err := c.LoadBHI(ctx, img); err != nil {
		return err
	}
	return c.waitFor(ctx, c.prof.readyBound(), "the flash programmer (BHI_EXECENV FP)", func() (bool, error) {
		st := c.read(RegMHISTATUS)
		if st != 0xFFFFFFFF && (st&StatusSysErr != 0 || State(Field(st, StatusStateMask, StatusStateShift)) == StateSysErr) {
			return false, ErrSysErr
		}
		return EE(c.read(c.bhiOff+BHIExecEnv)) == EEFP, nil
	})
}

// sblTransition is the full-boot-chain step between READY and mission
// mode (§4.4 step 7): wait for EE SBL, then send the whole image over
// BHIe. It does nothing when no full-boot-chain image is pending.
func (c *Controller) sblTransition(ctx context.Context) error {
	c.mu.Lock()
	img := c.boot.fbcImage
	c.boot.fbcImage = nil
	c.mu.Unlock()
	if img == nil {
		return nil
	}
	err := c.waitFor(ctx, c.prof.readyBound(), "EE SBL", func() (bool, error) {
		if c.pm == pmSysErrProcess || c.devState == StateSysErr {
			return false, ErrSysErr
		}
		return c.ee == EESBL || c.ee.MissionMode(), nil
	})
	if err != nil {
		return err
	}
	if c.currentEE() != EESBL {
		// The SBL found its image elsewhere; nothing to send.
		c.log.Warn("full-boot-chain: device skipped SBL; no BHIe download", "dev", c.name, "ee", c.currentEE())
		return nil
	}
	return c.LoadBHIe(ctx, img, BHIeOptions{})
}

// LoadBHI downloads img through BHI (§4.4): copy it into one DMA buffer,
// program BHI_IMGADDR (high word first) and BHI_IMGSIZE, start with a
// random session id in BHI_IMGTXDB, and wait for BHI_STATUS. The buffer is
// freed only after the device reported a result.
func (c *Controller) LoadBHI(ctx context.Context, img []byte) error {
	if len(img) == 0 {
		return fmt.Errorf("mhi: %s: empty BHI image: %w", c.name, ErrFirmware)
	}
	if uint64(len(img)) > 0xFFFFFFFF {
		return fmt.Errorf("mhi: %s: BHI image of %d bytes does not fit BHI_IMGSIZE: %w", c.name, len(img), ErrFirmware)
	}
	// The boot ROM fetches the image by DMA (New leaves it off).
	if err := c.setBusMaster(true); err != nil {
		return err
	}
	dma := c.dev.DMA()
	buf, err := dma.Alloc(len(img), 4096)
	if err != nil {
		return fmt.Errorf("mhi: %s: BHI image buffer (%d bytes): %w", c.name, len(img), err)
	}
	defer dma.Free(buf)
	copy(buf.Mem, img)
	c.progress(nil, Progress{Phase: PhaseBHI, Done: len(img), Total: len(img)})
	b := c.bhiOff
	c.write(b+BHIStatus, 0)
	c.write(b+BHIImgAddrHigh, uint32(buf.IOVA>>32))
	c.write(b+BHIImgAddrLow, uint32(buf.IOVA))
	c.write(b+BHIImgSize, uint32(len(img)))
	c.write(b+BHIImgTxDB, sessionID())
	var status uint32
	err = c.waitFor(ctx, c.stateBound(), "BHI transfer", func() (bool, error) {
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
		return fmt.Errorf("mhi: %s: BHI status %d, error code %#x (dbg %#x %#x %#x); check the image matches the modem: %w", c.name, status,
			c.read(b+BHIErrCode), c.read(b+BHIErrDbg1), c.read(b+BHIErrDbg2), c.read(b+BHIErrDbg3), ErrFirmware)
	}
	c.progress(nil, Progress{Phase: PhaseBHI, Done: len(img), Total: len(img), Complete: true})
	return nil
}

// LoadBHIe downloads img through the BHIe vector table (§4.4 "BHIe
// download"): the image is cut into segments of SegLen bytes, each in its
// own DMA buffer; a table of 16-byte entries (u64 IOVA, u64 length,
// little-endian) lists them. The host writes TXVECADDR (high word first),
// TXVECSIZE in bytes, then a read-modify-write of TXVECDB with a random
// non-zero sequence, which starts the transfer, and waits for
// TXVECSTATUS. The buffers are freed only after the device answered (or
// the wait gave up). The device is normally in SBL.
func (c *Controller) LoadBHIe(ctx context.Context, img []byte, o BHIeOptions) error {
	if c.bhieOff == 0 {
		return fmt.Errorf("mhi: %s: the device advertises no BHIe block (BHIEOFF 0); use BHI: %w", c.name, ErrFirmware)
	}
	if len(img) == 0 {
		return fmt.Errorf("mhi: %s: empty BHIe image: %w", c.name, ErrFirmware)
	}
	if err := c.setBusMaster(true); err != nil {
		return err
	}
	segLen := o.SegLen
	if segLen <= 0 {
		segLen = c.opts.Boot.SegLen
	}
	v, err := c.newBHIeVector(len(img), segLen, func(i, off int, s *pci.Buffer) {
		copy(s.Mem, img[off:])
		c.progress(o.OnProgress, Progress{Phase: PhaseBHIe, Done: off + s.Len(), Total: len(img)})
	})
	if err != nil {
		return fmt.Errorf("%w: %w", err, ErrFirmware)
	}
	defer v.free(c.dev.DMA())
	st, err := c.runBHIe(ctx, bhieTX, v)
	if err != nil {
		return err
	}
	if Field(st.status, BHIEStatusMask, BHIEStatusShift) != BHIEStatusXferDone {
		return fmt.Errorf("mhi: %s: BHIe %s after %d segments; check the image and segment length: %w", c.name, st, len(v.segs), ErrFirmware)
	}
	c.progress(o.OnProgress, Progress{Phase: PhaseBHIe, Done: len(img), Total: len(img), Complete: true})
	return nil
}

// bhieDir is the register set of one BHIe direction (§1.3): TX carries
// images to the device, RX carries the RDDM crash dump to the host.
type bhieDir struct {
	name                                string // register prefix, for errors
	addrLow, addrHigh, size, db, status uint64
	// sysErrFails: a device in SYS_ERR fails the wait (a download); the
	// RDDM upload happens in SYS_ERR.
	sysErrFails bool
}

var (
	bhieTX = bhieDir{"TXVEC", BHIETxVecAddrLow, BHIETxVecAddrHigh, BHIETxVecSize, BHIETxVecDB, BHIETxVecStatus, true}
	bhieRX = bhieDir{"RXVEC", BHIERxVecAddrLow, BHIERxVecAddrHigh, BHIERxVecSize, BHIERxVecDB, BHIERxVecStatus, false}
)

// bhieVector is a BHIe vector table and the segments it lists, each in its
// own DMA buffer (Linux mhi_alloc_bhie_table).
type bhieVector struct {
	table *pci.Buffer
	segs  []*pci.Buffer
}

// newBHIeVector allocates size bytes as segments of segLen (default
// DefaultSegLen), the last one partial, and the table listing them. fill,
// if set, fills segment i, which starts at byte off, before it is listed.
func (c *Controller) newBHIeVector(size, segLen int, fill func(i, off int, s *pci.Buffer)) (*bhieVector, error) {
	if segLen <= 0 {
		segLen = DefaultSegLen
	}
	n := (size + segLen - 1) / segLen
	if n > maxBHIeSegments {
		return nil, fmt.Errorf("mhi: %s: %d bytes need %d BHIe segments of %d bytes, at most %d; use a larger segment length",
			c.name, size, n, segLen, maxBHIeSegments)
	}
	dma := c.dev.DMA()
	v := &bhieVector{segs: make([]*pci.Buffer, 0, n)}
	var err error
	if v.table, err = dma.Alloc(16*n, 4096); err != nil {
		return nil, fmt.Errorf("mhi: %s: BHIe vector table (%d entries): %w", c.name, n, err)
	}
	for i := range n {
		off := i * segLen
		s, err := dma.Alloc(min(segLen, size-off), 4096)
		if err != nil {
			v.free(dma)
			return nil, fmt.Errorf("mhi: %s: BHIe segment %d (%d bytes): %w", c.name, i, min(segLen, size-off), err)
		}
		v.segs = append(v.segs, s)
		if fill != nil {
			fill(i, off, s)
		}
		v.table.Store64(16*i, s.IOVA)
		v.table.Store64(16*i+8, uint64(s.Len()))
	}
	return v, nil
}

func (v *bhieVector) free(dma pci.DMA) {
	for _, s := range v.segs {
		_ = dma.Free(s)
	}
	if v.table != nil {
		_ = dma.Free(v.table)
	}
}

// bhieResult is the status word a BHIe transfer ended with.
type bhieResult struct {
	status, seq uint32 // the register, and the sequence we rang with
	dir         string
}

func (r bhieResult) String() string {
	return fmt.Sprintf("%sSTATUS %#x (status %d, sequence %#x, ours %#x)", r.dir, r.status,
		Field(r.status, BHIEStatusMask, BHIEStatusShift), r.status&BHIESeqMask, r.seq)
}

// runBHIe starts a transfer over v in direction d and waits for its status
// (§4.4): the table address (high word first), its size in bytes, then a
// read-modify-write of the doorbell with a random non-zero sequence. A
// status of another transfer must not be taken for ours: a result must
// echo our sequence. A device that does not echo sequences (Linux never
// checks them) leaves 0 there; its result must at least have changed since
// we rang. A status with another non-zero sequence (an earlier transfer
// ending late) is never ours.
func (c *Controller) runBHIe(ctx context.Context, d bhieDir, v *bhieVector) (bhieResult, error) {
	b := c.bhieOff
	res := bhieResult{seq: sessionID(), dir: d.name}
	prev := c.read(b + d.status)
	c.write(b+d.addrHigh, uint32(v.table.IOVA>>32))
	c.write(b+d.addrLow, uint32(v.table.IOVA))
	c.write(b+d.size, uint32(v.table.Len()))
	c.write(b+d.db, SetField(c.read(b+d.db), BHIESeqMask, 0, res.seq))
	err := c.waitFor(ctx, c.stateBound(), "BHIe "+d.name+" transfer", func() (bool, error) {
		res.status = c.read(b + d.status)
		if res.status == 0xFFFFFFFF {
			return false, nil
		}
		if d.sysErrFails && State(Field(c.read(RegMHISTATUS), StatusStateMask, StatusStateShift)) == StateSysErr {
			return false, ErrSysErr
		}
		if Field(res.status, BHIEStatusMask, BHIEStatusShift) == 0 {
			return false, nil
		}
		seq := res.status & BHIESeqMask
		return seq == res.seq || seq == 0 && res.status != prev, nil
	})
	return res, err
}

// EnterEDL forces the modem into emergency download mode and starts the
// flash programmer edlImage in it (§6.1, §6.4, §4.4 step 5): the
// doorbell-91 cookie (high word 0, then low word 0xEDEDEDED), a SoC reset,
// a wait for BHI_EXECENV = EDL, a BHI download of edlImage, READY, M0, and
// EE_EVENT(FP). It returns in mission mode with EE FP: the FIREHOSE
// channels can be started. A running controller is powered down first.
// Only profiles with EDLTrigger support it.
//
// A device found already running a flash programmer (BHI_EXECENV FP, not
// in SYS_ERR: left there by an earlier session) is powered up as it is,
// without the SoC reset and the download, which would only restart the
// same programmer; edlImage is not used then (FPSkipped reports it).
func (c *Controller) EnterEDL(ctx context.Context, edlImage []byte) error {
	if !c.prof.EDLTrigger {
		return fmt.Errorf("mhi: %s: profile %s has no EDL trigger (doorbell 91); enter EDL with the modem's test point or vendor tool: %w", c.name, c.prof.Name, ErrState)
	}
	if len(edlImage) == 0 {
		return fmt.Errorf("mhi: %s: empty flash programmer image: %w", c.name, ErrFirmware)
	}
	c.mu.Lock()
	closed, running := c.closed, c.pm != pmDisabled || c.poweringUp
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if running {
		if err := c.PowerDown(ctx); err != nil {
			return fmt.Errorf("mhi: %s: power down before EDL: %w", c.name, err)
		}
	}
	chdb := uint64(c.read(RegCHDBOFF))
	if chdb == 0xFFFFFFFF {
		return fmt.Errorf("mhi: %s: %w", c.name, ErrRemoved)
	}
	if chdb%4 != 0 || chdb+MaxChannels*DoorbellStride > c.bar.Len() {
		return fmt.Errorf("mhi: %s: CHDBOFF %#x leaves no room for the EDL doorbell: %w", c.name, chdb, ErrProtocol)
	}
	if c.programmerRunning() {
		c.log.Info("flash programmer already running: no EDL entry", "dev", c.name)
		c.mu.Lock()
		c.boot.fpSkipped = true
		c.mu.Unlock()
		return c.startRunningProgrammer(ctx)
	}
	c.mu.Lock()
	c.boot.fpSkipped = false
	c.mu.Unlock()
	c.doorbell(chdb+EDLDoorbellChannel*DoorbellStride, EDLCookie)
	c.write(RegSOCResetReq, SOCResetCookie)
	c.progress(nil, Progress{Phase: PhaseEDL})
	// Linux sleeps 2 s after a SoC reset (MHI_POST_RESET_DELAY_MS); the
	// register reads below tell us as soon as the boot ROM is up. The
	// reset takes the function's PCIe core with it: config space (BARs,
	// Command register, MSI) is back at power-on values, registers do not
	// decode and the boot ROM could not fetch the programmer. Restore it
	// as soon as it is seen lost (Linux pci_restore_state), then once
	// more when the boot ROM is up, in case the reset came after a look.
	var restoreErr error
	err := c.waitFor(ctx, c.stateBound(), "EE EDL after SoC reset", func() (bool, error) {
		if c.configLost() {
			restoreErr = c.restoreConfig()
		}
		return EE(c.read(c.bhiOff+BHIExecEnv)) == EEEDL, nil
	})
	if err != nil {
		if restoreErr != nil {
			err = fmt.Errorf("%w; %w", err, restoreErr)
		}
		return fmt.Errorf("%w (BHI_EXECENV %s)", err, EE(c.read(c.bhiOff+BHIExecEnv)))
	}
	if err := c.restoreConfig(); err != nil {
		return fmt.Errorf("mhi: %s: after SoC reset: %w", c.name, err)
	}
	c.mu.Lock()
	c.boot.edlImage = edlImage
	c.mu.Unlock()
	err = c.PowerUp(ctx)
	c.mu.Lock()
	c.boot.edlImage = nil
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("mhi: %s: start the flash programmer: %w", c.name, err)
	}
	if ee := c.currentEE(); ee != EEFP {
		return fmt.Errorf("mhi: %s: after loading the flash programmer the device is in EE %s, not FP: %w", c.name, ee, ErrProtocol)
	}
	c.progress(nil, Progress{Phase: PhaseFP, Complete: true})
	return nil
}

// programmerRunning reports whether the device runs a flash programmer
// now: BHI_EXECENV FP and MHISTATUS neither all-ones nor in SYS_ERR.
func (c *Controller) programmerRunning() bool {
	st := c.read(RegMHISTATUS)
	if st == 0xFFFFFFFF || st&StatusSysErr != 0 || State(Field(st, StatusStateMask, StatusStateShift)) == StateSysErr {
		return false
	}
	return EE(c.read(c.bhiOff+BHIExecEnv)) == EEFP
}

// startRunningProgrammer powers up a device whose flash programmer is
// already running (EnterEDL).
func (c *Controller) startRunningProgrammer(ctx context.Context) error {
	c.mu.Lock()
	c.boot.resumeFP = true
	c.mu.Unlock()
	err := c.PowerUp(ctx)
	c.mu.Lock()
	c.boot.resumeFP = false
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("mhi: %s: power up the running flash programmer: %w", c.name, err)
	}
	if ee := c.currentEE(); ee != EEFP {
		return fmt.Errorf("mhi: %s: the running flash programmer came up in EE %s, not FP: %w", c.name, ee, ErrProtocol)
	}
	c.progress(nil, Progress{Phase: PhaseFP, Complete: true})
	return nil
}

// FPSkipped reports whether the last EnterEDL found the flash programmer
// already running and so neither reset the device nor loaded edlImage.
func (c *Controller) FPSkipped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boot.fpSkipped
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
