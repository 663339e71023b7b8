package sim

import (
	"bytes"
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// TestBootJudgesTheAMSSImageOnFlash: at power-on the modem reads its
// modem partition; only its own profile's image, byte for byte, is good;
// a bad one changes the PCI ID to BadImageID (17cb:0306 by default) and
// turns the crash loop on; an erased partition (zeros on UFS, 0xFF on
// NAND) boots as without storage.
func TestBootJudgesTheAMSSImageOnFlash(t *testing.T) {
	p, _ := mhi.Lookup("foxconn-t99w175")
	other, _ := mhi.Lookup("foxconn-t99w368")
	good := AMSSImage(p)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-2] ^= 1
	for _, tc := range []struct {
		name    string
		kind    string
		img     []byte
		badID   mhi.PCIID
		want    string
		wantID  [2]uint16
		crashes bool
	}{
		{name: "erased UFS", kind: StorageUFS, want: "none", wantID: [2]uint16{0x105b, 0xe0ab}},
		{name: "erased NAND", kind: StorageNAND, want: "none", wantID: [2]uint16{0x105b, 0xe0ab}},
		{name: "own image", kind: StorageUFS, img: good, want: "good", wantID: [2]uint16{0x105b, 0xe0ab}},
		{name: "own image on NAND", kind: StorageNAND, img: good, want: "good", wantID: [2]uint16{0x105b, 0xe0ab}},
		{name: "other profile's image", kind: StorageUFS, img: AMSSImage(other), want: "bad", wantID: [2]uint16{0x17cb, 0x0306}, crashes: true},
		{name: "corrupted", kind: StorageEMMC, img: corrupt, want: "bad", wantID: [2]uint16{0x17cb, 0x0306}, crashes: true},
		{name: "truncated", kind: StorageUFS, img: good[:len(good)-1], want: "bad", wantID: [2]uint16{0x17cb, 0x0306}, crashes: true},
		{name: "garbage, own bad ID", kind: StorageUFS, img: []byte{1}, badID: mhi.PCIID{Vendor: 0x17cb, Device: 0x0308}, want: "bad", wantID: [2]uint16{0x17cb, 0x0308}, crashes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := NewStorage(tc.kind, 1024)
			if err != nil {
				t.Fatal(err)
			}
			if tc.img != nil {
				buf := make([]byte, AMSSSectors*st.SectorSize())
				fill(buf, st.erasedByte())
				copy(buf, tc.img)
				if err := st.WriteSectors(AMSSLUN, AMSSSector, buf); err != nil {
					t.Fatal(err)
				}
			}
			m, err := New(p, Options{BadImageID: tc.badID, Functions: map[string]Function{"FIREHOSE": &Firehose{Storage: st}}})
			if err != nil {
				t.Fatal(err)
			}
			id := m.Identity()
			if m.AMSS() != tc.want || [2]uint16{id.Vendor, id.Device} != tc.wantID || (m.opts.CrashLoop > 0) != tc.crashes {
				t.Errorf("AMSS %s, ID %04x:%04x, crash loop %v; want %s, %04x:%04x, %v",
					m.AMSS(), id.Vendor, id.Device, m.opts.CrashLoop, tc.want, tc.wantID[0], tc.wantID[1], tc.crashes)
			}
		})
	}
}

// FuzzCheckAMSS: whatever the host wrote into the modem partition, the
// boot's verdict is good exactly when the partition starts with the
// profile's image, none exactly when it is erased, and it never panics.
func FuzzCheckAMSS(f *testing.F) {
	p, _ := mhi.Lookup("foxconn-t99w175")
	f.Add(AMSSImage(p))
	f.Add([]byte(amssMagic))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, img []byte) {
		st, err := NewStorage(StorageUFS, 512)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, AMSSSectors*st.SectorSize())
		copy(buf, img)
		if err := st.WriteSectors(AMSSLUN, AMSSSector, buf); err != nil {
			t.Fatal(err)
		}
		want := amssBad
		switch {
		case bytes.HasPrefix(buf, AMSSImage(p)):
			want = amssGood
		case allBytes(buf, 0):
			want = amssNone
		}
		if got := checkAMSS(st, p); got != want {
			t.Errorf("verdict %s, want %s", got, want)
		}
	})
}
