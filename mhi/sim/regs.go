package sim

import (
	"sync"

	"github.com/mhistack/mhistack/mhi"
)

// BAR0 layout. The MHI core block is at 0 as on every modem; where the BHI,
// BHIe and doorbell blocks sit is the device's choice, advertised in
// BHIOFF/BHIEOFF/CHDBOFF/ERDBOFF. This is the self-consistent layout
// suggested in docs/PROTOCOL.md §1.4 (not a copy of real silicon): it keeps
// clear of the fixed SOC_RESET_REQ (0xB0) and SOC_HW_VERSION (0x224).
const (
	barSize = 0x1000
	bhiOff  = 0x300
	bhieOff = 0x400
	chdbOff = 0x800
	erdbOff = 0xC00

	// maxEventRings is how many event ring doorbells fit after ERDBOFF.
	maxEventRings = (barSize - erdbOff) / mhi.DoorbellStride

	// regLen is what MHIREGLEN reports: the core block ends where BHI
	// starts.
	regLen = bhiOff

	// defaultSOCHWVersion is reported at 0x224 (§1.1: family 31:28,
	// device 27:16, major 15:8, minor 7:0); purely informational.
	defaultSOCHWVersion = 0x4001_0100
)

// doorbell is one 64-bit doorbell register pair. The host writes the high
// word (+4) first and the low word (+0) last; the low-word write commits
// the value (§1.4, §10 pitfall 1; kernel host/main.c mhi_write_db, ep/mmio.c
// mhi_ep_mmio_get_db). Every commit bumps seq, because a doorbell rung
// again with an unchanged value is still a kick.
type doorbell struct {
	hi, lo    uint32 // raw register contents, for reads
	committed uint64 // value latched by the last low-word write
	seq       uint32 // number of commits since reset
}

func (d *doorbell) writeLow(v uint32) {
	d.lo = v
	d.committed = uint64(d.hi)<<32 | uint64(v)
	d.seq++
}

// latch is a committed doorbell value as the device goroutines see it.
type latch struct {
	val uint64
	seq uint32
}

// pending is the work MMIO writes queue for the device goroutine. MMIOWrite
// never does the work itself: it must not block the host (vpci.Model).
type pending struct {
	ctrl, crdb, bhi, bhie, soc bool
	rddm                       bool      // BHIE_RXVECDB written with a sequence (rddm.go)
	rddmSeq                    uint32    // that sequence, latched at the write
	chdb                       [2]uint64 // one bit per channel doorbell
}

// regFile is the register file of BAR0. It has its own small lock so that
// MMIORead and MMIOWrite answer at once even while the device goroutine is
// busy; the device goroutine publishes its state (MHISTATUS, BHI_EXECENV,
// BHI_STATUS…) here and takes the host's writes from here.
type regFile struct {
	mu sync.Mutex

	cfg    uint32 // MHICFG: NHWER/NER written by the host, NHWCH/NCH ours
	ctrl   uint32 // MHICTRL as last written by the host (RESET cleared by us)
	status uint32 // MHISTATUS, device-owned

	// 64-bit host-written address registers, [0] = LOWER, [1] = HIGHER.
	ccabap, ecabap, crcbap [2]uint32
	ctrlBase, ctrlLimit    [2]uint32
	dataBase, dataLimit    [2]uint32
	socHWVersion           uint32
	badOffsets             bool // QuirkBadOffsets; set once by New
	crdb                   doorbell
	chdb                   [mhi.MaxChannels]doorbell
	erdb                   [maxEventRings]doorbell
	bhi                    [mhi.BHIBlockLen / 4]uint32
	bhie                   [mhi.BHIEBlockLen / 4]uint32
	pend                   pending
}

// addr64 joins a LOWER/HIGHER register pair.
func addr64(r [2]uint32) uint64 { return uint64(r[1])<<32 | uint64(r[0]) }

