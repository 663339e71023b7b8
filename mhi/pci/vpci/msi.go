package vpci

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/mhi/pci"
)

// msiAddr is the address a host programs into the MSI capability (the x86
// local APIC window); only a bus delivering MSIs as memory writes uses it.
const msiAddr = 0xFEE0_0000

// MSIFilter decides the fate of each MSI the model raises, before the bus
// applies MSI enable, masking and aliasing: drop it, or deliver it after
// delay (0: now). It runs on the raising goroutine and must not block.
type MSIFilter func(vector int) (drop bool, delay time.Duration)

// msiState is the MSI side of the bus: the eventfds, the config-space mirror
// and the Pending bits, which the function owns.
type msiState struct {
	mu      sync.Mutex
	vecs    []*pci.EventVector // nil while disabled by the host
	enabled bool               // MSI Enable in config space
	nvec    int                // Multiple Message Enable, as a count
	mask    uint32
	pending uint32

	filter atomic.Pointer[MSIFilter]

	// Delayed MSIs: each runs on a timer goroutine; Close stops the
	// timers it can and waits for those already running.
	delayed map[*delayedMSI]struct{}
	stopped bool
	running sync.WaitGroup
}

type delayedMSI struct {
	vector int
	timer  *time.Timer
}

// SetMSIFilter installs f (nil removes it). A filter that drops the next n
// MSIs, or delays all of them, is a few lines of closure.
func (d *Device) SetMSIFilter(f MSIFilter) {
	if f == nil {
		d.msi.filter.Store(nil)
		return
	}
	d.msi.filter.Store(&f)
}

// raiseMSI is Host.RaiseMSI: it never blocks and may run on any goroutine.
func (d *Device) raiseMSI(n int) {
	d.stats.msiRaised.Add(1)
	if f := d.msi.filter.Load(); f != nil {
		drop, delay := (*f)(n)
		switch {
		case drop:
			d.stats.msiDropped.Add(1)
			return
		case delay > 0:
			d.deliverLater(n, delay)
			return
		}
	}
	d.deliverMSI(n)
}

// deliverMSI is the MSI memory write reaching the host: it is subject to the
// state of the function when it happens, not when the model raised it.
func (d *Device) deliverMSI(n int) {
	if n < 0 || d.closed.Load() || d.removed.Load() || d.cmd.Load()&pci.CmdBusMaster == 0 {
		d.stats.msiDropped.Add(1)
		return
	}
	m := &d.msi
	m.mu.Lock()
	if !m.enabled {
		m.mu.Unlock()
		d.stats.msiDropped.Add(1)
		return
	}
	// The function replaces the low MME bits of the message data with
	// the vector number, so a vector past the enabled count aliases.
	v := n & (m.nvec - 1)
	if m.mask&(1<<v) != 0 {
		m.pending |= 1 << v
		m.mu.Unlock()
		d.stats.msiMasked.Add(1)
		return
	}
	var ev *pci.EventVector
	if v < len(m.vecs) {
		ev = m.vecs[v]
	}
	m.mu.Unlock()
	if ev == nil {
		d.stats.msiDropped.Add(1)
		return
	}
	d.signal(ev)
}

// signal writes the eventfd of a delivered MSI. It counts the delivery
// first, so that a host woken by the eventfd already sees it in Stats; a
// Trigger lost to a concurrent Disable (os.File makes that safe) moves the
// count to dropped.
func (d *Device) signal(ev *pci.EventVector) {
	d.stats.msiDelivered.Add(1)
	if ev.Trigger() != nil {
		d.stats.msiDelivered.Add(^uint64(0))
		d.stats.msiDropped.Add(1)
	}
}

// deliverLater delivers vector n after delay on a timer, unless Close comes
// first.
func (d *Device) deliverLater(n int, delay time.Duration) {
	m := &d.msi
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		d.stats.msiDropped.Add(1)
		return
	}
	if m.delayed == nil {
		m.delayed = make(map[*delayedMSI]struct{})
	}
	p := &delayedMSI{vector: n}
	m.running.Add(1)
	// Assigned under mu, which the callback takes first, so it sees p.timer.
	p.timer = time.AfterFunc(delay, func() {
		m.mu.Lock()
		delete(m.delayed, p)
		m.mu.Unlock()
		d.deliverMSI(p.vector)
		m.running.Done()
	})
	m.delayed[p] = struct{}{}
}

// stopDelayedMSIs cancels the delayed MSIs (counted as dropped) and waits
// for those already firing, so that no timer goroutine outlives Close.
func (d *Device) stopDelayedMSIs() {
	m := &d.msi
	m.mu.Lock()
	m.stopped = true
	for p := range m.delayed {
		if p.timer.Stop() {
			delete(m.delayed, p)
			d.stats.msiDropped.Add(1)
			m.running.Done()
		}
	}
	m.mu.Unlock()
	m.running.Wait()
}

