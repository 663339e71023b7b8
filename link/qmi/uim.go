package qmi

// UIM, the SIM card service (card status and PIN): its message IDs and
// codecs.

// UIM message IDs (libqmi data/qmi-service-uim.json).
const (
	UIMVerifyPIN     uint16 = 0x0026
	UIMUnblockPIN    uint16 = 0x0027
	UIMGetCardStatus uint16 = 0x002F
)

var uimMessages = map[uint16]string{UIMVerifyPIN: "Verify PIN", UIMUnblockPIN: "Unblock PIN", UIMGetCardStatus: "Get Card Status"}

// CardState is a UIM card's state.
type CardState uint8

// Card states.
const (
	CardAbsent  CardState = 0
	CardPresent CardState = 1
	CardError   CardState = 2
)

// PINState is a UIM PIN's state (QmiUimPinState).
type PINState uint8

// PIN states.
const (
	PINNotInitialized     PINState = 0
	PINEnabledNotVerified PINState = 1
	PINEnabledVerified    PINState = 2
	PINDisabled           PINState = 3
	PINBlocked            PINState = 4
	PINPermanentlyBlocked PINState = 5
)

// AppState is a UIM application's state (QmiUimCardApplicationState).
type AppState uint8

// Application states.
const (
	AppUnknown     AppState = 0
	AppDetected    AppState = 1
	AppPINRequired AppState = 2
	AppPUKRequired AppState = 3
	AppPIN1Blocked AppState = 5
	AppIllegal     AppState = 6
	AppReady       AppState = 7
)

// AppTypeUSIM is the application type of a USIM.
const AppTypeUSIM = 2

// App is one application of a card.
type App struct {
	Type, State                       uint8
	PersoState, PersoFeature          uint8
	PersoRetries, PersoUnblockRetries uint8
	AID                               []byte
	UPINReplacesPIN1                  bool
	PIN1State                         PINState
	PIN1Retries, PUK1Retries          uint8
	PIN2State                         PINState
	PIN2Retries, PUK2Retries          uint8
}

// Card is one card of Get Card Status.
type Card struct {
	State                    CardState
	UPINState                PINState
	UPINRetries, UPUKRetries uint8
	Error                    uint8
	Apps                     []App
}

// CardStatus is UIM Get Card Status's TLV 0x10.
type CardStatus struct {
	IndexGWPrimary, Index1xPrimary, IndexGWSecondary, Index1xSecondary uint16
	Cards                                                              []Card
}

// TLVs encodes the response TLV 0x10.
func (c *CardStatus) TLVs() []TLV {
	v := le.AppendUint16(nil, c.IndexGWPrimary)
	v = le.AppendUint16(v, c.Index1xPrimary)
	v = le.AppendUint16(v, c.IndexGWSecondary)
	v = le.AppendUint16(v, c.Index1xSecondary)
	v = append(v, byte(len(c.Cards)))
	for _, cd := range c.Cards {
		v = append(v, byte(cd.State), byte(cd.UPINState), cd.UPINRetries, cd.UPUKRetries, cd.Error, byte(len(cd.Apps)))
		for _, a := range cd.Apps {
			v = append(v, a.Type, a.State, a.PersoState, a.PersoFeature, a.PersoRetries, a.PersoUnblockRetries, byte(len(a.AID)))
			v = append(v, a.AID...)
			up := byte(0)
			if a.UPINReplacesPIN1 {
				up = 1
			}
			v = append(v, up, byte(a.PIN1State), a.PIN1Retries, a.PUK1Retries, byte(a.PIN2State), a.PIN2Retries, a.PUK2Retries)
		}
	}
	return []TLV{{Type: 0x10, Value: v}}
}

// ParseCardStatus decodes Get Card Status. Counts are bounded by the
// TLV's length: every element takes bytes.
func ParseCardStatus(m *Message) (CardStatus, error) {
	var c CardStatus
	r, ok := tlvReader(m, 0x10)
	if !ok {
		return c, missing(m, 0x10, "card status")
	}
	c.IndexGWPrimary, c.Index1xPrimary = r.u16("index GW primary"), r.u16("index 1x primary")
	c.IndexGWSecondary, c.Index1xSecondary = r.u16("index GW secondary"), r.u16("index 1x secondary")
	nc := int(r.u8("card count"))
	for i := 0; i < nc && r.err == nil; i++ {
		cd := Card{State: CardState(r.u8("card state")), UPINState: PINState(r.u8("UPIN state")),
			UPINRetries: r.u8("UPIN retries"), UPUKRetries: r.u8("UPUK retries"), Error: r.u8("error code")}
		na := int(r.u8("application count"))
		for j := 0; j < na && r.err == nil; j++ {
			a := App{Type: r.u8("type"), State: r.u8("state"), PersoState: r.u8("personalization state"),
				PersoFeature: r.u8("personalization feature"), PersoRetries: r.u8("personalization retries"),
				PersoUnblockRetries: r.u8("personalization unblock retries")}
			a.AID = append([]byte(nil), r.bytes8("AID")...)
			a.UPINReplacesPIN1 = r.u8("UPIN replaces PIN1") != 0
			a.PIN1State, a.PIN1Retries, a.PUK1Retries = PINState(r.u8("PIN1 state")), r.u8("PIN1 retries"), r.u8("PUK1 retries")
			a.PIN2State, a.PIN2Retries, a.PUK2Retries = PINState(r.u8("PIN2 state")), r.u8("PIN2 retries"), r.u8("PUK2 retries")
			if r.err == nil {
				cd.Apps = append(cd.Apps, a)
			}
		}
		if r.err == nil {
			c.Cards = append(c.Cards, cd)
		}
	}
	return c, r.done(true)
}

