package radio

import (
	"math"
	"math/rand/v2"
	"time"
)

// packet is a packet in a line: in the queue, or crossed and waiting for
// its delivery time.
type packet struct {
	buf    []byte // pooled copy
	tag    uint32
	arrive time.Duration // when Send took it
	ready  time.Duration // not before this may it cross (RRC promotion)
	at     time.Duration // delivery time, once crossed
	seq    uint64        // tie-break of at: the order it crossed
}

// line is one direction's model in virtual time (durations since the
// link's start). It has no lock and no goroutine: Link serialises calls
// to it, tests drive it with made-up times.
type line struct {
	cfg  Direction
	sh   *shared
	rng  rand.Rand
	pcg  rand.PCG
	q    ring
	fly  flight        // crossed, ordered by delivery time
	free time.Duration // when the bottleneck is free for the next packet
	last time.Duration // latest delivery time given (keeps order without Reorder)
	seq  uint64
	bad  bool // Gilbert–Elliott state
	cd   codel
	bufs [][]byte // free buffers
	st   Stats
}

// shared is what both directions of a link see: handover gaps and RRC.
type shared struct {
	ho   Handover
	rrc  RRC
	seed uint64
	// RRC state: the latest packet's arrival in either direction and
	// when the promotion under way ends. Guarded by Link.rrcMu.
	lastActive, readyAt time.Duration
	promotions          uint64
}

func (l *line) init(cfg Direction, sh *shared, seed uint64) {
	l.cfg, l.sh = cfg, sh
	l.pcg.Seed(seed, seed^0x9e3779b97f4a7c15)
	l.rng = *rand.New(&l.pcg)
	l.cd.init(cfg.Queue)
}

// admit is the RRC decision for a packet arriving at now: when it may
// cross. Both lines call it under the link's rrc lock.
func (sh *shared) admit(now time.Duration) time.Duration {
	if sh.rrc.Idle > 0 && now >= sh.readyAt && now-sh.lastActive >= sh.rrc.Idle {
		sh.readyAt = now + sh.rrc.Promotion
		sh.promotions++
	}
	sh.lastActive = max(sh.lastActive, now)
	return sh.readyAt
}

// gap returns the handover gap holding t: its end, and whether t is in
// one.
func (sh *shared) gap(t time.Duration) (end time.Duration, in bool) {
	h := sh.ho
	if h.Every <= 0 || t < h.Every {
		return 0, false
	}
	k := t / h.Every
	start := k * h.Every
	d := h.Gap
	if h.GapMax > h.Gap {
		u := float64(splitmix(sh.seed^uint64(k))>>11) / (1 << 53)
		d += time.Duration(u * float64(h.GapMax-h.Gap))
	}
	if t < start+d {
		return start + d, true
	}
	return 0, false
}

// splitmix is SplitMix64's output function: a gap's length depends on
// its number and the seed only, not on the traffic.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// lost draws the packet's random loss: Bernoulli, then Gilbert–Elliott
// (state moves first, the loss uses the state before the move, as netem).
func (l *line) lost() bool {
	if l.cfg.Loss > 0 && l.rng.Float64() < l.cfg.Loss {
		return true
	}
	g := &l.cfg.Burst
	if g.P == 0 {
		return false
	}
	was := l.bad
	if was {
		l.bad = l.rng.Float64() >= g.R
	} else {
		l.bad = l.rng.Float64() < g.P
	}
	p := g.LossGood
	if was {
		p = g.LossBad
	}
	return p > 0 && l.rng.Float64() < p
}

// send takes a packet arriving at now that may cross from ready on.
func (l *line) send(now, ready time.Duration, tag uint32, p []byte) {
	l.advance(now)
	l.st.Enqueued++
	if _, in := l.sh.gap(now); in && l.sh.ho.DropQueue {
		l.st.DroppedGap++
		return
	}
	if l.lost() {
		l.st.DroppedLoss++
		return
	}
	q := l.cfg.Queue
	if q.Packets > 0 && l.q.len()+1 > q.Packets || q.Bytes > 0 && l.q.bytes+len(p) > q.Bytes {
		l.st.DroppedQueue++
		return
	}
	b := l.take(len(p))
	copy(b, p)
	l.q.push(packet{buf: b, tag: tag, arrive: now, ready: max(now, ready)})
	l.st.MaxQueued = max(l.st.MaxQueued, l.q.len())
	l.st.MaxQueuedBytes = max(l.st.MaxQueuedBytes, l.q.bytes)
	l.advance(now)
}

// take returns a buffer of n bytes from the pool.
func (l *line) take(n int) []byte {
	if k := len(l.bufs); k > 0 {
		b := l.bufs[k-1]
		l.bufs = l.bufs[:k-1]
		if cap(b) >= n {
			return b[:n]
		}
	}
	return make([]byte, n, max(n, 2048))
}

// recycle returns a delivered packet's buffer to the pool.
func (l *line) recycle(b []byte) { l.bufs = append(l.bufs, b[:0]) }

