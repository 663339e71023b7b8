package mbim

import "context"

// Typed BASIC_CONNECT calls. Each returns the decoded answer or an error
// wrapping the MBIM status (*CommandError), the transport failure or
// ErrMalformed.

func (c *Client) basic(ctx context.Context, cid uint32, typ CommandType, buf []byte) ([]byte, error) {
	return c.Command(ctx, ServiceBasicConnect, cid, typ, buf)
}

// DeviceCaps queries DEVICE_CAPS.
func (c *Client) DeviceCaps(ctx context.Context) (DeviceCaps, error) {
	b, err := c.basic(ctx, CIDDeviceCaps, Query, nil)
	if err != nil {
		return DeviceCaps{}, err
	}
	return ParseDeviceCaps(b)
}

// DeviceServices queries DEVICE_SERVICES.
func (c *Client) DeviceServices(ctx context.Context) (DeviceServices, error) {
	b, err := c.basic(ctx, CIDDeviceServices, Query, nil)
	if err != nil {
		return DeviceServices{}, err
	}
	return ParseDeviceServices(b)
}

// SubscriberReadyStatus queries SUBSCRIBER_READY_STATUS.
func (c *Client) SubscriberReadyStatus(ctx context.Context) (SubscriberReadyStatus, error) {
	b, err := c.basic(ctx, CIDSubscriberReadyStatus, Query, nil)
	if err != nil {
		return SubscriberReadyStatus{}, err
	}
	if c.MBIMEx() >= MBIMEx3 {
		return ParseSubscriberReadyStatusV3(b)
	}
	return ParseSubscriberReadyStatus(b)
}

// PIN queries the PIN state.
func (c *Client) PIN(ctx context.Context) (PINInfo, error) {
	b, err := c.basic(ctx, CIDPIN, Query, nil)
	if err != nil {
		return PINInfo{}, err
	}
	return ParsePINInfo(b)
}

// EnterPIN enters pin for typ (usually PINTypePIN1) and returns the PIN
// state after it. A wrong PIN fails with the device's status (usually
// FAILURE); the remaining attempts are in the returned info when the
// device sends it.
func (c *Client) EnterPIN(ctx context.Context, typ PINType, pin string) (PINInfo, error) {
	return c.setPIN(ctx, PINRequest{Type: typ, Operation: PINEnter, PIN: pin})
}

// EnterPUK unblocks a SIM that asks for PUK1: PIN set {PUK1, enter, Pin
// = the PUK, NewPin = the new PIN1} (MBIM 1.0 MBIM_CID_PIN; ModemManager
// src/mm-sim-mbim.c sends the same). Errors as EnterPIN.
func (c *Client) EnterPUK(ctx context.Context, puk, newPIN string) (PINInfo, error) {
	return c.setPIN(ctx, PINRequest{Type: PINTypePUK1, Operation: PINEnter, PIN: puk, NewPIN: newPIN})
}

func (c *Client) setPIN(ctx context.Context, req PINRequest) (PINInfo, error) {
	b, err := c.basic(ctx, CIDPIN, Set, req.Encode())
	if err != nil {
		if info, perr := ParsePINInfo(b); perr == nil {
			return info, err
		}
		return PINInfo{}, err
	}
	return ParsePINInfo(b)
}

// RadioState queries RADIO_STATE.
func (c *Client) RadioState(ctx context.Context) (RadioState, error) {
	b, err := c.basic(ctx, CIDRadioState, Query, nil)
	if err != nil {
		return RadioState{}, err
	}
	return ParseRadioState(b)
}

// SetRadioState switches the software radio state.
func (c *Client) SetRadioState(ctx context.Context, on bool) (RadioState, error) {
	b, err := c.basic(ctx, CIDRadioState, Set, EncodeRadioStateSet(on))
	if err != nil {
		return RadioState{}, err
	}
	return ParseRadioState(b)
}

// RegisterState queries REGISTER_STATE.
func (c *Client) RegisterState(ctx context.Context) (RegisterState, error) {
	b, err := c.basic(ctx, CIDRegisterState, Query, nil)
	return parseWithNwError(b, err, ParseRegisterState, func(s RegisterState) NwError { return s.NwError })
}

