package stack_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// pinControls are the two protocols the SIM PIN is entered over.
var pinControls = []struct{ name, profile, control string }{
	{"mbim", "qcom-sdx55m", "mbim"}, {"qmi", "telit-fn980-hwv1", "qmi"},
}

// lockedModem opens the emulated modem of c on a SIM locked with PIN
// 1357 (tries PINAttempts), with opts' PIN and PUK.
func lockedModem(t *testing.T, c struct{ name, profile, control string }, nc simnet.NetworkConfig, pin, puk string, log *slog.Logger) (*stack.Modem, *simnet.Network) {
	t.Helper()
	nc.APN = "internet"
	if nc.PIN == "" {
		nc.PIN = "1357"
	}
	nw := simnet.NewNetwork(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := stack.OpenModem(ctx, stack.Options{Profile: c.profile, Control: c.control, PIN: pin, PUK: puk, Logger: log,
		Sim: stack.SimOptions{NetworkConfig: nc, Network: nw}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, nw
}

func openSession(m *stack.Modem) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := m.OpenSession(ctx, stack.SessionOptions{APN: "internet"})
	if err == nil {
		s.Close()
	}
	return err
}

// TestOpenWithoutPINOnALockedSIMNamesTheFlag: no PIN given: a
// *PINError asking for the PIN with the SIM's 3 tries, matching
// ErrSIMLocked, whose text names -pin; nothing was entered.
func TestOpenWithoutPINOnALockedSIMNamesTheFlag(t *testing.T) {
	for _, c := range pinControls {
		t.Run(c.name, func(t *testing.T) {
			m, nw := lockedModem(t, c, simnet.NetworkConfig{}, "", "", nil)
			err := openSession(m)
			var pe *stack.PINError
			if !errors.As(err, &pe) || !errors.Is(err, stack.ErrSIMLocked) || pe.Need != "PIN" || pe.Remaining != 3 || pe.Rejected {
				t.Fatalf("OpenSession: %v (%+v)", err, pe)
			}
			for _, want := range []string{"-pin", stack.PINEnv, "3 attempts left"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q lacks %q", err, want)
				}
			}
			if _, _, left := nw.PINState(); left != 3 {
				t.Errorf("%d tries left on the SIM, want 3", left)
			}
		})
	}
}

// TestWrongPINIsEnteredOnceAndNeverRetried: a wrong PIN costs one try,
// is reported Rejected with 2 left, and a second session on the modem
// does not send it again.
func TestWrongPINIsEnteredOnceAndNeverRetried(t *testing.T) {
	for _, c := range pinControls {
		t.Run(c.name, func(t *testing.T) {
			m, nw := lockedModem(t, c, simnet.NetworkConfig{}, "2468", "", nil)
			for range 2 {
				err := openSession(m)
				var pe *stack.PINError
				if !errors.As(err, &pe) || !pe.Rejected || pe.Need != "PIN" || pe.Remaining != 2 {
					t.Fatalf("OpenSession: %v (%+v)", err, pe)
				}
				if _, _, left := nw.PINState(); left != 2 {
					t.Fatalf("%d tries left on the SIM, want 2: the PIN was sent again", left)
				}
			}
		})
	}
}

// TestRightPINUnlocksTheSIM.
func TestRightPINUnlocksTheSIM(t *testing.T) {
	for _, c := range pinControls {
		t.Run(c.name, func(t *testing.T) {
			m, nw := lockedModem(t, c, simnet.NetworkConfig{}, "1357", "", nil)
			if err := openSession(m); err != nil {
				t.Fatal(err)
			}
			if locked, _, _ := nw.PINState(); locked {
				t.Fatal("still locked")
			}
		})
	}
}

// TestPUKOnlyWhenGivenAndItSetsTheNewPIN: the last PIN try burnt leaves
// the SIM asking for its PUK; without -puk nothing is sent (10 PUK tries
// left) and the error names -puk; with -puk and -pin the SIM is
// unblocked and its PIN is the new one.
func TestPUKOnlyWhenGivenAndItSetsTheNewPIN(t *testing.T) {
	for _, c := range pinControls {
		t.Run(c.name, func(t *testing.T) {
			m, nw := lockedModem(t, c, simnet.NetworkConfig{PINAttempts: 1}, "2468", "", nil)
			err := openSession(m)
			var pe *stack.PINError
			if !errors.As(err, &pe) || pe.Need != "PUK" || !pe.Rejected {
				t.Fatalf("wrong last PIN: %v (%+v)", err, pe)
			}
			err = openSession(m)
			if !errors.As(err, &pe) || pe.Need != "PUK" || pe.Remaining != 10 || !strings.Contains(err.Error(), "-puk") {
				t.Fatalf("no PUK: %v (%+v)", err, pe)
			}
			if locked, need, left := nw.PINState(); !locked || need != mbim.PINTypePUK1 || left != 10 {
				t.Fatalf("SIM %v %v %d, want PUK1 with 10 tries", locked, need, left)
			}
			m.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m2, err := stack.OpenModem(ctx, stack.Options{Profile: c.profile, Control: c.control, PIN: "4321", PUK: "12345678",
				Sim: stack.SimOptions{NetworkConfig: simnet.NetworkConfig{APN: "internet"}, Network: nw}})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			if err := openSession(m2); err != nil {
				t.Fatal(err)
			}
			if locked, _, _ := nw.PINState(); locked {
				t.Fatal("still locked after the PUK")
			}
		})
	}
}

// syncBuffer is a log sink written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestPINNeverAppearsInLogs: debug logs of a wrong PIN, a PUK and the
// new PIN hold none of them, as text or as hex.
func TestPINNeverAppearsInLogs(t *testing.T) {
	for _, c := range pinControls {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			m, nw := lockedModem(t, c, simnet.NetworkConfig{PIN: "97531", PINAttempts: 1}, "86420", "", log)
			openSession(m)
			m.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m2, err := stack.OpenModem(ctx, stack.Options{Profile: c.profile, Control: c.control, PIN: "75319", PUK: "12345678", Logger: log,
				Sim: stack.SimOptions{NetworkConfig: simnet.NetworkConfig{APN: "internet"}, Network: nw}})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			if err := openSession(m2); err != nil {
				t.Fatal(err)
			}
			out := logs.String()
			if len(out) == 0 {
				t.Fatal("no logs captured: the test would prove nothing")
			}
			for _, secret := range []string{"86420", "75319", "12345678"} {
				if strings.Contains(out, secret) || strings.Contains(strings.ToLower(out), hex.EncodeToString([]byte(secret))) {
					t.Errorf("the logs hold %q", secret)
				}
			}
		})
	}
}
