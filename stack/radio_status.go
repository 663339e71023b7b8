package stack

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
)

// RadioStatus is what the modem says of its radio and SIM, in the same
// words on MBIM and QMI: `mhictl status` prints it and mhiproxy exports
// it as gauges. A field the modem did not answer stays empty.
type RadioStatus struct {
	// OperatorName is the network's name for itself as the modem
	// decoded it (QMI: NAS Get Operator Name, GSM 7-bit or UCS2 per
	// 3GPP TS 23.038; MBIM: REGISTER_STATE's ProviderName).
	OperatorName string
	// RAT is the radio access technology: "lte", "nr" or "lte+nr"
	// (EN-DC) on QMI, and on MBIM when the modem reports RSRP per RAT
	// (MBIMEx 2.0) or NR cells (3.0); otherwise on MBIM the highest available data class
	// ("5G-SA").
	RAT string
	// Bands are the bands in use ("B3", "n78"). On MBIM they are the
	// serving cells' in BASE_STATIONS_INFO: the LTE cell's from its
	// EARFCN, the NR cells' (MBIMEx 3.0) from their NR-ARFCN, where
	// overlapping NR bands resolve to the narrowest
	// (mbim.NRBandOfARFCN: n78, not n77).
	Bands []string
	// Carriers are the component carriers, the primary cell first: on
	// QMI the LTE ones; on MBIM a serving cell each (the LTE one, then
	// the NR ones of MBIMEx 3.0), without bandwidth.
	Carriers []Carrier
	// LTE and NR are each RAT's signal (nil: not measured). On MBIM,
	// RSRP and SINR come from the MBIMEx 2.0 SIGNAL_STATE (1 dB and
	// 0.5 dB steps), LTE's RSRQ from BASE_STATIONS_INFO's LTE cell and
	// NR's RSRQ (0.5 dB steps) from its first NR cell (MBIMEx 3.0).
	LTE, NR *Signal
	// SIM is the SIM's state: "ready", "pin-required", "puk-required",
	// "blocked", "absent", "error" or "not-initialized".
	SIM string
}

// Carrier is one component carrier.
type Carrier struct {
	Band         string
	PCI          uint16
	Channel      uint32 // EARFCN (LTE) or NR-ARFCN (bands "n…")
	BandwidthMHz float64
	Primary      bool
	State        string // secondary cells: "active", "deactivated", "deconfigured"
}

// Signal is a RAT's signal: RSRP (dBm), RSRQ (dB, when HasRSRQ), SINR
// (dB).
type Signal struct {
	RSRP, RSRQ, SINR float64
	HasRSRQ          bool
}

// RadioStatus asks the modem's control client (QMI or MBIM) for its
// radio status. It may be called from any goroutine while the stack is
// open; on QMI it borrows a NAS and a UIM client ID for the call.
func (s *Stack) RadioStatus(ctx context.Context) (RadioStatus, error) {
	switch {
	case s.qmi != nil:
		return qmiRadioStatus(ctx, s.qmi)
	case s.mbim != nil:
		var r RadioStatus
		cl := s.mbim
		reg, err := cl.RegisterState(ctx)
		if err != nil {
			return r, fmt.Errorf("REGISTER_STATE: %w", err)
		}
		r.OperatorName = reg.ProviderName
		if ps, err := cl.PacketService(ctx); err == nil && ps.HighestAvailableDataClass != 0 {
			r.RAT = ps.HighestDataClass().String()
		}
		if rs, err := cl.SubscriberReadyStatus(ctx); err == nil {
			r.SIM = mbimSIM(rs.ReadyState)
		}
		mbimRadio(ctx, cl, &r)
		return r, nil
	}
	return RadioStatus{}, fmt.Errorf("stack: no control client (a stack made with New)")
}

// mbimSIM says SUBSCRIBER_READY_STATUS's ready state in RadioStatus.SIM's
// words.
func mbimSIM(s mbim.ReadyState) string {
	switch s {
	case mbim.ReadyInitialized:
		return "ready"
	case mbim.ReadySIMNotInserted:
		return "absent"
	case mbim.ReadyBadSIM, mbim.ReadyFailure:
		return "error"
	case mbim.ReadyDeviceLocked:
		return "pin-required"
	}
	return s.String()
}

