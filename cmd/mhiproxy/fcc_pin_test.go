package main

import (
	"context"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/stack"
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

// TestPINFlagsFileAndEnvironment: -pin, else -pin-file's first line,
// else MHISTACK_PIN; -pin with -pin-file and -puk without a new PIN are
// usage errors.
func TestPINFlagsFileAndEnvironment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pin")
	if err := os.WriteFile(file, []byte("4321\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(stack.PINEnv, "5678")
	for _, c := range []struct {
		args     []string
		pin, err string
	}{
		{[]string{"-pin", "1234"}, "1234", ""},
		{[]string{"-pin-file", file}, "4321", ""},
		{nil, "5678", ""},
		{[]string{"-pin", "1234", "-pin-file", file}, "", "not both"},
	} {
		cfg, err := parseFlags(c.args, io.Discard)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want %q", c.args, err, c.err)
		case c.err == "" && (err != nil || cfg.open.Stack.PIN != c.pin):
			t.Errorf("%q: %v, PIN %q, want %q", c.args, err, cfg.open.Stack.PIN, c.pin)
		}
	}
	t.Setenv(stack.PINEnv, "")
	if _, err := parseFlags([]string{"-puk", "12345678"}, io.Discard); err == nil || !strings.Contains(err.Error(), "new PIN") {
		t.Errorf("-puk alone: %v", err)
	}
}

// TestWrongPINIsNeverLogged: mhiproxy on an emulated SIM locked with
// 1357, given -pin 2468 and debug logs, fails naming the rejection and
// never prints the PIN.
func TestWrongPINIsNeverLogged(t *testing.T) {
	var stdout, stderr syncBuffer
	locked := func(ctx context.Context, o openOptions) (network, error) {
		o.Stack.Sim.NetworkConfig.PIN = "1357"
		return openModem(ctx, o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"-listen", "127.0.0.1:0", "-pin", "2468", "-log-level", "debug"}, &stdout, &stderr, locked)
	out := stdout.String() + stderr.String()
	if code == 0 || !strings.Contains(out, "rejected") || !strings.Contains(out, "2 attempts left") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "DEBUG") {
		t.Fatalf("no debug logs: the test would prove nothing:\n%s", out)
	}
	if strings.Contains(out, "2468") || strings.Contains(out, hex.EncodeToString([]byte("2468"))) {
		t.Errorf("the output holds the PIN:\n%s", out)
	}
}
