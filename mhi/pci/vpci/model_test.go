package vpci

import (
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi/pci"
)

// copyModel is the smallest useful device: a scratch register file and a
// DMA engine that copies LEN bytes from SRC to DST on its own goroutine,
// then raises MSI VEC.
type copyModel struct {
	vectors int

	host    Host
	scratch [64]atomic.Uint32
	src     atomic.Uint32
	dst     atomic.Uint32
	length  atomic.Uint32
	vec     atomic.Uint32
	status  atomic.Uint32
	jobs    chan job
	quit    chan struct{}
	wg      sync.WaitGroup

	attached, detached, resets atomic.Int32
	// lastOff records the last register offset the model saw, so tests
	// can tell whether an access reached it.
	lastOff atomic.Int64
}

type job struct{ src, dst, n, vec uint32 }

// Register map of BAR0.
const (
	regScratch = 0x000 // 64 read/write registers
	regSrc     = 0x100
	regDst     = 0x104
	regLen     = 0x108
	regVec     = 0x10C
	regGo      = 0x110 // write: queue a copy
	regStatus  = 0x114

	statusIdle  = 0
	statusDone  = 1
	statusFault = 2
)

var testIdentity = pci.Identity{
	Vendor: 0x17cb, Device: 0x0306, SubVendor: 0x17cb, SubDev: 0x010c,
	Class:    pci.ClassWirelessOther,
	Revision: 3,
	BARSize:  [6]uint32{0: 4096, 2: 64},
}

func newCopyModel(vectors int) *copyModel {
	return &copyModel{vectors: vectors, jobs: make(chan job, 16), quit: make(chan struct{})}
}

func (m *copyModel) Identity() pci.Identity {
	id := testIdentity
	id.MSIVectors = m.vectors
	return id
}

func (m *copyModel) Attach(h Host) {
	m.attached.Add(1)
	m.host = h
	m.wg.Add(1)
	go m.run()
}

func (m *copyModel) run() {
	defer m.wg.Done()
	for {
		select {
		case <-m.quit:
			return
		case j := <-m.jobs:
			buf := make([]byte, j.n)
			st := uint32(statusDone)
			if m.host.DMARead(uint64(j.src), buf) != nil || m.host.DMAWrite(uint64(j.dst), buf) != nil {
				st = statusFault
			}
			m.status.Store(st)
			m.host.RaiseMSI(int(j.vec))
		}
	}
}

func (m *copyModel) MMIORead(bar int, off uint64) uint32 {
	m.lastOff.Store(int64(off))
	if bar != 0 {
		return 0xb2b2b2b2
	}
	switch {
	case off < regSrc:
		return m.scratch[off/4].Load()
	case off == regSrc:
		return m.src.Load()
	case off == regDst:
		return m.dst.Load()
	case off == regLen:
		return m.length.Load()
	case off == regVec:
		return m.vec.Load()
	case off == regStatus:
		return m.status.Load()
	}
	return 0
}

func (m *copyModel) MMIOWrite(bar int, off uint64, v uint32) {
	m.lastOff.Store(int64(off))
	if bar != 0 {
		return
	}
	switch {
	case off < regSrc:
		m.scratch[off/4].Store(v)
	case off == regSrc:
		m.src.Store(v)
	case off == regDst:
		m.dst.Store(v)
	case off == regLen:
		m.length.Store(v)
	case off == regVec:
		m.vec.Store(v)
	case off == regGo:
		m.status.Store(statusIdle)
		// MMIOWrite must not block: a full queue is a device error.
		select {
		case m.jobs <- job{m.src.Load(), m.dst.Load(), m.length.Load(), m.vec.Load()}:
		default:
			m.status.Store(statusFault)
		}
	}
}

func (m *copyModel) Reset() {
	m.resets.Add(1)
	for i := range m.scratch {
		m.scratch[i].Store(0)
	}
	m.src.Store(0)
	m.dst.Store(0)
	m.length.Store(0)
	m.vec.Store(0)
	m.status.Store(statusIdle)
}

func (m *copyModel) Detach() {
	m.detached.Add(1)
	close(m.quit)
	m.wg.Wait()
}
