package mhi

import "encoding/binary"

// Contexts (§2): channel, event-ring and command-ring contexts share one
// packed 44-byte layout whose 64-bit fields are only 4-byte aligned.
const (
	ContextSize = 44

	CtxW0    = 0x00 // chcfg | intmod | reserved
	CtxW1    = 0x04 // chtype | ertype | reserved
	CtxW2    = 0x08 // erindex | msivec | reserved
	CtxRBase = 0x0C
	CtxRLen  = 0x14
	CtxRP    = 0x1C
	CtxWP    = 0x24
)

// ChanState is the CHSTATE field of a channel context (§2.1).
type ChanState uint8

const (
	ChanDisabled  ChanState = 0
	ChanEnabled   ChanState = 1
	ChanRunning   ChanState = 2
	ChanSuspended ChanState = 3
	ChanStop      ChanState = 4
	ChanError     ChanState = 5
)

func (s ChanState) String() string {
	names := [...]string{"DISABLED", "ENABLED", "RUNNING", "SUSPENDED", "STOP", "ERROR"}
	if int(s) < len(names) {
		return names[s]
	}
	return "CHSTATE(?)"
}

// chcfg fields.
const (
	ChCfgStateMask    = 0xFF
	ChCfgBrstModeMask = 0x3 << 8
	ChCfgBrstShift    = 8
	ChCfgPollCfgMask  = 0x3F << 10
	ChCfgPollShift    = 10

	// Burst mode values (BRSTMODE).
	BrstDisabled = 2
	BrstEnabled  = 3
)

// ChanType is a channel's direction (chtype, §2.1).
type ChanType uint32

const (
	ChanTypeInvalid   ChanType = 0
	ChanTypeOutbound  ChanType = 1 // UL, host → device
	ChanTypeInbound   ChanType = 2 // DL, device → host
	ChanTypeCoalesced ChanType = 3
)

// Event-ring context fields (§2.2).
const (
	EvIntModCShift = 8
	EvIntModCMask  = 0xFF << EvIntModCShift
	EvIntModTShift = 16
	EvIntModTMask  = 0xFFFF << EvIntModTShift
	EvTypeValid    = 1
)

// Context is the decoded form of a 44-byte context.
type Context struct {
	W0, W1, W2          uint32
	RBase, RLen, RP, WP uint64
}

// DecodeContext decodes a context from b (at least ContextSize bytes).
func DecodeContext(b []byte) Context {
	le := binary.LittleEndian
	_ = b[ContextSize-1]
	return Context{
		W0: le.Uint32(b[CtxW0:]), W1: le.Uint32(b[CtxW1:]), W2: le.Uint32(b[CtxW2:]),
		RBase: le.Uint64(b[CtxRBase:]), RLen: le.Uint64(b[CtxRLen:]),
		RP: le.Uint64(b[CtxRP:]), WP: le.Uint64(b[CtxWP:]),
	}
}

// Encode writes c into b (at least ContextSize bytes).
func (c Context) Encode(b []byte) {
	le := binary.LittleEndian
	_ = b[ContextSize-1]
	le.PutUint32(b[CtxW0:], c.W0)
	le.PutUint32(b[CtxW1:], c.W1)
	le.PutUint32(b[CtxW2:], c.W2)
	le.PutUint64(b[CtxRBase:], c.RBase)
	le.PutUint64(b[CtxRLen:], c.RLen)
	le.PutUint64(b[CtxRP:], c.RP)
	le.PutUint64(b[CtxWP:], c.WP)
}

// ChanState returns CHSTATE of a channel context.
func (c Context) ChanState() ChanState { return ChanState(c.W0 & ChCfgStateMask) }

// BurstMode reports whether BRSTMODE says burst enabled.
func (c Context) BurstMode() bool { return (c.W0&ChCfgBrstModeMask)>>ChCfgBrstShift == BrstEnabled }

// IntModT returns the interrupt moderation time (ms) of an event context.
func (c Context) IntModT() uint32 { return (c.W0 & EvIntModTMask) >> EvIntModTShift }

// ChCfg builds a channel context chcfg word.
func ChCfg(state ChanState, burst bool) uint32 {
	b := uint32(BrstDisabled)
	if burst {
		b = BrstEnabled
	}
	return uint32(state) | b<<ChCfgBrstShift
}