func qmiRadioStatus(ctx context.Context, c *qmi.Client) (RadioStatus, error) {
	var r RadioStatus
	cid, err := c.AllocateCID(ctx, qmi.ServiceNAS)
	if err != nil {
		return r, fmt.Errorf("QMI NAS: %w", err)
	}
	defer c.ReleaseCID(context.WithoutCancel(ctx), qmi.ClientID{Service: qmi.ServiceNAS, Client: cid})
	nas := qmi.NAS{ServiceClient: c.Service(qmi.ServiceNAS, cid)}
	ss, err := nas.ServingSystem(ctx)
	if err != nil {
		return r, err
	}
	var rats []string
	for _, ri := range ss.RadioInterfaces {
		switch ri {
		case qmi.RadioLTE:
			rats = append(rats, "lte")
		case qmi.Radio5GNR:
			rats = append(rats, "nr")
		default:
			rats = append(rats, ri.String())
		}
	}
	r.RAT = strings.Join(rats, "+")
	if p := ss.PLMN; p != nil {
		r.OperatorName = p.Description
	}
	// The rest is optional: older firmware lacks some of these messages,
	// and an unregistered modem answers them with an error.
	if on, err := nas.OperatorName(ctx); err == nil {
		for _, p := range on.PLMNNames {
			if name, err := p.Decode(); err == nil && name != "" {
				r.OperatorName = name
				break
			}
		}
	}
	if si, err := nas.SignalInfo(ctx); err == nil {
		if l := si.LTE; l != nil {
			r.LTE = &Signal{RSRP: float64(l.RSRP), RSRQ: float64(l.RSRQ), HasRSRQ: true, SINR: float64(l.SNR) / 10}
		}
		if n := si.NR; n != nil && n.RSRP != qmiUnavailable {
			r.NR = &Signal{RSRP: float64(n.RSRP), SINR: float64(n.SNR) / 10}
			if n.HasRSRQ && n.RSRQ != qmiUnavailable {
				r.NR.RSRQ, r.NR.HasRSRQ = float64(n.RSRQ), true
			}
		}
	}
	if bands, err := nas.RFBands(ctx); err == nil {
		for _, b := range bands {
			r.Bands = append(r.Bands, b.Band.String())
		}
	}
	if ca, err := nas.CAInfo(ctx); err == nil {
		if p := ca.PCell; p != nil {
			r.Carriers = append(r.Carriers, Carrier{Band: p.Band.String(), PCI: p.PCI, Channel: uint32(p.EARFCN), BandwidthMHz: p.BandwidthMHz(), Primary: true})
		}
		for _, sc := range ca.SCells {
			r.Carriers = append(r.Carriers, Carrier{Band: sc.Band.String(), PCI: sc.PCI, Channel: uint32(sc.EARFCN), BandwidthMHz: sc.BandwidthMHz(), State: sc.State.String()})
		}
	}
	r.SIM = qmiSIM(ctx, c)
	return r, nil
}

// qmiUnavailable is Get Signal Info's "no value" (−32768).
const qmiUnavailable = -32768

// qmiSIM reads the SIM's state from UIM Get Card Status (the first
// card's first application); "" when UIM does not answer.
func qmiSIM(ctx context.Context, c *qmi.Client) string {
	cid, err := c.AllocateCID(ctx, qmi.ServiceUIM)
	if err != nil {
		return ""
	}
	defer c.ReleaseCID(context.WithoutCancel(ctx), qmi.ClientID{Service: qmi.ServiceUIM, Client: cid})
	cs, err := qmi.UIM{ServiceClient: c.Service(qmi.ServiceUIM, cid)}.CardStatus(ctx)
	if err != nil || len(cs.Cards) == 0 {
		return ""
	}
	card := cs.Cards[0]
	switch {
	case card.State == qmi.CardAbsent:
		return "absent"
	case card.State == qmi.CardError:
		return "error"
	case len(card.Apps) == 0:
		return "not-initialized"
	}
	switch qmi.AppState(card.Apps[0].State) {
	case qmi.AppReady:
		return "ready"
	case qmi.AppPINRequired:
		return "pin-required"
	case qmi.AppPUKRequired:
		return "puk-required"
	case qmi.AppPIN1Blocked:
		return "blocked"
	case qmi.AppIllegal:
		return "error"
	}
	return "not-initialized"
}