// headStart returns when the head of the queue starts crossing, or
// reports that a handover drops it.
func (l *line) headStart() (start time.Duration, dropped bool) {
	start = max(l.free, l.q.front().ready)
	if end, in := l.sh.gap(start); in {
		if l.sh.ho.DropQueue {
			return start, true
		}
		start = end
	}
	return start, false
}

// advance lets every queued packet whose turn has come by now cross the
// bottleneck: each takes its size over the rate from when the bottleneck
// is free (or the packet arrived, or RRC let it, or a gap ended), then
// gets its delivery time.
func (l *line) advance(now time.Duration) {
	for l.q.len() > 0 {
		start, gapDrop := l.headStart()
		if start > now {
			return
		}
		h := l.q.pop()
		if gapDrop {
			l.st.DroppedGap++
			l.recycle(h.buf)
			continue
		}
		sojourn := start - h.arrive
		if l.cfg.Queue.CoDel && l.cd.drop(sojourn, start, l.q.bytes) {
			l.st.DroppedAQM++
			l.recycle(h.buf)
			continue
		}
		l.st.QueueDelay += sojourn
		l.st.MaxQueueDelay = max(l.st.MaxQueueDelay, sojourn)
		l.st.Crossed++
		done := l.crossed(start, len(h.buf))
		l.free = done
		h.at = done
		if l.cfg.Reorder > 0 && l.rng.Float64() < l.cfg.Reorder {
			l.st.Reordered++
		} else {
			h.at += l.cfg.Delay
			if j := l.cfg.Jitter; j > 0 {
				h.at += time.Duration(l.rng.Int64N(int64(j)))
			}
			h.at = max(h.at, l.last)
			l.last = h.at
		}
		l.seq++
		h.seq = l.seq
		l.fly.push(h)
	}
}

// crossed returns when n bytes starting at start have crossed the
// bottleneck.
func (l *line) crossed(start time.Duration, n int) time.Duration {
	bits := float64(n) * 8
	if t := l.cfg.Trace; t != nil {
		return t.finish(start, bits)
	}
	if l.cfg.Rate <= 0 {
		return start
	}
	return start + time.Duration(math.Ceil(bits*1e9/float64(l.cfg.Rate)))
}

// due moves the packets whose delivery time has come by now to out.
func (l *line) due(now time.Duration, out []packet) []packet {
	for l.fly.len() > 0 && l.fly.top().at <= now {
		p := l.fly.pop()
		l.st.Delivered++
		d := p.at - p.arrive
		l.st.Delay += d
		out = append(out, p)
	}
	return out
}

// next returns the time of the line's next event (a delivery or a queued
// packet's start), if there is one.
func (l *line) next() (time.Duration, bool) {
	t, ok := time.Duration(math.MaxInt64), false
	if l.fly.len() > 0 {
		t, ok = l.fly.top().at, true
	}
	if l.q.len() > 0 {
		s, _ := l.headStart()
		t, ok = min(t, s), true
	}
	return t, ok
}

func (l *line) stats() Stats {
	s := l.st
	s.Queued, s.QueuedBytes = l.q.len(), l.q.bytes
	s.InFlight = l.fly.len()
	return s
}

// ring is the queue: a FIFO of packets over a power-of-two slice that
// grows to its high-water mark and stays.
type ring struct {
	s        []packet
	first, n int
	bytes    int
}

func (r *ring) len() int       { return r.n }
func (r *ring) front() *packet { return &r.s[r.first] }

func (r *ring) push(p packet) {
	if r.n == len(r.s) {
		s := make([]packet, max(16, 2*len(r.s)))
		for i := range r.n {
			s[i] = r.s[(r.first+i)&(len(r.s)-1)]
		}
		r.s, r.first = s, 0
	}
	r.s[(r.first+r.n)&(len(r.s)-1)] = p
	r.n++
	r.bytes += len(p.buf)
}

func (r *ring) pop() packet {
	p := r.s[r.first]
	r.s[r.first] = packet{}
	r.first = (r.first + 1) & (len(r.s) - 1)
	r.n--
	r.bytes -= len(p.buf)
	return p
}

// flight is a min-heap of crossed packets by (at, seq). Without Reorder
// it is pushed in order and each push is O(1).
type flight struct{ h []packet }

func (f *flight) len() int     { return len(f.h) }
func (f *flight) top() *packet { return &f.h[0] }
func less(a, b *packet) bool   { return a.at < b.at || a.at == b.at && a.seq < b.seq }

func (f *flight) push(p packet) {
	f.h = append(f.h, p)
	i := len(f.h) - 1
	for i > 0 {
		up := (i - 1) / 2
		if !less(&f.h[i], &f.h[up]) {
			break
		}
		f.h[i], f.h[up] = f.h[up], f.h[i]
		i = up
	}
}

func (f *flight) pop() packet {
	p := f.h[0]
	n := len(f.h) - 1
	f.h[0] = f.h[n]
	f.h[n] = packet{}
	f.h = f.h[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && less(&f.h[c+1], &f.h[c]) {
			c++
		}
		if !less(&f.h[c], &f.h[i]) {
			break
		}
		f.h[i], f.h[c] = f.h[c], f.h[i]
		i = c
	}
	return p
}
