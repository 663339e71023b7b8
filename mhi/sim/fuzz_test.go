package sim

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// lenientHost is a raw host for fuzzing: violations are expected and only
// counted.
func lenientHost(t testing.TB, opts Options) *rawHost {
	opts.EventWait = 5 * time.Millisecond
	opts.SendTimeout = time.Millisecond
	h := newHost(t, testProfile(), opts)
	h.lenient = true
	return h
}

// responsive checks that the device goroutine still answers: a request is
// served only between two passes of its loop.
func (h *rawHost) responsive() {
	h.t.Helper()
	done := make(chan struct{})
	go func() {
		h.m.EnterM1() // may fail with ErrState; it only has to return
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitLimit):
		h.t.Fatal("device goroutine hung")
	}
}

// FuzzCommandRing feeds fuzzer-chosen channel contexts, command elements
// and command doorbell values to a modem in M0. It must neither panic nor
// hang, whatever the host wrote.
func FuzzCommandRing(f *testing.F) {
	le := binary.LittleEndian
	seed := make([]byte, 2+2*mhi.ContextSize+3*16)
	seed[0] = 3 // three commands
	mhi.Context{W0: mhi.ChCfg(mhi.ChanEnabled, false), W1: 1, RBase: 0, RLen: 512}.Encode(seed[2:])
	mhi.Command(mhi.TypeStartCmd, 0).Encode(seed[2+2*mhi.ContextSize:])
	mhi.Command(mhi.TypeStopCmd, 0).Encode(seed[2+2*mhi.ContextSize+16:])
	mhi.Command(mhi.TypeResetCmd, 1).Encode(seed[2+2*mhi.ContextSize+32:])
	f.Add(seed)
	garbage := make([]byte, 300)
	for i := range garbage {
		garbage[i] = byte(i*37 + 11)
	}
	f.Add(garbage)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2+2*mhi.ContextSize {
			return
		}
		h := lenientHost(t, Options{})
		h.upToMissionMode()
		// Channel contexts 0 and 1 come from the fuzzer, except that a
		// ring base, if any, is moved into a real buffer half the time
		// so that the walkers get past the first checks.
		ring := h.alloc(4096, 4096)
		for i := range 2 {
			ctx := mhi.DecodeContext(data[2+i*mhi.ContextSize:])
			if ctx.RBase&1 == 0 {
				ctx.RBase = ring.IOVA + ctx.RBase%4096&^15
				ctx.RP = ctx.RBase + ctx.RP%512&^15
				ctx.WP = ctx.RBase + ctx.WP%512&^15
			}
			ctx.Encode(h.chCtx.Mem[i*mhi.ContextSize:])
		}
		cmds := data[2+2*mhi.ContextSize:]
		n := min(int(data[0]), len(cmds)/16, 127)
		for i := range n {
			copy(h.cmdRing.Mem[i*16:], cmds[i*16:i*16+16])
		}
		// The doorbell: the natural wp, or a fuzzer-skewed one.
		wp := h.cmdRing.IOVA + uint64(n*16)
		if data[1]&1 != 0 {
			wp += uint64(int64(int8(data[1]))) * 8
		}
		h.cmdCtx.Store64(mhi.CtxWP, wp)
		h.w64(mhi.RegCRDBLower, wp)
		// And ring the channel doorbells with whatever they hold.
		h.w64(h.chdb, le.Uint64(data[2+mhi.CtxWP:]))
		h.w64(h.chdb+8, le.Uint64(data[2+mhi.ContextSize+mhi.CtxWP:]))
		h.responsive()
	})
}

// FuzzRegisterWrites writes fuzzer-chosen values at fuzzer-chosen offsets:
// the modem must survive any register traffic.
func FuzzRegisterWrites(f *testing.F) {
	f.Add([]byte{0x38, 0x00, 0x00, 0x02, 0x00, 0x00})                   // MHICTRL = M0 from READY
	f.Add([]byte{0x70, 0x00, 0x10, 0x00, 0x00, 0x00, 0x38, 0x00, 0x02}) // CRDB, RESET
	f.Add([]byte{0xB0, 0x00, 0x01, 0x00, 0x00, 0x00})                   // SoC reset
	f.Add([]byte{0x18, 0x03, 0x34, 0x12, 0x00, 0x00})                   // BHI_IMGTXDB
	f.Fuzz(func(t *testing.T, data []byte) {
		h := lenientHost(t, Options{})
		for len(data) >= 6 {
			off := uint64(binary.LittleEndian.Uint16(data)) % barSize &^ 3
			h.w32(off, binary.LittleEndian.Uint32(data[2:]))
			h.r32(off)
			data = data[6:]
			runtime.Gosched()
		}
		h.responsive()
	})
}
