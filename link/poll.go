package link

import (
	"runtime"
	"time"

	"github.com/mhistack/mhistack/link/experiment"
	"github.com/mhistack/mhistack/link/internal/backoff"
)

// missedIRQInterval is how often an idle dedicated poller looks at its
// event rings without an interrupt. An MSI can be lost (a PCIe link
// hiccup, a device bug, vpci.SetMSIFilter): the device then waits for
// event ring space that the host never hands back, and the host waits for
// an interrupt that never comes — the data path stops for good. Linux
// drivers cover the same hole with their TX watchdogs. One look costs two
// context reads, ten times a second.
const missedIRQInterval = 100 * time.Millisecond

// yieldSlice is how long the poller runs full passes back to back before
// it yields its P to other goroutines (writers, the stack's timers) even
// when it woke nobody: Go has no need_resched for cond_resched to test, so
// a time slice stands in for it. Yielding after every full pass cost a
// thread hand-off each time on a locked poller (experiment.Options'
// LockOSThread, ThreadHook), ~70 ns per packet with 64-packet passes on the 2-core CI
// machine (BenchmarkRXCost, poller-cpu-ns/pkt); a slice of 100 µs bounds
// what other goroutines on the poller's P wait and costs ≤ a few %.
const yieldSlice = 100 * time.Microsecond

// stopPollMax is the longest interval between the deferred polls that
// run while writers are stopped on a full UL ring (see pollLoop): the
// interrupt moderation of Linux's hardware data event rings (INTMODT
// 1 ms in drivers/bus/mhi/host/pci_generic.c), beyond which a moderated
// MSI would come anyway.
const stopPollMax = time.Millisecond

// With InlinePoll, passes run on the controller's interrupt goroutine,
// which also handles the control ring when MSI vectors are shared. Like
// Linux __do_softirq (MAX_SOFTIRQ_TIME 2 ms, MAX_SOFTIRQ_RESTART 10), an
// inline run that keeps exhausting its budget stops after inlineSlice or
// inlineRestarts passes and hands the rest to the poller goroutine, the
// endpoint's ksoftirqd, so that the interrupt goroutine returns to other
// event work.
const (
	inlineSlice    = 2 * time.Millisecond
	inlineRestarts = 10
)

