package stack

import (
	"fmt"
	"net/netip"
	"sync"
)

// EventKind says what changed.
type EventKind int

// Event kinds.
const (
	EventLinkUp         EventKind = iota + 1 // the bearer is up: traffic flows
	EventLinkDown                            // the bearer is down (Event.Err says why, when known)
	EventAddressAdded                        // Event.Prefix was added
	EventAddressRemoved                      // Event.Prefix was removed
	EventMTUChanged                          // Event.MTU is the new MTU
	EventDNSChanged                          // Event.DNS are the new servers
	EventSession                             // a step of the data session (Event.Session, Event.Err)
	EventCLAT                                // the CLAT runs with NAT64 prefix Event.Prefix, stopped (zero Prefix), or did not start (Event.Err)
)

func (k EventKind) String() string {
	switch k {
	case EventLinkUp:
		return "link-up"
	case EventLinkDown:
		return "link-down"
	case EventAddressAdded:
		return "address-added"
	case EventAddressRemoved:
		return "address-removed"
	case EventMTUChanged:
		return "mtu-changed"
	case EventDNSChanged:
		return "dns-changed"
	case EventSession:
		return "session"
	case EventCLAT:
		return "clat"
	}
	return fmt.Sprintf("event-%d", int(k))
}

// Event is a change of the interface's state.
type Event struct {
	Kind    EventKind
	Prefix  netip.Prefix
	MTU     uint32
	DNS     []netip.Addr
	Session string // the session step, for EventSession
	Err     error
}

func (e Event) String() string {
	switch e.Kind {
	case EventAddressAdded, EventAddressRemoved:
		return fmt.Sprintf("%v %v", e.Kind, e.Prefix)
	case EventMTUChanged:
		return fmt.Sprintf("%v %d", e.Kind, e.MTU)
	case EventDNSChanged:
		return fmt.Sprintf("%v %v", e.Kind, e.DNS)
	case EventSession:
		if e.Err != nil {
			return fmt.Sprintf("%v %s: %v", e.Kind, e.Session, e.Err)
		}
		return fmt.Sprintf("%v %s", e.Kind, e.Session)
	}
	if e.Err != nil {
		return fmt.Sprintf("%v: %v", e.Kind, e.Err)
	}
	return e.Kind.String()
}

// eventQueue delivers events on a buffered channel without ever
// blocking the stack: when the reader falls behind, the oldest event is
// dropped (the current state is always available from Addresses,
// LinkUp and MTU).
type eventQueue struct {
	mu      sync.Mutex
	ch      chan Event
	closed  bool
	dropped uint64
}

const eventBuffer = 256

func (q *eventQueue) init() { q.ch = make(chan Event, eventBuffer) }

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	for {
		select {
		case q.ch <- e:
			return
		default:
		}
		select {
		case <-q.ch:
			q.dropped++
		default:
		}
	}
}

func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
}

// Events returns the stack's event channel: link up and down, address,
// MTU and DNS changes and (for Open) the data session's steps. It is
// closed by Close. Events are buffered (256); a reader that falls behind
// loses the oldest ones, never blocks the stack.
func (s *Stack) Events() <-chan Event { return s.events.ch }
