package sim

import (
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// Boot quirks (docs/QUIRKS.md): how the execution environments follow one
// another.

const (
	// QuirkEEBackToBack: the SBL announces itself and mission mode back
	// to back: at M0 in the SBL, EE_EVENT(SBL) and EE_EVENT(AMSS) are
	// posted as one batch (the ring's rp moves past both at once, one
	// MSI), BHI_EXECENV already AMSS. A host that lets a client act on
	// the SBL in between starts the SBL's channels (SAHARA) in AMSS.
	QuirkEEBackToBack Quirk = "ee-back-to-back"
	// QuirkEDLReadyAgain: in EDL the boot ROM's MHI is up (MHISTATUS
	// READY, before any download); after the flash programmer's BHI
	// download succeeded that stale READY stays for fpStartDelay, while
	// the boot ROM ignores MHICTRL, until the programmer starts: MHI
	// reset (RESET, READY cleared, BHI_EXECENV = FP), then READY again.
	// A host that takes the boot ROM's READY for the programmer's asks
	// for M0 into the void and waits for it forever.
	QuirkEDLReadyAgain Quirk = "edl-ready-again"
	// QuirkPBLSysErrTwice: the first two images the boot ROM receives
	// over BHI after New hang before any EE change: BHI_STATUS says
	// success, then the PBL reports SYS_ERR with BHI_EXECENV still PBL,
	// and the MHI reset from it leaves the device in PBL for another
	// download. The third boots.
	QuirkPBLSysErrTwice Quirk = "pbl-syserr-twice"
	// QuirkBHIeLE: the device reads the BHIe vector table strictly as
	// little-endian and refuses an image whose table has an entry that
	// looks byte-swapped (a segment length of 0 or of 4 GiB or more, as
	// a big-endian length reads): TXVECSTATUS error, no segment read,
	// and a violation.
	QuirkBHIeLE Quirk = "bhie-le"
)

// ruleBHIeLE is the violation of a host that writes its BHIe vector table
// in any order but little-endian.
const ruleBHIeLE = "docs/PROTOCOL.md §4.4: BHIe vector table entries are little-endian (Linux boot.c: \"bus: mhi: host: Fix endianness of BHI vector table\")"

// refusesBHIeEntry plays QuirkBHIeLE for one vector table entry, read as
// little-endian, and reports whether the download must fail. A real
// segment is never empty and never 4 GiB long; a big-endian length below
// 4 GiB reads little-endian as 4 GiB or more. The caller holds m.mu.
func (m *Modem) refusesBHIeEntry(addr, n uint64) bool {
	if !m.quirks.has(QuirkBHIeLE) || n != 0 && n < 1<<32 {
		return false
	}
	m.violate(ruleBHIeLE, "BHIe vector table entry (addr %#x, len %#x) looks byte-swapped", addr, n)
	return true
}

// pblSysErrs is how many downloads QuirkPBLSysErrTwice lets fail.
const pblSysErrs = 2

// fpStartDelay is how long after the flash programmer's download the
// programmer takes over MHI with QuirkEDLReadyAgain.
const fpStartDelay = 20 * time.Millisecond

// eeBackToBack plays QuirkEEBackToBack at READY → M0 in the SBL, after
// STATE_CHANGE(M0) was posted, and reports whether it did. A
// full-boot-chain SBL waits for its BHIe image and StayInSBL holds the
// SBL: neither moves on at once. The caller holds m.mu.
func (m *Modem) eeBackToBack() bool {
	if !m.quirks.has(QuirkEEBackToBack) || m.boot.fullBootChain || m.opts.StayInSBL && !m.sblReleased {
		return false
	}
	m.endSBLChannels()
	m.setEE(mhi.EEAMSS)
	m.postBatch(0, mhi.EEEvent(mhi.EESBL), mhi.EEEvent(mhi.EEAMSS))
	m.eeChangeQuirks() // quirks_memory.go
	m.armCrashLoop()   // faults.go
	return true
}

// edlReady brings the boot ROM's MHI up in EDL with QuirkEDLReadyAgain:
// MHISTATUS READY before any download. The caller holds m.mu.
func (m *Modem) edlReady() {
	if m.quirks.has(QuirkEDLReadyAgain) {
		m.setState(mhi.StateReady)
	}
}

// flashProgrammerReceived runs once the flash programmer's BHI download
// succeeded: with QuirkEDLReadyAgain the programmer starts fpStartDelay
// later (fpStart), the boot ROM's READY standing meanwhile; otherwise at
// once. The caller holds m.mu.
func (m *Modem) flashProgrammerReceived() {
	if m.quirks.has(QuirkEDLReadyAgain) {
		m.fpAt = m.now().Add(fpStartDelay)
		return
	}
	m.startFlashProgrammer()
}

// fpStart is the flash programmer taking over MHI (QuirkEDLReadyAgain):
// everything the host set up with the boot ROM is forgotten, MHISTATUS
// goes to RESET, then READY again as the programmer comes up. The caller
// holds m.mu.
func (m *Modem) fpStart() {
	m.fpAt = zeroTime
	m.stopChannels(false)
	m.forgetRings()
	m.regs.resetMHI()
	m.setState(mhi.StateReset)
	m.startFlashProgrammer()
}

// ignoresCtrl reports whether MHICTRL state requests are not acted on:
// with QuirkEDLReadyAgain the boot ROM, handing over to the flash
// programmer, ignores them. The caller holds m.mu.
func (m *Modem) ignoresCtrl(req mhi.State) bool {
	if m.fpAt.IsZero() {
		return false
	}
	m.log.Info("MHICTRL ignored: the flash programmer is starting", "req", req)
	return true
}

// pblSysErr plays QuirkPBLSysErrTwice once the PBL received an image, and
// reports whether the image hung (the caller does not start it). The
// caller holds m.mu.
func (m *Modem) pblSysErr() bool {
	if !m.quirks.has(QuirkPBLSysErrTwice) || m.boot.pblSysErrs >= pblSysErrs {
		return false
	}
	m.boot.pblSysErrs++
	m.log.Info("the image hung before any EE change: SYS_ERR in PBL", "time", m.boot.pblSysErrs)
	m.enterSysErr()
	m.bootSysErr = true // the reset keeps PBL
	return true
}
