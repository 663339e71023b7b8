package mhi

import (
	"context"

	"github.com/mhistack/mhistack/mhi/pci"
)

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

// PostEventForTest writes ev into event ring i at the host's read index
// and advances the context rp past it, exactly as a device posts an
// event. Benchmarks use it on a ring the emulated modem leaves idle, to
// time the host path alone.
func PostEventForTest(c *Controller, i int, ev Element) {
	er := c.events[i]
	er.mu.Lock()
	defer er.mu.Unlock()
	dev, _ := er.ring.index(c.evCtx.Load64(er.ctxOff + CtxRP))
	ev.Encode(er.ring.element(dev))
	c.evCtx.Store64(er.ctxOff+CtxRP, er.ring.iova(er.ring.next(dev)))
}

// TREAddrForTest returns the IOVA of the TRE that the next completion of
// ch will name (its local read index).
func TREAddrForTest(ch *Channel) uint64 { return ch.ring.iova(ch.rp.Load()) }

// UnqueuedTREForTest returns the IOVA of a TRE slot inside ch's ring that
// holds no queued buffer (the one after the write pointer).
func UnqueuedTREForTest(ch *Channel) uint64 {
	return ch.ring.iova(ch.ring.next(ch.wp.Load()))
}

// PendingEventsForTest counts the events the device has posted on er that
// the host has not consumed yet.
func PendingEventsForTest(er *EventRing) int {
	er.mu.Lock()
	defer er.mu.Unlock()
	dev, ok := er.ring.index(er.c.evCtx.Load64(er.ctxOff + CtxRP))
	if !ok || !er.active {
		return 0
	}
	return int(er.ring.pending(er.rp, dev))
}

// AbandonForTest plays a host process killed without PowerDown: its
// goroutines stop (interrupt loops, liveness, recovery) and its MSI vectors
// close, as the kernel tears down what a dead process held, but no register
// is written, so the device keeps running with rings in the process's
// memory. The controller becomes closed (Close does nothing more); the DMA
// buffers it held are returned for the test to watch and free, standing
// for the dead process's memory.
func AbandonForTest(c *Controller) []*pci.Buffer {
	c.mu.Lock()
	c.closed = true
	c.pm = pmDisabled
	if c.cancelRecovery != nil {
		c.cancelRecovery()
	}
	c.broadcast()
	c.mu.Unlock()
	c.stopInterrupts()
	c.wg.Wait()
	bufs := []*pci.Buffer{c.chanCtx, c.evCtx, c.cmdCtx, c.cmd.ring.buf}
	for _, er := range c.events {
		bufs = append(bufs, er.ring.buf)
	}
	for _, ch := range c.channels {
		if ch.ring.buf != nil {
			bufs = append(bufs, ch.ring.buf)
		}
	}
	return bufs
}

// SetRecoveryEndHookForTest makes f run on the recovery goroutine after
// recovery has started the channels again and before it checks for a new
// SYS_ERR and ends. Set it before the SYS_ERR.
func SetRecoveryEndHookForTest(c *Controller, f func()) {
	c.mu.Lock()
	c.recoveryEndHook = f
	c.mu.Unlock()
}

// SetEEHookForTest makes f run on the control ring's goroutine with each
// execution environment the controller publishes, right after it did
// (while f runs, no further control event is handled). Set it before
// power-up.
func SetEEHookForTest(c *Controller, f func(EE)) {
	c.mu.Lock()
	c.eeHook = f
	c.mu.Unlock()
}

// EventContextSettledForTest reports whether event ring i has consumed
// every event the device posted and its context WP hands back every slot
// but the one before the device's RP (§2.2: the host's WP trails the
// device's RP by one when it has caught up).
func EventContextSettledForTest(c *Controller, i int) bool {
	er := c.events[i]
	er.mu.Lock()
	defer er.mu.Unlock()
	rp, wp := c.evCtx.Load64(er.ctxOff+CtxRP), c.evCtx.Load64(er.ctxOff+CtxWP)
	dev, ok := er.ring.index(rp)
	if !ok || !er.active || dev != er.rp {
		return false
	}
	return wp == er.ring.iova(er.wp) && er.ring.next(er.wp) == dev
}
