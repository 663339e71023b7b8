//go:build linux

package vfiouserclient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vpcitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type rig struct {
	model  *vpcitest.Regs
	srv    *vfiouser.Server
	sconn  *net.UnixConn // the server's end
	served chan error
	dev    *Device
}

func newRig(t testing.TB, m *vpcitest.Regs, o *Options) *rig {
	t.Helper()
	if m == nil {
		m = &vpcitest.Regs{}
	}
	srv, err := vfiouser.New(m)
	if err != nil {
		t.Fatal(err)
	}
	s, c, err := vfiouser.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{model: m, srv: srv, sconn: s, served: make(chan error, 1)}
	go func() { r.served <- srv.ServeConn(s) }()
	r.dev, err = New(c, "test.sock", o)
	if err != nil {
		srv.Close()
		<-r.served
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.dev.Close()
		srv.Close()
		<-r.served
	})
	return r
}

func TestOpenReadsIDsRegionsAndMSI(t *testing.T) {
	r := newRig(t, nil, nil)
	info := r.dev.Info()
	if info.Address != "vfio-user:test.sock" || info.Vendor != 0x17cb || info.Device != 0x0306 || info.SubVendor != 0x1eac || info.SubDev != 0x1002 {
		t.Errorf("Info = %+v", info)
	}
	if info.Class != pci.ClassWirelessOther {
		t.Errorf("class %#x, want %#x", info.Class, pci.ClassWirelessOther)
	}
	b, err := r.dev.BAR(0)
	if err != nil || b.Len() != 4096 {
		t.Fatalf("BAR(0) = %v, %v; want a 4096-byte BAR", b, err)
	}
	if _, err := r.dev.BAR(1); err == nil {
		t.Error("BAR(1), absent, was returned")
	}
	if got := r.dev.Interrupts().Max(); got != 4 {
		t.Errorf("MSI vectors %d, want 4", got)
	}
	if iova, size := r.dev.Arena(); iova != defaultIOVABase || size != defaultDMASize {
		t.Errorf("arena %#x+%#x, want %#x+%#x", iova, size, defaultIOVABase, defaultDMASize)
	}
}

func TestPostedWritesTakeEffectInOrderBeforeALaterRead(t *testing.T) {
	r := newRig(t, nil, nil)
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b, _ := r.dev.BAR(0)
	const n = 1000
	for i := range n {
		b.Write32(8, uint32(i))
	}
	if got := b.Read32(8); got != n-1 {
		t.Fatalf("read after %d posted writes = %d, want %d", n, got, n-1)
	}
	w := r.model.Writes()
	if len(w) != n {
		t.Fatalf("%d writes reached the model, want %d", len(w), n)
	}
	for i, v := range w {
		if v != uint32(i) {
			t.Fatalf("write %d carried %d: reordered", i, v)
		}
	}
	// Accesses the BAR cannot claim never reach the server.
	before := r.srv.Stats().Messages
	for _, off := range []uint64{2, 4096, 4094, ^uint64(0) - 1} {
		if v := b.Read32(off); v != 0xFFFFFFFF {
			t.Errorf("Read32(%#x) = %#x, want all-ones", off, v)
		}
		b.Write32(off, 1)
	}
	if got := r.srv.Stats().Messages; got != before {
		t.Errorf("%d messages for accesses outside the BAR", got-before)
	}
}

