package mhi

import "strconv"

// MMIO register map of the MHI BAR (docs/PROTOCOL.md §1.1; Linux
// drivers/bus/mhi/common.h). All registers are 32-bit little-endian.
const (
	RegMHIREGLEN         = 0x00
	RegMHIVER            = 0x08
	RegMHICFG            = 0x10
	RegCHDBOFF           = 0x18
	RegERDBOFF           = 0x20
	RegBHIOFF            = 0x28
	RegBHIEOFF           = 0x2C
	RegDEBUGOFF          = 0x30
	RegMHICTRL           = 0x38
	RegMHISTATUS         = 0x48
	RegCCABAPLower       = 0x58
	RegCCABAPHigher      = 0x5C
	RegECABAPLower       = 0x60
	RegECABAPHigher      = 0x64
	RegCRCBAPLower       = 0x68
	RegCRCBAPHigher      = 0x6C
	RegCRDBLower         = 0x70
	RegCRDBHigher        = 0x74
	RegMHICTRLBASELower  = 0x80
	RegMHICTRLBASEHigher = 0x84
	RegMHICTRLLIMITLower = 0x88
	RegMHICTRLLIMITHigh  = 0x8C
	RegMHIDATABASELower  = 0x98
	RegMHIDATABASEHigher = 0x9C
	RegMHIDATALIMITLower = 0xA0
	RegMHIDATALIMITHigh  = 0xA4
	RegSOCResetReq       = 0xB0
	RegSOCHWVersion      = 0x224

	// MHIVersion10 is the value an MHI 1.0 device reports in MHIVER.
	MHIVersion10 = 0x01000000
	// SOCResetCookie written to RegSOCResetReq forces a SoC reset.
	SOCResetCookie = 1
)

// MHICFG fields (§1.1).
const (
	CfgNHWERShift = 24
	CfgNERShift   = 16
	CfgNHWCHShift = 8
	CfgNCHShift   = 0
	CfgFieldMask  = 0xFF
)

// MHICTRL and MHISTATUS fields (§1.1).
const (
	CtrlStateShift = 8
	CtrlStateMask  = 0xFF << CtrlStateShift
	CtrlReset      = 1 << 1

	StatusStateShift = 8
	StatusStateMask  = 0xFF << StatusStateShift
	StatusSysErr     = 1 << 2
	StatusReady      = 1 << 0
)

// BHI block registers, offsets from BHIOFF (§1.2).
const (
	BHIVersionMinor = 0x00
	BHIVersionMajor = 0x04
	BHIImgAddrLow   = 0x08
	BHIImgAddrHigh  = 0x0C
	BHIImgSize      = 0x10
	BHIImgTxDB      = 0x18
	BHIIntVec       = 0x20
	BHIExecEnv      = 0x28
	BHIStatus       = 0x2C
	BHIErrCode      = 0x30
	BHIErrDbg1      = 0x34
	BHIErrDbg2      = 0x38
	BHIErrDbg3      = 0x3C
	BHISerialNum    = 0x40
	BHISBLAntiRoll  = 0x44
	BHINumSeg       = 0x48
	BHIMSMHWID0     = 0x4C // 6 words
	BHIOEMPKHash0   = 0x64 // 16 words
	BHIBlockLen     = 0xC8

	BHIStatusShift   = 30
	BHIStatusMask    = 3 << BHIStatusShift
	BHIStatusReset   = 0
	BHIStatusSuccess = 2
	BHIStatusError   = 3
	BHISessionMask   = 0x3FFFFFFF
)

// BHIe block registers, offsets from BHIEOFF (§1.3).
const (
	BHIEMSMSOCID      = 0x00
	BHIETxVecAddrLow  = 0x2C
	BHIETxVecAddrHigh = 0x30
	BHIETxVecSize     = 0x34
	BHIETxVecDB       = 0x3C
	BHIETxVecStatus   = 0x44
	BHIERxVecAddrLow  = 0x60
	BHIERxVecAddrHigh = 0x64
	BHIERxVecSize     = 0x68
	BHIERxVecDB       = 0x70
	BHIERxVecStatus   = 0x78
	BHIEBlockLen      = 0x80

	BHIEStatusShift    = 30
	BHIEStatusMask     = 3 << BHIEStatusShift
	BHIEStatusXferDone = 2
	BHIEStatusError    = 3
	BHIESeqMask        = 0x3FFFFFFF
)

// Doorbells (§1.4). Each is 8 bytes: the low word at +0 commits the 64-bit
// value whose high word was written to +4 first.
const (
	DoorbellStride = 8
	MaxChannels    = 128
	// WakeDoorbellChannel is the channel doorbell used as device wake.
	WakeDoorbellChannel = 127
	// EDLDoorbellChannel is the channel doorbell that takes the EDL cookie.
	EDLDoorbellChannel = 91
	EDLCookie          = 0xEDEDEDED
)

// State is an MHI state (MHICTRL/MHISTATUS.MHISTATE, §4.1).
type State uint8

const (
	StateReset  State = 0x0
	StateReady  State = 0x1
	StateM0     State = 0x2
	StateM1     State = 0x3
	StateM2     State = 0x4
	StateM3     State = 0x5
	StateM3Fast State = 0x6
	StateBHI    State = 0x7
	StateSysErr State = 0xFF
)

func (s State) String() string {
	switch s {
	case StateReset:
		return "RESET"
	case StateReady:
		return "READY"
	case StateM0:
		return "M0"
	case StateM1:
		return "M1"
	case StateM2:
		return "M2"
	case StateM3:
		return "M3"
	case StateM3Fast:
		return "M3_FAST"
	case StateBHI:
		return "BHI"
	case StateSysErr:
		return "SYS_ERR"
	}
	return "STATE(" + strconv.Itoa(int(s)) + ")"
}

// EE is an execution environment (BHI_EXECENV, EE events, §4.2).
type EE uint8

const (
	EEPBL   EE = 0
	EESBL   EE = 1
	EEAMSS  EE = 2
	EERDDM  EE = 3
	EEWFW   EE = 4
	EEPTHRU EE = 5
	EEEDL   EE = 6
	EEFP    EE = 7
)

func (e EE) String() string {
	names := [...]string{"PBL", "SBL", "AMSS", "RDDM", "WFW", "PTHRU", "EDL", "FP"}
	if int(e) < len(names) {
		return names[e]
	}
	return "EE(" + strconv.Itoa(int(e)) + ")"
}

// InPBL reports whether e is a boot-ROM environment (§4.2 host predicates).
func (e EE) InPBL() bool { return e == EEPBL || e == EEPTHRU || e == EEEDL }

// MissionMode reports whether e is a mission-mode environment.
func (e EE) MissionMode() bool { return e == EEAMSS || e == EEWFW || e == EEFP }

// PowerUpCapable reports whether the host may start power-up in e.
func (e EE) PowerUpCapable() bool { return e.InPBL() || e == EEAMSS }

// EEMask is a bitmask of execution environments (bit n = EE n).
type EEMask uint16

// Has reports whether m contains e.
func (m EEMask) Has(e EE) bool { return e < 16 && m&(1<<e) != 0 }

// Field helpers for a register value.

// Field extracts (v & mask) >> shift.
func Field(v, mask uint32, shift uint) uint32 { return (v & mask) >> shift }

// SetField replaces the masked field of v.
func SetField(v, mask uint32, shift uint, f uint32) uint32 { return v&^mask | (f<<shift)&mask }
