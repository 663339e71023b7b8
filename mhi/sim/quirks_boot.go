package sim

import "github.com/mhistack/mhistack/mhi"

// Boot quirks (docs/QUIRKS.md): how the execution environments follow one
// another.

const (
	// QuirkEEBackToBack: the SBL announces itself and mission mode back
	// to back: at M0 in the SBL, EE_EVENT(SBL) and EE_EVENT(AMSS) are
	// posted as one batch (the ring's rp moves past both at once, one
	// MSI), BHI_EXECENV already AMSS. A host that lets a client act on
	// the SBL in between starts the SBL's channels (SAHARA) in AMSS.
	QuirkEEBackToBack Quirk = "ee-back-to-back"
)

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