// msiConfigChanged refreshes the mirror after a config write and sends the
// pending MSIs of vectors the write unmasked. The caller holds cfgMu.
func (d *Device) msiConfigChanged(enabled bool, nvec int, mask uint32) {
	m := &d.msi
	m.mu.Lock()
	defer m.mu.Unlock()
	m.enabled, m.nvec, m.mask = enabled, nvec, mask
	if !enabled {
		return
	}
	release := m.pending &^ mask
	m.pending &^= release
	for release != 0 {
		v := bits.TrailingZeros32(release)
		release &^= 1 << v
		if d.removed.Load() || d.cmd.Load()&pci.CmdBusMaster == 0 || v >= len(m.vecs) {
			d.stats.msiDropped.Add(1)
			continue
		}
		d.signal(m.vecs[v])
	}
}

// msiPending returns the Pending bits for config reads.
func (d *Device) msiPending() uint32 {
	d.msi.mu.Lock()
	defer d.msi.mu.Unlock()
	return d.msi.pending
}

// takeVectors detaches the eventfds and clears the Pending bits; the caller
// holds cfgMu and closes the returned vectors.
func (d *Device) takeVectors() []*pci.EventVector {
	m := &d.msi
	m.mu.Lock()
	defer m.mu.Unlock()
	vecs := m.vecs
	m.vecs = nil
	m.pending = 0
	return vecs
}

func closeVectors(vecs []*pci.EventVector) error {
	var errs []error
	for _, v := range vecs {
		if err := v.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// interrupts is the host's MSI controller. It programs the MSI capability
// through config space as a host kernel does, so the model-facing behaviour
// follows from config space alone.
type interrupts struct{ d *Device }

// Max returns the vectors the MSI capability advertises.
func (c *interrupts) Max() int { return c.d.cfg.MSICapable() }

// Enable grants the smallest power of two ≥ n vectors (MSI's Multiple
// Message Enable), creates one eventfd each and returns the first n. An MSI
// for a granted vector beyond n goes to an eventfd nobody waits on, like a
// spurious interrupt. Enable on enabled vectors is an error: Disable first.
func (c *interrupts) Enable(n int) ([]pci.Vector, error) {
	d := c.d
	if limit := c.Max(); n < 1 || n > limit {
		return nil, fmt.Errorf("vpci: %s: enable %d MSI vectors, want 1..%d", d.info.Address, n, limit)
	}
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	// Checked under cfgMu, which Close holds while taking the vectors,
	// so vectors created here are never leaked past Close.
	if d.closed.Load() {
		return nil, pci.ErrClosed
	}
	d.msi.mu.Lock()
	busy := d.msi.vecs != nil
	d.msi.mu.Unlock()
	if busy {
		return nil, fmt.Errorf("vpci: %s: MSI already enabled", d.info.Address)
	}
	mme := bits.Len(uint(n - 1)) // log2 of the granted count
	vecs := make([]*pci.EventVector, 1<<mme)
	for i := range vecs {
		v, err := pci.NewEventVector(i)
		if err != nil {
			_ = closeVectors(vecs[:i])
			return nil, err
		}
		vecs[i] = v
	}
	// Publish the eventfds before MSI Enable is set, so that the first
	// MSI after it finds them.
	d.msi.mu.Lock()
	d.msi.vecs = vecs
	d.msi.pending = 0
	d.msi.mu.Unlock()

	var w [4]byte
	put32 := func(off int, v uint32) {
		w = [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
		d.writeConfigLocked(pci.MSICapOffset+off, w[:])
	}
	put32(pci.MSIAddrLo, msiAddr)
	put32(pci.MSIAddrHi, 0)
	put32(pci.MSIData, 0)
	put32(pci.MSIMask, 0)
	var ctrl [2]byte
	d.cfg.Read(pci.MSICapOffset+pci.MSICtrl, ctrl[:])
	ctrl[0] = ctrl[0]&^0x70 | byte(mme)<<4 | pci.MSICtrlEnable
	d.writeConfigLocked(pci.MSICapOffset+pci.MSICtrl, ctrl[:1])

	out := make([]pci.Vector, n)
	for i := range out {
		out[i] = vecs[i]
	}
	return out, nil
}

// Disable clears MSI Enable and closes the eventfds: blocked Waits return
// pci.ErrClosed. Disabling disabled vectors is a no-op.
func (c *interrupts) Disable() error {
	d := c.d
	d.cfgMu.Lock()
	if d.closed.Load() {
		d.cfgMu.Unlock()
		return pci.ErrClosed
	}
	var ctrl [1]byte
	d.cfg.Read(pci.MSICapOffset+pci.MSICtrl, ctrl[:])
	ctrl[0] &^= pci.MSICtrlEnable | 0x70
	d.writeConfigLocked(pci.MSICapOffset+pci.MSICtrl, ctrl[:])
	vecs := d.takeVectors()
	d.cfgMu.Unlock()
	return closeVectors(vecs)
}
