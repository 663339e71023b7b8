package radio

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Dir is a direction of the link.
type Dir int

const (
	// Down is the downlink: network to device.
	Down Dir = iota
	// Up is the uplink: device to network.
	Up
)

func (d Dir) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// Config is a whole link: one Direction each way and what the two share
// (handover gaps, RRC state, the seed).
type Config struct {
	// Name is the preset's or file's name, for logs.
	Name     string
	Down, Up Direction
	// Handover takes the link down now and then, in both directions at
	// once. Zero: never.
	Handover Handover
	// RRC delays the first packet after an idle time. Zero: never.
	RRC RRC
	// Seed seeds every random draw (loss, jitter, reordering, gap
	// lengths): one generator per direction, derived from it.
	Seed uint64
}

// Direction is one direction's delay line.
type Direction struct {
	// Rate is the bottleneck's rate in bit/s (0 with no Trace: no
	// bottleneck, packets leave as they come).
	Rate int64
	// Trace, if set, replaces Rate: the rate follows it, wrapping at
	// its end (ParseTrace).
	Trace *Trace
	// Delay is the base one-way delay a packet takes after it has
	// crossed the bottleneck; Jitter adds to it a uniform draw in
	// [0, Jitter). Without Reorder a packet never overtakes the one
	// before it: jitter delays the packets behind a late one too.
	Delay, Jitter time.Duration
	// Queue is the bottleneck's queue.
	Queue Queue
	// Loss is the probability that a packet is lost, independently of
	// the others (Bernoulli).
	Loss float64
	// Burst adds bursty loss (Gilbert–Elliott). Zero: off.
	Burst GilbertElliott
	// Reorder is the probability that a packet skips the one-way delay
	// and jitter (it still crosses the bottleneck), so it overtakes the
	// packets in flight ahead of it, as netem's reorder does.
	Reorder float64
}

// Queue is a bottleneck queue. A packet that would take it past Bytes or
// Packets is dropped on arrival (drop-tail); with CoDel the queue also
// drops at its head when packets have waited above Target for an
// Interval (RFC 8289, Controlled Delay Active Queue Management).
type Queue struct {
	// Bytes and Packets bound the queue (0: that bound is off). With
	// a rate, at least one of them must be set.
	Bytes, Packets int
	// CoDel turns on RFC 8289's controlled delay at the queue's head.
	CoDel bool
	// Target and Interval are CoDel's parameters (0: 5 ms and 100 ms,
	// RFC 8289 §4).
	Target, Interval time.Duration
}

// GilbertElliott is a two-state loss model with netem's semantics
// (tc-netem(8), "loss gemodel p r 1-h 1-k"): per packet the state first
// moves (good→bad with P, bad→good with R), then the packet is lost with
// the probability of the state it was in before the move. Mean burst
// length is 1/R packets.
type GilbertElliott struct {
	// P is the good→bad probability per packet (0: the model is off),
	// R the bad→good one.
	P, R float64
	// LossBad (netem's 1-h) and LossGood (1-k) are the loss
	// probabilities in each state.
	LossBad, LossGood float64
}

// Rate returns the long-run loss fraction the model gives:
// (P·LossBad + R·LossGood)/(P+R).
func (g GilbertElliott) Rate() float64 {
	if g.P == 0 {
		return 0
	}
	return (g.P*g.LossBad + g.R*g.LossGood) / (g.P + g.R)
}

// Handover is a train of link outages: the k-th gap (k = 1, 2, ...)
// starts at k·Every after the link's start and lasts between Gap and
// GapMax (uniform, drawn from the seed; GapMax 0: exactly Gap). During a
// gap nothing crosses the bottleneck in either direction.
type Handover struct {
	Every       time.Duration
	Gap, GapMax time.Duration
	// DropQueue drops what is queued when a gap starts and what
	// arrives during it (a break without data forwarding). Otherwise
	// the queue is held and drains after the gap, as with a lossless
	// handover (3GPP TS 36.300 §10.1.2, handover with data forwarding).
	DropQueue bool
}

// RRC is the radio's idle state: after Idle without a packet in either
// direction the radio has released its connection, and the next packet
// (and everything behind it, both ways) waits Promotion before it can
// cross. The link starts connected.
type RRC struct {
	Idle, Promotion time.Duration
}

// Validate reports the first thing wrong with c.
func (c *Config) Validate() error {
	for _, d := range []struct {
		dir Dir
		v   *Direction
	}{{Down, &c.Down}, {Up, &c.Up}} {
		if err := d.v.validate(); err != nil {
			return fmt.Errorf("radio: %s: %w", d.dir, err)
		}
	}
	h := c.Handover
	if h.Every < 0 || h.Gap < 0 || h.GapMax < 0 {
		return errors.New("radio: handover: negative duration")
	}
	if h.Every > 0 {
		if h.Gap == 0 {
			return errors.New("radio: handover: Every without Gap")
		}
		if h.GapMax != 0 && h.GapMax < h.Gap {
			return errors.New("radio: handover: GapMax below Gap")
		}
		if max(h.Gap, h.GapMax) >= h.Every {
			return errors.New("radio: handover: a gap must be shorter than Every")
		}
	}
	if c.RRC.Idle < 0 || c.RRC.Promotion < 0 {
		return errors.New("radio: rrc: negative duration")
	}
	return nil
}

func prob(name string, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("%s %v is not a probability", name, p)
	}
	return nil
}

func (d *Direction) validate() error {
	if d.Rate < 0 {
		return errors.New("negative rate")
	}
	if d.Delay < 0 || d.Jitter < 0 {
		return errors.New("negative delay or jitter")
	}
	q := d.Queue
	if q.Bytes < 0 || q.Packets < 0 || q.Target < 0 || q.Interval < 0 {
		return errors.New("negative queue limit or CoDel parameter")
	}
	if d.Rate > 0 || d.Trace != nil {
		if q.Bytes == 0 && q.Packets == 0 {
			return errors.New("a bottleneck needs a queue limit (Queue.Bytes or Queue.Packets)")
		}
	}
	for _, p := range []struct {
		n string
		v float64
	}{{"loss", d.Loss}, {"reorder", d.Reorder}, {"burst P", d.Burst.P}, {"burst R", d.Burst.R},
		{"burst LossBad", d.Burst.LossBad}, {"burst LossGood", d.Burst.LossGood}} {
		if err := prob(p.n, p.v); err != nil {
			return err
		}
	}
	if d.Burst.P > 0 && d.Burst.R == 0 {
		return errors.New("burst: R 0 never leaves the bad state")
	}
	return nil
}

// MeanRate returns the direction's rate in bit/s: Rate, or the trace's
// mean rate.
func (d *Direction) MeanRate() int64 {
	if d.Trace != nil {
		return d.Trace.MeanRate()
	}
	return d.Rate
}

// BDP returns the direction's bandwidth-delay product in bytes for a
// round trip of rtt, at MeanRate.
func (d *Direction) BDP(rtt time.Duration) int64 {
	return int64(float64(d.MeanRate()) * rtt.Seconds() / 8)
}