// pollLoop is the dedicated poller (threaded NAPI): it sleeps until
// notify schedules it, then runs passes until one does less than a budget
// of work and the re-check after re-arming finds nothing. While idle it
// checks the rings every missedIRQInterval for events whose MSI was lost.
// With InlinePoll it is the ksoftirqd of the inline passes: it runs what
// an inline run handed over, the idle checks, and the deferred polls for
// writers stopped on a full UL ring (no inline pass runs for them while
// RX is idle), but no deferred polling for RX.
func (e *Endpoint) pollLoop() {
	defer e.wg.Done()
	defer e.workers.Add(-1)
	if e.x.LockOSThread || e.x.ThreadHook != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	if exit := runHook(e.x.ThreadHook, experiment.RolePoller); exit != nil {
		defer exit()
	}
	var retry *time.Timer // RefillInline back-off while the pool is empty
	var b backoff.Backoff
	idle := time.NewTicker(missedIRQInterval)
	defer idle.Stop()
	// Deferred polling (Linux's gro_flush_timeout + napi_defer_hard_irqs):
	// after a pass that found work, poll again after DeferPoll instead of
	// waiting for the next (moderated) interrupt, until DeferCount passes
	// in a row find nothing.
	deferT := time.NewTimer(time.Hour)
	deferT.Stop()
	defer deferT.Stop()
	deferLeft := 0
	every := e.opts.DeferPoll // the deferred poll's interval
	armed := false            // deferT runs
	for {
		var deferC <-chan time.Time
		if deferLeft > 0 {
			if !armed {
				deferT.Reset(every)
				armed = true
			}
			deferC = deferT.C
		}
		var retryC <-chan time.Time
		if e.x.Refill == experiment.RefillInline && e.starved.Load() {
			if retry == nil {
				retry = time.NewTimer(b.Next())
			} else {
				retry.Reset(b.Next())
			}
			retryC = retry.C
		} else {
			b.Reset()
		}
		select {
		case <-e.quit:
			if retry != nil {
				retry.Stop()
			}
			return
		case <-e.sched:
		case <-e.stopKick:
			// A writer stopped on a full UL ring. The device writes
			// its completions to the event ring at once but, with
			// BEI and INTMODT, may raise the MSI a millisecond later:
			// the ring would drain and sit empty meanwhile. Poll
			// deferred instead, as after a pass that freed buffers
			// for stopped writers.
			if e.opts.DeferPoll > 0 && deferLeft == 0 {
				deferLeft, every = e.opts.DeferCount, e.opts.DeferPoll
			}
			continue
		case <-retryC:
			deferT.Stop()
			armed = false
			e.refill()
			continue
		case <-deferC:
			armed = false
			// As the idle check: the CAS keeps one owner of a pass; if
			// an interrupt won it, its token is in sched.
			if !e.scheduled.CompareAndSwap(false, true) {
				continue
			}
			e.stats.deferredPolls.Add(1)
		case <-idle.C:
			// Not scheduled and events waiting: their MSI was lost.
			// The CAS keeps the NAPI rule (one owner of a pass); if
			// an interrupt won it, its token is in sched.
			if e.scheduled.Load() || !(e.rx.pending() || e.dlER.Pending() || e.ulER.Pending()) ||
				!e.scheduled.CompareAndSwap(false, true) {
				continue
			}
			e.stats.missedIRQ.Add(1)
		}
		deferT.Stop()
		armed = false
		e.inPass.Store(true)
		ok, work, woke := e.run(false)
		e.inPass.Store(false)
		if !ok {
			return
		}
		switch {
		case e.opts.DeferPoll <= 0:
		case !e.x.InlinePoll && (work > 0 || woke):
			// RX work, or TX completions that woke stopped writers:
			// the device is busy, and its next (moderated) MSI may
			// be a millisecond away.
			deferLeft, every = e.opts.DeferCount, e.opts.DeferPoll
		case e.x.InlinePoll && woke:
			// Inline, RX passes run on interrupts; the poller
			// defers only for writers that stop again.
			deferLeft, every = 1, e.opts.DeferPoll
		case e.tx.waiters.Load() > 0:
			// Writers stopped on a full UL ring and this pass freed
			// nothing: the device holds their frames and will
			// complete them, but its MSI may be moderated. Keep
			// polling, backing off to stopPollMax (a slow or
			// flow-controlled device costs a few wake-ups per
			// millisecond, not 20000 a second); the writers
			// themselves give up at TXTimeout.
			deferLeft, every = max(deferLeft, 1), min(2*every, stopPollMax)
		case deferLeft > 0:
			deferLeft--
		}
	}
}

// pollInline runs the passes on the interrupt goroutine that scheduled
// them (softirq NAPI). pollMu lets Close wait for a pass in progress.
func (e *Endpoint) pollInline() {
	e.pollMu.Lock()
	defer e.pollMu.Unlock()
	if e.stopped.Load() {
		return
	}
	e.inlineRun.Store(true)
	e.run(true)
	e.inlineRun.Store(false)
}

