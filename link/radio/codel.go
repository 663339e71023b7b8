package radio

import (
	"math"
	"time"
)

// CoDel's defaults: RFC 8289 §4, TARGET 5 ms and INTERVAL 100 ms.
const (
	defaultTarget   = 5 * time.Millisecond
	defaultInterval = 100 * time.Millisecond
	// codelMaxPacket is RFC 8289's MAXPACKET: a queue holding no more
	// than one packet is not dropped from (ok_to_drop in RFC 8289 §5).
	codelMaxPacket = 1500
)

// codel is RFC 8289's state for one queue, decided at the queue's head:
// drop reports whether the packet about to leave at now, after waiting
// sojourn, is dropped instead (written from the RFC's description and
// its §5 pseudocode).
type codel struct {
	target, interval time.Duration
	dropping         bool
	aboveSet         bool          // firstAbove is set
	firstAbove       time.Duration // when sojourn has been above target for an interval
	dropNext         time.Duration
	count, lastCount uint32
}

func (c *codel) init(q Queue) {
	c.target, c.interval = q.Target, q.Interval
	if c.target == 0 {
		c.target = defaultTarget
	}
	if c.interval == 0 {
		c.interval = defaultInterval
	}
}

// okToDrop is the pseudocode's ok_to_drop: sojourn above target for at least an interval, and
// more than one packet's worth left behind.
func (c *codel) okToDrop(sojourn, now time.Duration, backlog int) bool {
	if sojourn < c.target || backlog <= codelMaxPacket {
		c.aboveSet = false
		return false
	}
	if !c.aboveSet {
		c.aboveSet, c.firstAbove = true, now+c.interval
		return false
	}
	return now >= c.firstAbove
}

// controlLaw is the pseudocode's control_law: the next drop comes interval/√count later.
func (c *codel) controlLaw(t time.Duration) time.Duration {
	return t + time.Duration(float64(c.interval)/math.Sqrt(float64(c.count)))
}

// drop decides for the head packet (backlog: bytes queued behind it).
func (c *codel) drop(sojourn, now time.Duration, backlog int) bool {
	ok := c.okToDrop(sojourn, now, backlog)
	if c.dropping {
		if !ok {
			c.dropping = false
			return false
		}
		if now >= c.dropNext {
			c.count++
			c.dropNext = c.controlLaw(c.dropNext)
			return true
		}
		return false
	}
	if !ok {
		return false
	}
	// Enter the dropping state; start near the previous drop rate if
	// the last episode was recent, as the pseudocode's dequeue does.
	c.dropping = true
	if delta := c.count - c.lastCount; delta > 1 && now-c.dropNext < 16*c.interval {
		c.count = delta
	} else {
		c.count = 1
	}
	c.dropNext = c.controlLaw(now)
	c.lastCount = c.count
	return true
}