// read answers a 32-bit register read. Unknown offsets read 0 (§1.1).
func (r *regFile) read(off uint64) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case off >= erdbOff:
		return r.erdb[(off-erdbOff)/8].word(off)
	case off >= chdbOff:
		return r.chdb[(off-chdbOff)/8].word(off)
	case off >= bhieOff && off < bhieOff+mhi.BHIEBlockLen:
		return r.bhie[(off-bhieOff)/4]
	case off >= bhiOff && off < bhiOff+mhi.BHIBlockLen:
		return r.bhi[(off-bhiOff)/4]
	}
	switch off {
	case mhi.RegMHIREGLEN:
		return regLen
	case mhi.RegMHIVER:
		return mhi.MHIVersion10
	case mhi.RegMHICFG:
		return r.cfg
	case mhi.RegCHDBOFF:
		if r.badOffsets {
			return badCHDBOff
		}
		return chdbOff
	case mhi.RegERDBOFF:
		return erdbOff
	case mhi.RegBHIOFF:
		return bhiOff
	case mhi.RegBHIEOFF:
		return bhieOff
	case mhi.RegMHICTRL:
		return r.ctrl
	case mhi.RegMHISTATUS:
		return r.status
	case mhi.RegCCABAPLower, mhi.RegCCABAPHigher:
		return r.ccabap[(off-mhi.RegCCABAPLower)/4]
	case mhi.RegECABAPLower, mhi.RegECABAPHigher:
		return r.ecabap[(off-mhi.RegECABAPLower)/4]
	case mhi.RegCRCBAPLower, mhi.RegCRCBAPHigher:
		return r.crcbap[(off-mhi.RegCRCBAPLower)/4]
	case mhi.RegCRDBLower, mhi.RegCRDBHigher:
		return r.crdb.word(off - mhi.RegCRDBLower)
	case mhi.RegMHICTRLBASELower, mhi.RegMHICTRLBASEHigher:
		return r.ctrlBase[(off-mhi.RegMHICTRLBASELower)/4]
	case mhi.RegMHICTRLLIMITLower, mhi.RegMHICTRLLIMITHigh:
		return r.ctrlLimit[(off-mhi.RegMHICTRLLIMITLower)/4]
	case mhi.RegMHIDATABASELower, mhi.RegMHIDATABASEHigher:
		return r.dataBase[(off-mhi.RegMHIDATABASELower)/4]
	case mhi.RegMHIDATALIMITLower, mhi.RegMHIDATALIMITHigh:
		return r.dataLimit[(off-mhi.RegMHIDATALIMITLower)/4]
	case mhi.RegSOCHWVersion:
		return r.socHWVersion
	}
	return 0
}

// word returns the low (+0) or high (+4) register of a doorbell.
func (d *doorbell) word(off uint64) uint32 {
	if off&4 != 0 {
		return d.hi
	}
	return d.lo
}

// writeResult tells MMIOWrite what to do after the register lock is
// released: wake the device goroutine, wake event-ring space waiters,
// interrupt waits for a reset, or report a violation.
type writeResult struct {
	work, erKick, abort bool
	readOnly            bool
}

