package stack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/link/nmea"
	"github.com/mhistack/mhistack/mhi"
)

// ErrNoGNSSPort fails Modem.GNSS on a modem whose profile has no NMEA
// port (mhi.Profile.NMEAChannel; mhictl info lists a modem's channels).
var ErrNoGNSSPort = errors.New("stack: the modem has no GNSS (NMEA) port")

// GNSS is a stream of the NMEA 0183 sentences the modem's GNSS receiver
// sends on its NMEA port (Modem.GNSS). One goroutine reads it at a time.
type GNSS struct {
	m    *Modem
	port *mhi.ControlPort
	r    nmea.Reader

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
}

// GNSS opens the modem's NMEA channel pair (mhi.Profile.NMEAChannel) and
// returns its sentence stream, beside the data sessions. Close it when
// done; Modem.Close closes it too. A modem without the port fails with
// ErrNoGNSSPort, a closed one with ErrClosed; ctx bounds the opening.
// Whether the receiver has a fix is in the sentences (GGA's quality, RMC's
// status): the port streams either way.
func (m *Modem) GNSS(ctx context.Context) (*GNSS, error) {
	name, ok := m.profile.NMEAChannel()
	if !ok {
		return nil, fmt.Errorf("%w (profile %s)", ErrNoGNSSPort, m.profile.Name)
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	p, err := m.ctrl.OpenControl(ctx, name, mhi.ControlOptions{})
	if err != nil {
		return nil, m.atError(fmt.Errorf("stack: open the NMEA port %s: %w", name, err))
	}
	g := &GNSS{m: m, port: p}
	g.r.Recv = p.Recv
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		p.Close()
		return nil, ErrClosed
	}
	m.gnss = append(m.gnss, g)
	m.mu.Unlock()
	return g, nil
}

// Next returns the next valid sentence and its line (without CR LF).
// Lines with a bad checksum and malformed ones are skipped and counted
// (Stats). It waits until ctx ends; after Close, or once the modem is
// closed, it fails with ErrClosed.
func (g *GNSS) Next(ctx context.Context) (nmea.Sentence, string, error) {
	if g.closed.Load() || g.m.ctx.Err() != nil {
		return nmea.Sentence{}, "", ErrClosed
	}
	line, s, err := g.r.Next(ctx)
	if err != nil {
		if g.m.ctx.Err() != nil || g.closed.Load() {
			return nmea.Sentence{}, "", ErrClosed
		}
		return nmea.Sentence{}, "", fmt.Errorf("stack: GNSS: %w", err)
	}
	return s, line, nil
}

// Stats counts the sentences returned and the lines and bytes skipped.
// Call it from the goroutine that calls Next.
func (g *GNSS) Stats() nmea.ReaderStats { return g.r.Stats() }

// Close closes the NMEA port; a Next under way fails with ErrClosed.
// Closing again returns nil.
func (g *GNSS) Close() error {
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		g.m.mu.Lock()
		for i, x := range g.m.gnss {
			if x == g {
				g.m.gnss = append(g.m.gnss[:i], g.m.gnss[i+1:]...)
				break
			}
		}
		g.m.mu.Unlock()
		g.closeErr = g.port.Close()
	})
	return g.closeErr
}

// closeGNSS closes the modem's open GNSS streams (Modem.Close).
func (m *Modem) closeGNSS() {
	m.mu.Lock()
	gs := append([]*GNSS(nil), m.gnss...)
	m.mu.Unlock()
	for _, g := range gs {
		g.Close()
	}
}
