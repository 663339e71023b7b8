package qmi

import (
	"errors"
	"fmt"
)

// ErrorCode is the error field of a response's result TLV (0x02), the
// QMI protocol error (libqmi qmi-errors.h, QmiProtocolError). A non-zero
// code is an error whose text names it; errors returned by this package
// wrap it, so
//
//	errors.Is(err, qmi.ErrCallFailed)
//
// works on any error from a request or a session.
type ErrorCode uint16

// The QMI protocol errors a data session meets (numbering from libqmi
// qmi-errors.h).
const (
	ErrNone                 ErrorCode = 0
	ErrMalformedMessage     ErrorCode = 1
	ErrNoMemory             ErrorCode = 2
	ErrInternal             ErrorCode = 3
	ErrAborted              ErrorCode = 4
	ErrClientIDsExhausted   ErrorCode = 5
	ErrInvalidClientID      ErrorCode = 7
	ErrInvalidHandle        ErrorCode = 9
	ErrInvalidProfile       ErrorCode = 10
	ErrInvalidPINID         ErrorCode = 11
	ErrIncorrectPIN         ErrorCode = 12
	ErrNoNetworkFound       ErrorCode = 13
	ErrCallFailed           ErrorCode = 14
	ErrOutOfCall            ErrorCode = 15
	ErrNotProvisioned       ErrorCode = 16
	ErrMissingArgument      ErrorCode = 17
	ErrArgumentTooLong      ErrorCode = 19
	ErrInvalidTransactionID ErrorCode = 22
	ErrDeviceInUse          ErrorCode = 23
	ErrNetworkUnsupported   ErrorCode = 24
	ErrDeviceUnsupported    ErrorCode = 25
	ErrNoEffect             ErrorCode = 26
	ErrInvalidServiceType   ErrorCode = 31
	ErrInvalidPDPType       ErrorCode = 28
	ErrAuthenticationFailed ErrorCode = 34
	ErrPINBlocked           ErrorCode = 35
	ErrPINAlwaysBlocked     ErrorCode = 36
	ErrUIMUninitialized     ErrorCode = 37
	ErrInvalidDataFormat    ErrorCode = 45
	ErrGeneralError         ErrorCode = 46
	ErrUnknownError         ErrorCode = 47
	ErrInvalidArgument      ErrorCode = 48
	ErrDeviceNotReady       ErrorCode = 52
	ErrNetworkNotReady      ErrorCode = 53
	ErrInvalidTransition    ErrorCode = 60
	ErrInvalidQMICommand    ErrorCode = 71
	ErrNotSupported         ErrorCode = 94
	ErrSessionInvalid       ErrorCode = 66
	ErrIncompatibleState    ErrorCode = 90
	ErrNetworkAborted       ErrorCode = 97
	ErrHardwareRestricted   ErrorCode = 83
)

var errorText = map[ErrorCode]string{
	ErrNone:                 "success",
	ErrMalformedMessage:     "malformed message",
	ErrNoMemory:             "no memory",
	ErrInternal:             "internal error",
	ErrAborted:              "aborted",
	ErrClientIDsExhausted:   "client IDs exhausted",
	ErrInvalidClientID:      "invalid client ID",
	ErrInvalidHandle:        "invalid handle",
	ErrInvalidProfile:       "invalid profile",
	ErrInvalidPINID:         "invalid PIN ID",
	ErrIncorrectPIN:         "incorrect PIN",
	ErrNoNetworkFound:       "no network found",
	ErrCallFailed:           "call failed",
	ErrOutOfCall:            "out of call",
	ErrNotProvisioned:       "not provisioned",
	ErrMissingArgument:      "missing argument",
	ErrArgumentTooLong:      "argument too long",
	ErrInvalidTransactionID: "invalid transaction ID",
	ErrDeviceInUse:          "device in use",
	ErrNetworkUnsupported:   "network unsupported",
	ErrDeviceUnsupported:    "device unsupported",
	ErrNoEffect:             "no effect",
	ErrInvalidServiceType:   "invalid service type",
	ErrInvalidPDPType:       "invalid PDP type",
	ErrAuthenticationFailed: "authentication failed",
	ErrPINBlocked:           "PIN blocked",
	ErrPINAlwaysBlocked:     "PIN permanently blocked",
	ErrUIMUninitialized:     "UIM uninitialized",
	ErrInvalidDataFormat:    "invalid data format",
	ErrGeneralError:         "general error",
	ErrUnknownError:         "unknown error",
	ErrInvalidArgument:      "invalid argument",
	ErrDeviceNotReady:       "device not ready",
	ErrNetworkNotReady:      "network not ready",
	ErrInvalidTransition:    "invalid transition",
	ErrInvalidQMICommand:    "invalid QMI command",
	ErrHardwareRestricted:   "hardware restricted",
	ErrIncompatibleState:    "incompatible state",
	ErrSessionInvalid:       "session invalid",
	ErrNetworkAborted:       "network aborted",
	ErrNotSupported:         "not supported",
}

func (e ErrorCode) String() string {
	if s, ok := errorText[e]; ok {
		return s
	}
	return fmt.Sprintf("QMI error %d", uint16(e))
}

// Error makes a code an error.
func (e ErrorCode) Error() string { return fmt.Sprintf("%s (QMI error %d)", e.String(), uint16(e)) }

// Result TLV fields (libqmi qmi-message.c): u16 status, u16 error.
const (
	TLVResult     = 0x02
	resultSuccess = 0
	resultFailure = 1
)

// ResultTLV is the result TLV for code (0: success).
func ResultTLV(code ErrorCode) TLV {
	st := uint16(resultSuccess)
	if code != ErrNone {
		st = resultFailure
	}
	v := le.AppendUint16(nil, st)
	return TLV{Type: TLVResult, Value: le.AppendUint16(v, uint16(code))}
}

// Error is a failed response: the request it answers and the code.
type Error struct {
	Service Service
	ID      uint16
	Code    ErrorCode
}

func (e *Error) Error() string {
	return fmt.Sprintf("qmi: %s: %s (QMI error %d)", MessageName(e.Service, e.ID), e.Code.String(), uint16(e.Code))
}

// Unwrap returns the code, for errors.Is(err, qmi.ErrCallFailed).
func (e *Error) Unwrap() error { return e.Code }

// Result checks a response's result TLV: nil on success, an *Error for
// a failure, a *FormatError when the TLV is missing or malformed.
func (m *Message) Result() error {
	v, ok := m.Get(TLVResult)
	if !ok {
		return &FormatError{Header: true, Service: m.Service, Client: m.Client, Kind: m.Kind, TID: m.TID, ID: m.ID,
			Reason: "no result TLV"}
	}
	if len(v) != 4 {
		return &FormatError{Header: true, Service: m.Service, Client: m.Client, Kind: m.Kind, TID: m.TID, ID: m.ID,
			Reason: fmt.Sprintf("result TLV of %d bytes, want 4", len(v))}
	}
	st, code := le.Uint16(v), ErrorCode(le.Uint16(v[2:]))
	switch {
	case st == resultSuccess && code == ErrNone:
		return nil
	case st == resultSuccess:
		// libqmi treats only status FAILURE as failed; a success with
		// an error code is a warning some firmware sends (NO_EFFECT).
		return nil
	case code == ErrNone:
		code = ErrUnknownError
	}
	return &Error{Service: m.Service, ID: m.ID, Code: code}
}

// ErrorCodeOf returns the QMI error code in err's chain (ErrNone if
// there is none).
func ErrorCodeOf(err error) ErrorCode {
	var c ErrorCode
	if errors.As(err, &c) {
		return c
	}
	return ErrNone
}
