package main

import (
	"io"
	"testing"
)

// TestFCCUnlockFlagIsOffByDefault: the unlock runs only when asked.
func TestFCCUnlockFlagIsOffByDefault(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil || c.open.Stack.FCCUnlock {
		t.Fatalf("default: %v, FCCUnlock %v", err, c != nil && c.open.Stack.FCCUnlock)
	}
	c, err = parseFlags([]string{"-fcc-unlock"}, io.Discard)
	if err != nil || !c.open.Stack.FCCUnlock {
		t.Fatalf("-fcc-unlock: %v", err)
	}
}
