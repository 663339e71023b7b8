package mhi

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Defaults of Options.CrashLoopLimit and Options.CrashLoopWindow: five
// crashes in a minute stop recovery.
const (
	DefaultCrashLoopLimit  = 5
	DefaultCrashLoopWindow = time.Minute
)

func (c *Controller) crashLoopBound() (limit int, window time.Duration) {
	limit, window = c.opts.CrashLoopLimit, c.opts.CrashLoopWindow
	if limit == 0 {
		limit = DefaultCrashLoopLimit
	}
	if window <= 0 {
		window = DefaultCrashLoopWindow
	}
	return limit, window
}

// noteCrash records a SYS_ERR that starts a recovery (at now) and returns
// the error that stops recovery when it is the CrashLoopLimit-th within
// CrashLoopWindow: firmware that crashes again after every recovery (an
// image that does not fit the modem) would otherwise be reset and booted
// forever. Recovery stays stopped until the next PowerUp
// (recoveryStopped). It runs on the recovery goroutine.
func (c *Controller) noteCrash(now time.Time) error {
	limit, window := c.crashLoopBound()
	if limit < 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.crashes[:0]
	for _, t := range c.crashes {
		if now.Sub(t) < window {
			kept = append(kept, t)
		}
	}
	c.crashes = append(kept, now)
	if len(c.crashes) < limit {
		return nil
	}
	c.recoveryStopped = fmt.Errorf("mhi: %s: firmware crashed %d times in %ss: recovery stopped; the modem may need a firmware flash (mhictl flash, docs/FLASHING.md): %w",
		c.name, len(c.crashes), strconv.FormatFloat(window.Seconds(), 'f', -1, 64), ErrCrashLoop)
	return c.recoveryStopped
}

// stopForCrashLoop leaves a crash-looping device quiescent instead of
// recovering it, like Linux's MHI_PM_SYS_ERR_FAIL for a recovery that
// itself fails ("bus: mhi: host: Add MHI_PM_SYS_ERR_FAIL state"): the
// channels are already down; an MHI reset stops the device's DMA (and,
// the modem back in READY, its crashing) so that the buffers go back to
// their owners; nothing boots it again. finishRecovery, which follows,
// reports err (EventRecoveryFailed) and leaves the controller failed:
// channel operations return err, later SYS_ERRs are ignored, PowerDown
// and Close work as usual, and PowerUp starts afresh.
func (c *Controller) stopForCrashLoop(ctx context.Context, err error) {
	c.log.Error("crash loop: recovery stopped", "dev", c.name, "err", err)
	if rerr := c.mhiReset(ctx); rerr != nil {
		c.log.Warn("crash loop: MHI reset", "dev", c.name, "err", rerr)
		return
	}
	c.reclaim(ErrSysErr)
}
