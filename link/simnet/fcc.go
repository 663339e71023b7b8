package simnet

// The FCC lock (NetworkConfig.FCCLock) and the two procedures that lift
// it, as ModemManager's data/dispatcher-fcc-unlock/ scripts run them:
// Foxconn's QMI DMS vendor messages (native or in the MBIM QMI service)
// and Quectel's MBIM RADIO_STATE. A locked modem keeps its radio off; an
// unlock leaves it off until the host turns it on, as after a power-up.

import (
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
)

// The emulated Foxconn firmware's versions (DMS Foxconn Get Firmware
// Version): the MCFG version is FirmwareInfo with two more fields, which
// the v2 hash drops again.
func (n *Network) foxconnVersionLocked(t qmi.FoxconnVersionType) (string, bool) {
	switch t {
	case qmi.FoxconnFirmwareMCFG:
		return n.cfg.FirmwareInfo + ".00.01", true
	case qmi.FoxconnFirmwareMCFGApps:
		return n.cfg.FirmwareInfo + ".00.01_APPS.1", true
	case qmi.FoxconnApps:
		return "APPS." + n.cfg.FirmwareInfo, true
	}
	return "", false
}

// foxconnDMSLocked answers the Foxconn DMS vendor messages of a modem
// whose procedure is FCCUnlockFoxconn (ok false: not one of them, or
// not a Foxconn modem). v2 unlocks when its string is the hash of this
// modem's facts and its number 48; v1 when its byte is 0.
func (n *Network) foxconnDMSLocked(m *qmi.Message) (code qmi.ErrorCode, tlvs []qmi.TLV, ok bool, err error) {
	if n.cfg.FCCLock != mhi.FCCUnlockFoxconn {
		return 0, nil, false, nil
	}
	switch m.ID {
	case qmi.DMSFoxconnGetFirmwareVersion:
		t, err := qmi.ParseFoxconnVersionType(m)
		if err != nil {
			return 0, nil, true, parseErr(err)
		}
		v, known := n.foxconnVersionLocked(t)
		if !known {
			return qmi.ErrInvalidArgument, nil, true, nil
		}
		return 0, []qmi.TLV{{Type: 0x01, Value: []byte(v)}}, true, nil
	case qmi.DMSFoxconnSetFCCAuth:
		a, err := qmi.ParseFoxconnFCCAuth(m)
		if err != nil {
			return 0, nil, true, parseErr(err)
		}
		good := !a.V2 && a.Value == 0
		if a.V2 {
			mcfg, _ := n.foxconnVersionLocked(qmi.FoxconnFirmwareMCFG)
			apps, _ := n.foxconnVersionLocked(qmi.FoxconnApps)
			good = a.Num == qmi.FoxconnFCCMagicNumber && a.Magic == qmi.FoxconnFCCMagic(mcfg, apps, n.cfg.DeviceID)
		}
		if !good {
			return qmi.ErrAuthenticationFailed, nil, true, nil
		}
		n.st.fccLocked = false
		return 0, nil, true, nil
	}
	return 0, nil, false, nil
}

// FCCLocked reports whether the modem is still FCC-locked.
func (n *Network) FCCLocked() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st.fccLocked
}

// qmiTunnelLocked answers the MBIM QMI service (mbim.CIDQMIMsg): a QMUX
// frame in, its reply out. The tunnel serves what the Foxconn procedure
// needs — CTL client IDs, DMS Get IDs and the Foxconn messages — and
// only on a Foxconn modem.
func (f *MBIMFunction) qmiTunnelLocked(m *mbim.Message) (mbim.Status, []byte) {
	n := f.net
	if n.cfg.FCCLock != mhi.FCCUnlockFoxconn || m.CID != mbim.CIDQMIMsg {
		return mbim.StatusNoDeviceSupport, nil
	}
	if m.CommandType != mbim.Set {
		return mbim.StatusInvalidParameters, nil
	}
	req, err := qmi.Parse(m.Buffer)
	if err != nil || req.FromModem || req.Kind != qmi.Request {
		return mbim.StatusInvalidParameters, nil
	}
	var code qmi.ErrorCode
	var tlvs []qmi.TLV
	switch {
	case req.Service == qmi.ServiceCTL && req.ID == qmi.CTLAllocateCID:
		svc, err := qmi.ParseAllocateCIDRequest(req)
		switch {
		case err != nil:
			code = qmi.ErrMalformedMessage
		case svc != qmi.ServiceDMS:
			code = qmi.ErrInvalidServiceType
		default:
			f.st.tunnelCID = f.st.tunnelCID%254 + 1
			tlvs = []qmi.TLV{qmi.ClientID{Service: svc, Client: f.st.tunnelCID}.TLV()}
		}
	case req.Service == qmi.ServiceCTL && req.ID == qmi.CTLReleaseCID:
		id, err := qmi.ParseClientID(req)
		if err != nil {
			code = qmi.ErrMalformedMessage
		} else {
			tlvs = []qmi.TLV{id.TLV()}
		}
	case req.Service == qmi.ServiceDMS && req.ID == qmi.DMSGetIDs:
		tlvs = qmi.IDs{IMEI: n.cfg.DeviceID}.TLVs()
	case req.Service == qmi.ServiceDMS:
		c, t, ok, err := n.foxconnDMSLocked(req)
		switch {
		case err != nil:
			code = qmi.ErrMalformedMessage
		case !ok:
			code = qmi.ErrInvalidQMICommand
		default:
			code, tlvs = c, t
		}
	default:
		code = qmi.ErrInvalidServiceType
	}
	b, err := req.Reply(code, tlvs...).Marshal()
	if err != nil {
		return mbim.StatusFailure, nil
	}
	return mbim.StatusNone, b
}

// quectelLocked answers the Quectel service's RADIO_STATE on a modem
// whose procedure is FCCUnlockQuectel: a query says fcc-locked (4) until
// a set to on lifts the lock.
func (f *MBIMFunction) quectelLocked(m *mbim.Message) (mbim.Status, []byte) {
	n := f.net
	if n.cfg.FCCLock != mhi.FCCUnlockQuectel || m.CID != mbim.CIDQuectelRadioState {
		return mbim.StatusNoDeviceSupport, nil
	}
	if m.CommandType == mbim.Set {
		s, err := mbim.ParseQuectelRadioState(m.Buffer)
		if err != nil || (s != mbim.QuectelRadioOn && s != mbim.QuectelRadioOff) {
			return mbim.StatusInvalidParameters, nil
		}
		if s == mbim.QuectelRadioOn {
			n.st.fccLocked = false
		}
	}
	st := mbim.QuectelRadioOff
	switch {
	case n.st.fccLocked:
		st = mbim.QuectelRadioFCCLocked
	case n.st.radioOn():
		st = mbim.QuectelRadioOn
	}
	return mbim.StatusNone, mbim.EncodeQuectelRadioState(st)
}
