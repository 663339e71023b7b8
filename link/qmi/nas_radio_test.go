package qmi_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

func TestOperatorNameDecodesGSM7PackedPerTS23038(t *testing.T) {
	// "hellohello" packed: the worked example of SMS user data packing.
	b, _ := hex.DecodeString("E8329BFD4697D9EC37")
	got, err := qmi.DecodeName(qmi.NameGSM7, b, 2)
	if err != nil || got != "hellohello" {
		t.Fatalf("DecodeName(GSM7 %x) = %q, %v; want hellohello", b, got, err)
	}
	p, spare, ok := qmi.PackGSM7("hellohello")
	if !ok || !bytes.Equal(p, b) || spare != 2 {
		t.Errorf("PackGSM7(hellohello) = %x spare %d ok %v, want %x spare 2", p, spare, ok, b)
	}
	// Seven septets leave 7 spare bits; with the count unknown the zero
	// padding septet must not decode as '@'.
	p, spare, _ = qmi.PackGSM7("Telekom")
	if got, _ := qmi.DecodeName(qmi.NameGSM7, p, 0); got != "Telekom" || spare != 7 {
		t.Errorf("Telekom with spare bits unknown: %q (spare %d)", got, spare)
	}
}

func TestOperatorNameDecodesTheExtensionTableAndUnpackedSeptets(t *testing.T) {
	got, err := qmi.DecodeGSM7([]byte{0x1B, 0x65, 0x20, 0x1B, 0x3C, 0x41, 0x1B, 0x3E, 0x00, 0x5D})
	if err != nil || got != "€ [A]@Ñ" {
		t.Errorf("DecodeGSM7 = %q, %v", got, err)
	}
	if _, err := qmi.DecodeGSM7([]byte{0x80}); !errors.Is(err, qmi.ErrNameCoding) {
		t.Errorf("septet 0x80: err %v, want ErrNameCoding", err)
	}
	p, _, ok := qmi.PackGSM7("{Ω}€")
	if !ok {
		t.Fatal("PackGSM7 refused characters of the default alphabet and its extension")
	}
	if got, _ := qmi.DecodeName(qmi.NameGSM7, p, 0); got != "{Ω}€" {
		t.Errorf("round trip: %q", got)
	}
}

func TestOperatorNameDecodesUCS2LittleEndianAndCodesNonGSMNamesAsUCS2(t *testing.T) {
	name := "中国移动 Ünlü"
	p := qmi.EncodePLMNName(name)
	if p.Coding != qmi.NameUCS2LE {
		t.Fatalf("EncodePLMNName(%q) coding %d, want UCS2", name, p.Coding)
	}
	if !bytes.Equal(p.Long[:2], []byte{0x2D, 0x4E}) { // U+4E2D, low byte first
		t.Errorf("UCS2 LE starts % x", p.Long[:2])
	}
	o := qmi.OperatorName{PLMNNames: []qmi.PLMNName{p}}
	got, err := qmi.ParseOperatorName(&qmi.Message{Service: qmi.ServiceNAS, ID: qmi.NASGetOperatorName, TLVs: o.TLVs()})
	if err != nil || len(got.PLMNNames) != 1 {
		t.Fatalf("ParseOperatorName: %+v, %v", got, err)
	}
	if s, err := got.PLMNNames[0].Decode(); s != name || err != nil {
		t.Errorf("Decode = %q, %v; want %q", s, err, name)
	}
	if _, err := qmi.DecodeUCS2([]byte{0x41}, true); !errors.Is(err, qmi.ErrNameCoding) {
		t.Errorf("odd UCS2 length: %v", err)
	}
	if p := qmi.EncodePLMNName("Vodafone.de"); p.Coding != qmi.NameGSM7 {
		t.Errorf("an ASCII name is coded %d, want GSM7", p.Coding)
	}
}

