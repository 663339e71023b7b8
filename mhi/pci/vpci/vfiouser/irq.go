package vfiouser

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
)

// irqTable holds the MSI eventfds the client installed with SET_IRQS.
//
// MSI Enable, Multiple Message Enable, the mask and pending bits live in
// the client: QEMU virtualises the MSI capability of an assigned function
// (as for kernel VFIO) and tells the server which vectors to signal by
// installing eventfds. So an installed eventfd is what "MSI enabled" means
// here, and masking is the client's business: the server never holds an
// MSI back, it only drops those that have nowhere to go.
type irqTable struct {
	mu  sync.Mutex
	max int        // vectors of the MSI capability
	msi []*os.File // by vector; nil where none is installed
}

// install sets the eventfds of vectors [start, start+len(fds)); -1 removes
// a vector's eventfd.
func (t *irqTable) install(start int, fds []int) {
	var old []*os.File
	t.mu.Lock()
	if need := start + len(fds); need > len(t.msi) {
		t.msi = append(t.msi, make([]*os.File, need-len(t.msi))...)
	}
	for i, fd := range fds {
		if f := t.msi[start+i]; f != nil {
			old = append(old, f)
		}
		t.msi[start+i] = nil
		if fd >= 0 {
			t.msi[start+i] = os.NewFile(uintptr(fd), fmt.Sprintf("msi%d", start+i))
		}
	}
	// Trailing empty slots would make aliasing wrap over missing vectors.
	for len(t.msi) > 0 && t.msi[len(t.msi)-1] == nil {
		t.msi = t.msi[:len(t.msi)-1]
	}
	t.mu.Unlock()
	// Closed outside the lock; a concurrent raise holding the same
	// *os.File gets os.ErrClosed, never another file's descriptor.
	for _, f := range old {
		f.Close()
	}
}

// clear closes every eventfd (MSI disabled, reset, disconnect).
func (t *irqTable) clear() {
	t.mu.Lock()
	old := t.msi
	t.msi = nil
	t.mu.Unlock()
	for _, f := range old {
		if f != nil {
			f.Close()
		}
	}
}

// vector returns the eventfd that MSI n reaches. With fewer vectors
// installed than n+1, n aliases to n mod the enabled count, as the low MSI
// data bits of a real function do (vpci.Host.RaiseMSI); the enabled count
// is a power of two, the largest not above what was installed.
func (t *irqTable) vector(n int) *os.File {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.msi) == 0 {
		return nil
	}
	enabled := 1
	for enabled*2 <= len(t.msi) {
		enabled *= 2
	}
	return t.msi[n&(enabled-1)]
}

// raiseMSI is Host.RaiseMSI: it writes 1 to the vector's eventfd (the
// client turns that into the guest's MSI). It never blocks for long and may
// run on any goroutine.
func (s *Server) raiseMSI(n int) {
	s.stats.msiRaised.Add(1)
	if n < 0 || s.closed.Load() || s.offline.Load() || s.cmd.Load()&pci.CmdBusMaster == 0 || s.pm.d3() {
		s.stats.msiDropped.Add(1)
		return
	}
	f := s.irq.vector(n)
	if f == nil {
		s.stats.msiDropped.Add(1)
		return
	}
	var one [8]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	if _, err := f.Write(one[:]); err != nil {
		s.stats.msiDropped.Add(1)
		return
	}
	s.stats.msiDelivered.Add(1)
}

// setIRQs handles DEVICE_SET_IRQS (vfio-user.rst). For MSI: eventfds are
// installed (DATA_EVENTFD|TRIGGER, one descriptor per vector, or none to
// remove the range), MSI is disabled (DATA_NONE|TRIGGER with count 0), or
// vectors are fired from the client (DATA_NONE/DATA_BOOL|TRIGGER). Other
// indexes have no vectors: only "disable all" is accepted. MSI cannot be
// masked through SET_IRQS (IRQ_INFO does not say MASKABLE).
func (s *Server) setIRQs(m *message) ([]byte, syscall.Errno) {
	r, err := vuwire.DecodeIRQSet(m.body)
	if err != nil {
		return nil, syscall.EINVAL
	}
	data, action := r.Flags&vuwire.IRQSetDataMask, r.Flags&vuwire.IRQSetActionMaskAll
	if data != vuwire.IRQSetDataEventfd && len(m.fds) > 0 {
		return nil, syscall.EINVAL
	}
	disableAll := data == vuwire.IRQSetDataNone && action == vuwire.IRQSetActionTrig && r.Count == 0
	if r.Index != vuwire.IRQMSI {
		if disableAll && r.Index < vuwire.NumIRQs {
			return nil, 0
		}
		return nil, syscall.EINVAL
	}
	if disableAll {
		s.irq.clear()
		return nil, 0
	}
	if action != vuwire.IRQSetActionTrig || int(r.Start)+int(r.Count) > s.irq.max {
		return nil, syscall.EINVAL
	}
	switch data {
	case vuwire.IRQSetDataEventfd:
		fds := make([]int, r.Count)
		switch len(m.fds) {
		case int(r.Count):
			for _, fd := range m.fds {
				if !isEventfd(fd) {
					return nil, syscall.EINVAL
				}
			}
			for i := range fds {
				fds[i] = m.takeFD(i)
			}
		case 0:
			// No descriptors: de-assign the range (vfio-user.rst;
			// QEMU sends runs of -1 this way).
			for i := range fds {
				fds[i] = -1
			}
		default:
			return nil, syscall.EINVAL
		}
		s.irq.install(int(r.Start), fds)
	case vuwire.IRQSetDataNone, vuwire.IRQSetDataBool:
		for i := range int(r.Count) {
			if data == vuwire.IRQSetDataBool && r.Bools[i] == 0 {
				continue
			}
			s.triggerInstalled(int(r.Start) + i)
		}
	}
	return nil, 0
}

// triggerInstalled fires vector v if it has an eventfd (a client-requested
// trigger: no aliasing, no bus-master gate, and not counted as the model's).
func (s *Server) triggerInstalled(v int) {
	s.irq.mu.Lock()
	var f *os.File
	if v < len(s.irq.msi) {
		f = s.irq.msi[v]
	}
	s.irq.mu.Unlock()
	if f != nil {
		var one [8]byte
		binary.LittleEndian.PutUint64(one[:], 1)
		_, _ = f.Write(one[:])
	}
}

// isEventfd reports whether fd is an eventfd: writing 8 bytes to anything
// else (a socket, the client's RAM file) would not be an interrupt.
func isEventfd(fd int) bool {
	if fd < 0 {
		return false
	}
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	target, err := os.Readlink(p)
	if err != nil {
		// No /proc: trust the client.
		return true
	}
	return target == "anon_inode:[eventfd]"
}