// PacketService queries PACKET_SERVICE.
func (c *Client) PacketService(ctx context.Context) (PacketService, error) {
	b, err := c.basic(ctx, CIDPacketService, Query, nil)
	return parseWithNwError(b, err, c.parsePacketService, func(s PacketService) NwError { return s.NwError })
}

// parsePacketService decodes PACKET_SERVICE in the layout agreed (the 1.0
// parser reads 2.0's fields it needs).
func (c *Client) parsePacketService(b []byte) (PacketService, error) {
	if c.MBIMEx() >= MBIMEx3 {
		return ParsePacketServiceV3(b)
	}
	return ParsePacketService(b)
}

// SetPacketService attaches or detaches.
func (c *Client) SetPacketService(ctx context.Context, a PacketServiceAction) (PacketService, error) {
	b, err := c.basic(ctx, CIDPacketService, Set, EncodePacketServiceSet(a))
	return parseWithNwError(b, err, c.parsePacketService, func(s PacketService) NwError { return s.NwError })
}

// Connect activates (or, with Activate false, deactivates) a context.
// A refusal is a *CommandError carrying the 3GPP cause, so that
// errors.Is(err, ErrBadAPN) holds for "missing or unknown APN".
//
// A zero req.ContextType is sent as ContextTypeInternet, the context
// a data session needs; Encode itself writes the UUID it is given
// (zero is MBIMContextTypeNone) so that parse and encode stay inverse.
func (c *Client) Connect(ctx context.Context, req ConnectRequest) (ContextState, error) {
	if req.ContextType == (UUID{}) {
		req.ContextType = ContextTypeInternet
	}
	set := req.Encode()
	if c.MBIMEx() >= MBIMEx3 {
		set = req.EncodeV3()
	}
	b, err := c.basic(ctx, CIDConnect, Set, set)
	return parseWithNwError(b, err, c.ParseContextState, func(s ContextState) NwError { return s.NwError })
}

// Disconnect deactivates session.
func (c *Client) Disconnect(ctx context.Context, session uint32) (ContextState, error) {
	return c.Connect(ctx, ConnectRequest{SessionID: session})
}

// ConnectState queries CONNECT for session.
func (c *Client) ConnectState(ctx context.Context, session uint32) (ContextState, error) {
	q := EncodeConnectQuery(session)
	if c.MBIMEx() >= MBIMEx3 {
		q = q[:4] // the 3.0 query is SessionId alone
	}
	b, err := c.basic(ctx, CIDConnect, Query, q)
	return parseWithNwError(b, err, c.ParseContextState, func(s ContextState) NwError { return s.NwError })
}

// ParseContextState decodes a CONNECT answer or indication in the
// layout agreed (MBIMEx).
func (c *Client) ParseContextState(b []byte) (ContextState, error) {
	if c.MBIMEx() >= MBIMEx3 {
		return ParseContextStateV3(b)
	}
	return ParseContextState(b)
}

// IPConfiguration queries IP_CONFIGURATION for session.
func (c *Client) IPConfiguration(ctx context.Context, session uint32) (IPConfig, error) {
	b, err := c.basic(ctx, CIDIPConfiguration, Query, EncodeIPConfigurationQuery(session))
	if err != nil {
		return IPConfig{}, err
	}
	return ParseIPConfig(b)
}

// SubscribeIndications sets DEVICE_SERVICE_SUBSCRIBE_LIST: from then on
// the function sends only the listed indications.
func (c *Client) SubscribeIndications(ctx context.Context, list []EventSubscription) ([]EventSubscription, error) {
	b, err := c.basic(ctx, CIDDeviceServiceSubscribeList, Set, EncodeSubscribeList(list))
	if err != nil {
		return nil, err
	}
	return ParseSubscribeList(b)
}

// parseWithNwError decodes an answer; on a failed command whose buffer
// still decodes it copies the 3GPP cause into the *CommandError.
func parseWithNwError[T any](b []byte, err error, parse func([]byte) (T, error), nw func(T) NwError) (T, error) {
	if err != nil {
		var zero T
		if ce, ok := err.(*CommandError); ok && len(b) > 0 {
			if v, perr := parse(b); perr == nil {
				ce.NwError = nw(v)
				return v, ce
			}
		}
		return zero, err
	}
	return parse(b)
}
