// Package simlock is the error a data session returns when the SIM stays
// locked, shared by the MBIM and QMI sessions so that callers (package
// stack, as stack.PINError) see one type whatever the protocol.
// A session builds an *Error with the code the SIM asks for, the tries
// left and whether the code it was given was refused; stack adds the
// options that supply a code.
package simlock

import (
	"errors"
	"fmt"
	"sync"
)

// ErrLocked matches (errors.Is) every *Error.
var ErrLocked = errors.New("SIM locked")

// Code is what the SIM asks for.
type Code string

// Codes.
const (
	PIN1 Code = "PIN"
	PUK1 Code = "PUK"
)

// Unknown is Remaining when the modem did not say.
const Unknown = -1

// Error is a SIM that stayed locked. It unwraps to the protocol's error
// (mbim.ErrPINRequired, qmi.ErrSIM and the modem's status or code).
type Error struct {
	// Protocol is "mbim" or "qmi".
	Protocol string
	// Need is the code the SIM asks for now.
	Need Code
	// Remaining is how many tries of Need are left (Unknown: not said).
	Remaining int
	// Rejected: the code the session was given was refused (it is never
	// sent again); otherwise none was given.
	Rejected bool
	// Reason says more (e.g. "a PUK needs a new PIN"); may be empty.
	Reason string
	Err    error
}

func (e *Error) Error() string {
	left := "attempts left unknown"
	if e.Remaining != Unknown {
		left = fmt.Sprintf("%d attempts left", e.Remaining)
	}
	what := "no " + string(e.Need) + " configured"
	switch {
	case e.Reason != "":
		what = e.Reason
	case e.Rejected:
		what = "the " + string(e.Need) + " given was rejected and is not tried again"
	}
	s := fmt.Sprintf("%s: SIM locked, %s required (%s): %s", e.Protocol, e.Need, left, what)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches ErrLocked.
func (e *Error) Is(target error) bool { return target == ErrLocked }

// Refused remembers the codes a SIM refused, so that no session sends
// one again: a wrong PIN is never retried automatically (each try burns
// one of the SIM's few). One per modem, shared by its sessions; the
// zero value is ready. Values are compared, not kept: a hash would do,
// but the process holds the code anyway.
type Refused struct {
	mu sync.Mutex
	m  map[Code]string
}

// Has reports whether value was refused as c.
func (r *Refused) Has(c Code, value string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[c]
	return ok && v == value
}

// Add records that value was refused as c.
func (r *Refused) Add(c Code, value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[Code]string{}
	}
	r.m[c] = value
}
