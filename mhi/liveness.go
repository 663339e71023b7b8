package mhi

import (
	"fmt"
	"time"

	"github.com/mhistack/mhistack/mhi/pci"
)

// DefaultLivenessInterval is how often a powered controller checks on its
// own that the device still answers (Options.LivenessInterval).
const DefaultLivenessInterval = time.Second

// liveness is the goroutine that reads MHISTATUS every interval while the
// controller is powered (from PowerUp until PowerDown or Close), and the
// vendor ID every health-check interval (health.go).
//
// Removal is otherwise noticed only when something reads a register: a
// command or state wait, an interrupt. An idle controller whose only user
// is blocked in ControlPort.Recv would never notice that the device is
// gone, and the Recv would wait forever. Linux has the PCI core's hotplug
// for that; here one MMIO read per second (about a microsecond through
// VFIO) does it, and it also catches a SYS_ERR whose MSI was lost.
type liveness struct {
	stop chan struct{}
	done chan struct{}
}

func (c *Controller) livenessInterval() time.Duration {
	return optInterval(c.opts.LivenessInterval, DefaultLivenessInterval)
}

// optInterval is the period an Options interval field asks for: def for
// 0, none (0) for a negative one.
func optInterval(iv, def time.Duration) time.Duration {
	switch {
	case iv == 0:
		return def
	case iv < 0:
		return 0
	default:
		return iv
	}
}

// startLiveness starts the liveness goroutine unless it runs or is
// disabled. It is called with interrupts, at the start of power-up.
//
// The same goroutine waits for a pci.Removable device's removal request
// (vfio-pci's request interrupt on hot-unplug), also with the periodic
// check disabled (releaseOnRequest).
func (c *Controller) startLiveness() {
	iv, hc := c.livenessInterval(), c.healthCheckInterval()
	_, removable := c.dev.(pci.Removable)
	if iv == 0 && hc == 0 && !removable {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live != nil || c.closed {
		return
	}
	l := &liveness{stop: make(chan struct{}), done: make(chan struct{})}
	c.live = l
	c.wg.Add(1)
	go c.livenessLoop(l, iv, hc)
}

// stopLiveness stops the liveness goroutine and waits until it is gone.
// It must not be called from that goroutine (event subscribers, which
// it may run, must not block, let alone power the controller down).
func (c *Controller) stopLiveness() {
	c.mu.Lock()
	l := c.live
	c.live = nil
	c.mu.Unlock()
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
}

func (c *Controller) livenessLoop(l *liveness, iv, hc time.Duration) {
	defer c.wg.Done()
	defer close(l.done)
	var tick, health <-chan time.Time
	if iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	if hc > 0 {
		t := time.NewTicker(hc)
		defer t.Stop()
		health = t.C
	}
	var requested <-chan struct{}
	rm, _ := c.dev.(pci.Removable)
	if rm != nil {
		requested = rm.RemovalRequested()
	}
	for {
		select {
		case <-l.stop:
			return
		case <-requested:
			c.releaseOnRequest(rm)
			return
		case <-tick:
		case <-health:
			c.healthCheck() // health.go
			continue
		}
		c.mu.Lock()
		pm, closed := c.pm, c.closed
		c.mu.Unlock()
		switch {
		case closed || pm == pmRemoved:
			return
		case pm == pmM3Enter || pm == pmM3 || pm == pmM3Exit:
			// Suspended: the function is in D3hot, where its BAR
			// reads all-ones; the resume path checks the device.
			continue
		}
		c.stats.LivenessChecks.Add(1)
		c.checkStatus("liveness check")
	}
}

// releaseResetWait bounds the MHI reset releaseOnRequest gives the device.
const releaseResetWait = 500 * time.Millisecond

// releaseOnRequest gives the device back when the system asks for it
// (hot-unplug, unbind), as a driver's remove does: no doorbell from now
// on, then an MHI reset so that the device stops its DMA before the
// kernel turns bus mastering off, then every channel and wait fails with
// ErrRemoved and the backend releases the function.
func (c *Controller) releaseOnRequest(rm pci.Removable) {
	c.mu.Lock()
	if c.pm == pmRemoved || c.closed {
		c.mu.Unlock()
		rm.Release()
		return
	}
	c.setRemovedLocked()
	c.mu.Unlock()
	// A doorbell in flight holds its channel's lock and checked the
	// state before: taking each lock once waits them out, so that none
	// reaches the device after its reset.
	for _, ch := range c.channels {
		ch.mu.Lock()
		ch.mu.Unlock()
	}
	why := "the host asked for it back (hot-unplug or unbind: VFIO request interrupt); MHI reset, released"
	if err := c.resetForRelease(); err != nil {
		why = fmt.Sprintf("the host asked for it back (hot-unplug or unbind: VFIO request interrupt); released (MHI reset: %v)", err)
	}
	c.finishRemoved(why)
	rm.Release()
}

// resetForRelease sets MHICTRL.RESET and polls for the device to clear
// it, at most releaseResetWait (the controller is already marked
// removed, so its waits would return at once).
func (c *Controller) resetForRelease() error {
	c.rmw(RegMHICTRL, CtrlReset, 1, 1)
	deadline := time.Now().Add(releaseResetWait)
	for {
		v := c.read(RegMHICTRL)
		if v != 0xFFFFFFFF && v&CtrlReset == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MHICTRL.RESET still set after %v", releaseResetWait)
		}
		time.Sleep(time.Millisecond)
	}
}
