package mhi

import "context"

// Hooks for the external tests (package mhi_test); compiled only in tests.

// SendCommandForTest issues a raw command, bypassing the channel table.
func SendCommandForTest(c *Controller, typ uint8, ch int) error {
	return c.command(context.Background(), typ, ch)
}

var savedRP = map[int]uint64{}

// CorruptEventRPForTest overwrites event ring i's context rp as a hostile
// device would; RestoreEventRPForTest puts the saved value back.
func CorruptEventRPForTest(c *Controller, i int, v uint64) {
	er := c.events[i]
	savedRP[i] = c.evCtx.Load64(er.ctxOff + CtxRP)
	c.evCtx.Store64(er.ctxOff+CtxRP, v)
}

func RestoreEventRPForTest(c *Controller, i int) {
	er := c.events[i]
	c.evCtx.Store64(er.ctxOff+CtxRP, savedRP[i])
}
