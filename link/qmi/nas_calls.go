package qmi

import (
	"context"
	"fmt"
)

// NAS is a NAS client ID with typed calls:
//
//	cid, _ := c.AllocateCID(ctx, qmi.ServiceNAS)
//	nas := qmi.NAS{c.Service(qmi.ServiceNAS, cid)}
//	ss, err := nas.ServingSystem(ctx)
type NAS struct{ *ServiceClient }

func (n NAS) call(ctx context.Context, id uint16) (*Message, error) {
	if n.ServiceClient == nil || n.id.Service != ServiceNAS {
		return nil, fmt.Errorf("qmi: %s needs a NAS client", MessageName(ServiceNAS, id))
	}
	return n.Do(ctx, NewRequest(ServiceNAS, id))
}

// ServingSystem asks Get Serving System.
func (n NAS) ServingSystem(ctx context.Context) (ServingSystem, error) {
	r, err := n.call(ctx, NASGetServingSystem)
	if err != nil {
		return ServingSystem{}, err
	}
	return ParseServingSystem(r)
}

// SignalStrength asks Get Signal Strength (the RSSI of the radio in
// use, and per RAT in its optional TLVs).
func (n NAS) SignalStrength(ctx context.Context) (SignalStrength, error) {
	r, err := n.call(ctx, NASGetSignalStrength)
	if err != nil {
		return SignalStrength{}, err
	}
	return ParseSignalStrength(r)
}

// SignalInfo asks Get Signal Info (LTE and NR RSRP, RSRQ, SNR).
func (n NAS) SignalInfo(ctx context.Context) (SignalInfo, error) {
	r, err := n.call(ctx, NASGetSignalInfo)
	if err != nil {
		return SignalInfo{}, err
	}
	return ParseSignalInfo(r)
}

// OperatorName asks Get Operator Name (the names the network sent).
func (n NAS) OperatorName(ctx context.Context) (OperatorName, error) {
	r, err := n.call(ctx, NASGetOperatorName)
	if err != nil {
		return OperatorName{}, err
	}
	return ParseOperatorName(r)
}

// RFBands asks Get RF Band Information (the bands in use).
func (n NAS) RFBands(ctx context.Context) (RFBands, error) {
	r, err := n.call(ctx, NASGetRFBandInfo)
	if err != nil {
		return nil, err
	}
	return ParseRFBands(r)
}

// CAInfo asks Get LTE Cphy CA Info (LTE carrier aggregation).
func (n NAS) CAInfo(ctx context.Context) (CAInfo, error) {
	r, err := n.call(ctx, NASGetLTECphyCAInfo)
	if err != nil {
		return CAInfo{}, err
	}
	return ParseCAInfo(r)
}

// UIM is a UIM client ID with typed calls.
type UIM struct{ *ServiceClient }

// CardStatus asks Get Card Status.
func (u UIM) CardStatus(ctx context.Context) (CardStatus, error) {
	if u.ServiceClient == nil || u.id.Service != ServiceUIM {
		return CardStatus{}, fmt.Errorf("qmi: Get Card Status needs a UIM client")
	}
	r, err := u.Do(ctx, NewRequest(ServiceUIM, UIMGetCardStatus))
	if err != nil {
		return CardStatus{}, err
	}
	return ParseCardStatus(r)
}
