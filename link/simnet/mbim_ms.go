package simnet

import (
	"math"

	"github.com/mhistack/mhistack/link/mbim"
)

// msExtensionsLocked answers MS_BASIC_CONNECT_EXTENSIONS: VERSION, which
// switches the function to the MBIMEx 2.0 layouts when the host offers
// 2.0 or more, and BASE_STATIONS_INFO, the serving LTE cell from the
// network's cell (the state QMI's Get Signal Info and Get LTE Cphy CA Info
// read).
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
		// The function supports MBIMEx 2.0 and answers the highest
		// version both sides have.
		f.st.ex = mbim.MBIMEx1
		if q.Extended >= mbim.MBIMEx2 {
			f.st.ex = mbim.MBIMEx2
		}
		a := mbim.VersionInfo{MBIM: mbim.MBIMVersion1, Extended: f.st.ex}
		return mbim.StatusNone, a.Encode()
	case mbim.CIDMSBaseStationsInfo:
		if len(m.Buffer) < 20 {
			return mbim.StatusInvalidParameters, nil
		}
		return mbim.StatusNone, f.baseStations().Encode()
	}
	return mbim.StatusNoDeviceSupport, nil
}

// baseStations is BASE_STATIONS_INFO's answer: the LTE primary cell when
// the modem is registered on LTE.
func (f *MBIMFunction) baseStations() *mbim.BaseStationsInfo {
	n := f.net
	c := n.cellLocked()
	info := &mbim.BaseStationsInfo{}
	if !c.Registered {
		return info
	}
	info.SystemType = highestDataClass(n.cfg.DataClass)
	if c.LTE == nil {
		return info
	}
	for _, cc := range c.Components {
		if cc.NR {
			continue
		}
		info.LTE = &mbim.LTEServingCell{ProviderID: n.cfg.ProviderID, CellID: mbim.Unknown, EARFCN: cc.Channel, PCI: uint32(cc.PCI),
			TAC: mbim.Unknown, RSRP: int32(math.Round(c.LTE.RSRP)), RSRQ: int32(math.Round(c.LTE.RSRQ)), TimingAdvance: mbim.Unknown}
		break
	}
	return info
}
