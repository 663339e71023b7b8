package radio

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Trace is a rate that changes with time, repeating with its period.
type Trace struct {
	segs       []traceSeg
	period     time.Duration
	periodBits float64
}

// traceSeg holds a rate (bit/s) from the previous segment's end up to end
// (an offset in the period).
type traceSeg struct {
	end  time.Duration
	rate float64
}

// Limits of a trace file: a trace is outside input.
const (
	maxTraceLines  = 10 << 20
	maxTracePeriod = 24 * time.Hour
	maxTraceRate   = 1 << 40 // bit/s, 1.1 Tbit/s
	// mahimahiOpportunity is the bytes one line of a Mahimahi trace
	// lets through (mm-link(1): "an opportunity for one 1500-byte
	// packet to be drained").
	mahimahiOpportunity = 1500
)

// ParseTrace reads a rate trace in one of two formats, told apart by the
// first data line:
//
//   - CSV "time_ms,rate_kbps" (a header line of that text is allowed):
//     from time_ms on the rate is rate_kbps, up to the next line's time.
//     The first line's time is 0; times increase; the last line's time
//     is the trace's length and its rate is not used.
//   - Mahimahi's packet-delivery opportunities (mm-link(1), and
//     traces/README in the Mahimahi repository): one millisecond
//     timestamp per line, non-decreasing, each line a chance for 1500
//     bytes to leave in that millisecond; chances not used are lost. The
//     trace repeats after its last timestamp. Here a millisecond with n
//     chances is a millisecond at n·12 Mbit/s.
//
// Lines starting with '#' and blank lines are skipped. A trace must let
// at least one 1500-byte packet through per period.
func ParseTrace(data []byte) (*Trace, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 4096)
	var lines []string
	for sc.Scan() {
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		if len(lines) == maxTraceLines {
			return nil, errors.New("radio: trace: more than 10 Mi lines")
		}
		lines = append(lines, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("radio: trace: %w", err)
	}
	if len(lines) == 0 {
		return nil, errors.New("radio: trace: empty")
	}
	var t *Trace
	var err error
	if strings.Contains(lines[0], ",") {
		if strings.EqualFold(strings.ReplaceAll(lines[0], " ", ""), "time_ms,rate_kbps") {
			lines = lines[1:]
		}
		t, err = parseCSV(lines)
	} else {
		t, err = parseMahimahi(lines)
	}
	if err != nil {
		return nil, fmt.Errorf("radio: trace: %w", err)
	}
	return t, nil
}

