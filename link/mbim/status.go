package mbim

import (
	"errors"
	"fmt"
)

// Status is the Status field of OPEN_DONE, CLOSE_DONE and COMMAND_DONE
// (docs/FRAMING.md §2.4, libmbim mbim-errors.h). A non-zero Status is an
// error whose text names it the way a user reads it ("SIM not inserted",
// "PIN required"); errors returned by this package wrap it, so
//
//	errors.Is(err, mbim.ErrSIMNotInserted)
//
// works on any error from a command, a session or the proxy.
type Status uint32

// MBIM status codes (MBIM 1.0 §9.4.5, libmbim mbim-errors.h).
const (
	StatusNone                          Status = 0
	StatusBusy                          Status = 1
	StatusFailure                       Status = 2
	StatusSIMNotInserted                Status = 3
	StatusBadSIM                        Status = 4
	StatusPINRequired                   Status = 5
	StatusPINDisabled                   Status = 6
	StatusNotRegistered                 Status = 7
	StatusProvidersNotFound             Status = 8
	StatusNoDeviceSupport               Status = 9
	StatusProviderNotVisible            Status = 10
	StatusDataClassNotAvailable         Status = 11
	StatusPacketServiceDetached         Status = 12
	StatusMaxActivatedContexts          Status = 13
	StatusNotInitialized                Status = 14
	StatusVoiceCallInProgress           Status = 15
	StatusContextNotActivated           Status = 16
	StatusServiceNotActivated           Status = 17
	StatusInvalidAccessString           Status = 18
	StatusInvalidUserNamePwd            Status = 19
	StatusRadioPowerOff                 Status = 20
	StatusInvalidParameters             Status = 21
	StatusReadFailure                   Status = 22
	StatusWriteFailure                  Status = 23
	StatusNoPhonebook                   Status = 25
	StatusParameterTooLong              Status = 26
	StatusSTKBusy                       Status = 27
	StatusOperationNotAllowed           Status = 28
	StatusMemoryFailure                 Status = 29
	StatusInvalidMemoryIndex            Status = 30
	StatusMemoryFull                    Status = 31
	StatusFilterNotSupported            Status = 32
	StatusDSSInstanceLimit              Status = 33
	StatusInvalidDeviceServiceOperation Status = 34
	StatusAuthIncorrectAUTN             Status = 35
	StatusAuthSyncFailure               Status = 36
	StatusAuthAMFNotSet                 Status = 37
	StatusContextNotSupported           Status = 38
	StatusSMSUnknownSMSCAddress         Status = 100
	StatusSMSNetworkTimeout             Status = 101
	StatusSMSLangNotSupported           Status = 102
	StatusSMSEncodingNotSupported       Status = 103
	StatusSMSFormatNotSupported         Status = 104
	firstVendorStatus, lastVendorStatus Status = 0x87430001, 0x91000007
)

var statusText = map[Status]string{
	StatusNone:                          "success",
	StatusBusy:                          "device busy",
	StatusFailure:                       "failure",
	StatusSIMNotInserted:                "SIM not inserted",
	StatusBadSIM:                        "bad SIM",
	StatusPINRequired:                   "PIN required",
	StatusPINDisabled:                   "PIN disabled",
	StatusNotRegistered:                 "no service (not registered)",
	StatusProvidersNotFound:             "providers not found",
	StatusNoDeviceSupport:               "not supported by the device",
	StatusProviderNotVisible:            "provider not visible",
	StatusDataClassNotAvailable:         "data class not available",
	StatusPacketServiceDetached:         "packet service detached",
	StatusMaxActivatedContexts:          "maximum number of contexts activated",
	StatusNotInitialized:                "not initialized",
	StatusVoiceCallInProgress:           "voice call in progress",
	StatusContextNotActivated:           "context not activated",
	StatusServiceNotActivated:           "service not activated",
	StatusInvalidAccessString:           "bad APN (invalid access string)",
	StatusInvalidUserNamePwd:            "invalid user name or password",
	StatusRadioPowerOff:                 "radio off",
	StatusInvalidParameters:             "invalid parameters",
	StatusReadFailure:                   "read failure",
	StatusWriteFailure:                  "write failure",
	StatusNoPhonebook:                   "no phonebook",
	StatusParameterTooLong:              "parameter too long",
	StatusSTKBusy:                       "SIM toolkit busy",
	StatusOperationNotAllowed:           "operation not allowed",
	StatusMemoryFailure:                 "memory failure",
	StatusInvalidMemoryIndex:            "invalid memory index",
	StatusMemoryFull:                    "memory full",
	StatusFilterNotSupported:            "filter not supported",
	StatusDSSInstanceLimit:              "DSS instance limit reached",
	StatusInvalidDeviceServiceOperation: "invalid device service operation",
	StatusAuthIncorrectAUTN:             "authentication: incorrect AUTN",
	StatusAuthSyncFailure:               "authentication: sync failure",
	StatusAuthAMFNotSet:                 "authentication: AMF bit not set",
	StatusContextNotSupported:           "context type not supported",
	StatusSMSUnknownSMSCAddress:         "SMS: unknown SMSC address",
	StatusSMSNetworkTimeout:             "SMS: network timeout",
	StatusSMSLangNotSupported:           "SMS: language not supported",
	StatusSMSEncodingNotSupported:       "SMS: encoding not supported",
	StatusSMSFormatNotSupported:         "SMS: format not supported",
}

