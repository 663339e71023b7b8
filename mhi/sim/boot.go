package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/mhistack/mhistack/mhi"
)

// BHI_ERRCODE values the emulated boot ROM reports. Real codes are
// vendor-specific; the host only logs them (§4.4).
const (
	BHIErrImageSize uint32 = 0x1 // BHI_IMGSIZE below ImageMinSize or above ImageMaxSize
	BHIErrDMA       uint32 = 0x2 // the image is not (entirely) in mapped memory
	BHIErrSession   uint32 = 0x3 // BHI_IMGTXDB carried session id 0
	BHIErrVector    uint32 = 0x4 // BHIe vector table malformed
)

// maxBHIeEntries bounds the BHIe vector table the device walks.
const maxBHIeEntries = 4096

// BootImage describes an image the modem received.
type BootImage struct {
	Session uint32 // BHI_IMGTXDB session id, or BHIe sequence number
	Addr    uint64 // BHI image IOVA, or BHIe vector table IOVA
	Size    int
	SHA256  [32]byte
	Data    []byte // the image bytes
}

// bootState is the boot loader's memory.
type bootState struct {
	bhi, bhie BootImage
	failNext  uint32 // one-shot injected BHI_ERRCODE
	// fullBootChain: the SBL waits for a BHIe download before AMSS
	// (SetFullBootChain); bhieDone records that it arrived this boot.
	fullBootChain, bhieDone bool
	failNextBHIe            bool // one-shot injected BHIe error (FailNextBHIe)
	edlEntries              int  // times the EDL trigger was honoured
	pblSysErrs              int  // QuirkPBLSysErrTwice's SYS_ERRs so far (since New)
	rddm                    rddmState
}

// bhiDownload is the PBL's reaction to BHI_IMGTXDB (§8.7, from what
// host/boot.c expects): read BHI_IMGSIZE bytes at BHI_IMGADDR, set
// BHI_STATUS (2 success, 3 error + BHI_ERRCODE), raise INTVEC; on success
// hand over to the SBL, which comes up READY. The EP stack has no boot
// loader; this is the emulator's. The caller holds m.mu.
func (m *Modem) bhiDownload() {
	if m.ee != mhi.EEPBL && m.ee != mhi.EEEDL {
		m.violate(ruleBHI, "BHI_IMGTXDB written in EE %s", m.ee)
		return
	}
	session := m.regs.bhiReg(mhi.BHIImgTxDB) & mhi.BHISessionMask
	addr := uint64(m.regs.bhiReg(mhi.BHIImgAddrHigh))<<32 | uint64(m.regs.bhiReg(mhi.BHIImgAddrLow))
	size := int(m.regs.bhiReg(mhi.BHIImgSize))
	code := m.opts.BHIErrCode
	if m.boot.failNext != 0 {
		code, m.boot.failNext = m.boot.failNext, 0
	}
	if code == 0 && session == 0 {
		m.violate(ruleBHI, "BHI_IMGTXDB session id is 0")
		code = BHIErrSession
	}
	if code == 0 && (size < m.opts.ImageMinSize || size > m.opts.ImageMaxSize) {
		code = BHIErrImageSize
	}
	var img []byte
	if code == 0 {
		img = make([]byte, size)
		if !m.hc.inData(addr, size) {
			m.violate(ruleDMA, "BHI image [%#x,+%d) outside the data window", addr, size)
		}
		for off := 0; off < size; off += 64 << 10 {
			end := min(off+64<<10, size)
			if err := m.host.DMARead(addr+uint64(off), img[off:end]); err != nil {
				m.dmaFailed(err, "reading the BHI image", addr+uint64(off))
				code = BHIErrDMA
				break
			}
		}
	}
	if code != 0 {
		m.regs.setBHI(mhi.BHIErrCode, code)
		m.regs.setBHI(mhi.BHIErrDbg1, uint32(addr))
		m.regs.setBHI(mhi.BHIErrDbg2, uint32(size))
		m.regs.setBHI(mhi.BHIErrDbg3, session)
		m.regs.setBHI(mhi.BHIStatus, mhi.BHIStatusError<<mhi.BHIStatusShift)
		m.log.Info("BHI download failed", "errcode", code, "size", size)
		m.raiseIntVec()
		return
	}
	m.boot.bhi = BootImage{Session: session, Addr: addr, Size: size, SHA256: sha256.Sum256(img), Data: img}
	m.regs.setBHI(mhi.BHIErrCode, 0)
	m.regs.setBHI(mhi.BHIStatus, mhi.BHIStatusSuccess<<mhi.BHIStatusShift)
	m.log.Info("BHI image received", "size", size)
	m.raiseIntVec()
	if m.ee == mhi.EEEDL {
		// The image is the flash programmer (edl.go).
		m.flashProgrammerReceived() // quirks_boot.go
		return
	}
	if m.pblSysErr() { // quirks_boot.go
		return
	}
	// The image is the SBL: it starts and brings MHI up.
	m.boot.bhieDone = false
	m.setEE(mhi.EESBL)
	m.enterReady()
	m.raiseIntVec()
}