func parseCSV(lines []string) (*Trace, error) {
	if len(lines) < 2 {
		return nil, errors.New("CSV trace needs two lines: the last one's time is the trace's length")
	}
	t := new(Trace)
	var prevEnd time.Duration
	var prevRate float64
	for i, s := range lines {
		ts, rs, ok := strings.Cut(s, ",")
		if !ok {
			return nil, fmt.Errorf("line %d: want time_ms,rate_kbps", i+1)
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
		if err != nil || ms < 0 || time.Duration(ms) > maxTracePeriod/time.Millisecond {
			return nil, fmt.Errorf("line %d: bad time %q", i+1, ts)
		}
		kbps, err := strconv.ParseFloat(strings.TrimSpace(rs), 64)
		if err != nil || math.IsNaN(kbps) || kbps < 0 || kbps*1000 > maxTraceRate {
			return nil, fmt.Errorf("line %d: bad rate %q", i+1, rs)
		}
		at := time.Duration(ms) * time.Millisecond
		switch {
		case i == 0 && at != 0:
			return nil, errors.New("line 1: a CSV trace starts at time 0")
		case i > 0 && at <= prevEnd:
			return nil, fmt.Errorf("line %d: time does not increase", i+1)
		case i > 0:
			t.add(at, prevRate)
		}
		prevEnd, prevRate = at, kbps*1000
	}
	return t, t.check()
}

func parseMahimahi(lines []string) (*Trace, error) {
	type chances struct {
		ms int64
		n  float64
	}
	var cs []chances
	for i, s := range lines {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 || time.Duration(ms) > maxTracePeriod/time.Millisecond {
			return nil, fmt.Errorf("line %d: bad timestamp %q", i+1, s)
		}
		switch last := len(cs) - 1; {
		case last >= 0 && ms < cs[last].ms:
			return nil, fmt.Errorf("line %d: timestamp goes back", i+1)
		case last >= 0 && ms == cs[last].ms:
			cs[last].n++
		default:
			cs = append(cs, chances{ms, 1})
		}
	}
	// The trace repeats after its last timestamp, so that timestamp is
	// the next period's millisecond 0 (a trace of one timestamp is one
	// millisecond long).
	period := cs[len(cs)-1].ms
	if period == 0 {
		period = 1
	} else {
		tail := cs[len(cs)-1]
		cs = cs[:len(cs)-1]
		if len(cs) > 0 && cs[0].ms == 0 {
			cs[0].n += tail.n
		} else {
			cs = append([]chances{{0, tail.n}}, cs...)
		}
	}
	t := new(Trace)
	var at int64
	for _, c := range cs {
		if c.ms > at {
			t.add(time.Duration(c.ms)*time.Millisecond, 0)
		}
		t.add(time.Duration(c.ms+1)*time.Millisecond, c.n*mahimahiOpportunity*8*1000)
		at = c.ms + 1
	}
	if at < period {
		t.add(time.Duration(period)*time.Millisecond, 0)
	}
	return t, t.check()
}

// add appends a segment at rate (bit/s) up to end.
func (t *Trace) add(end time.Duration, rate float64) {
	var start time.Duration
	if n := len(t.segs); n > 0 {
		start = t.segs[n-1].end
		if t.segs[n-1].rate == rate {
			t.segs[n-1].end = end
			t.periodBits += rate * (end - start).Seconds()
			t.period = end
			return
		}
	}
	t.segs = append(t.segs, traceSeg{end, rate})
	t.periodBits += rate * (end - start).Seconds()
	t.period = end
}

func (t *Trace) check() error {
	if t.period <= 0 || len(t.segs) == 0 {
		return errors.New("zero length")
	}
	if t.period > maxTracePeriod {
		return errors.New("longer than 24 h")
	}
	if t.periodBits < mahimahiOpportunity*8 {
		return errors.New("lets less than one 1500-byte packet through per period")
	}
	return nil
}

// Period returns how long the trace lasts before it repeats.
func (t *Trace) Period() time.Duration { return t.period }

// MeanRate returns the trace's mean rate in bit/s.
func (t *Trace) MeanRate() int64 { return int64(t.periodBits / t.period.Seconds()) }

// RateAt returns the rate in bit/s at offset at from the trace's start.
func (t *Trace) RateAt(at time.Duration) int64 {
	return int64(t.segs[t.find(at%t.period)].rate)
}

// find returns the index of the segment holding pos (0 <= pos < period).
func (t *Trace) find(pos time.Duration) int {
	lo, hi := 0, len(t.segs)-1
	for lo < hi {
		m := (lo + hi) / 2
		if t.segs[m].end > pos {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// finish returns when a packet of bits that starts crossing at start has
// crossed. Whole periods are skipped arithmetically, so the walk visits
// each segment at most twice.
func (t *Trace) finish(start time.Duration, bits float64) time.Duration {
	periods := math.Floor(bits / t.periodBits)
	if periods > 0 && bits == periods*t.periodBits {
		periods--
	}
	rem := bits - periods*t.periodBits
	at := start + time.Duration(periods)*t.period
	pos := start % t.period
	i := t.find(pos)
	for range 2*len(t.segs) + 1 {
		s := t.segs[i]
		span := s.end - pos
		if c := s.rate * span.Seconds(); c >= rem {
			return at + time.Duration(math.Ceil(rem/s.rate*1e9))
		} else {
			rem -= c
		}
		at += span
		pos = s.end
		if i++; i == len(t.segs) {
			i, pos = 0, 0
		}
	}
	return at
}