// Error implements error: the status as a user reads it.
func (s Status) Error() string {
	if t, ok := statusText[s]; ok {
		return t
	}
	if s >= firstVendorStatus && s <= lastVendorStatus {
		return fmt.Sprintf("vendor status %#x", uint32(s))
	}
	return fmt.Sprintf("status %d", uint32(s))
}

// String is Error.
func (s Status) String() string { return s.Error() }

// Sentinels for the conditions a data session most often stops at. They
// are Status values, so errors.Is matches a COMMAND_DONE status as well as
// the session's own diagnosis (a SUBSCRIBER_READY_STATUS of
// SIM_NOT_INSERTED, a REGISTER_STATE that never reaches home or roaming,
// a CONNECT refused with 3GPP cause 27).
var (
	ErrSIMNotInserted error = StatusSIMNotInserted
	ErrBadSIM         error = StatusBadSIM
	ErrPINRequired    error = StatusPINRequired
	ErrNoService      error = StatusNotRegistered
	ErrRadioOff       error = StatusRadioPowerOff
	ErrBadAPN         error = StatusInvalidAccessString
	ErrBadCredentials error = StatusInvalidUserNamePwd
	ErrDetached       error = StatusPacketServiceDetached
	ErrBusy           error = StatusBusy
)

// Errors of the transaction engine.
var (
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("mbim: client closed")
	// ErrTimeout: no answer within the request's timeout.
	ErrTimeout = errors.New("mbim: request timed out")
	// ErrNotOpened: the function is not open (OPEN not done, or the
	// function answered NOT_OPENED, or the modem was reset).
	ErrNotOpened = errors.New("mbim: function not opened")
	// ErrModemReset: the modem crashed or was reset while the request
	// was outstanding; the MBIM session is gone and must be opened
	// again.
	ErrModemReset = errors.New("mbim: modem reset")
	// ErrMalformed: a message or information buffer does not parse.
	ErrMalformed = errors.New("mbim: malformed message")
)

// ProtocolError is the ErrorStatusCode of HOST_ERROR and FUNCTION_ERROR
// (docs/FRAMING.md §2.4). It is an error; a FUNCTION_ERROR answering a
// request is returned as a *FunctionError wrapping it.
type ProtocolError uint32

// MBIM protocol error codes.
const (
	ProtoTimeoutFragment       ProtocolError = 1
	ProtoFragmentOutOfSequence ProtocolError = 2
	ProtoLengthMismatch        ProtocolError = 3
	ProtoDuplicatedTID         ProtocolError = 4
	ProtoNotOpened             ProtocolError = 5
	ProtoUnknown               ProtocolError = 6
	ProtoCancel                ProtocolError = 7
	ProtoMaxTransfer           ProtocolError = 8
	protoLast                  ProtocolError = 8
)

