package sim

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// Errors of Port.Send.
var (
	// ErrStopped is returned by Send on a port whose channels are no
	// longer running (STOP/RESET_CHAN, MHI reset, SYS_ERR, Detach).
	ErrStopped = errors.New("sim: channel pair not running")
	// ErrNoBuffer is returned by Send when the packet was dropped: the
	// host provided no DL buffer and the port's queue stayed full for
	// Options.SendTimeout (or at once, from inside Receive). It is the
	// function's backpressure signal; the drop is counted in Stats.
	ErrNoBuffer = errors.New("sim: no host DL buffer: packet dropped")
)

// Function is what the modem runs behind a channel pair: the EP's client
// device (§8.4), e.g. a loopback, a network, an MBIM control function.
//
// Start, Receive and Stop are called one at a time from the modem's device
// goroutine, without the modem's lock held: Start when both channels of the
// pair are running, Receive for every complete UL transfer descriptor, Stop
// when the pair stops (STOP/RESET_CHAN of either channel, MHI reset,
// SYS_ERR, SoC reset, Detach). They must return promptly; a function that
// does slow work hands it to its own goroutines, which it stops in Stop.
// Start may be called again after Stop (the host restarted the channels).
type Function interface {
	// Start hands the function its port for this run.
	Start(p *Port)
	// Receive delivers one UL transfer descriptor (the bytes of a chain
	// of TREs ending without CHAIN). td is valid only until Receive
	// returns.
	Receive(td []byte)
	// Stop ends the run; the port refuses Send from now on.
	Stop()
}

// EchoFunction is an optional interface of a Function whose DL output is
// driven by its UL input (Loopback): while the pair's DL queue holds data
// (the host has not posted enough DL buffers), the modem stops consuming
// UL transfers and leaves them in the host's ring, so that the host is
// slowed down instead of the function dropping what it cannot send back.
type EchoFunction interface {
	Function
	// HoldsULForDL reports whether UL delivery waits for the DL queue.
	HoldsULForDL() bool
}

// Port is a running channel pair as its function sees it. Send may be
// called from any goroutine.
type Port struct {
	m      *Modem
	pr     *pair
	done   chan struct{}
	closed bool   // guarded by m.mu
	boot   uint64 // Modem.boots when the port started

	// delivering is set while the function is inside Receive on the
	// device goroutine: a Send from that goroutine then never waits,
	// because waiting would stall the whole device (and the room it waits
	// for would never come).
	delivering atomic.Bool
}

// Name returns the channel pair's name (mhi.ChannelLoopback, mhi.ChannelIPHW0, …).
func (p *Port) Name() string { return p.pr.name }

// Channels returns the UL (even) and DL (odd) channel numbers.
func (p *Port) Channels() (ul, dl int) { return p.pr.ul.num, p.pr.dl.num }

// MRU returns the profile's receive-buffer size hint for data channels
// (0 when the profile sets none): the size of the host's DL buffers, which
// an aggregating function can fill exactly.
func (p *Port) MRU() int { return p.m.p.MRU }

// Boot identifies the modem's run the port belongs to: it changes with
// every modem restart (power-on, SoC reset or FLR, MHI reset, SYS_ERR)
// and not when the host merely stops and restarts the pair's channels
// (Linux's mhi_wwan_ctrl does on every close and open of the port). A
// function whose state outlives its host closing the port, as a modem's
// QMI client IDs do, keeps it while Boot stays the same.
func (p *Port) Boot() uint64 { return p.boot }

// Done is closed when the port stops.
func (p *Port) Done() <-chan struct{} { return p.done }

// Send copies b to the host on the DL channel. If host buffers are posted
// it is written at once, split over as many TREs as it needs (OVERFLOW
// events, EOT on the last piece, §5.4); otherwise it is queued (bounded by
// Options.DLQueue / DLQueueBytes) and placed when the host posts buffers.
// When the queue is full Send waits up to Options.SendTimeout for room —
// except when called from inside Receive (on the device goroutine), where
// it drops at once — and then drops the packet and returns ErrNoBuffer.
// Another goroutine's Send waits as usual while the device goroutine is
// inside Receive. It returns ErrStopped once the pair
// stopped. A nil error means the data was placed or queued, not that the
// host has consumed it.
func (p *Port) Send(b []byte) error {
	m := p.m
	c := p.pr.dl
	var deadline time.Time
	for {
		m.mu.Lock()
		if p.closed {
			m.mu.Unlock()
			return ErrStopped
		}
		m.drain(c)
		if c.q.n == 0 && m.canTransfer(c) {
			k, done := m.place(c, b)
			if !done {
				// The ring ran dry mid-packet: the rest goes first
				// when buffers come.
				c.q.push(b[k:])
				c.lastNew = time.Now()
				m.mu.Unlock()
				m.signal()
				return nil
			}
			m.mu.Unlock()
			return nil
		}
		if c.q.fits(len(b)) {
			wasEmpty := c.q.n == 0
			c.q.push(b)
			if wasEmpty {
				c.lastNew = time.Now()
			}
			m.mu.Unlock()
			if wasEmpty {
				// A polling burst channel needs the device goroutine
				// to look for buffers.
				m.signal()
			}
			return nil
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(m.opts.SendTimeout)
		}
		if !now.Before(deadline) || p.delivering.Load() && m.onDeviceGoroutine() {
			m.mu.Unlock()
			m.stats.dlDrops.Add(1)
			return ErrNoBuffer
		}
		room := c.room
		c.waiters++
		m.mu.Unlock()
		t := time.NewTimer(deadline.Sub(now))
		detached := false
		select {
		case <-room:
		case <-t.C:
		case <-m.quit:
			detached = true
		}
		t.Stop()
		m.mu.Lock()
		c.waiters--
		m.mu.Unlock()
		if detached {
			return ErrStopped
		}
	}
}

