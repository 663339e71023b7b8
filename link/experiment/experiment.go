// Package experiment holds the switches of link.Endpoint that exist only to
// compare designs: the alternatives argued in the Linux netdev threads
// behind link's design, kept so that hack/bench and link's benchmarks can
// measure them (docs/LINK.md, "Design comparisons"). Each zero value is the
// design link uses; a user leaves link.Options.Experiments nil.
package experiment

import "fmt"

// Options are link.Options.Experiments.
type Options struct {
	// TXInBudget counts TX completions against the budget (the stmmac
	// patch that netdev rejected: "[PATCH 13/17] net: stmmac: Implement
	// NAPI for TX", Feb 2017) instead of draining them first and for free.
	// Without it, a pair whose UL and DL share an event ring charges only
	// DL events.
	TXInBudget bool
	// InlinePoll polls on the controller's interrupt goroutine (softirq
	// NAPI) instead of a dedicated poller goroutine (threaded NAPI,
	// as in "[v2] ath10k: snoc: enable threaded napi on WCN3990"). Like
	// a softirq, an inline run that keeps exhausting the budget for 2 ms
	// or 10 passes hands the rest to the poller goroutine (ksoftirqd), so
	// that the interrupt goroutine gets back to control events. The
	// endpoint's DeferPoll applies only to writers stopped on a full UL
	// ring then.
	InlinePoll bool
	// LockOSThread pins the dedicated poller to an OS thread.
	LockOSThread bool
	// ThreadHook, when set, locks the dedicated poller and refiller
	// goroutines each to an OS thread of its own and calls ThreadHook on
	// each of them as it starts, with its role (RolePoller,
	// RoleRefiller); the function it returns, if any, runs on the same
	// goroutine as it exits. It lets a benchmark read each role's
	// per-thread CPU clock (hack/bench): with the goroutine locked, the
	// thread's CPU time is the role's. Locking costs a thread hand-off
	// per wake-up.
	ThreadHook func(role string) (exit func())

	// Refill selects who queues RX buffers; Worker is the shared worker
	// for RefillShared.
	Refill Refill
	Worker *Worker
	// RefillLevel is the number of free DL descriptors at which the
	// poller wakes the refiller (default a quarter of the ring).
	RefillLevel int
}

// Refill selects who queues RX buffers (netdev thread "[PATCH v2 3/3]
// net: mhi: Add dedicated alloc thread", Dec 2020).
type Refill int

const (
	// RefillDedicated: a goroutine per endpoint, woken at the refill
	// level (the mhi-net-rx kthread). The default.
	RefillDedicated Refill = iota
	// RefillShared: a Worker shared by several endpoints (the system
	// workqueue the kthread replaced). Options.Worker is required.
	RefillShared
	// RefillInline: the poller refills at the end of its pass, no
	// goroutine hop (not with InlinePoll).
	RefillInline
)

func (m Refill) String() string {
	switch m {
	case RefillDedicated:
		return "dedicated"
	case RefillShared:
		return "shared"
	case RefillInline:
		return "inline"
	}
	return fmt.Sprintf("Refill(%d)", int(m))
}

// Roles of the endpoint's goroutines, as Options.ThreadHook and NewWorker
// name them.
const (
	RolePoller   = "poller"
	RoleRefiller = "refiller"
	RoleWorker   = "refill-worker"
)
