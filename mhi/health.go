package mhi

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/mhistack/mhistack/mhi/pci"
)

// DefaultHealthCheckInterval is how often a powered controller reads the
// function's vendor ID (Options.HealthCheckInterval): Linux pci_generic's
// HEALTH_CHECK_PERIOD (drivers/bus/mhi/host/pci_generic.c).
const DefaultHealthCheckInterval = 2 * time.Second

func (c *Controller) healthCheckInterval() time.Duration {
	return optInterval(c.opts.HealthCheckInterval, DefaultHealthCheckInterval) // liveness.go
}

// healthCheck reads the vendor ID from config space, as Linux
// pci_generic's mhi_pci_health_check does (mhi_pci_is_alive), on the
// liveness goroutine. A device can die without an error report or an
// interrupt, and its registers may even keep answering; config space is
// answered by the function's PCIe core, and a vendor ID of 0xFFFF (no
// completion: link down, card gone) or 0 (the core itself is wedged) means
// that the function is dead:
//
//   - 0xFFFF: the device is removed (ErrRemoved, EventRemoved).
//   - 0: the controller recovers through a function-level reset
//     (recoverDeadFunction); if the vendor ID still reads 0 or 0xFFFF
//     after it, the device is removed.
//
// Linux recovers in both cases; here all-ones is removal as it is for
// registers that read all-ones. A config read that fails (a backend
// error) is left to the MHISTATUS check. Suspended, powering up or
// recovering controllers are not checked (Linux: not while suspended,
// and the timer is stopped during recovery).
func (c *Controller) healthCheck() {
	c.mu.Lock()
	skip := c.closed || c.poweringUp || c.recovering
	switch c.pm {
	case pmDisabled, pmRemoved, pmM3Enter, pmM3, pmM3Exit:
		skip = true
	}
	c.mu.Unlock()
	if skip {
		return
	}
	c.stats.HealthChecks.Add(1)
	v, err := c.vendorID()
	switch {
	case err != nil:
		c.log.Debug("health check: config read failed", "dev", c.name, "err", err)
	case v == 0xFFFF:
		c.markRemovedWhy("config space reads all-ones (vendor ID 0xFFFF): surprise removal or link down")
	case v == 0:
		c.startDeadFunctionRecovery()
	}
}

// vendorID reads the function's vendor ID from config space.
func (c *Controller) vendorID() (uint16, error) {
	var b [2]byte
	if err := c.dev.ConfigRead(pci.CfgVendorID, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b[:]), nil
}

// functionDead reports whether the vendor ID reads 0xFFFF or 0, and the
// value read. A read that fails does not count (restoreConfig, which
// follows, reports a backend that cannot write config space).
func (c *Controller) functionDead() (uint16, bool) {
	v, err := c.vendorID()
	return v, err == nil && (v == 0xFFFF || v == 0)
}

// startDeadFunctionRecovery starts recoverDeadFunction unless the
// controller cannot recover now: closed, removed, not powered, suspended,
// already recovering, or after a recovery that failed (pmFatal: Linux
// stops its health check then too).
func (c *Controller) startDeadFunctionRecovery() {
	c.mu.Lock()
	if c.closed || c.recovering || c.poweringUp || c.pm != pmM0 && c.pm != pmM2 && c.pm != pmPOR {
		c.mu.Unlock()
		return
	}
	ctx := c.beginRecoveryLocked()
	c.mu.Unlock()
	c.log.Error("config space reads zero (vendor ID 0): the function died silently; resetting it", "dev", c.name)
	go c.recoverDeadFunction(ctx)
}

// recoverDeadFunction is the recovery goroutine for a function whose
// vendor ID read 0 (Linux mhi_pci_recovery_work, which resets the
// function with pci_try_reset_function): power down host-side, a
// function-level reset, config space restored, power up, channels
// started again (recoverByFunctionReset, flr.go). A function still dead
// after the reset is removed.
func (c *Controller) recoverDeadFunction(ctx context.Context) {
	defer c.wg.Done()
	start := time.Now()
	err := c.recoverByFunctionReset(ctx, fmt.Errorf("config space reads zero (vendor ID 0): the function died without an error report or interrupt"))
	if err == nil {
		err = c.endRecovery(start)
	}
	c.finishRecovery(ctx, start, err)
}