// run does poll passes while the poller is scheduled. It returns false if
// the endpoint is stopping, the RX work done, and whether a pass's TX
// completions woke stopped writers (read here, while this run owns the
// passes: with InlinePoll another goroutine's run may follow at once). An inline run (on an
// interrupt goroutine) is bounded like a softirq: see inlineSlice.
func (e *Endpoint) run(inline bool) (ok bool, total int, woke bool) {
	var since time.Time // last yield (or the start)
	start, passes := time.Now(), 0
	for {
		if e.stopped.Load() {
			return false, total, woke
		}
		work, end := e.poll()
		total += work
		woke = woke || e.txWoke
		passes++
		if since.IsZero() {
			since = end
		}
		if work >= e.budget && inline && (passes >= inlineRestarts || end.Sub(start) >= inlineSlice) {
			// Still scheduled: the poller goroutine continues, and
			// interrupts only find the SCHED bit set meanwhile.
			e.stats.inlineHandoffs.Add(1)
			select {
			case e.sched <- struct{}{}:
			default:
			}
			return true, total, woke
		}
		if work >= e.budget {
			// The device has more: poll again without waiting for an
			// interrupt (with BEI moderation the next MSI may be a
			// millisecond away). Yield when the pass woke the
			// refiller (it is runnable on this P, and the DL ring
			// needs it) or when the poller has held its P for a
			// slice, so that writers get to run.
			e.stats.exhausted.Add(1)
			if e.kicked || end.Sub(since) >= yieldSlice {
				runtime.Gosched()
				since = time.Time{}
			}
			continue
		}
		// napi_complete_done: clear SCHED, then re-check the rings for
		// events that raced in before an interrupt could be raised for
		// them.
		e.stats.rearms.Add(1)
		e.scheduled.Store(false)
		if !e.rx.pending() && !e.dlER.Pending() && !e.ulER.Pending() {
			return true, total, woke
		}
		e.stats.rearmRaces.Add(1)
		if !e.scheduled.CompareAndSwap(false, true) {
			// An interrupt got in between and scheduled a poll: its
			// token (or, inline, its goroutine) takes over.
			return true, total, woke
		}
	}
}

// poll is one pass: TX completions first and outside the budget, then up
// to budget RX packets, one GRO flush, buffers back to the pool in one
// batch, the refiller woken at its level. It returns the RX work done and
// when the pass ended; e.kicked says whether it woke the refiller.
func (e *Endpoint) poll() (int, time.Time) {
	start := time.Now()
	e.kicked, e.txWoke = false, false
	e.stats.polls.Add(1)
	// Writers stopped on a full UL ring make the TX completions of this
	// pass work worth deferred polling for (see pollLoop).
	stopped, tx0 := e.tx.waiters.Load() > 0, e.stats.txCompletions.Load()
	defer func() {
		if stopped && e.stats.txCompletions.Load() != tx0 {
			e.txWoke = true
		}
	}()
	if e.resetRX.Swap(false) {
		e.rx.dropChain(e)
	}
	work := 0
	if !e.shared {
		// TX liberation is cheap and frees the buffers writers wait
		// for: bounded by the ring, not by the budget, unless
		// TXInBudget measures the other choice.
		n := e.ulER.Poll(e.txBudget, e.txFn)
		e.tx.flush()
		if e.x.TXInBudget {
			work = min(n, e.budget)
		}
	}
	work += e.rx.deliver(e, e.budget-work)
	if work < e.budget {
		// One Poll per pass: the event ring doorbell is rung once. At
		// most one DL event per remaining packet of budget, so the
		// frames it completes fit the backlog. On a ring shared with
		// UL, the TX completions on it are free too (unless
		// TXInBudget): only DL events are charged.
		if e.shared && !e.x.TXInBudget {
			e.dlER.PollCharged(e.budget-work, e.dl, e.rxFn)
		} else {
			e.dlER.Poll(e.budget-work, e.rxFn)
		}
		if e.shared {
			e.tx.flush()
		}
		work += e.rx.deliver(e, e.budget-work)
	}
	e.flushGRO()
	e.rx.returnBuffers(e)
	e.stats.publish(&e.pass)
	if uint64(work) > e.stats.maxPass.Load() {
		e.stats.maxPass.Store(uint64(work))
	}
	if e.dl.FreeCount() >= e.level {
		if e.x.Refill == experiment.RefillInline {
			e.refill()
		} else {
			e.kickRefill()
			e.kicked = true
		}
	}
	end := time.Now()
	e.stats.pollNanos.Add(uint64(end.Sub(start)))
	return work, end
}

// flushGRO delivers everything GRO holds. gro.GRO.Flush at the pinned
// gVisor delivers only the first packet of each bucket (it walks the list
// with Next after removing the element, which clears the link), so it is
// repeated until a call delivers nothing; a bucket holds at most 8.
func (e *Endpoint) flushGRO() {
	if e.pass.groIn == e.pass.groOut {
		return
	}
	for range 9 {
		before := e.pass.groOut
		e.gro.Flush()
		if e.pass.groOut == before {
			return
		}
	}
}