// write applies a 32-bit register write.
func (r *regFile) write(off uint64, v uint32) writeResult {
	var res writeResult
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case off >= erdbOff:
		d := &r.erdb[(off-erdbOff)/8]
		if off&4 != 0 {
			d.hi = v
		} else {
			d.writeLow(v)
			res.erKick = true
		}
		return res
	case off >= chdbOff:
		n := int(off-chdbOff) / 8
		d := &r.chdb[n]
		if off&4 != 0 {
			d.hi = v
			return res
		}
		d.writeLow(v)
		r.pend.chdb[n/64] |= 1 << (n % 64)
		res.work = true
		return res
	case off >= bhieOff && off < bhieOff+mhi.BHIEBlockLen:
		i := (off - bhieOff) / 4
		if off-bhieOff == mhi.BHIEMSMSOCID {
			res.readOnly = true
			return res
		}
		// Everything else is host-writable: the host even zeroes the
		// RX status words at prepare time (§1.3).
		r.bhie[i] = v
		switch off - bhieOff {
		case mhi.BHIETxVecDB:
			r.pend.bhie, res.work = true, true
		case mhi.BHIERxVecDB:
			// Sequence 0 is the host clearing the register
			// (Linux does at prepare time), not a transfer
			// request. The sequence is latched now: by the time
			// the device goroutine looks, the register may hold a
			// later write's, and one write is one request.
			if seq := v & mhi.BHIESeqMask; seq != 0 {
				r.pend.rddm, r.pend.rddmSeq, res.work = true, seq, true
			}
		}
		return res
	case off >= bhiOff && off < bhiOff+mhi.BHIBlockLen:
		rel := off - bhiOff
		switch rel {
		case mhi.BHIImgAddrLow, mhi.BHIImgAddrHigh, mhi.BHIImgSize, mhi.BHIIntVec, mhi.BHIStatus:
			r.bhi[rel/4] = v
		case mhi.BHIImgTxDB:
			r.bhi[rel/4] = v
			r.pend.bhi, res.work = true, true
		case 0x14, 0x1C, 0x24, 0xC4: // reserved: ignored
		default:
			res.readOnly = true
		}
		return res
	}
	switch off {
	case mhi.RegMHICFG:
		// NHWER and NER are the host's; NHWCH and NCH are capabilities.
		r.cfg = r.cfg&0xFFFF | v&0xFFFF0000
	case mhi.RegMHICTRL:
		r.ctrl = v & (mhi.CtrlStateMask | mhi.CtrlReset)
		r.pend.ctrl, res.work = true, true
		res.abort = v&mhi.CtrlReset != 0
	case mhi.RegCCABAPLower, mhi.RegCCABAPHigher:
		r.ccabap[(off-mhi.RegCCABAPLower)/4] = v
	case mhi.RegECABAPLower, mhi.RegECABAPHigher:
		r.ecabap[(off-mhi.RegECABAPLower)/4] = v
	case mhi.RegCRCBAPLower, mhi.RegCRCBAPHigher:
		r.crcbap[(off-mhi.RegCRCBAPLower)/4] = v
	case mhi.RegCRDBHigher:
		r.crdb.hi = v
	case mhi.RegCRDBLower:
		r.crdb.writeLow(v)
		r.pend.crdb, res.work = true, true
	case mhi.RegMHICTRLBASELower, mhi.RegMHICTRLBASEHigher:
		r.ctrlBase[(off-mhi.RegMHICTRLBASELower)/4] = v
	case mhi.RegMHICTRLLIMITLower, mhi.RegMHICTRLLIMITHigh:
		r.ctrlLimit[(off-mhi.RegMHICTRLLIMITLower)/4] = v
	case mhi.RegMHIDATABASELower, mhi.RegMHIDATABASEHigher:
		r.dataBase[(off-mhi.RegMHIDATABASELower)/4] = v
	case mhi.RegMHIDATALIMITLower, mhi.RegMHIDATALIMITHigh:
		r.dataLimit[(off-mhi.RegMHIDATALIMITLower)/4] = v
	case mhi.RegSOCResetReq:
		if v&mhi.SOCResetCookie != 0 {
			r.pend.soc, res.work, res.abort = true, true, true
		}
	case mhi.RegMHIREGLEN, mhi.RegMHIVER, mhi.RegCHDBOFF, mhi.RegERDBOFF, mhi.RegBHIOFF,
		mhi.RegBHIEOFF, mhi.RegDEBUGOFF, mhi.RegMHISTATUS, mhi.RegSOCHWVersion:
		res.readOnly = true
	}
	// Other offsets are not touched by Linux; writes are ignored (§1.1).
	return res
}

// take returns and clears the queued work.
func (r *regFile) take() pending {
	r.mu.Lock()
	p := r.pend
	r.pend = pending{}
	r.mu.Unlock()
	return p
}

func (r *regFile) chLatch(n int) latch {
	r.mu.Lock()
	d := &r.chdb[n]
	l := latch{d.committed, d.seq}
	r.mu.Unlock()
	return l
}