// UIM session types (QmiUimSessionType).
const (
	SessionPrimaryGW = 0
	SessionCardSlot1 = 6
)

// PINID names a PIN (QmiUimPinId).
type PINID uint8

// PIN IDs.
const (
	PIN1 PINID = 1
	PIN2 PINID = 2
	UPIN PINID = 3
)

// VerifyPIN is UIM Verify PIN's request: the session (TLV 0x01: u8 type,
// u8-counted AID) and the PIN (TLV 0x02: u8 ID, u8-prefixed value).
type VerifyPIN struct {
	SessionType uint8
	AID         []byte
	ID          PINID
	PIN         string
}

// Request encodes the request.
func (v *VerifyPIN) Request() *Message {
	s := append([]byte{v.SessionType, byte(len(v.AID))}, v.AID...)
	p := append([]byte{byte(v.ID), byte(len(v.PIN))}, v.PIN...)
	return NewRequest(ServiceUIM, UIMVerifyPIN).Add(0x01, s).Add(0x02, p)
}

// ParseVerifyPIN decodes a Verify PIN request.
func ParseVerifyPIN(m *Message) (VerifyPIN, error) {
	var v VerifyPIN
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return v, missing(m, 0x01, "session")
	}
	v.SessionType = r.u8("session type")
	v.AID = append([]byte(nil), r.bytes8("AID")...)
	if err := r.done(true); err != nil {
		return v, err
	}
	r, ok = tlvReader(m, 0x02)
	if !ok {
		return v, missing(m, 0x02, "PIN info")
	}
	v.ID = PINID(r.u8("PIN ID"))
	v.PIN = r.str8("PIN value")
	return v, r.done(true)
}

// UnblockPIN is UIM Unblock PIN's request: the session (TLV 0x01, as
// Verify PIN) and TLV 0x02 {u8 PIN ID, u8-prefixed PUK, u8-prefixed new
// PIN} (libqmi data/qmi-service-uim.json "Unblock PIN").
type UnblockPIN struct {
	SessionType uint8
	AID         []byte
	ID          PINID
	PUK, NewPIN string
}

// Request encodes the request.
func (u *UnblockPIN) Request() *Message {
	s := append([]byte{u.SessionType, byte(len(u.AID))}, u.AID...)
	p := append([]byte{byte(u.ID), byte(len(u.PUK))}, u.PUK...)
	p = append(append(p, byte(len(u.NewPIN))), u.NewPIN...)
	return NewRequest(ServiceUIM, UIMUnblockPIN).Add(0x01, s).Add(0x02, p)
}

// ParseUnblockPIN decodes an Unblock PIN request.
func ParseUnblockPIN(m *Message) (UnblockPIN, error) {
	var u UnblockPIN
	r, ok := tlvReader(m, 0x01)
	if !ok {
		return u, missing(m, 0x01, "session")
	}
	u.SessionType = r.u8("session type")
	u.AID = append([]byte(nil), r.bytes8("AID")...)
	if err := r.done(true); err != nil {
		return u, err
	}
	r, ok = tlvReader(m, 0x02)
	if !ok {
		return u, missing(m, 0x02, "PIN info")
	}
	u.ID = PINID(r.u8("PIN ID"))
	u.PUK = r.str8("PUK value")
	u.NewPIN = r.str8("new PIN value")
	return u, r.done(true)
}

// Retries is Verify PIN's and Unblock PIN's response TLV 0x10 (present
// also on failure).
type Retries struct {
	Verify, Unblock uint8
}

// TLV encodes the retries.
func (r Retries) TLV() TLV { return TLV{Type: 0x10, Value: []byte{r.Verify, r.Unblock}} }

// ParseRetries decodes Verify PIN's retries (ok false when absent).
func ParseRetries(m *Message) (Retries, bool, error) {
	r, ok := tlvReader(m, 0x10)
	if !ok {
		return Retries{}, false, nil
	}
	v := Retries{Verify: r.u8("verify retries"), Unblock: r.u8("unblock retries")}
	return v, true, r.done(true)
}
