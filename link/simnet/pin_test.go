package simnet

import (
	"testing"

	"github.com/mhistack/mhistack/link/mbim"
)

// TestSIMTriesSurviveAModemRestart: the tries are the card's: a wrong
// PIN before a restart still counts after it, and a SIM that needs its
// PUK still does; a wrong PUK costs a PUK try; the right one sets the
// new PIN, which the next restart asks for.
func TestSIMTriesSurviveAModemRestart(t *testing.T) {
	nw := NewNetwork(NetworkConfig{PIN: "1357", PINAttempts: 2})
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.enterPINLocked("0000") {
		t.Fatal("wrong PIN accepted")
	}
	nw.powerOnLocked()
	if nw.st.attempts != 1 || nw.st.pinType != mbim.PINTypePIN1 {
		t.Fatalf("after a restart: %d tries, %v", nw.st.attempts, nw.st.pinType)
	}
	nw.enterPINLocked("0000")
	nw.powerOnLocked()
	if !nw.st.pinLocked || nw.st.pinType != mbim.PINTypePUK1 || nw.st.pukLeft != 10 {
		t.Fatalf("after the last try and a restart: %+v", nw.st)
	}
	if nw.enterPUKLocked("00000000", "2468") || nw.st.pukLeft != 9 {
		t.Fatalf("wrong PUK: %d PUK tries left", nw.st.pukLeft)
	}
	if !nw.enterPUKLocked("12345678", "2468") || nw.st.pinLocked {
		t.Fatal("the right PUK did not unblock")
	}
	nw.powerOnLocked()
	if !nw.st.pinLocked || nw.st.pinType != mbim.PINTypePIN1 || !nw.enterPINLocked("2468") {
		t.Fatal("the new PIN does not unlock after a restart")
	}
}