// Violation reports a host protocol violation found by a function (bad
// UL framing, say): it is counted in Stats().Violations, kept in
// Violations and, in strict mode, passed to Options.OnViolation, so the
// test that caused it fails.
func (p *Port) Violation(rule, format string, args ...any) {
	p.m.violate(rule, "%s: %s", p.pr.name, fmt.Sprintf(format, args...))
}

// Loopback is the LOOPBACK function: every UL transfer descriptor received
// on channel n is sent back, byte-exact and with its boundary preserved,
// on DL channel n+1 (what the Linux EP's loopback client does). It can be
// attached to any pair, including the burst-mode IP_HW0 channels.
type Loopback struct {
	port atomic.Pointer[Port]
	// Dropped counts transfers that could not be sent back.
	Dropped atomic.Uint64
}

// Start implements Function.
func (l *Loopback) Start(p *Port) { l.port.Store(p) }

// Receive implements Function.
func (l *Loopback) Receive(td []byte) {
	if p := l.port.Load(); p == nil || p.Send(td) != nil {
		l.Dropped.Add(1)
	}
}

// Stop implements Function.
func (l *Loopback) Stop() { l.port.Store(nil) }

// HoldsULForDL implements EchoFunction: the loopback never drops for want
// of DL buffers; the host's UL ring waits instead.
func (l *Loopback) HoldsULForDL() bool { return true }

// updatePair starts the pair's function when both channels became active
// and stops it when either stopped. Function calls are deferred to after
// the lock is released (runActions). The caller holds m.mu.
func (m *Modem) updatePair(pr *pair) {
	active := pr.ul.active() && pr.dl.active()
	switch {
	case active && pr.port == nil && pr.fn != nil:
		p := &Port{m: m, pr: pr, done: make(chan struct{}), boot: m.boots}
		pr.port = p
		m.actions = append(m.actions, action{fn: pr.fn, port: p})
	case !active && pr.port != nil:
		m.stopPort(pr)
	}
}

// stopPort closes the pair's port: queued DL data is discarded (counted),
// waiting senders return ErrStopped, the function is told after the lock
// is released. The caller holds m.mu.
func (m *Modem) stopPort(pr *pair) {
	p := pr.port
	if p == nil {
		return
	}
	pr.port = nil
	p.closed = true
	close(p.done)
	m.stats.dlDrops.Add(uint64(pr.dl.q.clear()))
	pr.dl.waiters++ // force the wake below even with no waiter counted
	m.wakeRoom(pr.dl)
	pr.dl.waiters--
	m.actions = append(m.actions, action{fn: pr.fn})
}

// action is a deferred Function call: Start when port is set, else Stop.
type action struct {
	fn   Function
	port *Port
}

// runActions performs the deferred function calls in order, on the device
// goroutine, without m.mu held.
func (m *Modem) runActions() {
	m.mu.Lock()
	acts := m.actions
	m.actions = nil
	m.mu.Unlock()
	for _, a := range acts {
		if a.port != nil {
			a.fn.Start(a.port)
		} else {
			a.fn.Stop()
		}
	}
}

// buildPairs creates the channel pairs of the profile and attaches the
// functions by name.
func (m *Modem) buildPairs(fns map[string]Function) {
	byName := map[string]*pair{}
	for _, cc := range m.p.Channels {
		c := &channel{num: cc.Num, cfg: cc, ul: cc.Dir == mhi.ChanTypeOutbound, room: make(chan struct{})}
		if !c.ul {
			c.q.init(m.opts.DLQueue, m.opts.DLQueueBytes)
		}
		m.chans[cc.Num] = c
		if cc.Burst {
			m.burstChans = append(m.burstChans, c)
		}
		pr := byName[cc.Name]
		if pr == nil {
			pr = &pair{name: cc.Name, fn: fns[cc.Name]}
			if e, ok := pr.fn.(EchoFunction); ok {
				pr.holdUL = e.HoldsULForDL()
			}
			byName[cc.Name] = pr
			m.pairs = append(m.pairs, pr)
		}
		c.pair = pr
		if c.ul {
			pr.ul = c
		} else {
			pr.dl = c
		}
	}
}

// onDeviceGoroutine reports whether the caller is the modem's device
// goroutine. Only Send's slow path asks (queue full while a function is
// inside Receive), so the cost of reading the goroutine's id is paid only
// there: it is what tells the function's own Send from inside Receive,
// which must not wait, from its other goroutines', which may.
func (m *Modem) onDeviceGoroutine() bool {
	g := m.deviceG.Load()
	return g != 0 && g == goid()
}

// goid returns the calling goroutine's id, from the first line of its
// stack trace ("goroutine 17 [running]:"); 0 if that cannot be read.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0
	}
	var id uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
