package stack

// The FCC lock: some laptop SKUs keep their radio off until the host
// runs a vendor unlock (mhi.FCCUnlock; docs/GETTING-ONLINE.md, "FCC
// lock"). OpenModem turns the radio on itself for such a modem; when the
// modem refuses, it runs the profile's procedure if Options.FCCUnlock
// allows it, and tries once more, as ModemManager does.

import (
	"context"
	"errors"
	"fmt"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
)

// ErrFCCLocked matches (errors.Is) an Open or OpenModem whose modem kept
// its radio off because it is FCC-locked: Options.FCCUnlock was not set,
// or the unlock procedure failed.
var ErrFCCLocked = errors.New("stack: modem is FCC-locked")

// FCCError is an FCC-locked modem that stayed locked. It matches
// ErrFCCLocked and unwraps to the modem's refusal (or the procedure's
// failure).
type FCCError struct {
	// Procedure is the unlock the modem needs.
	Procedure mhi.FCCUnlock
	// Tried: the procedure ran (Options.FCCUnlock) and did not unlock.
	Tried bool
	Err   error
}

func (e *FCCError) Error() string {
	if e.Tried {
		return fmt.Sprintf("modem is FCC-locked and the %s unlock did not lift the lock: %v", e.Procedure, e.Err)
	}
	return fmt.Sprintf("modem is FCC-locked (%v); running the vendor unlock (%s) is your legal choice: "+
		"set Options.FCCUnlock (mhiproxy or mhictl -fcc-unlock)", e.Err, e.Procedure)
}

func (e *FCCError) Unwrap() error        { return e.Err }
func (e *FCCError) Is(target error) bool { return target == ErrFCCLocked }

// errRadioRefused is a radio-on the modem refused the way an FCC-locked
// modem does.
var errRadioRefused = errors.New("the radio refused to come on")

// fccRadioOn brings the radio of a modem whose profile ships FCC-locked
// up (a no-op for others: the session does it).
func (m *Modem) fccRadioOn(ctx context.Context) error {
	if m.fcc == mhi.FCCUnlockNone {
		return nil
	}
	err := m.radioOn(ctx)
	if err == nil || !errors.Is(err, errRadioRefused) {
		return err
	}
	if !m.opts.FCCUnlock {
		return &FCCError{Procedure: m.fcc, Err: err}
	}
	m.log.Info("stack: radio refused, running the FCC unlock", "procedure", m.fcc)
	if uerr := m.fccUnlock(ctx); uerr != nil {
		return &FCCError{Procedure: m.fcc, Tried: true, Err: uerr}
	}
	if err := m.radioOn(ctx); err != nil {
		return &FCCError{Procedure: m.fcc, Tried: true, Err: err}
	}
	return nil
}

// fccRelocked runs the FCC unlock again when a session's radio on is
// refused: the modem locks again at every restart, a SYS_ERR recovery
// included, and the session loop brings the session back by itself
// (mbim.SessionConfig.RadioRefused).
func (m *Modem) fccRelocked(ctx context.Context) error {
	if m.fcc == mhi.FCCUnlockNone {
		return errRadioRefused
	}
	if !m.opts.FCCUnlock {
		return &FCCError{Procedure: m.fcc, Err: errRadioRefused}
	}
	m.log.Info("stack: radio refused again (the modem restarted locked), running the FCC unlock", "procedure", m.fcc)
	if err := m.fccUnlock(ctx); err != nil {
		return &FCCError{Procedure: m.fcc, Tried: true, Err: err}
	}
	return nil
}

// radioOn asks the modem to turn its radio on: MBIM RADIO_STATE set on
// (refused: any failure, or an answer with the software switch off),
// QMI DMS Set Operating Mode online (refused: Internal or
// InvalidTransition, the two ModemManager's QMI power-up turns into
// "retry after the FCC unlock", src/mm-broadband-modem-qmi.c).
func (m *Modem) radioOn(ctx context.Context) error {
	if m.mbim != nil {
		rs, err := m.mbim.SetRadioState(ctx, true)
		var ce *mbim.CommandError
		switch {
		case errors.As(err, &ce):
			return fmt.Errorf("%w: MBIM RADIO_STATE: %w", errRadioRefused, err)
		case err != nil:
			return err
		case !rs.HardwareOn:
			return fmt.Errorf("stack: hardware radio switch is off: %w", mbim.ErrRadioOff)
		case !rs.SoftwareOn:
			return fmt.Errorf("%w: MBIM RADIO_STATE stayed off", errRadioRefused)
		}
		return nil
	}
	return m.withDMS(ctx, func(dms dmsDoer) error {
		_, err := dms(ctx, qmi.SetOperatingModeRequest(qmi.ModeOnline))
		if c := qmi.ErrorCodeOf(err); c == qmi.ErrInternal || c == qmi.ErrInvalidTransition {
			return fmt.Errorf("%w: QMI DMS Set Operating Mode online: %w", errRadioRefused, err)
		}
		return err
	})
}