func TestDMAReachesTheMemfdArenaAndNothingElse(t *testing.T) {
	r := newRig(t, nil, &Options{DMASize: 1 << 20})
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	buf, err := r.dev.DMA().Alloc(8192, 4096)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("device wrote this "), 100)
	if err := r.model.Host.DMAWrite(buf.IOVA+100, data); err != nil {
		t.Fatalf("DMA write into the arena: %v", err)
	}
	if !bytes.Equal(buf.Mem[100:100+len(data)], data) {
		t.Fatal("the device's write is not in the client's buffer")
	}
	buf.Store32(0, 0xfeedf00d)
	if v, err := r.model.Host.DMARead32(buf.IOVA); err != nil || v != 0xfeedf00d {
		t.Fatalf("DMA read of the client's word = %#x, %v", v, err)
	}
	iova, size := r.dev.Arena()
	for _, at := range []uint64{iova - 4, iova + size, iova + size - 2, 0} {
		if err := r.model.Host.DMAWrite(at, []byte{1, 2, 3, 4}); err == nil {
			t.Errorf("DMA write at %#x, outside the arena %#x+%#x, was allowed", at, iova, size)
		}
	}
	st := r.srv.Stats()
	if st.DMAFaults != 4 {
		t.Errorf("server counted %d refused DMAs, want 4", st.DMAFaults)
	}
	if st.DMAMaps != 1 || st.DMAWindows != 1 {
		t.Errorf("%d DMA maps, %d windows: want one (the arena)", st.DMAMaps, st.DMAWindows)
	}
	if err := r.dev.DMA().Free(buf); err != nil {
		t.Fatal(err)
	}
}

