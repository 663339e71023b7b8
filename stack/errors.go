package stack

import (
	"errors"
	"syscall"

	"github.com/mhistack/mhistack/internal/simlock"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// ErrUnknownAPN matches (errors.Is) an Open or OpenSession the network
// refused for its APN, missing or unknown (3GPP cause 27): on MBIM a
// CONNECT answered INVALID_ACCESS_STRING, or FAILURE with that cause
// (mbim.ErrBadAPN also matches); on QMI a Start Network refused with that
// cause as its verbose call end reason (errors.As finds the
// *qmi.CallError, and errors.Is(err, qmi.ErrCallFailed) holds).
var ErrUnknownAPN = errors.New("stack: missing or unknown APN")

// ErrRoaming matches (errors.Is) an Open or OpenSession refused because
// the modem is roaming and Options.AllowRoaming is not set (mbim.ErrRoaming
// or qmi.ErrRoaming also matches). A session that was up and is dropped
// because the modem started roaming reports it in an EventSession whose
// Err matches mbim.ErrRoaming or qmi.ErrRoaming.
var ErrRoaming = errors.New("stack: the modem is roaming and Options.AllowRoaming is not set")

// ErrActivationRefused matches (errors.Is) an Open or OpenSession whose
// data session the network refused to activate with a 3GPP cause
// (RefusalCause returns it): an MBIM CONNECT answered with the cause as
// NwError, a QMI Start Network with it as the verbose call end reason. A
// cause that passes with time (TransientCause: 26 insufficient resources,
// 34 service option temporarily out of order, 38 network failure) does
// not fail Open: it waits through the session's back-off for the next
// attempt, until its context ends, and only then fails with an error
// that matches this and the context's error. Any other cause fails at
// once: 27 also matches ErrUnknownAPN; 29 (authentication failed), 33
// (option not subscribed) and the rest want the user or the carrier.
var ErrActivationRefused = errors.New("stack: the network refused to activate the data session")

// RefusalCause returns the 3GPP cause (TS 24.008 §10.5.6.6, TS 24.301
// §9.9.4.4) with which the network refused a data session's activation,
// if err says one.
func RefusalCause(err error) (int, bool) {
	var me *mbim.CommandError
	if errors.As(err, &me) && me.Service == mbim.ServiceBasicConnect && me.CID == mbim.CIDConnect && me.NwError != 0 {
		return int(me.NwError), true
	}
	var ce *qmi.CallError
	if errors.As(err, &ce) {
		return ce.End.Cause3GPP()
	}
	return 0, false
}

// TransientCause reports whether 3GPP cause c refuses a data session for
// now rather than for good, so that a later attempt may pass: 26
// insufficient resources (a busy cell or gateway), 34 service option
// temporarily out of order, 38 network failure (TS 24.008 §10.5.6.6). A
// network that refuses with one of them for a long time is still
// retried by the session, at most about once a minute.
func TransientCause(c int) bool {
	switch c {
	case 26, 34, 38:
		return true
	}
	return false
}

// transientRefusal is an attempt's error that Open waits through.
func transientRefusal(err error) bool {
	c, ok := RefusalCause(err)
	return ok && TransientCause(c)
}

// PINError is a SIM that stayed locked (errors.As finds it in an Open or
// OpenSession error): Need is the code it asks for ("PIN" or "PUK"),
// Remaining the tries left of it (-1 when the modem did not say),
// Rejected whether the code given (Options.PIN or Options.PUK) was
// refused — it is not sent again. It matches ErrSIMLocked, and unwraps
// to the protocol's error (mbim.ErrPINRequired, qmi.ErrSIM).
type PINError = simlock.Error

// ErrSIMLocked matches (errors.Is) every *PINError.
var ErrSIMLocked = simlock.ErrLocked

// PINEnv is the environment variable mhiproxy and mhictl read the SIM
// PIN from when no -pin or -pin-file is given (it keeps the PIN out of
// the process list).
const PINEnv = "MHISTACK_PIN"

// sessionError is a data session that did not come up: the MBIM or QMI
// session's error, matching ErrUnknownAPN when the network refused the
// APN, ErrActivationRefused when it refused with any 3GPP cause.
type sessionError struct{ err error }

func (e *sessionError) Error() string {
	if c, ok := RefusalCause(e.err); ok {
		switch {
		case c == 27:
			return e.err.Error() + "; the network does not serve this APN (3GPP cause 27, missing or unknown APN): check Options.APN (-apn)"
		case TransientCause(c):
			return e.err.Error() + "; the network refused the data session for now and Open waited for it until its context ended: give it longer, or try again later"
		}
		return e.err.Error() + "; the network refuses this data session for good (not retried): check the APN, credentials and subscription with the carrier"
	}
	if errors.Is(e, ErrRoaming) {
		return e.err.Error() + "; set Options.AllowRoaming (mhiproxy or mhictl -allow-roaming) to use data while roaming"
	}
	var pe *PINError
	if !errors.As(e.err, &pe) {
		return e.err.Error()
	}
	// Say which option gives the code the SIM wants.
	switch {
	case pe.Need == simlock.PUK1 && pe.Remaining == 0:
		return e.err.Error() + "; no PUK tries left: the SIM is blocked for good, ask the carrier for a new one"
	case pe.Need == simlock.PUK1 && pe.Rejected && pe.Reason != "":
		return e.err.Error() + "; the PIN is used up: give the PUK and a new PIN: Options.PUK and Options.PIN (-puk and -pin)"
	case pe.Rejected:
		return e.err.Error() + "; check the code: it is not tried again automatically (each try burns one)"
	case pe.Need == simlock.PUK1:
		return e.err.Error() + "; give the PUK and a new PIN: Options.PUK and Options.PIN (-puk and -pin)"
	case pe.Need == simlock.PIN1:
		return e.err.Error() + "; give the SIM PIN: Options.PIN (-pin, -pin-file or " + PINEnv + ")"
	}
	return e.err.Error()
}
func (e *sessionError) Unwrap() error { return e.err }

func (e *sessionError) Is(target error) bool {
	if target == ErrRoaming {
		return errors.Is(e.err, mbim.ErrRoaming) || errors.Is(e.err, qmi.ErrRoaming)
	}
	if target == ErrActivationRefused {
		_, ok := RefusalCause(e.err)
		return ok
	}
	if target != ErrUnknownAPN {
		return false
	}
	if errors.Is(e.err, mbim.ErrBadAPN) {
		return true
	}
	var ce *qmi.CallError
	if errors.As(e.err, &ce) {
		cause, ok := ce.End.Cause3GPP()
		return ok && cause == 27
	}
	return false
}

// Limit errors. They wrap syscall errnos too (EMFILE, EAGAIN), so code
// that handles the kernel's resource errors handles them the same way.
var (
	// ErrTooManyConns: Limits.MaxTCPConns connections are open.
	ErrTooManyConns = &limitError{"too many TCP connections (Limits.MaxTCPConns)", syscall.EMFILE}
	// ErrTooManyDials: Limits.MaxInFlightDials handshakes are in progress.
	ErrTooManyDials = &limitError{"too many dials in flight (Limits.MaxInFlightDials)", syscall.EAGAIN}
)

// errAddressRemoved fails a dial whose local address was removed (a
// session address change) while it was in progress.
var errAddressRemoved = &abortError{"local address removed during the dial"}

type abortError struct{ msg string }

func (e *abortError) Error() string   { return "stack: " + e.msg }
func (e *abortError) Unwrap() error   { return syscall.ECONNABORTED }
func (e *abortError) Timeout() bool   { return false }
func (e *abortError) Temporary() bool { return false }

type limitError struct {
	msg   string
	errno syscall.Errno
}

func (e *limitError) Error() string        { return "stack: " + e.msg }
func (e *limitError) Unwrap() error        { return e.errno }
func (e *limitError) Temporary() bool      { return true }
func (e *limitError) Timeout() bool        { return false }
func (e *limitError) Is(target error) bool { return target == e }

// errnoOf maps gVisor's errors to the errno the kernel would return, so
// that errors.Is(err, syscall.ECONNREFUSED) works as with package net.
func errnoOf(e tcpip.Error) error {
	switch e.(type) {
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrNetworkUnreachable:
		return syscall.ENETUNREACH
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrPortInUse:
		return syscall.EADDRINUSE
	case *tcpip.ErrBadLocalAddress:
		return syscall.EADDRNOTAVAIL
	case *tcpip.ErrNoBufferSpace:
		return syscall.ENOBUFS
	case *tcpip.ErrClosedForSend:
		return syscall.EPIPE
	case *tcpip.ErrMessageTooLong:
		return syscall.EMSGSIZE
	case *tcpip.ErrInvalidEndpointState, *tcpip.ErrNotConnected:
		return syscall.ENOTCONN
	case *tcpip.ErrAddressFamilyNotSupported:
		return syscall.EAFNOSUPPORT
	case *tcpip.ErrAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrDestinationRequired:
		return syscall.EDESTADDRREQ
	case *tcpip.ErrBroadcastDisabled, *tcpip.ErrNotPermitted:
		return syscall.EACCES
	case *tcpip.ErrNoPortAvailable:
		return syscall.EAGAIN
	case *tcpip.ErrBadAddress:
		return syscall.EFAULT
	case *tcpip.ErrInvalidOptionValue, *tcpip.ErrBadBuffer:
		return syscall.EINVAL
	case *tcpip.ErrHostDown:
		return syscall.EHOSTDOWN
	case *tcpip.ErrNoNet:
		return syscall.ENONET
	case *tcpip.ErrAlreadyConnected:
		return syscall.EISCONN
	case *tcpip.ErrAlreadyConnecting:
		return syscall.EALREADY
	case *tcpip.ErrNotSupported:
		return syscall.EOPNOTSUPP
	}
	return errors.New(e.String())
}
