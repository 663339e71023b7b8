package sim

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// ErrViolation matches (errors.Is) every *Violation.
var ErrViolation = errors.New("sim: host protocol violation")

// Violation is a host protocol violation the modem detected: Rule is the
// rule broken, with the docs/PROTOCOL.md section that states it; Detail is
// what the host did.
type Violation struct {
	Rule   string
	Detail string
}

func (v *Violation) Error() string {
	return "sim: host protocol violation: " + v.Detail + " (rule " + v.Rule + ")"
}

// Is makes errors.Is(v, ErrViolation) hold.
func (v *Violation) Is(target error) bool { return target == ErrViolation }

// The rules the modem checks. Each names the protocol section it comes from.
const (
	ruleDoorbellInRing   = "§1.4: a doorbell value is the ring's new write pointer, a 16-byte aligned IOVA inside the ring"
	ruleCtxWPInRing      = "§2.1/§5.3: a burst channel's context wp is a 16-byte aligned IOVA inside its ring"
	ruleDoorbellState    = "§4.6: the host rings doorbells only in M0/M2, and only for started channels"
	ruleReadOnly         = "§1.1: read-only registers are not written"
	ruleUnknownChannel   = "§8.4: commands and doorbells name channels the device configured"
	ruleStartCtx         = "§2.1/§4.7: START_CHAN is sent for a channel whose context the host initialised (CHSTATE ENABLED, or STOP after a STOP)"
	ruleRingCtx          = "§2: a context describes a ring: rbase 16-byte aligned, rlen a non-zero multiple of 16, rp/wp inside the ring"
	ruleChanType         = "§2.1: chtype is 1 (outbound) for even UL channels and 2 (inbound) for odd DL channels"
	ruleChanEE           = "§4.2: a channel is started only in an execution environment of its EE mask"
	ruleEventRingIndex   = "§2.1: erindex names an event ring below MHICFG.NER"
	ruleEventCtx         = "§2.2: an event ring context is valid (ertype 1) and describes a ring"
	ruleStopStarted      = "§8.4: STOP_CHAN and RESET_CHAN are sent only for started channels"
	ruleCommandType      = "§3.3: command elements are START/STOP/RESET_CHAN (or NOP)"
	ruleTREType          = "§3.2: transfer ring elements have type 2"
	ruleDMA              = "§10 pitfall 6: every pointer the host gives the device is mapped DMA memory inside the programmed window"
	ruleStateTransition  = "§8.2: M0 only from READY/M3 (or M1/M2 here), M3 only from M0/M1/M2, M2 only from M1, M1 never host-requested"
	ruleSysErrNeedsReset = "§4.8: after SYS_ERR the host sets MHICTRL.RESET before anything else"
	ruleContextBases     = "§1.1/§2: context arrays are programmed, 4-byte aligned and inside MHICTRLBASE..MHICTRLLIMIT"
	ruleNER              = "§1.1: MHICFG.NER is between 1 and the number of event ring doorbells"
	ruleBHI              = "§4.4: BHI_IMGTXDB carries a non-zero session id and is written in PBL"
	ruleEventSpace       = "§5.5/§10 pitfall 3: the host recycles event ring elements and rings the event ring doorbell"
	ruleNoWakeDoorbell   = "§4.6: a host never writes the wake doorbell (channel 127) of a modem with sideband wake"
	ruleZeroLenTRE       = "§3.2: a DL TRE has a buffer to fill"
)

// violationLogLimit bounds how many violations are logged and passed to
// OnViolation: a hostile or broken host can produce one per poll; they are
// all counted.
const violationLogLimit = 100

// historyLen is how many violations Violations keeps.
const historyLen = 32

// strictState records violations.
type strictState struct {
	mu      sync.Mutex
	history []error
	n       int
}

// violate reports a host protocol violation: counted always; logged and,
// in strict mode, passed to OnViolation for the first violationLogLimit.
// It never takes the device lock, so MMIOWrite may call it.
func (m *Modem) violate(rule, format string, args ...any) {
	v := &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)}
	m.stats.violations.Add(1)
	s := &m.strict
	s.mu.Lock()
	s.n++
	n := s.n
	if len(s.history) == historyLen {
		copy(s.history, s.history[1:])
		s.history = s.history[:historyLen-1]
	}
	s.history = append(s.history, v)
	s.mu.Unlock()
	if n > violationLogLimit {
		return
	}
	m.log.Warn("host protocol violation", slog.String("detail", v.Detail), slog.String("rule", v.Rule))
	if m.opts.Strict && m.opts.OnViolation != nil {
		m.opts.OnViolation(v)
	}
}

// Violations returns the latest violations (at most 32), oldest first.
// Stats().Violations counts them all.
func (m *Modem) Violations() []error {
	m.strict.mu.Lock()
	defer m.strict.mu.Unlock()
	return append([]error(nil), m.strict.history...)
}

// dmaFailed classifies a failed DMA: a refused access is the host's fault
// (it gave the device a pointer it had not mapped, or turned bus mastering
// off under live rings) unless the device was surprise-removed or the bus
// is closing. It reports a violation when it is and returns false when the
// device should just stop quietly.
func (m *Modem) dmaFailed(err error, what string, iova uint64) bool {
	if errors.Is(err, pci.ErrClosed) {
		return false
	}
	var f vpci.Fault
	if errors.As(err, &f) && f.Reason == "device removed" {
		return false
	}
	m.violate(ruleDMA, "%s at IOVA %#x: %v", what, iova, err)
	return true
}
