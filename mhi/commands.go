package mhi

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/mmio"
)

// cmdRingElements is the command ring size (Linux CMD_EL_PER_RING).
const cmdRingElements = 128

// commandRing issues START/STOP/RESET commands one at a time and matches
// completions by the command element's IOVA (docs/PROTOCOL.md §2.3, §4.7).
// A command that is abandoned after a timeout keeps its slot until the
// device completes it or the ring is rewound; its late completion is
// recognised and dropped.
type commandRing struct {
	ring ring
	ctx  *pci.Buffer

	issue sync.Mutex // one command in flight

	mu      sync.Mutex
	rp, wp  uint32
	waiting uint64 // IOVA of the element being waited for, 0 if none
	result  chan Code
}

func (cr *commandRing) reset(ctx *pci.Buffer) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.ctx = ctx
	cr.rp, cr.wp, cr.waiting = 0, 0, 0
	ctx.Store64(CtxRBase, cr.ring.base)
	ctx.Store64(CtxRLen, cr.ring.len())
	ctx.Store64(CtxRP, cr.ring.base)
	ctx.Store64(CtxWP, cr.ring.base)
}

// rewind empties the ring; a pending command fails.
func (cr *commandRing) rewind(c *Controller) {
	cr.mu.Lock()
	if cr.waiting != 0 {
		cr.waiting = 0
		cr.result <- CodeInvalid
	}
	cr.mu.Unlock()
	cr.reset(c.cmdCtx)
}

func (cr *commandRing) reRing(c *Controller) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.rp != cr.wp {
		c.doorbell(RegCRDBLower, cr.ring.iova(cr.wp))
	}
}

// complete handles a command completion event (from the control ring).
func (cr *commandRing) complete(c *Controller, ptr uint64, code Code) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	i, ok := cr.ring.index(ptr)
	if !ok || cr.ring.pending(cr.rp, cr.wp) == 0 || cr.ring.pending(cr.rp, i) >= cr.ring.pending(cr.rp, cr.wp) {
		// Outside the ring or not an outstanding command.
		c.stats.InvalidEvents.Add(1)
		return
	}
	// Completions arrive in order; a completion for a later element
	// also retires the abandoned ones before it.
	cr.rp = cr.ring.next(i)
	if ptr == cr.waiting {
		cr.waiting = 0
		cr.result <- code
		c.mu.Lock()
		c.broadcast()
		c.mu.Unlock()
	}
}

// command sends one command for channel ch and waits for its completion.
func (c *Controller) command(ctx context.Context, typ uint8, ch int) error {
	return c.chanCommand(ctx, typ, ch, 0)
}

// errEEEnded ends the wait for a channel command's completion once the
// host has learnt that the device left the channel's execution
// environments (chanCommand).
var errEEEnded = errors.New("the device left the channel's execution environment")

// chanCommand is command for a channel that exists only in the execution
// environments ees (0: every one). The device may leave them while the
// command is in flight (the SBL moving on to AMSS takes SAHARA with it);
// the firmware that could answer is then gone, so the wait ends with
// errEEEnded once the host has seen the new EE (EE_EVENT). The abandoned
// command keeps its slot like a timed-out one.
func (c *Controller) chanCommand(ctx context.Context, typ uint8, ch int, ees EEMask) error {
	cr := &c.cmd
	cr.issue.Lock()
	defer cr.issue.Unlock()
	c.mu.Lock()
	if err := c.operationalLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	allowed := c.doorbellAllowedLocked()
	c.mu.Unlock()

	cr.mu.Lock()
	if cr.ring.full(cr.rp, cr.wp) {
		cr.mu.Unlock()
		return fmt.Errorf("command ring full: %w", ErrRingFull)
	}
	el := cr.ring.iova(cr.wp)
	Command(typ, ch).Encode(cr.ring.element(cr.wp))
	cr.wp = cr.ring.next(cr.wp)
	if cr.result == nil {
		cr.result = make(chan Code, 1)
	}
	cr.waiting = el
	result := cr.result
	mmio.DMAWriteBarrier()
	cr.ctx.Store64(CtxWP, cr.ring.iova(cr.wp))
	if allowed {
		c.doorbell(RegCRDBLower, cr.ring.iova(cr.wp))
	}
	cr.mu.Unlock()
	c.stats.Commands.Add(1)

	var code Code
	err := c.waitFor(ctx, c.stateBound(), cmdName(typ)+" completion", func() (bool, error) {
		select {
		case code = <-result:
			return true, nil
		default:
		}
		if c.devState == StateSysErr {
			return false, ErrSysErr
		}
		if ees != 0 && !ees.Has(c.ee) {
			return false, errEEEnded
		}
		return false, nil
	})
	if err != nil {
		cr.mu.Lock()
		if cr.waiting == el {
			cr.waiting = 0
		} else {
			// The completion raced with the timeout; drain it.
			select {
			case <-result:
			default:
			}
		}
		cr.mu.Unlock()
		c.stats.CommandTimeouts.Add(1)
		return err
	}
	if code == CodeInvalid {
		return fmt.Errorf("%s aborted by a ring reset: %w", cmdName(typ), ErrSysErr)
	}
	if code != CodeSuccess {
		return fmt.Errorf("%s completed with %s: %w", cmdName(typ), code, ErrProtocol)
	}
	return nil
}

func cmdName(typ uint8) string {
	switch typ {
	case TypeStartCmd:
		return "START_CHAN"
	case TypeStopCmd:
		return "STOP_CHAN"
	case TypeResetCmd:
		return "RESET_CHAN"
	case TypeNoopCmd:
		return "NOOP"
	}
	return fmt.Sprintf("command %#x", typ)
}