var protoText = [...]string{"", "fragment timeout", "fragment out of sequence", "length mismatch",
	"duplicated transaction ID", "not opened", "unknown error", "cancelled", "max transfer exceeded"}

// Error implements error.
func (e ProtocolError) Error() string {
	if e >= 1 && e <= protoLast {
		return "MBIM protocol error: " + protoText[e]
	}
	return fmt.Sprintf("MBIM protocol error %d", uint32(e))
}

// Is lets errors.Is(err, ErrNotOpened) match a NOT_OPENED protocol error.
func (e ProtocolError) Is(target error) bool {
	return e == ProtoNotOpened && target == ErrNotOpened
}

// FunctionError is a FUNCTION_ERROR the modem sent in answer to a
// request (matched by transaction ID, §2.2).
type FunctionError struct {
	TID  uint32
	Code ProtocolError
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("mbim: function error for transaction %d: %v", e.TID, e.Code)
}

func (e *FunctionError) Unwrap() error { return e.Code }

// NwError is a 3GPP cause (TS 24.008 §10.5.6.6 / §10.5.3.6) that
// REGISTER_STATE, PACKET_SERVICE and CONNECT report next to the status;
// a refused CONNECT usually comes back as FAILURE with the real reason
// here (docs/FRAMING.md §2.4).
type NwError uint32

var nwText = map[NwError]string{
	2:   "IMSI unknown in HLR",
	3:   "illegal MS",
	6:   "illegal ME",
	7:   "GPRS services not allowed",
	8:   "operator determined barring",
	11:  "PLMN not allowed",
	12:  "location area not allowed",
	13:  "roaming not allowed in this location area",
	14:  "GPRS services not allowed in this PLMN",
	15:  "no suitable cells in location area",
	26:  "insufficient resources",
	27:  "missing or unknown APN",
	28:  "unknown PDP address or type",
	29:  "user authentication failed",
	30:  "activation rejected by the gateway",
	31:  "activation rejected, unspecified",
	32:  "service option not supported",
	33:  "requested service option not subscribed",
	34:  "service option temporarily out of order",
	36:  "regular deactivation",
	38:  "network failure",
	50:  "PDP type IPv4 only allowed",
	51:  "PDP type IPv6 only allowed",
	111: "protocol error, unspecified",
}

// String names the cause.
func (n NwError) String() string {
	if t, ok := nwText[n]; ok {
		return fmt.Sprintf("%s (3GPP cause %d)", t, uint32(n))
	}
	return fmt.Sprintf("3GPP cause %d", uint32(n))
}

// status maps the causes that have an MBIM status of their own, so that
// a FAILURE with cause 27 matches ErrBadAPN.
func (n NwError) status() Status {
	switch n {
	case 27:
		return StatusInvalidAccessString
	case 29:
		return StatusInvalidUserNamePwd
	case 7, 14:
		return StatusServiceNotActivated
	case 2, 3, 6, 8, 11, 12, 13, 15:
		return StatusNotRegistered
	}
	return StatusNone
}

// CommandError is a COMMAND_DONE whose Status is not success. NwError is
// the 3GPP cause when the CID's information buffer carries one.
type CommandError struct {
	Service UUID
	CID     uint32
	Set     bool
	Status  Status
	NwError NwError
}

func (e *CommandError) Error() string {
	op := "query"
	if e.Set {
		op = "set"
	}
	s := fmt.Sprintf("mbim: %s %s: %v", cidName(e.Service, e.CID), op, e.Status)
	if e.NwError != 0 {
		if st := e.NwError.status(); st != StatusNone && st != e.Status {
			s = fmt.Sprintf("mbim: %s %s: %v: %v (status %v)", cidName(e.Service, e.CID), op, st, e.NwError, e.Status)
		} else {
			s += ": " + e.NwError.String()
		}
	}
	return s
}

// Unwrap returns the Status.
func (e *CommandError) Unwrap() error { return e.Status }

// Is matches the status implied by the 3GPP cause as well, so that a
// CONNECT refused as FAILURE with cause 27 is errors.Is(err, ErrBadAPN).
func (e *CommandError) Is(target error) bool {
	st, ok := target.(Status)
	return ok && e.NwError != 0 && st == e.NwError.status() && st != StatusNone
}
