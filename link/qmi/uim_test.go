package qmi_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
)

// TestUIMCodec: every UIM codec decodes what it encodes; truncated and
// malformed TLVs are errors naming the field, never partial values.
func TestUIMCodec(t *testing.T) {
	cs := qmi.CardStatus{IndexGWPrimary: 0, Index1xPrimary: 0xFFFF, IndexGWSecondary: 0xFFFF, Index1xSecondary: 0xFFFF,
		Cards: []qmi.Card{{State: qmi.CardPresent, UPINState: qmi.PINNotInitialized, Apps: []qmi.App{{
			Type: qmi.AppTypeUSIM, State: uint8(qmi.AppReady), AID: []byte{0xa0, 0, 0, 0, 0x87}, PIN1State: qmi.PINEnabledVerified,
			PIN1Retries: 3, PUK1Retries: 10}}}}}
	if got, err := qmi.ParseCardStatus(response(t, qmi.ServiceUIM, qmi.UIMGetCardStatus, cs.TLVs())); err != nil || !reflect.DeepEqual(got, cs) {
		t.Errorf("card status %+v, %v", got, err)
	}
	if got, err := qmi.ParseVerifyPIN((&qmi.VerifyPIN{SessionType: 1, AID: []byte{1, 2}, ID: qmi.PIN1, PIN: "0000"}).Request()); err != nil || got.PIN != "0000" || got.SessionType != 1 || !bytes.Equal(got.AID, []byte{1, 2}) {
		t.Errorf("verify PIN %+v, %v", got, err)
	}
	// Unblock PIN: TLV 0x02 = {1, 8, "12345678", 4, "4321"}.
	ub := (&qmi.UnblockPIN{ID: qmi.PIN1, PUK: "12345678", NewPIN: "4321"}).Request()
	if v, _ := ub.Get(0x02); string(v) != "\x01\x0812345678\x044321" || ub.ID != 0x0027 {
		t.Errorf("unblock PIN TLV 0x02 %q", v)
	}
	if got, err := qmi.ParseUnblockPIN(ub); err != nil || got.PUK != "12345678" || got.NewPIN != "4321" || got.ID != qmi.PIN1 {
		t.Errorf("unblock PIN %+v, %v", got, err)
	}
	_, err := qmi.ParseCardStatus(withTLVs(qmi.ServiceUIM, qmi.UIMGetCardStatus, qmi.TLV{Type: 0x10, Value: []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 9}}))
	wantMalformed(t, "card status app count beyond TLV", err, "needs 1")
}

// FuzzUIM: card status (nested counted arrays), Verify PIN request and
// retries.
func FuzzUIM(f *testing.F) {
	cs := qmi.CardStatus{Cards: []qmi.Card{{State: qmi.CardPresent, Apps: []qmi.App{{Type: 2, AID: []byte{1, 2}}}}}}
	seedTLVs(f, reply(qmi.ServiceUIM, qmi.UIMGetCardStatus, cs.TLVs()), (&qmi.VerifyPIN{ID: qmi.PIN1, PIN: "1234"}).Request(),
		(&qmi.UnblockPIN{ID: qmi.PIN1, PUK: "12345678", NewPIN: "4321"}).Request())
	f.Fuzz(func(t *testing.T, data []byte) {
		m := tlvArea(qmi.ServiceUIM, qmi.UIMGetCardStatus, data)
		if c, err := qmi.ParseCardStatus(m); err == nil {
			back, err := qmi.ParseCardStatus(reply(qmi.ServiceUIM, 0, c.TLVs()))
			if err != nil || !reflect.DeepEqual(normalCards(back), normalCards(c)) {
				t.Fatalf("card status %+v re-decodes to %+v, %v", c, back, err)
			}
		}
		if v, err := qmi.ParseVerifyPIN(m); err == nil {
			back, err := qmi.ParseVerifyPIN(v.Request())
			if err != nil || back.PIN != v.PIN || back.ID != v.ID || !bytes.Equal(back.AID, v.AID) {
				t.Fatalf("verify PIN %+v re-decodes to %+v, %v", v, back, err)
			}
		}
		if u, err := qmi.ParseUnblockPIN(m); err == nil {
			back, err := qmi.ParseUnblockPIN(u.Request())
			if err != nil || back.PUK != u.PUK || back.NewPIN != u.NewPIN || back.ID != u.ID || !bytes.Equal(back.AID, u.AID) {
				t.Fatalf("unblock PIN %+v re-decodes to %+v, %v", u, back, err)
			}
		}
		_, _, _ = qmi.ParseRetries(m)
	})
}

func normalCards(c qmi.CardStatus) qmi.CardStatus {
	for i := range c.Cards {
		for j := range c.Cards[i].Apps {
			if len(c.Cards[i].Apps[j].AID) == 0 {
				c.Cards[i].Apps[j].AID = nil
			}
		}
	}
	return c
}