func TestSignalBandsAndCAInfoRoundTrip(t *testing.T) {
	b3, _ := qmi.LTEBand(3)
	n78, _ := qmi.NRBand(78)
	if b3 != 122 || n78 != 269 || qmi.Band(161).String() != "B66" || qmi.Band(250).String() != "n1" {
		t.Errorf("band table: B3=%d n78=%d 161=%v 250=%v", b3, n78, qmi.Band(161), qmi.Band(250))
	}
	bands := qmi.RFBands{{Radio: qmi.RadioLTE, Band: b3, Channel: 1300}, {Radio: qmi.Radio5GNR, Band: n78, Channel: 0}}
	got, err := qmi.ParseRFBands(&qmi.Message{TLVs: bands.TLVs()})
	if err != nil || len(got) != 2 || got[1] != bands[1] {
		t.Errorf("RF bands: %+v, %v", got, err)
	}
	ca := qmi.CAInfo{PCell: &qmi.Cell{PCI: 101, EARFCN: 1300, Bandwidth: 5, Band: b3},
		SCells: []qmi.Cell{{PCI: 7, EARFCN: 3050, Bandwidth: 3, Band: 126, State: qmi.SCellActivated, Index: 1}}}
	gc, err := qmi.ParseCAInfo(&qmi.Message{TLVs: ca.TLVs()})
	if err != nil || *gc.PCell != *ca.PCell || len(gc.SCells) != 1 || gc.SCells[0] != ca.SCells[0] || gc.PCell.BandwidthMHz() != 20 {
		t.Errorf("CA info: %+v, %v", gc, err)
	}
	if _, err := qmi.ParseCAInfo(&qmi.Message{TLVs: []qmi.TLV{{Type: 0x15, Value: []byte{3, 1, 2}}}}); err == nil {
		t.Error("a truncated secondary cell list decoded")
	}
}

func FuzzOperatorName(f *testing.F) {
	f.Add(byte(0), byte(0), []byte{0xE8, 0x32, 0x9B, 0xFD, 0x46, 0x97, 0xD9, 0xEC, 0x37})
	f.Add(byte(1), byte(0), qmi.EncodeUCS2LE("中国移动"))
	f.Add(byte(0), byte(7), []byte{0x1B})
	f.Fuzz(func(t *testing.T, coding, spare byte, b []byte) {
		s, err := qmi.DecodeName(coding, b, int(spare))
		if err != nil {
			return
		}
		if coding == qmi.NameGSM7 {
			// What decodes re-encodes to a name that decodes the same.
			p, sp, ok := qmi.PackGSM7(s)
			if !ok {
				t.Fatalf("decoded %q does not re-encode", s)
			}
			// A trailing '@' that fills the last octet is indistinguishable
			// from padding when the spare-bit count is unknown (0).
			again, err := qmi.DecodeName(qmi.NameGSM7, p, sp)
			if err != nil || (again != s && !(sp == 0 && again+"@" == s)) {
				t.Fatalf("%q re-decodes as %q, %v", s, again, err)
			}
		}
		m := &qmi.Message{TLVs: []qmi.TLV{{Type: 0x12, Value: append([]byte{1, coding, 0, spare, 0, byte(len(b))}, append(b, 0)...)}}}
		if o, err := qmi.ParseOperatorName(m); err == nil && len(o.PLMNNames) == 1 {
			o.PLMNNames[0].Decode()
		}
	})
}

func FuzzNASRadio(f *testing.F) {
	ca := qmi.CAInfo{PCell: &qmi.Cell{PCI: 1, Band: 122}, SCells: []qmi.Cell{{PCI: 2, Band: 126}}}
	bands := qmi.RFBands{{Radio: qmi.RadioLTE, Band: 122}}
	seedTLVs(f, &qmi.Message{TLVs: ca.TLVs()}, &qmi.Message{TLVs: bands.TLVs()})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceNAS, qmi.NASGetLTECphyCAInfo, data)
		if c, err := qmi.ParseCAInfo(m); err == nil {
			if again, err := qmi.ParseCAInfo(&qmi.Message{TLVs: c.TLVs()}); err != nil || len(again.SCells) != len(c.SCells) {
				t.Fatalf("CA info does not round-trip: %v", err)
			}
		}
		if b, err := qmi.ParseRFBands(m); err == nil {
			if again, err := qmi.ParseRFBands(&qmi.Message{TLVs: b.TLVs()}); err != nil || len(again) != len(b) {
				t.Fatalf("RF bands do not round-trip: %v", err)
			}
		}
		qmi.ParseOperatorName(m)
		qmi.ParseSignalInfo(m)
	})
}
