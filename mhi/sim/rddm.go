package sim

import (
	"github.com/mhistack/mhistack/mhi"
)

// RAM-dump download mode (RDDM, §1.3, §4.4 "RDDM"): crashed firmware that
// keeps its RAM for the host. TriggerCrash puts the modem in EE RDDM and
// SYS_ERR with a dump image; the host hands it an RX vector table over
// BHIe (RXVECADDR, RXVECSIZE, then RXVECDB with a sequence number) and the
// modem writes the image into the table's segments in order, then reports
// RXVECSTATUS = transfer complete (or error for a malformed or unmapped
// table) with the sequence, and raises INTVEC. A host may also ring RXVECDB
// before the crash, as Linux does when it prepares RDDM at power-up; the
// upload then starts at the crash. The MHI reset that recovers the modem
// drops the dump; it comes back in AMSS (or PBL, LoseFirmwareOnSysErr).

// rddmState is the crash-dump side of the boot loader's memory.
type rddmState struct {
	dump    []byte // the image of the pending crash, nil when none
	armed   bool   // RXVECDB rung and not used yet
	seq     uint32 // the sequence it was rung with
	uploads int    // completed uploads
}

// TriggerCrash makes the firmware crash into RDDM with dump as its RAM
// dump image: BHI_EXECENV = RDDM, then the SYS_ERR of TriggerSysErr. The
// image is uploaded when the host rings BHIE_RXVECDB (at once if it already
// had). dump is copied. It returns once the state is visible and must not
// be called from a Function callback.
func (m *Modem) TriggerCrash(dump []byte) error {
	return m.callRequest(&request{kind: reqCrash, done: make(chan error, 1), dump: append([]byte(nil), dump...)})
}

// RDDMUploads returns how many crash dumps the modem uploaded.
func (m *Modem) RDDMUploads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boot.rddm.uploads
}

// crashIntoRDDM is TriggerCrash on the device goroutine. The caller holds
// m.mu.
func (m *Modem) crashIntoRDDM(dump []byte) {
	m.boot.rddm.dump = dump
	m.setEE(mhi.EERDDM)
	m.enterSysErr()
	if m.boot.rddm.armed {
		m.rddmUpload()
	}
}

// rddmDoorbell handles a BHIE_RXVECDB write of sequence seq (non-zero,
// latched by the register write: regs.go): one write, at most one upload.
// The caller holds m.mu.
func (m *Modem) rddmDoorbell(seq uint32) {
	m.boot.rddm.armed, m.boot.rddm.seq = true, seq
	if m.ee == mhi.EERDDM && m.boot.rddm.dump != nil {
		m.rddmUpload()
	}
}

// rddmUpload writes the dump into the RX vector table the host programmed.
// An image larger than the table is cut at its end. The caller holds m.mu.
func (m *Modem) rddmUpload() {
	m.boot.rddm.armed = false
	seq := m.boot.rddm.seq
	table := uint64(m.regs.bhieReg(mhi.BHIERxVecAddrHigh))<<32 | uint64(m.regs.bhieReg(mhi.BHIERxVecAddrLow))
	size := int(m.regs.bhieReg(mhi.BHIERxVecSize))
	rest := m.boot.rddm.dump
	status := m.walkBHIeTable(table, size, func(seg, n uint64) bool {
		part := rest[:min(uint64(len(rest)), n)]
		if len(part) == 0 {
			return true
		}
		if err := m.host.DMAWrite(seg, part); err != nil {
			m.dmaFailed(err, "writing an RDDM segment", seg)
			return false
		}
		rest = rest[len(part):]
		return true
	})
	if status == mhi.BHIEStatusXferDone {
		m.boot.rddm.uploads++
		m.log.Info("RDDM dump uploaded", "bytes", len(m.boot.rddm.dump)-len(rest), "cut", len(rest))
	}
	m.regs.setBHIE(mhi.BHIERxVecStatus, status<<mhi.BHIEStatusShift|seq)
	m.raiseIntVec()
}
