package link

import (
	"errors"
	"runtime"
	"time"

	"github.com/mhistack/mhistack/link/experiment"
	"github.com/mhistack/mhistack/link/internal/backoff"
	"github.com/mhistack/mhistack/mhi"
)

// kickRefill wakes whoever refills this endpoint (non-blocking).
func (e *Endpoint) kickRefill() {
	switch e.x.Refill {
	case experiment.RefillDedicated:
		select {
		case e.refillKick <- struct{}{}:
		default:
		}
	case experiment.RefillShared:
		e.worker.Submit()
	case experiment.RefillInline:
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
	if e.x.ThreadHook != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if exit := runHook(e.x.ThreadHook, experiment.RoleRefiller); exit != nil {
			defer exit()
		}
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var b backoff.Backoff
	for {
		var retry <-chan time.Time
		if d := b.Delay(); d > 0 {
			t.Reset(d)
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
			b.Next()
		} else {
			b.Reset()
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

// runHook calls hook (if set) for role and returns its exit function.
func runHook(hook func(string) func(), role string) func() {
	if hook == nil {
		return nil
	}
	return hook(role)
}