func (r *regFile) erLatch(n int) latch {
	r.mu.Lock()
	d := &r.erdb[n]
	l := latch{d.committed, d.seq}
	r.mu.Unlock()
	return l
}

func (r *regFile) cmdLatch() latch {
	r.mu.Lock()
	l := latch{r.crdb.committed, r.crdb.seq}
	r.mu.Unlock()
	return l
}

// setStatus publishes MHISTATUS.
func (r *regFile) setStatus(s mhi.State, ready, sysErr bool) {
	v := uint32(s) << mhi.StatusStateShift
	if ready {
		v |= mhi.StatusReady
	}
	if sysErr {
		v |= mhi.StatusSysErr
	}
	r.mu.Lock()
	r.status = v
	r.mu.Unlock()
}

func (r *regFile) getCtrl() uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctrl
}

// bhiReg and setBHI access one BHI register (offset relative to BHIOFF).
func (r *regFile) bhiReg(rel uint32) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bhi[rel/4]
}

func (r *regFile) setBHI(rel, v uint32) {
	r.mu.Lock()
	r.bhi[rel/4] = v
	r.mu.Unlock()
}

func (r *regFile) bhieReg(rel uint32) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bhie[rel/4]
}

func (r *regFile) setBHIE(rel, v uint32) {
	r.mu.Lock()
	r.bhie[rel/4] = v
	r.mu.Unlock()
}

// hostConfig is what the host programmed before asking for M0 (§1.1
// mhi_init_mmio), read once at the READY → M0 transition as the EP does.
type hostConfig struct {
	ner, nhwer             int
	ccabap, ecabap, crcbap uint64
	ctrlBase, ctrlLimit    uint64
	dataBase, dataLimit    uint64
}

func (r *regFile) hostConfig() hostConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return hostConfig{
		ner:       int(mhi.Field(r.cfg, mhi.CfgFieldMask<<mhi.CfgNERShift, mhi.CfgNERShift)),
		nhwer:     int(mhi.Field(r.cfg, mhi.CfgFieldMask<<mhi.CfgNHWERShift, mhi.CfgNHWERShift)),
		ccabap:    addr64(r.ccabap),
		ecabap:    addr64(r.ecabap),
		crcbap:    addr64(r.crcbap),
		ctrlBase:  addr64(r.ctrlBase),
		ctrlLimit: addr64(r.ctrlLimit),
		dataBase:  addr64(r.dataBase),
		dataLimit: addr64(r.dataLimit),
	}
}

// resetMHI is the register part of an MHI reset (§8.5 step 2): MHICTRL = 0
// (which clears RESET, the bit the host polls), MHISTATUS = 0, doorbells and
// queued doorbell work forgotten, BHI_INTVEC cleared (the host rewrites it).
// Context base addresses and BHI image registers keep their values.
func (r *regFile) resetMHI() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctrl = 0
	r.status = 0
	r.crdb = doorbell{}
	r.chdb = [mhi.MaxChannels]doorbell{}
	r.erdb = [maxEventRings]doorbell{}
	r.pend.crdb = false
	r.pend.chdb = [2]uint64{}
	r.bhi[mhi.BHIIntVec/4] = 0
}

// powerOn returns every register to its power-on value.
func (r *regFile) powerOn(cfg uint32, bhi [mhi.BHIBlockLen / 4]uint32, socHW uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfg, r.ctrl, r.status = cfg, 0, 0
	r.ccabap, r.ecabap, r.crcbap = [2]uint32{}, [2]uint32{}, [2]uint32{}
	r.ctrlBase, r.ctrlLimit, r.dataBase, r.dataLimit = [2]uint32{}, [2]uint32{}, [2]uint32{}, [2]uint32{}
	r.socHWVersion = socHW
	r.crdb = doorbell{}
	r.chdb = [mhi.MaxChannels]doorbell{}
	r.erdb = [maxEventRings]doorbell{}
	r.bhi = bhi
	r.bhie = [mhi.BHIEBlockLen / 4]uint32{}
	r.pend = pending{}
}