func TestMSIsArriveOnEventfdsUntilDisable(t *testing.T) {
	r := newRig(t, nil, nil)
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	vecs, err := r.dev.Interrupts().Enable(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(vecs) != 3 {
		t.Fatalf("%d vectors, want 3", len(vecs))
	}
	r.model.Host.RaiseMSI(2)
	r.model.Host.RaiseMSI(2)
	got := uint64(0)
	for got < 2 {
		n, err := vecs[2].Wait()
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	waited := make(chan error, 1)
	go func() { _, err := vecs[0].Wait(); waited <- err }()
	if err := r.dev.Interrupts().Disable(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, pci.ErrClosed) {
		t.Fatalf("Wait after Disable = %v, want pci.ErrClosed", err)
	}
	r.model.Host.RaiseMSI(0)
	if st := r.srv.Stats(); st.MSIDelivered != 2 || st.MSIDropped != 1 {
		t.Errorf("MSIs delivered %d dropped %d, want 2 and 1 (after Disable)", st.MSIDelivered, st.MSIDropped)
	}
}

func TestResetResetsTheFunction(t *testing.T) {
	r := newRig(t, nil, nil)
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b, _ := r.dev.BAR(0)
	b.Write32(0, 7)
	if err := r.dev.Reset(); err != nil {
		t.Fatal(err)
	}
	if r.model.Resets.Load() != 1 {
		t.Fatalf("model reset %d times, want 1", r.model.Resets.Load())
	}
	var cmd [2]byte
	if err := r.dev.ConfigRead(pci.CfgCommand, cmd[:]); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint16(cmd[:])&(pci.CmdMemory|pci.CmdBusMaster) != 0 {
		t.Errorf("Command %#x after reset, want memory and bus mastering off", cmd)
	}
}

func TestServerDeathFailsBlockedAndLaterCalls(t *testing.T) {
	m := &vpcitest.Regs{Gate: make(chan struct{}), Entered: make(chan struct{})}
	r := newRig(t, m, nil)
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	vecs, err := r.dev.Interrupts().Enable(1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.dev.BAR(0)
	read := make(chan uint32, 1)
	go func() { read <- b.Read32(63 * 4) }()
	<-m.Entered
	// The server's end goes away with the read in flight.
	r.sconn.Close()
	select {
	case v := <-read:
		if v != 0xFFFFFFFF {
			t.Errorf("blocked read returned %#x, want all-ones", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read blocked on a dead server did not return")
	}
	close(m.Gate)
	select {
	case <-r.dev.RemovalRequested():
	default:
		t.Error("RemovalRequested not closed after the connection died")
	}
	if err := r.dev.ConfigRead(0, make([]byte, 4)); !errors.Is(err, pci.ErrRemoved) {
		t.Errorf("ConfigRead on a dead server = %v, want pci.ErrRemoved", err)
	}
	if err := r.dev.Reset(); !errors.Is(err, pci.ErrRemoved) {
		t.Errorf("Reset on a dead server = %v, want pci.ErrRemoved", err)
	}
	if _, err := r.dev.Interrupts().Enable(1); !errors.Is(err, pci.ErrRemoved) {
		t.Errorf("Enable on a dead server = %v, want pci.ErrRemoved", err)
	}
	b.Write32(0, 1) // dropped, no panic
	if err := r.dev.Close(); err != nil {
		t.Errorf("Close after the server died: %v", err)
	}
	if _, err := vecs[0].Wait(); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Wait after Close = %v, want pci.ErrClosed", err)
	}
}

// hungError checks that err is the error of a connection whose server
// stopped answering: removal, a timeout, and what was not answered.
func hungError(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !errors.Is(err, pci.ErrRemoved) || !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s = %v; want pci.ErrRemoved and os.ErrDeadlineExceeded, saying %q", what, err, want)
	}
}

// within waits for ch up to a bound far above any timeout the tests set.
func within[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: still blocked after 20 s", what)
		panic("unreachable")
	}
}

// A server that stays connected but stops answering (stuck in its model,
// as a hung or SIGSTOPped process is) fails the call waiting on it after
// Options.Timeout, the call queued behind it too, and the device reports
// removal; the reply the server sends later reaches no call.
func TestHungServerFailsPendingCallsAndRemovesTheDevice(t *testing.T) {
	const timeout = 200 * time.Millisecond
	m := &vpcitest.Regs{Gate: make(chan struct{}), Entered: make(chan struct{})}
	r := newRig(t, m, &Options{Timeout: timeout})
	defer close(m.Gate) // before the rig's cleanup closes the server
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b, _ := r.dev.BAR(0)
	b.Write32(63*4, 0x1234)
	if err := r.dev.Err(); err != nil {
		t.Fatalf("Err on a connected device = %v", err)
	}
	start := time.Now()
	hung := make(chan error, 1)
	go func() {
		var head [vuwire.RegionAccessSize]byte
		vuwire.RegionAccess{Offset: 63 * 4, Region: 0, Count: 4}.Put(head[:])
		var out [vuwire.RegionAccessSize + 4]byte
		_, err := r.dev.k.roundTrip(vuwire.CmdRegionRead, head[:], nil, nil, out[:])
		hung <- err
	}()
	<-m.Entered
	behind := make(chan uint32, 1)
	go func() { behind <- b.Read32(0) }()
	err := within(t, "a call to a hung server", hung)
	if d := time.Since(start); d < timeout {
		t.Errorf("the call failed after %v, before the %v timeout", d, timeout)
	}
	hungError(t, "the call the server did not answer", err, "did not answer REGION_READ")
	if !strings.Contains(err.Error(), "within 200ms") {
		t.Errorf("the error does not say the timeout: %v", err)
	}
	if v := within(t, "the read queued behind it", behind); v != 0xFFFFFFFF {
		t.Errorf("the read queued behind the hung call returned %#x, want all-ones", v)
	}
	select {
	case <-r.dev.RemovalRequested():
	default:
		t.Error("RemovalRequested not closed after the server hung")
	}
	// The server wakes up and answers: the late reply reaches nobody,
	// and later calls fail at once.
	m.Gate <- struct{}{}
	if v := b.Read32(63 * 4); v != 0xFFFFFFFF {
		t.Errorf("Read32 after the timeout = %#x, want all-ones", v)
	}
	err = r.dev.ConfigRead(0, make([]byte, 4))
	hungError(t, "ConfigRead after the timeout", err, "did not answer REGION_READ")
	hungError(t, "Err", r.dev.Err(), "did not answer REGION_READ")
	if err := r.dev.Close(); err != nil {
		t.Errorf("Close after the server hung: %v", err)
	}
}

// A server that stops reading: posted doorbell writes fill the socket,
// and the one that finds no room fails after Options.Timeout instead of
// blocking the engine forever.
func TestHungServerThatStopsReadingFailsABlockedPostedWrite(t *testing.T) {
	const timeout = 200 * time.Millisecond
	m := &vpcitest.Regs{Gate: make(chan struct{}), Entered: make(chan struct{})}
	r := newRig(t, m, &Options{Timeout: timeout})
	defer close(m.Gate)
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b, _ := r.dev.BAR(0)
	b.Write32(62*4, 1)
	<-m.Entered
	wrote := make(chan int, 1)
	go func() {
		n := 0
		for ; ; n++ {
			select {
			case <-r.dev.RemovalRequested():
				wrote <- n
				return
			default:
			}
			b.Write32(0, uint32(n))
		}
	}()
	n := within(t, "posted writes to a server that stopped reading", wrote)
	if n == 0 {
		t.Error("no write went out before the removal")
	}
	hungError(t, "ConfigRead after the timeout", r.dev.ConfigRead(0, make([]byte, 4)), "did not read REGION_WRITE")
}

// A server that answers slowly, but within the timeout, is alive: its
// reply reaches the call and the connection goes on.
func TestSlowServerWithinTheTimeoutKeepsTheConnection(t *testing.T) {
	const timeout = 4 * time.Second
	m := &vpcitest.Regs{Gate: make(chan struct{}), Entered: make(chan struct{})}
	r := newRig(t, m, &Options{Timeout: timeout})
	if err := r.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	b, _ := r.dev.BAR(0)
	b.Write32(63*4, 0xfeed)
	read := make(chan uint32, 1)
	go func() { read <- b.Read32(63 * 4) }()
	<-m.Entered
	// Answer once the watchdog has seen the call outstanding at two
	// checks (a quarter of the timeout apart): it is slow, not hung.
	for r.dev.k.overdue.Load() == 0 {
		select {
		case <-read:
			t.Fatal("the read returned while the server was stuck")
		case <-time.After(time.Millisecond):
		}
	}
	close(m.Gate)
	if v := within(t, "a slow read", read); v != 0xfeed {
		t.Fatalf("slow read = %#x, want 0xfeed", v)
	}
	select {
	case <-r.dev.RemovalRequested():
		t.Fatal("a slow but alive server was declared gone")
	default:
	}
	for i := range 100 {
		b.Write32(4, uint32(i))
		if v := b.Read32(4); v != uint32(i) {
			t.Fatalf("read %d after the slow one = %#x", i, v)
		}
	}
}

// New on a server that accepted the connection but never answers (a
// SIGSTOPped server's socket still accepts) returns the timeout error.
func TestNewOnAServerThatNeverAnswersFails(t *testing.T) {
	s, c, err := vfiouser.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		d, err := New(c, "mute.sock", &Options{Timeout: 100 * time.Millisecond})
		if d != nil {
			d.Close()
		}
		done <- err
	}()
	err = within(t, "New on a mute server", done)
	hungError(t, "New", err, "did not answer VERSION")
}

func TestCloseUnmapsTheArenaFromTheServer(t *testing.T) {
	r := newRig(t, nil, nil)
	if _, err := r.dev.Interrupts().Enable(2); err != nil {
		t.Fatal(err)
	}
	if err := r.dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.dev.Close(); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("second Close = %v, want pci.ErrClosed", err)
	}
	// The server sees the disconnect (and its DMA_UNMAP before it).
	select {
	case err := <-r.served:
		r.served <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the server still serves a closed client")
	}
	if st := r.srv.Stats(); st.DMAWindows != 0 || st.DMAUnmapped != 1 {
		t.Errorf("after Close: %d DMA windows, %d unmapped; want 0 and 1", st.DMAWindows, st.DMAUnmapped)
	}
	if _, err := r.dev.DMA().Alloc(64, 64); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("Alloc after Close = %v, want pci.ErrClosed", err)
	}
	if err := r.dev.ConfigRead(0, make([]byte, 4)); !errors.Is(err, pci.ErrClosed) {
		t.Errorf("ConfigRead after Close = %v, want pci.ErrClosed", err)
	}
}

