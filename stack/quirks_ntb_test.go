package stack_test

import (
	"context"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// TestOpenPlaysTheProfilesNTBQuirks: on foxconn-sdx55 (the ThinkPad
// X13s's MBIM modem) the emulated carrier restarts and repeats DL NTB
// sequence numbers by default, and a TCP transfer is not disturbed: the
// host counts the glitches and reports no RX error. With the profile's
// quirks off the carrier numbers its NTBs one by one.
func TestOpenPlaysTheProfilesNTBQuirks(t *testing.T) {
	for _, off := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s, err := stack.Open(ctx, stack.Options{APN: "internet", Profile: "foxconn-sdx55", Control: "mbim", Sim: stack.SimOptions{
			Modem: sim.Options{NoProfileQuirks: off},
		}})
		if err != nil {
			t.Fatal(err)
		}
		shaThroughTCP(t, ctx, s, 1<<20)
		ls := s.Stats().Link
		s.Close()
		if ls == nil {
			t.Fatal("no link stats")
		}
		if ls.RXErrors != 0 || ls.RXFrames < 2*8 || (ls.RXSequenceGlitches == 0) != off {
			t.Errorf("profile quirks off %v: %d NTBs, %d sequence glitches, %d RX errors", off, ls.RXFrames, ls.RXSequenceGlitches, ls.RXErrors)
		}
	}
}