// bhieDownload handles BHIE_TXVECDB (§4.4 BHIe, §8.7 full-boot-chain): walk
// the vector table (16-byte entries: segment IOVA, segment length), read
// every segment, then TXVECSTATUS = status<<30 | sequence and INTVEC. The
// EE sequence itself (SBL → AMSS) is driven by the SBL timer, so a host that
// never uses BHIe still reaches AMSS. The caller holds m.mu.
func (m *Modem) bhieDownload() {
	seq := m.regs.bhieReg(mhi.BHIETxVecDB) & mhi.BHIESeqMask
	table := uint64(m.regs.bhieReg(mhi.BHIETxVecAddrHigh))<<32 | uint64(m.regs.bhieReg(mhi.BHIETxVecAddrLow))
	size := int(m.regs.bhieReg(mhi.BHIETxVecSize))
	status := uint32(mhi.BHIEStatusXferDone)
	var img []byte
	switch {
	case m.ee != mhi.EESBL && m.ee != mhi.EEPBL:
		m.violate(ruleBHI, "BHIE_TXVECDB written in EE %s", m.ee)
		status = mhi.BHIEStatusError
	case size == 0 || size%16 != 0 || size/16 > maxBHIeEntries:
		status = mhi.BHIEStatusError
	case m.boot.failNextBHIe:
		m.boot.failNextBHIe = false
		status = mhi.BHIEStatusError
	default:
		status = m.walkBHIeTable(table, size, func(seg, n uint64) bool {
			if m.refusesBHIeEntry(seg, n) {
				return false
			}
			if n > uint64(m.opts.ImageMaxSize-len(img)) {
				return false
			}
			at := len(img)
			img = append(img, make([]byte, n)...)
			if err := m.host.DMARead(seg, img[at:]); err != nil {
				m.dmaFailed(err, "reading a BHIe segment", seg)
				return false
			}
			return true
		})
	}
	if status == mhi.BHIEStatusXferDone {
		m.boot.bhie = BootImage{Session: seq, Addr: table, Size: len(img), SHA256: sha256.Sum256(img), Data: img}
	}
	m.regs.setBHIE(mhi.BHIETxVecStatus, status<<mhi.BHIEStatusShift|seq)
	m.raiseIntVec()
	if status == mhi.BHIEStatusXferDone && m.ee == mhi.EESBL && m.boot.fullBootChain && !m.boot.bhieDone {
		// A full-boot-chain SBL held at sblDone now has its image:
		// it finishes booting after SBLTime.
		m.boot.bhieDone = true
		m.sblUntil = m.now().Add(m.opts.SBLTime)
	}
}

