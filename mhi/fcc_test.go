package mhi_test

import (
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// TestFCCLockIDsAreTheProfilesOwn: a profile's locked IDs are among its
// IDs and name a procedure; ModemManager's list (105b:e0ab, 105b:e0c3,
// 1eac:1001, 1eac:1004, 1eac:1007 among MHI modems) is what the table
// holds.
func TestFCCLockIDsAreTheProfilesOwn(t *testing.T) {
	var locked []string
	for _, p := range mhi.Profiles() {
		l := p.FCCLock
		if (l.Unlock == mhi.FCCUnlockNone) != (len(l.IDs) == 0) {
			t.Errorf("%s: procedure %q with %d IDs", p.Name, l.Unlock, len(l.IDs))
		}
		for _, id := range l.IDs {
			if got, ok := mhi.Match(id.Vendor, id.Device, id.SubVendor, id.SubDevice); !ok || got != p {
				t.Errorf("%s: locked ID %v matches %v", p.Name, id, got)
			}
			if p.FCCUnlockFor(id.Vendor, id.Device, id.SubVendor, id.SubDevice) != l.Unlock {
				t.Errorf("%s: %v not locked", p.Name, id)
			}
			locked = append(locked, id.String())
		}
	}
	want := map[string]bool{"105b:e0ab": true, "105b:e0c3": true, "1eac:1001": true, "1eac:1004": true, "1eac:1007": true}
	if len(locked) != len(want) {
		t.Errorf("locked IDs %v, want %v", locked, want)
	}
	for _, id := range locked {
		if !want[id] {
			t.Errorf("%s is not in ModemManager's list", id)
		}
	}
	p, _ := mhi.Lookup("foxconn-t99w175")
	if p.FCCUnlockFor(0x105b, 0xe0bf, 0, 0) != mhi.FCCUnlockNone {
		t.Error("105b:e0bf is not in ModemManager's list but is locked")
	}
}
