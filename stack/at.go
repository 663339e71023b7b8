package stack

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mhistack/mhistack/link/at"
	"github.com/mhistack/mhistack/mhi"
)

// ErrNoATPort fails Modem.AT on a modem whose profile has no AT port
// (mhi.Profile.ATChannel; mhictl info lists a modem's channels).
var ErrNoATPort = errors.New("stack: the modem has no AT port")

// atPort is a Modem's AT port: opened by the first AT call, closed with
// the modem or after the port failed.
type atPort struct {
	cmd  sync.Mutex // serializes commands; guards r
	r    at.Reader
	port *mhi.ControlPort // Modem.mu
}

// AT sends one AT command line on the modem's AT port (the DUN channel
// pair, else DUN2: mhi.Profile.ATChannel) and returns the answer: its
// information lines and final result code (link/at). ERROR, +CME ERROR
// and +CMS ERROR return the response with an *at.Error
// (errors.Is(err, at.ErrCommand)). The port is opened by the first call
// and kept until Close; calls are serialized, and an unsolicited line
// the modem sends between two commands comes with the next one's lines.
// ctx bounds the call. It runs beside the data sessions: the MBIM or QMI
// session does not use the AT port.
func (m *Modem) AT(ctx context.Context, cmd string) (at.Response, error) {
	if err := at.CheckCommand(cmd); err != nil {
		return at.Response{}, err
	}
	name, ok := m.profile.ATChannel()
	if !ok {
		return at.Response{}, fmt.Errorf("%w (profile %s)", ErrNoATPort, m.profile.Name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(m.ctx, cancel)()
	a := &m.at
	a.cmd.Lock()
	defer a.cmd.Unlock()
	m.mu.Lock()
	p, closed := a.port, m.closed
	m.mu.Unlock()
	if closed {
		return at.Response{}, ErrClosed
	}
	if p == nil {
		var err error
		if p, err = m.ctrl.OpenControl(ctx, name, mhi.ControlOptions{}); err != nil {
			return at.Response{}, m.atError(fmt.Errorf("stack: open the AT port %s: %w", name, err))
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			p.Close()
			return at.Response{}, ErrClosed
		}
		a.port, a.r = p, at.Reader{}
		m.mu.Unlock()
	}
	resp, err := at.Command(ctx, p, &a.r, cmd)
	if err != nil && !errors.Is(err, at.ErrCommand) {
		// A port that failed (a modem reset, an answer cut short) is
		// opened again by the next call, with nothing left of this one.
		m.mu.Lock()
		if a.port == p {
			a.port = nil
		}
		m.mu.Unlock()
		p.Close()
		return resp, m.atError(fmt.Errorf("stack: AT %s: %w", cmd, err))
	}
	return resp, err
}

// atError is err, or ErrClosed once the modem is closed.
func (m *Modem) atError(err error) error {
	if m.ctx.Err() != nil {
		return ErrClosed
	}
	return err
}

// closeAT closes the AT port; a command under way fails.
func (m *Modem) closeAT() {
	m.mu.Lock()
	p := m.at.port
	m.at.port = nil
	m.mu.Unlock()
	if p != nil {
		p.Close()
	}
}