// TestBARAccessesDoNotAllocate measures the client alone: its peer is a
// bare echo loop that allocates nothing (the server allocates per reply,
// and AllocsPerRun counts every goroutine).
func TestBARAccessesDoNotAllocate(t *testing.T) {
	if underRace {
		t.Skip("sync.Pool drops Puts under the race detector (the calls are pooled); run without -race")
	}
	s, c, err := vfiouser.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		var hb [vuwire.HeaderSize]byte
		body := make([]byte, 64)
		out := make([]byte, vuwire.HeaderSize+vuwire.RegionAccessSize+4)
		for {
			if _, err := io.ReadFull(s, hb[:]); err != nil {
				return
			}
			h, err := vuwire.ParseHeader(hb[:])
			if err != nil || int(h.Size)-vuwire.HeaderSize > len(body) {
				return
			}
			n := int(h.Size) - vuwire.HeaderSize
			if _, err := io.ReadFull(s, body[:n]); err != nil {
				return
			}
			if h.Flags&vuwire.FlagNoReply != 0 {
				continue
			}
			vuwire.Header{ID: h.ID, Cmd: h.Cmd, Size: uint32(len(out)), Flags: vuwire.TypeReply}.Put(out)
			copy(out[vuwire.HeaderSize:], body[:vuwire.RegionAccessSize])
			if _, err := s.Write(out); err != nil {
				return
			}
		}
	}()
	d := &Device{path: "echo", k: newConn("echo", c, DefaultTimeout)}
	b := &bar{d: d, index: 0, size: 4096}
	b.Read32(0) // warm the call pool
	// One run of 200 calls each: AllocsPerRun's average is an integer
	// division, which would read 199 allocations in 200 calls as 0.
	if n := testing.AllocsPerRun(1, func() {
		for range 200 {
			b.Write32(4, 1)
		}
	}); n != 0 {
		t.Errorf("posted Write32: %v allocations in 200 calls, want 0", n)
	}
	if n := testing.AllocsPerRun(1, func() {
		for range 200 {
			b.Read32(4)
		}
	}); n != 0 {
		t.Errorf("Read32: %v allocations in 200 calls, want 0", n)
	}
	d.k.close()
	s.Close()
	<-echoed
}