// mbimRadio adds what the MBIM extensions say: RSRP and SNR per RAT
// (MBIMEx 2.0 SIGNAL_STATE, MBIMEx negotiated here if the session has
// not yet) and the serving cells (BASE_STATIONS_INFO: LTE, and NR from
// MBIMEx 3.0). A modem without them leaves the fields empty.
func mbimRadio(ctx context.Context, cl *mbim.Client, r *RadioStatus) {
	if v, err := cl.NegotiateMBIMEx(ctx); err != nil || v < mbim.MBIMEx2 {
		return
	}
	if sig, err := cl.SignalState(ctx); err == nil {
		for _, e := range sig.RSRPSNR {
			rsrp, ok1 := e.RSRPdBm()
			snr, ok2 := e.SNRdB()
			if !ok1 || !ok2 {
				continue
			}
			switch {
			case e.SystemType&mbim.DataClassLTE != 0 && r.LTE == nil:
				r.LTE = &Signal{RSRP: rsrp, SINR: snr}
			case e.SystemType&(mbim.DataClass5GNSA|mbim.DataClass5GSA) != 0 && r.NR == nil:
				r.NR = &Signal{RSRP: rsrp, SINR: snr}
			}
		}
	}
	if bs, err := cl.BaseStationsInfo(ctx); err == nil {
		mbimLTECell(bs.LTE, r)
		mbimNRCells(bs.NR, r)
	}
	switch {
	case r.LTE != nil && r.NR != nil:
		r.RAT = "lte+nr"
	case r.LTE != nil:
		r.RAT = "lte"
	case r.NR != nil:
		r.RAT = "nr"
	}
}

// mbimLTECell adds the LTE serving cell: LTE's RSRQ, its band and the
// primary carrier.
func mbimLTECell(c *mbim.LTEServingCell, r *RadioStatus) {
	if c == nil {
		return
	}
	if r.LTE != nil && c.RSRQ != -1 { // 0xFFFFFFFF: not measured
		r.LTE.RSRQ, r.LTE.HasRSRQ = float64(c.RSRQ), true
	}
	if c.EARFCN == mbim.Unknown {
		return
	}
	band := fmt.Sprintf("earfcn-%d", c.EARFCN)
	if b, ok := mbim.LTEBandOfEARFCN(c.EARFCN); ok {
		band = fmt.Sprintf("B%d", b)
	}
	r.Bands = append(r.Bands, band)
	pci := uint16(0)
	if c.PCI <= 503 { // TS 36.211 §6.11: 504 physical cell IDs
		pci = uint16(c.PCI)
	}
	r.Carriers = append(r.Carriers, Carrier{Band: band, PCI: pci, Channel: c.EARFCN, Primary: true})
}

// mbimNRCells adds the NR serving cells (MBIMEx 3.0): the first measured
// cell's RSRQ (and its RSRP and SINR when SIGNAL_STATE had no NR entry),
// each cell's band and a carrier each, the first primary when there is
// no LTE cell (standalone NR).
func mbimNRCells(cells []mbim.NRServingCell, r *RadioStatus) {
	for _, c := range cells {
		rsrp, okP := c.Signal.RSRPdBm()
		if !okP {
			continue
		}
		if r.NR == nil {
			sinr, ok := c.Signal.SINRdB()
			if !ok {
				continue
			}
			r.NR = &Signal{RSRP: rsrp, SINR: sinr}
		}
		if rsrq, ok := c.Signal.RSRQdB(); ok {
			r.NR.RSRQ, r.NR.HasRSRQ = rsrq, true
		}
		break
	}
	primary := len(r.Carriers) == 0
	for _, c := range cells {
		if c.NRARFCN == mbim.Unknown {
			continue
		}
		band := fmt.Sprintf("nrarfcn-%d", c.NRARFCN)
		if b, ok := mbim.NRBandOfARFCN(c.NRARFCN); ok {
			band = fmt.Sprintf("n%d", b)
		}
		if !slices.Contains(r.Bands, band) {
			r.Bands = append(r.Bands, band)
		}
		pci := uint16(0)
		if c.PCI <= 1007 { // TS 38.211 §7.4.2.1: 1008 physical cell IDs
			pci = uint16(c.PCI)
		}
		r.Carriers = append(r.Carriers, Carrier{Band: band, PCI: pci, Channel: c.NRARFCN, Primary: primary})
		primary = false
	}
}
