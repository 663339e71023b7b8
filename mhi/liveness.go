package mhi

import "time"

// DefaultLivenessInterval is how often a powered controller checks on its
// own that the device still answers (Options.LivenessInterval).
const DefaultLivenessInterval = time.Second

// liveness is the goroutine that reads MHISTATUS every interval while the
// controller is powered (from PowerUp until PowerDown or Close).
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
	switch iv := c.opts.LivenessInterval; {
	case iv == 0:
		return DefaultLivenessInterval
	case iv < 0:
		return 0
	default:
		return iv
	}
}

// startLiveness starts the liveness goroutine unless it runs or is
// disabled. It is called with interrupts, at the start of power-up.
func (c *Controller) startLiveness() {
	iv := c.livenessInterval()
	if iv == 0 {
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
	go c.livenessLoop(l, iv)
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

func (c *Controller) livenessLoop(l *liveness, iv time.Duration) {
	defer c.wg.Done()
	defer close(l.done)
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
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
