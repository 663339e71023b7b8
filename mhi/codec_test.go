package mhi

import (
	"testing"
)

func TestElementRoundTripAndFields(t *testing.T) {
	cases := []struct {
		name string
		e    Element
		typ  uint8
	}{
		{"TRE", TRE(0x12345000, 1500, TREIEOT|TREBEI), TypeTransfer},
		{"start command", Command(TypeStartCmd, 101), TypeStartCmd},
		{"tx event", TxEvent(0x1000_0020, 77, CodeOverflow, 101), TypeTxEvent},
		{"command completion", CmdCompletionEvent(0x2000, CodeSuccess), TypeCmdComplete},
		{"state change", StateChangeEvent(StateM0), TypeStateChange},
		{"ee", EEEvent(EEAMSS), TypeEEEvent},
	}
	for _, tc := range cases {
		var b [ElementSize]byte
		tc.e.Encode(b[:])
		got := DecodeElement(b[:])
		if got != tc.e {
			t.Errorf("%s: round trip %+v → %+v", tc.name, tc.e, got)
		}
		if got.Type() != tc.typ {
			t.Errorf("%s: type %#x, want %#x", tc.name, got.Type(), tc.typ)
		}
	}
	tre := TRE(0xABC0, 70000, TREIEOT)
	if tre.Len() != 70000&0xFFFF {
		t.Errorf("TRE length must be the 16-bit field, got %d", tre.Len())
	}
	ev := TxEvent(0x40, 1234, CodeEOT, 100)
	if ev.Chan() != 100 || ev.Code() != CodeEOT || ev.Len() != 1234 || ev.Ptr != 0x40 {
		t.Errorf("tx event fields: %+v", ev)
	}
	if Command(TypeResetCmd, 13).Chan() != 13 {
		t.Error("command channel field")
	}
	if StateChangeEvent(StateSysErr).State() != StateSysErr || EEEvent(EEFP).EE() != EEFP {
		t.Error("state/EE payload")
	}
	// Byte layout: ptr, dword0, dword1, little-endian (§3).
	var b [16]byte
	TRE(0x1122334455667788, 0x99AA, TREChain).Encode(b[:])
	want := []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xAA, 0x99, 0, 0, 0x01, 0, 0x02, 0}
	if string(b[:]) != string(want) {
		t.Errorf("TRE bytes % x, want % x", b, want)
	}
}

func TestContextLayoutIsPacked44Bytes(t *testing.T) {
	c := Context{W0: 1, W1: 2, W2: 3, RBase: 0x1000, RLen: 0x800, RP: 0x1010, WP: 0x1020}
	b := make([]byte, ContextSize)
	c.Encode(b)
	if got := DecodeContext(b); got != c {
		t.Fatalf("round trip %+v", got)
	}
	// rbase is at 0x0C, not 8-byte aligned (§2, pitfall 5).
	if b[0x0C] != 0x00 || b[0x0D] != 0x10 || b[0x14] != 0x00 || b[0x15] != 0x08 {
		t.Errorf("64-bit fields misplaced: % x", b)
	}
	cfg := ChCfg(ChanRunning, true)
	if (Context{W0: cfg}).ChanState() != ChanRunning || !(Context{W0: cfg}).BurstMode() {
		t.Errorf("chcfg %#x", cfg)
	}
	if (Context{W0: 5 << EvIntModTShift}).IntModT() != 5 {
		t.Error("INTMODT field")
	}
}

func TestRingOccupancyMatchesProtocol(t *testing.T) {
	r := ring{n: 8, base: 0x10000}
	// §5.7: N−1 free right after start, full when next(wp) == rp.
	if got := r.freeCount(0, 0); got != 7 {
		t.Errorf("free(empty) = %d, want 7", got)
	}
	if !r.full(0, 7) || r.full(0, 6) {
		t.Error("full predicate")
	}
	if got := r.freeCount(3, 1); got != 1 {
		t.Errorf("free(rp 3, wp 1) = %d, want 1", got)
	}
	if got := r.freeCount(2, 5); got != 4 {
		t.Errorf("free(rp 2, wp 5) = %d, want 4", got)
	}
	if got := r.pending(6, 2); got != 4 {
		t.Errorf("pending(rp 6, wp 2) = %d, want 4", got)
	}
	for rp := uint32(0); rp < 8; rp++ {
		for wp := uint32(0); wp < 8; wp++ {
			if r.freeCount(rp, wp)+r.pending(rp, wp) != 7 {
				t.Fatalf("free+pending != N-1 at rp %d wp %d", rp, wp)
			}
		}
	}
}

func TestRingIndexRejectsForeignPointers(t *testing.T) {
	r := ring{n: 8, base: 0x10000}
	for _, p := range []uint64{0, 0xFFFF, 0x10000 + 8*16, 0x10008, 0xFFFFFFFFFFFFFFF0, 0x10000 + 3} {
		if _, ok := r.index(p); ok {
			t.Errorf("pointer %#x accepted", p)
		}
	}
	if i, ok := r.index(0x10000 + 7*16); !ok || i != 7 {
		t.Errorf("last element: %d %v", i, ok)
	}
}

func FuzzDecodeElement(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < ElementSize {
			return
		}
		e := DecodeElement(b)
		var out [ElementSize]byte
		e.Encode(out[:])
		if string(out[:]) != string(b[:ElementSize]) {
			t.Fatal("element encode(decode(b)) != b")
		}
		_ = e.Code().String()
		_ = e.State().String()
		_ = e.EE().String()
	})
}

func FuzzDecodeContext(f *testing.F) {
	f.Add(make([]byte, ContextSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < ContextSize {
			return
		}
		c := DecodeContext(b)
		out := make([]byte, ContextSize)
		c.Encode(out)
		if string(out) != string(b[:ContextSize]) {
			t.Fatal("context encode(decode(b)) != b")
		}
		_ = c.ChanState().String()
	})
}
