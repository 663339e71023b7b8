package radio

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Deliver receives a packet at the end of a direction: tag is what Send
// was given, pkt is only valid during the call. It runs on the
// direction's goroutine; it must not call Close.
type Deliver func(tag uint32, pkt []byte)

// Stats are one direction's counters. Every packet given to Send is
// Enqueued, then either dropped (one of the Dropped counters), or
// Delivered, or still Queued or InFlight.
type Stats struct {
	Enqueued uint64
	// DroppedQueue: the queue was full on arrival (drop-tail).
	// DroppedAQM: CoDel dropped it at the queue's head. DroppedLoss:
	// random loss (Loss, Burst). DroppedGap: a handover gap with
	// DropQueue.
	DroppedQueue, DroppedAQM, DroppedLoss, DroppedGap uint64
	// Crossed packets left the queue over the bottleneck; Reordered of
	// them skipped the delay; Delivered reached the callback.
	Crossed, Reordered, Delivered uint64
	// QueueDelay sums the time crossed packets waited in the queue
	// (arrival to start of crossing; MaxQueueDelay is the longest);
	// Delay sums delivered packets' arrival-to-delivery time (model
	// time: the goroutine hands them over as close to it as its timer
	// lets).
	QueueDelay, MaxQueueDelay, Delay time.Duration
	// Queued and QueuedBytes are in the queue now; MaxQueued and
	// MaxQueuedBytes the most it held; InFlight crossed, not yet
	// delivered.
	Queued, QueuedBytes, MaxQueued, MaxQueuedBytes, InFlight int
	// Promotions counts RRC promotions (the link's, in both
	// directions' Stats).
	Promotions uint64
}

// Link is a radio link: two lines and their goroutines.
type Link struct {
	cfg   Config
	epoch time.Time
	sh    shared
	rrcMu sync.Mutex // guards sh's RRC state
	dirs  [2]direction
	quit  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// direction is a line with its lock and goroutine.
type direction struct {
	mu      sync.Mutex
	l       line
	closed  bool
	wake    time.Duration // when the goroutine means to wake next (guarded by mu)
	kick    chan struct{} // one token: an earlier event than wake
	deliver Deliver
}

// New starts a link: down and up receive what crosses each direction.
func New(cfg Config, down, up Deliver) (*Link, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if down == nil || up == nil {
		return nil, errors.New("radio: New needs a Deliver for each direction")
	}
	l := &Link{cfg: cfg, epoch: time.Now(), quit: make(chan struct{})}
	l.sh = shared{ho: cfg.Handover, rrc: cfg.RRC, seed: cfg.Seed}
	for i, d := range []struct {
		c   Direction
		del Deliver
	}{{cfg.Down, down}, {cfg.Up, up}} {
		dir := &l.dirs[i]
		dir.l.init(d.c, &l.sh, splitmix(cfg.Seed+uint64(i)))
		dir.deliver = d.del
		dir.kick = make(chan struct{}, 1)
		dir.wake = never
	}
	l.wg.Add(2)
	go l.run(&l.dirs[Down])
	go l.run(&l.dirs[Up])
	return l, nil
}

const never = time.Duration(1<<63 - 1)

// Config returns the link's configuration.
func (l *Link) Config() Config { return l.cfg }

func (l *Link) now() time.Duration { return time.Since(l.epoch) }

// Send puts a copy of pkt into direction d; tag comes back with it to
// d's Deliver. A packet the model drops is not an error (the counters
// say why); Send fails only on a closed link (net.ErrClosed) or a bad
// argument.
func (l *Link) Send(d Dir, tag uint32, pkt []byte) error {
	if d != Down && d != Up {
		return errors.New("radio: no such direction")
	}
	if len(pkt) == 0 {
		return errors.New("radio: empty packet")
	}
	now := l.now()
	ready := now
	if l.cfg.RRC.Idle > 0 {
		l.rrcMu.Lock()
		ready = l.sh.admit(now)
		l.rrcMu.Unlock()
	}
	dir := &l.dirs[d]
	dir.mu.Lock()
	if dir.closed {
		dir.mu.Unlock()
		return net.ErrClosed
	}
	dir.l.send(now, ready, tag, pkt)
	next, ok := dir.l.next()
	kick := ok && next < dir.wake
	if kick {
		dir.wake = next
	}
	dir.mu.Unlock()
	if kick {
		select {
		case dir.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// Stats returns direction d's counters.
func (l *Link) Stats(d Dir) Stats {
	dir := &l.dirs[d&1]
	dir.mu.Lock()
	s := dir.l.stats()
	dir.mu.Unlock()
	l.rrcMu.Lock()
	s.Promotions = l.sh.promotions
	l.rrcMu.Unlock()
	return s
}

// Close stops both goroutines; packets still queued or in flight are
// dropped without being counted. Send after Close fails with
// net.ErrClosed.
func (l *Link) Close() error {
	l.once.Do(func() {
		for i := range l.dirs {
			l.dirs[i].mu.Lock()
			l.dirs[i].closed = true
			l.dirs[i].mu.Unlock()
		}
		close(l.quit)
		l.wg.Wait()
	})
	return nil
}

// run is direction dir's goroutine: it advances the line to the present,
// delivers what is due, and sleeps until the line's next event or a
// Send that brings one earlier.
func (l *Link) run(dir *direction) {
	defer l.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	var batch []packet
	for {
		dir.mu.Lock()
		now := l.now()
		dir.l.advance(now)
		batch = dir.l.due(now, batch[:0])
		next, ok := dir.l.next()
		dir.wake = never
		if len(batch) == 0 && ok {
			dir.wake = next
		}
		dir.mu.Unlock()
		if len(batch) > 0 {
			for i := range batch {
				dir.deliver(batch[i].tag, batch[i].buf)
			}
			dir.mu.Lock()
			for i := range batch {
				dir.l.recycle(batch[i].buf)
				batch[i] = packet{}
			}
			dir.mu.Unlock()
			select {
			case <-l.quit:
				return
			default:
			}
			continue
		}
		if ok {
			t.Reset(next - now)
		}
		select {
		case <-dir.kick:
		case <-t.C:
		case <-l.quit:
			t.Stop()
			return
		}
		t.Stop()
	}
}
