package experiment

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/link/internal/backoff"
)

// Worker refills the RX rings of several endpoints on one goroutine, like
// the system workqueue Linux's mhi_net used before its dedicated thread
// (Options.Refill = RefillShared). The owner closes it after the endpoints
// using it.
type Worker struct {
	jobs chan *Member
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	members map[*Member]bool
	starved map[*Member]backoff.Backoff // retry delay per member
}

// Member is an endpoint's place on a Worker (Join).
type Member struct {
	w      *Worker
	refill func() (short bool)
	queued atomic.Bool // submitted, not yet run
}

// NewWorker starts a refill worker. When hook is set, its goroutine is
// locked to an OS thread and calls hook(RoleWorker) as it starts (and the
// returned function as it exits), like Options.ThreadHook.
func NewWorker(hook func(role string) (exit func())) *Worker {
	w := &Worker{
		jobs:    make(chan *Member, 64),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		members: map[*Member]bool{},
		starved: map[*Member]backoff.Backoff{},
	}
	go w.run(hook)
	return w
}

// Close stops the worker's goroutine.
func (w *Worker) Close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// Join makes refill (link's: it fills the DL ring and reports whether the
// pool came up short) a member of the worker; the worker runs it after
// each Submit and, while it comes up short, after a back-off.
func (w *Worker) Join(refill func() (short bool)) *Member {
	m := &Member{w: w, refill: refill}
	w.mu.Lock()
	w.members[m] = true
	w.mu.Unlock()
	return m
}

// Leave removes m from its worker: refill is not called once Leave has
// returned, except by a run already in progress.
func (m *Member) Leave() {
	w := m.w
	w.mu.Lock()
	delete(w.members, m)
	delete(w.starved, m)
	w.mu.Unlock()
}

// Submit queues m's refill unless it is already queued. It does not block.
func (m *Member) Submit() {
	if !m.queued.CompareAndSwap(false, true) {
		return
	}
	w := m.w
	select {
	case w.jobs <- m:
	default:
		// Queue full: the retry timer picks it up.
		m.queued.Store(false)
		w.mu.Lock()
		if w.members[m] {
			if b := w.starved[m]; b.Delay() == 0 {
				b.Next()
				w.starved[m] = b
			}
		}
		w.mu.Unlock()
	}
}

func (w *Worker) run(hook func(string) func()) {
	defer close(w.done)
	if hook != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if exit := hook(RoleWorker); exit != nil {
			defer exit()
		}
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case m := <-w.jobs:
			m.queued.Store(false)
			w.runOne(m)
		case <-t.C:
			w.mu.Lock()
			retry := make([]*Member, 0, len(w.starved))
			for m := range w.starved {
				retry = append(retry, m)
			}
			w.mu.Unlock()
			for _, m := range retry {
				w.runOne(m)
			}
		}
		w.mu.Lock()
		next := time.Duration(0)
		for _, b := range w.starved {
			if d := b.Delay(); next == 0 || d < next {
				next = d
			}
		}
		w.mu.Unlock()
		if next > 0 {
			t.Reset(next)
		} else {
			t.Stop()
		}
	}
}

func (w *Worker) runOne(m *Member) {
	w.mu.Lock()
	member := w.members[m]
	w.mu.Unlock()
	if !member {
		return
	}
	short := m.refill()
	w.mu.Lock()
	if w.members[m] {
		if short {
			b := w.starved[m]
			b.Next()
			w.starved[m] = b
		} else {
			delete(w.starved, m)
		}
	}
	w.mu.Unlock()
}
