package simnet

import (
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
)

// TestFoxconnFCCLockOnTheQMIPort: a locked Foxconn refuses Set
// Operating Mode online with Internal; a v2 string that is not the hash
// of its facts and a v1 byte other than 0 fail and leave it locked; the
// v2 string built from its Foxconn Get Firmware Version and Get IDs
// answers unlocks it, and then the radio comes on.
func TestFoxconnFCCLockOnTheQMIPort(t *testing.T) {
	nw := NewNetwork(NetworkConfig{FCCLock: mhi.FCCUnlockFoxconn})
	fn := NewQMIFunction(QMIConfig{Network: nw})
	do := func(m *qmi.Message) (qmi.ErrorCode, *qmi.Message) {
		t.Helper()
		nw.mu.Lock()
		defer nw.mu.Unlock()
		code, tlvs, err := fn.dmsLocked(m, nil)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		return code, m.Reply(code, tlvs...)
	}
	if c, _ := do(qmi.SetOperatingModeRequest(qmi.ModeOnline)); c != qmi.ErrInternal {
		t.Fatalf("online while locked: %v, want Internal", c)
	}
	for _, bad := range []qmi.FoxconnFCCAuth{{Value: 1}, {V2: true, Magic: "salt00", Num: 48}} {
		if c, _ := do(bad.Request()); c != qmi.ErrAuthenticationFailed || !nw.FCCLocked() {
			t.Fatalf("%+v: %v, locked %v", bad, c, nw.FCCLocked())
		}
	}
	version := func(ty qmi.FoxconnVersionType) string {
		_, r := do(qmi.FoxconnGetFirmwareVersionRequest(ty))
		s, err := qmi.ParseString(r)
		if err != nil || s == "" {
			t.Fatalf("version %d: %q, %v", ty, s, err)
		}
		return s
	}
	a := qmi.FoxconnFCCAuth{V2: true, Num: 48,
		Magic: qmi.FoxconnFCCMagic(version(qmi.FoxconnFirmwareMCFG), version(qmi.FoxconnApps), nw.cfg.DeviceID)}
	if c, _ := do(a.Request()); c != qmi.ErrNone || nw.FCCLocked() {
		t.Fatalf("v2: %v, locked %v", c, nw.FCCLocked())
	}
	if c, _ := do(qmi.SetOperatingModeRequest(qmi.ModeOnline)); c != qmi.ErrNone {
		t.Fatalf("online after the unlock: %v", c)
	}
}

// TestFCCLockComesBackAtRestart: every power-up locks the modem again
// (ModemManager runs the unlock at every enable).
func TestFCCLockComesBackAtRestart(t *testing.T) {
	nw := NewNetwork(NetworkConfig{FCCLock: mhi.FCCUnlockQuectel})
	nw.mu.Lock()
	nw.st.fccLocked = false
	nw.powerOnLocked()
	nw.mu.Unlock()
	if !nw.FCCLocked() {
		t.Fatal("unlocked after a restart")
	}
}
