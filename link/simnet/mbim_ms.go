package simnet

import (
	"math"

	"github.com/mhistack/mhistack/link/mbim"
)

// msExtensionsLocked answers MS_BASIC_CONNECT_EXTENSIONS: VERSION, which
// switches the function to the MBIMEx 2.0 or 3.0 layouts when the host
// offers them, and BASE_STATIONS_INFO, the serving cells from the
// network's cell (the state QMI's Get Signal Info and Get LTE Cphy CA
// Info read).
func (f *MBIMFunction) msExtensionsLocked(m *mbim.Message) (mbim.Status, []byte) {
	if m.CommandType != mbim.Query {
		return mbim.StatusNoDeviceSupport, nil
	}
	switch m.CID {
	case mbim.CIDMSVersion:
		q, err := mbim.ParseVersionInfo(m.Buffer)
		if err != nil {
			return mbim.StatusInvalidParameters, nil
		}
		// The function answers the highest version both sides
		// have.
		top := f.cfg.MaxMBIMEx
		if top == 0 {
			top = mbim.MBIMEx3
		}
		f.st.ex = mbim.MBIMEx1
		for _, v := range []mbim.Version{mbim.MBIMEx2, mbim.MBIMEx3} {
			if q.Extended >= v && top >= v {
				f.st.ex = v
			}
		}
		a := mbim.VersionInfo{MBIM: mbim.MBIMVersion1, Extended: f.st.ex}
		return mbim.StatusNone, a.Encode()
	case mbim.CIDMSBaseStationsInfo:
		if f.st.ex >= mbim.MBIMEx3 {
			if len(m.Buffer) < 24 {
				return mbim.StatusInvalidParameters, nil
			}
			return mbim.StatusNone, f.baseStations(true).EncodeV3()
		}
		if len(m.Buffer) < 20 {
			return mbim.StatusInvalidParameters, nil
		}
		return mbim.StatusNone, f.baseStations(false).Encode()
	}
	return mbim.StatusNoDeviceSupport, nil
}

// baseStations is BASE_STATIONS_INFO's answer: the LTE primary cell when
// the modem is registered on LTE and, in the 3.0 layout (v3), a serving
// cell per NR component carrier. Only the first NR carrier carries the
// cell's NR measurement; the others' signal is unknown.
func (f *MBIMFunction) baseStations(v3 bool) *mbim.BaseStationsInfo {
	n := f.net
	c := n.cellLocked()
	info := &mbim.BaseStationsInfo{}
	if !c.Registered {
		return info
	}
	info.SystemType = highestDataClass(n.cfg.DataClass)
	if v3 && info.SystemType&(mbim.DataClass5GNSA|mbim.DataClass5GSA) != 0 {
		// MbimDataClassV3 has one 5G bit (5G-NSA's); the subtype
		// tells EN-DC from standalone.
		info.SystemType, info.SystemSubType = mbim.DataClass5GNSA, mbim.DataSubclass5GNR
		if c.LTE != nil {
			info.SystemSubType = mbim.DataSubclass5GENDC
		}
	}
	unknown := mbim.NRSignal{RSRP: mbim.Unknown, RSRQ: mbim.Unknown, SINR: mbim.Unknown}
	for _, cc := range c.Components {
		switch {
		case !cc.NR && c.LTE != nil && info.LTE == nil:
			info.LTE = &mbim.LTEServingCell{ProviderID: n.cfg.ProviderID, CellID: mbim.Unknown, EARFCN: cc.Channel, PCI: uint32(cc.PCI),
				TAC: mbim.Unknown, RSRP: int32(math.Round(c.LTE.RSRP)), RSRQ: int32(math.Round(c.LTE.RSRQ)), TimingAdvance: mbim.Unknown}
		case cc.NR && v3:
			sig := unknown
			if c.NR != nil && len(info.NR) == 0 {
				sig = mbim.CodeNRSignal(c.NR.RSRP, c.NR.RSRQ, c.NR.SINR)
			}
			info.NR = append(info.NR, mbim.NRServingCell{ProviderID: n.cfg.ProviderID, NCI: mbim.UnknownU64, PCI: uint32(cc.PCI),
				NRARFCN: cc.Channel, TAC: mbim.Unknown, Signal: sig, TimingAdvance: mbim.UnknownU64})
		}
	}
	return info
}
