// Package callbacks is a set of registered callbacks that can be
// cancelled one by one: what a control client (link/mbim, link/qmi)
// keeps for its indication subscribers and reset listeners.
package callbacks

import "sync"

// Set holds callbacks of type F. The zero value is ready to use; it is
// safe for concurrent use.
type Set[F any] struct {
	mu   sync.Mutex
	next int
	fns  map[int]F
}

// Add registers fn; cancel removes it.
func (s *Set[F]) Add(fn F) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns == nil {
		s.fns = map[int]F{}
	}
	s.next++
	id := s.next
	s.fns[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.fns, id)
		s.mu.Unlock()
	}
}

// All returns the registered callbacks (in no particular order), to be
// called without holding any lock of the caller's that a callback takes.
func (s *Set[F]) All() []F {
	s.mu.Lock()
	defer s.mu.Unlock()
	fns := make([]F, 0, len(s.fns))
	for _, fn := range s.fns {
		fns = append(fns, fn)
	}
	return fns
}
