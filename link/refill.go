package link

import (
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// Refill back-off when the pool runs dry: short, because buffers come
// back as soon as the poller has delivered the frames holding them; capped
// well below Linux's 250 ms, which would idle a 128-slot ring for a long
// time at modem rates.
const (
	minBackoff = 200 * time.Microsecond
	maxBackoff = 20 * time.Millisecond
)

func nextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return minBackoff
	}
	return min(2*d, maxBackoff)
}

// kickRefill wakes whoever refills this endpoint (non-blocking).
func (e *Endpoint) kickRefill() {
	switch e.opts.Refill {
	case RefillDedicated:
		select {
		case e.refillKick <- struct{}{}:
		default:
		}
	case RefillShared:
		e.opts.Worker.submit(e)
	case RefillInline:
		// The poller refills at the end of its pass; make it run one.
		e.notify()
	}
}

// refillLoop is the dedicated refiller (the mhi-net-rx kthread): it
// sleeps until kicked, fills the DL ring, and retries with back-off while
// the pool is short.
func (e *Endpoint) refillLoop() {
	defer e.wg.Done()
	defer e.workers.Add(-1)
	if e.opts.ThreadHook != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if exit := runHook(e.opts.ThreadHook, RoleRefiller); exit != nil {
			defer exit()
		}
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var backoff time.Duration
	for {
		var retry <-chan time.Time
		if backoff > 0 {
			t.Reset(backoff)
			retry = t.C
		}
		select {
		case <-e.quit:
			return
		case <-e.refillKick:
		case <-retry:
		}
		t.Stop()
		if e.refill() {
			backoff = nextBackoff(backoff)
		} else {
			backoff = 0
		}
	}
}

// refill queues MRU-sized buffers from the pool into every free DL
// descriptor, with one doorbell for the batch. The channel's free count is
// the source of truth (not a private counter: completions, resets and
// recovery all change it). It reports true when the pool could not cover
// the free descriptors (counted as an allocation failure), so the caller
// retries after a back-off.
func (e *Endpoint) refill() (short bool) {
	e.refillMu.Lock()
	defer e.refillMu.Unlock()
	if e.closed.Load() {
		return false
	}
	free := e.dl.FreeCount()
	if free <= 0 {
		e.starved.Store(false)
		return false
	}
	bufs := e.refillBufs[:min(free, len(e.refillBufs))]
	n := e.rxPool.get(bufs)
	queued, down := 0, false
	for i := range n {
		if err := e.dl.Queue(bufs[i], e.mru, mhi.EOT); err != nil {
			e.rxPool.put(bufs[i:n]...)
			// Ring full: someone else refilled meanwhile. Anything
			// else is the channel going down (SYS_ERR, removal); the
			// Recovered event kicks the refill again.
			down = !errors.Is(err, mhi.ErrRingFull)
			break
		}
		queued++
	}
	clear(bufs[:n])
	if queued > 0 {
		e.dl.Ring()
		e.stats.refills.Add(1)
		e.stats.refillBuffers.Add(uint64(queued))
	}
	if n < free && !down {
		e.stats.rxAllocFail.Add(1)
		e.starved.Store(true)
		return true
	}
	e.starved.Store(false)
	return false
}

// Worker refills the RX rings of several endpoints on one goroutine, like
// the system workqueue Linux's mhi_net used before its dedicated thread.
// It exists to measure that choice (Options.Refill = RefillShared). The
// owner closes it after the endpoints using it.
type Worker struct {
	jobs chan *Endpoint
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	members map[*Endpoint]bool
	starved map[*Endpoint]time.Duration // back-off per endpoint
}

// runHook calls hook (if set) for role and returns its exit function.
func runHook(hook func(string) func(), role string) func() {
	if hook == nil {
		return nil
	}
	return hook(role)
}

// NewWorker starts a refill worker.
func NewWorker() *Worker { return NewWorkerWithHook(nil) }

// NewWorkerWithHook starts a refill worker whose goroutine, when hook is
// set, is locked to an OS thread and calls hook(RoleWorker) as it starts
// (and the returned function as it exits), like Options.ThreadHook.
func NewWorkerWithHook(hook func(role string) (exit func())) *Worker {
	w := &Worker{
		jobs:    make(chan *Endpoint, 64),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		members: map[*Endpoint]bool{},
		starved: map[*Endpoint]time.Duration{},
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

func (w *Worker) add(e *Endpoint) {
	w.mu.Lock()
	w.members[e] = true
	w.mu.Unlock()
}

func (w *Worker) remove(e *Endpoint) {
	w.mu.Lock()
	delete(w.members, e)
	delete(w.starved, e)
	w.mu.Unlock()
}

// submit queues e's refill unless it is already queued.
func (w *Worker) submit(e *Endpoint) {
	if !e.refillQueued.CompareAndSwap(false, true) {
		return
	}
	select {
	case w.jobs <- e:
	default:
		// Queue full: the retry timer picks it up.
		e.refillQueued.Store(false)
		w.mu.Lock()
		if w.members[e] {
			w.starved[e] = max(w.starved[e], minBackoff)
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
		case e := <-w.jobs:
			e.refillQueued.Store(false)
			w.runOne(e)
		case <-t.C:
			w.mu.Lock()
			retry := make([]*Endpoint, 0, len(w.starved))
			for e := range w.starved {
				retry = append(retry, e)
			}
			w.mu.Unlock()
			for _, e := range retry {
				w.runOne(e)
			}
		}
		w.mu.Lock()
		next := time.Duration(0)
		for _, d := range w.starved {
			if next == 0 || d < next {
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

func (w *Worker) runOne(e *Endpoint) {
	w.mu.Lock()
	member := w.members[e]
	w.mu.Unlock()
	if !member {
		return
	}
	short := e.refill()
	w.mu.Lock()
	if w.members[e] {
		if short {
			w.starved[e] = nextBackoff(w.starved[e])
		} else {
			delete(w.starved, e)
		}
	}
	w.mu.Unlock()
}