// dmsDoer sends one DMS request and returns its successful reply.
type dmsDoer func(ctx context.Context, req *qmi.Message) (*qmi.Message, error)

// withDMS runs fn with a DMS client: on the QMI port, or in the MBIM
// QMI service (which is how ModemManager's Foxconn script reaches DMS on
// an MBIM modem: qmicli over the MBIM port).
func (m *Modem) withDMS(ctx context.Context, fn func(dmsDoer) error) error {
	if m.qmi != nil {
		id, err := m.qmi.AllocateCID(ctx, qmi.ServiceDMS)
		if err != nil {
			return err
		}
		defer m.qmi.ReleaseCID(context.WithoutCancel(ctx), qmi.ClientID{Service: qmi.ServiceDMS, Client: id})
		return fn(m.qmi.Service(qmi.ServiceDMS, id).Do)
	}
	var tid uint16
	do := func(ctx context.Context, req *qmi.Message) (*qmi.Message, error) {
		tid++
		r := *req
		r.TID = tid
		if r.Service == qmi.ServiceCTL {
			r.TID &= 0xFF
		}
		b, err := r.Marshal()
		if err != nil {
			return nil, err
		}
		rb, err := m.mbim.QMI(ctx, b)
		if err != nil {
			return nil, err
		}
		rep, err := qmi.Parse(rb)
		switch {
		case err != nil:
			return nil, err
		case rep.Service != r.Service || rep.ID != r.ID || rep.TID != r.TID || rep.Kind != qmi.Response:
			return nil, fmt.Errorf("stack: QMI over MBIM: %v answers %v: %w", rep, &r, qmi.ErrMalformed)
		}
		return rep, rep.Result()
	}
	rep, err := do(ctx, qmi.AllocateCIDRequest(qmi.ServiceDMS))
	if err != nil {
		return fmt.Errorf("stack: QMI over MBIM: %w", err)
	}
	id, err := qmi.ParseClientID(rep)
	if err != nil {
		return err
	}
	defer do(context.WithoutCancel(ctx), qmi.ReleaseCIDRequest(id))
	return fn(func(ctx context.Context, req *qmi.Message) (*qmi.Message, error) {
		r := *req
		r.Client = id.Client
		return do(ctx, &r)
	})
}

// fccUnlock runs the profile's procedure.
func (m *Modem) fccUnlock(ctx context.Context) error {
	switch m.fcc {
	case mhi.FCCUnlockQuectel:
		if m.mbim == nil {
			return fmt.Errorf("stack: the Quectel FCC unlock needs the MBIM control port (Options.Control \"mbim\")")
		}
		st, err := m.mbim.SetQuectelRadioState(ctx, mbim.QuectelRadioOn)
		if err != nil {
			return err
		}
		if st == mbim.QuectelRadioFCCLocked {
			return fmt.Errorf("stack: Quectel RADIO_STATE still %v after the unlock", st)
		}
		return nil
	case mhi.FCCUnlockFoxconn:
		return m.withDMS(ctx, func(dms dmsDoer) error { return foxconnUnlock(ctx, dms) })
	}
	return fmt.Errorf("stack: no FCC unlock procedure %q", m.fcc)
}

// foxconnUnlock is ModemManager's data/dispatcher-fcc-unlock/105b: v2
// (a hash of the firmware versions and the IMEI) when those can be
// read, then, if v2 could not be built or failed, v1.
func foxconnUnlock(ctx context.Context, dms dmsDoer) error {
	version := func(t qmi.FoxconnVersionType) (string, error) {
		r, err := dms(ctx, qmi.FoxconnGetFirmwareVersionRequest(t))
		if err != nil {
			return "", err
		}
		return qmi.ParseString(r)
	}
	v2 := func() error {
		mcfg, err := version(qmi.FoxconnFirmwareMCFG)
		if err != nil {
			return err
		}
		apps, err := version(qmi.FoxconnApps)
		if err != nil {
			return err
		}
		r, err := dms(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetIDs))
		if err != nil {
			return err
		}
		imei := qmi.ParseIDs(r).IMEI
		if mcfg == "" || apps == "" || imei == "" {
			return errors.New("firmware version or IMEI empty")
		}
		a := qmi.FoxconnFCCAuth{V2: true, Magic: qmi.FoxconnFCCMagic(mcfg, apps, imei), Num: qmi.FoxconnFCCMagicNumber}
		_, err = dms(ctx, a.Request())
		return err
	}
	err2 := v2()
	if err2 == nil {
		return nil
	}
	if _, err1 := dms(ctx, (&qmi.FoxconnFCCAuth{}).Request()); err1 != nil {
		return fmt.Errorf("stack: Foxconn FCC unlock: v2: %w; v1: %w", err2, err1)
	}
	return nil
}
