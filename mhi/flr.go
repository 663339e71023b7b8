package mhi

import (
	"context"
	"fmt"
)

// recoverByFunctionReset is the last resort of SYS_ERR recovery, after
// recovery through MHI reset failed with cause (the device never cleared
// MHICTRL.RESET, or kept crashing), and the recovery of a function whose
// vendor ID reads 0 (health.go): like Linux pci_generic's recovery work
// (mhi_pci_recovery_work, then pci_reset_function and mhi_pci_reset_done)
// the host powers down, resets the PCI function (pci.Device.Reset: FLR
// through VFIO_DEVICE_RESET, or the bus's own), restores the config space
// New saved, and powers up again: firmware download in PBL, READY, M0,
// mission mode, then the channels that were running are started again. A
// function whose vendor ID still reads 0xFFFF or 0 after the reset is
// removed. It runs on the recovery goroutine and returns nil when the
// device is back, else an error naming cause and the step that failed.
func (c *Controller) recoverByFunctionReset(ctx context.Context, cause error) error {
	fail := func(step string, err error) error {
		return fmt.Errorf("mhi: %s: recovery failed: %w; then %s: %w", c.name, cause, step, err)
	}
	c.log.Warn("resetting the PCI function", "dev", c.name, "why", cause)
	c.emit(Event{Kind: EventFunctionReset, Err: cause})
	// Power down, host side: the device answers nothing a graceful
	// power-down would ask. Interrupts off; the interrupt goroutines
	// end on their own (their vectors are closed).
	c.quiesceChannels(ErrSysErr)
	c.stopInterrupts()
	c.mu.Lock()
	c.pm = pmSysErrProcess
	c.mission = false
	c.devState = StateReset
	c.broadcast()
	c.mu.Unlock()
	if err := c.dev.Reset(); err != nil {
		return fail("function-level reset", err)
	}
	// The function is reset: its DMA has stopped, the buffers can go back.
	c.reclaim(ErrSysErr)
	if v, dead := c.functionDead(); dead {
		// Still no answer: nothing a power-up could reach (health.go).
		c.markRemovedWhy(fmt.Sprintf("config space still reads vendor ID %#04x after a function-level reset", v))
		return fail("function-level reset", fmt.Errorf("vendor ID still %#04x: %w", v, ErrRemoved))
	}
	if err := c.restoreConfig(); err != nil {
		return fail("after the function-level reset", err)
	}
	if err := c.powerUp(ctx); err != nil {
		c.stopInterrupts()
		return fail("power-up after the function-level reset", err)
	}
	if err := c.restartChannels(ctx); err != nil {
		return fail("channel restart after the function-level reset", err)
	}
	c.log.Info("device back after a function-level reset", "dev", c.name)
	return nil
}
