package qmi_test

import (
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestDMSCodec: every DMS codec decodes what it encodes.
func TestDMSCodec(t *testing.T) {
	ids := qmi.IDs{IMEI: "867929060000017", IMEISV: "01"}
	if got := qmi.ParseIDs(response(t, qmi.ServiceDMS, qmi.DMSGetIDs, ids.TLVs())); got != ids {
		t.Errorf("IDs %v", got)
	}
	if got, err := qmi.ParseOperatingMode(qmi.SetOperatingModeRequest(qmi.ModeLowPower)); err != nil || got != qmi.ModeLowPower {
		t.Errorf("operating mode %v, %v", got, err)
	}
}

// FuzzDMS: Get IDs, strings, operating mode.
func FuzzDMS(f *testing.F) {
	seedTLVs(f, reply(qmi.ServiceDMS, qmi.DMSGetIDs, qmi.IDs{IMEI: "1", ESN: "2"}.TLVs()),
		(&qmi.FoxconnFCCAuth{V2: true, Magic: "salt0123", Num: 48}).Request(), (&qmi.FoxconnFCCAuth{}).Request())
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceDMS, qmi.DMSGetIDs, data)
		_ = qmi.ParseIDs(m)
		_, _ = qmi.ParseString(m)
		_, _ = qmi.ParseOperatingMode(m)
		_, _ = qmi.ParseFoxconnVersionType(m)
		if a, err := qmi.ParseFoxconnFCCAuth(m); err == nil {
			back, err := qmi.ParseFoxconnFCCAuth(a.Request())
			if err != nil || back != a {
				t.Fatalf("FCC authentication %+v re-decodes to %+v, %v", a, back, err)
			}
		}
	})
}

// TestFoxconnFCCAuthV1AndV2Encode: v1 is TLV 0x01 = one byte; v2 is
// TLV 0x01 = the string without a length prefix and TLV 0x02 = the
// number (libqmi "Foxconn Set FCC Authentication" and "v2").
func TestFoxconnFCCAuthV1AndV2Encode(t *testing.T) {
	v1, _ := (&qmi.FoxconnFCCAuth{}).Request().Marshal()
	m, err := qmi.Parse(v1)
	if err != nil || m.ID != 0x5571 || len(m.TLVs) != 1 || m.TLVs[0].Type != 1 || string(m.TLVs[0].Value) != "\x00" {
		t.Fatalf("v1 %v, %v", m, err)
	}
	a := qmi.FoxconnFCCAuth{V2: true, Magic: "saltabc", Num: qmi.FoxconnFCCMagicNumber}
	got, err := qmi.ParseFoxconnFCCAuth(a.Request())
	if err != nil || got != a {
		t.Fatalf("v2 decodes to %+v, %v", got, err)
	}
	if v, _ := a.Request().Get(0x01); string(v) != "saltabc" {
		t.Errorf("v2 string TLV %q", v)
	}
}

// TestFoxconnFCCMagicFollowsTheScript: the v2 string is "salt" + MD5 hex
// of (MCFG version minus its last two fields, apps version, IMEI, "salt",
// "foxc"). The digest below is md5("T99W175.F0.1.0.0.9" + "APPS.1" +
// "867929060000017" + "salt" + "foxc"), computed with md5sum.
func TestFoxconnFCCMagicFollowsTheScript(t *testing.T) {
	got := qmi.FoxconnFCCMagic("T99W175.F0.1.0.0.9.GC.004", "APPS.1", "867929060000017")
	// echo -n T99W175.F0.1.0.0.9APPS.1867929060000017saltfoxc | md5sum
	const want = "salt" + "d81251e45264ce14abe52feeff83d061"
	if got != want {
		t.Errorf("magic %q, want %q", got, want)
	}
	if a, b := qmi.FoxconnFCCMagic("1.2", "a", "i"), qmi.FoxconnFCCMagic("1", "a", "i"); a == b {
		t.Error("a version with one dot lost a field")
	}
}