// Doorbell cost: a posted REGION_WRITE (what Write32 does), sustained and
// in bursts, against the same write waiting for the server's reply, and a
// BAR read.
func BenchmarkBAR(b *testing.B) {
	r := newRig(b, nil, nil)
	if err := r.dev.SetBusMaster(true); err != nil {
		b.Fatal(err)
	}
	bar, _ := r.dev.BAR(0)
	b.Run("WritePosted", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bar.Write32(4, uint32(i))
		}
		bar.Read32(4) // the server has applied every write
	})
	// The host's cost of a doorbell: bursts of 256 posted writes, the
	// server catching up outside the timed part, so the socket never
	// fills and the writer never waits for the server.
	b.Run("WritePostedBurst", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bar.Write32(4, uint32(i))
			if i%256 == 255 {
				b.StopTimer()
				bar.Read32(4)
				b.StartTimer()
			}
		}
	})
	b.Run("WriteRoundTrip", func(b *testing.B) {
		var msg [vuwire.RegionAccessSize + 4]byte
		vuwire.RegionAccess{Offset: 4, Region: 0, Count: 4}.Put(msg[:])
		for i := 0; i < b.N; i++ {
			if _, err := r.dev.k.roundTrip(vuwire.CmdRegionWrite, msg[:], nil, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReadRoundTrip", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bar.Read32(4)
		}
	})
}
