package stack

import (
	"context"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestFoxconnUnlockFallsBackToV1: as ModemManager's 105b script, when
// the v2 inputs cannot be read the v1 message (one byte 0) is sent; when
// they can, only v2 is.
func TestFoxconnUnlockFallsBackToV1(t *testing.T) {
	for _, c := range []struct {
		name       string
		versionsOK bool
		want       []qmi.FoxconnFCCAuth
	}{
		{"no versions", false, []qmi.FoxconnFCCAuth{{}}},
		{"v2", true, []qmi.FoxconnFCCAuth{{V2: true, Num: 48, Magic: qmi.FoxconnFCCMagic("FW.1.2.3.x.y", "APPS.1", "867929060000017")}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sent []qmi.FoxconnFCCAuth
			dms := func(_ context.Context, req *qmi.Message) (*qmi.Message, error) {
				switch req.ID {
				case qmi.DMSFoxconnGetFirmwareVersion:
					if !c.versionsOK {
						return req.Reply(qmi.ErrInvalidQMICommand), &qmi.Error{Service: qmi.ServiceDMS, ID: req.ID, Code: qmi.ErrInvalidQMICommand}
					}
					ty, _ := qmi.ParseFoxconnVersionType(req)
					v := map[qmi.FoxconnVersionType]string{qmi.FoxconnFirmwareMCFG: "FW.1.2.3.x.y", qmi.FoxconnApps: "APPS.1"}[ty]
					return req.Reply(0, qmi.TLV{Type: 1, Value: []byte(v)}), nil
				case qmi.DMSGetIDs:
					return req.Reply(0, qmi.IDs{IMEI: "867929060000017"}.TLVs()...), nil
				case qmi.DMSFoxconnSetFCCAuth:
					a, err := qmi.ParseFoxconnFCCAuth(req)
					if err != nil {
						t.Fatal(err)
					}
					sent = append(sent, a)
					return req.Reply(0), nil
				}
				t.Fatalf("unexpected %v", req)
				return nil, nil
			}
			if err := foxconnUnlock(context.Background(), dms); err != nil {
				t.Fatal(err)
			}
			if len(sent) != len(c.want) || sent[0] != c.want[0] {
				t.Fatalf("sent %+v, want %+v", sent, c.want)
			}
		})
	}
}