// walkBHIeTable reads the BHIe vector table of size bytes at table
// (16-byte entries: segment IOVA, segment length, little-endian) and calls
// seg for each entry in order until it returns false. It returns the
// TX/RXVECSTATUS status: transfer complete, or error when the table is
// malformed or unreadable or seg refused an entry. The caller holds m.mu.
func (m *Modem) walkBHIeTable(table uint64, size int, seg func(addr, n uint64) bool) uint32 {
	if size == 0 || size%16 != 0 || size/16 > maxBHIeEntries {
		return mhi.BHIEStatusError
	}
	var e [16]byte
	for i := 0; i < size/16; i++ {
		if err := m.host.DMARead(table+uint64(16*i), e[:]); err != nil {
			m.dmaFailed(err, "reading the BHIe vector table", table)
			return mhi.BHIEStatusError
		}
		if !seg(binary.LittleEndian.Uint64(e[:]), binary.LittleEndian.Uint64(e[8:])) {
			return mhi.BHIEStatusError
		}
	}
	return mhi.BHIEStatusXferDone
}

// sblDone moves the SBL on to mission mode (with full-boot-chain only once
// the BHIe image arrived): the SBL's channels end with it (SAHARA: the
// firmware that ran them is gone; nothing is written to host memory),
// BHI_EXECENV = AMSS first (the host reads it in its mission-mode
// transition), then EE_EVENT(AMSS).
func (m *Modem) sblDone() {
	m.sblUntil = zeroTime
	if m.ee != mhi.EESBL || m.opts.StayInSBL && !m.sblReleased {
		return
	}
	if m.boot.fullBootChain && !m.boot.bhieDone {
		// Waits for BHIE_TXVECDB; bhieDownload re-arms the timer.
		return
	}
	m.endSBLChannels()
	m.setEE(mhi.EEAMSS)
	switch m.state {
	case mhi.StateM0, mhi.StateM1, mhi.StateM2, mhi.StateM3:
		m.post(0, mhi.EEEvent(mhi.EEAMSS), false)
		m.eeChangeQuirks() // quirks_memory.go
		m.armCrashLoop()   // faults.go
	}
}

// endSBLChannels ends the started channels AMSS does not have (SAHARA):
// the firmware that ran them is gone. The caller holds m.mu.
func (m *Modem) endSBLChannels() {
	for _, c := range m.chans {
		if c != nil && c.started && !c.cfg.EE.Has(mhi.EEAMSS) {
			m.forgetChannel(c)
			c.eeEnded = true
			m.updatePair(c.pair)
		}
	}
}

// LeaveSBL ends the SBL of a modem with Options.StayInSBL now, as if its
// SBLTime had passed: the SBL's channels end and the modem moves to AMSS
// (EE_EVENT(AMSS)). It returns ErrState unless the modem is in the SBL in
// M0–M3. Until the next SoC reset or FLR, StayInSBL no longer holds it. It
// must not be called from a Function callback.
func (m *Modem) LeaveSBL() error { return m.call(reqLeaveSBL) }

// leaveSBL is LeaveSBL on the device goroutine; the caller holds m.mu.
func (m *Modem) leaveSBL() error {
	switch {
	case m.ee != mhi.EESBL:
		return fmt.Errorf("sim: LeaveSBL in EE %s: %w", m.ee, ErrState)
	case m.state != mhi.StateM0 && m.state != mhi.StateM1 && m.state != mhi.StateM2 && m.state != mhi.StateM3:
		return fmt.Errorf("sim: LeaveSBL in %s: %w", m.state, ErrState)
	}
	m.sblReleased = true
	m.sblDone()
	return nil
}

// BHIImage returns the last image received over BHI (zero before any).
func (m *Modem) BHIImage() BootImage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boot.bhi
}

// BHIeImage returns the last image received over BHIe (zero before any).
func (m *Modem) BHIeImage() BootImage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boot.bhie
}
