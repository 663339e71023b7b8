package mhi

// FCCUnlock names the procedure that lifts a modem's FCC lock. Laptop
// SKUs of some modems ship with the radio locked until the host proves,
// with a vendor command, that the modem sits in the laptop it was
// certified in; until then the radio does not come on. ModemManager
// ships one script per locked VID:PID, disabled by default
// (data/dispatcher-fcc-unlock/meson.build lists them), because running
// it is the user's legal choice: mhistack runs a procedure only when
// asked (stack.Options.FCCUnlock). docs/GETTING-ONLINE.md, "FCC lock".
type FCCUnlock string

// FCC unlock procedures (ModemManager data/dispatcher-fcc-unlock/).
const (
	// FCCUnlockNone: the modem ships unlocked.
	FCCUnlockNone FCCUnlock = ""
	// FCCUnlockFoxconn is the Foxconn SDX55 procedure (script "105b"),
	// QMI DMS vendor messages carried in the MBIM QMI service (or on
	// the QMI port): "v2" first — DMS Foxconn Set FCC Authentication v2
	// (0x5571) with "salt" and the MD5 of the firmware MCFG version, the
	// apps version, the IMEI, "salt" and "foxc" — then "v1", the same
	// message with the single byte 0.
	FCCUnlockFoxconn FCCUnlock = "foxconn-dms"
	// FCCUnlockQuectel is the Quectel procedure (scripts "2c7c" and
	// "1eac"): the Quectel MBIM service's RADIO_STATE set to 1 (on).
	FCCUnlockQuectel FCCUnlock = "quectel-mbim"
)

// FCCLock is a profile's FCC lock: the procedure and the PCI IDs that
// ship locked (not every ID of a profile does: ModemManager lists
// 105b:e0ab and 105b:e0c3 of the T99W175, not 105b:e0bf).
type FCCLock struct {
	Unlock FCCUnlock
	IDs    []PCIID
}

// FCCUnlockFor returns the procedure a function with these IDs needs
// (FCCUnlockNone if it ships unlocked).
func (p *Profile) FCCUnlockFor(vendor, device, subVendor, subDevice uint16) FCCUnlock {
	for _, id := range p.FCCLock.IDs {
		if id.Matches(vendor, device, subVendor, subDevice) {
			return p.FCCLock.Unlock
		}
	}
	return FCCUnlockNone
}

// EmulatedFCCUnlock is the procedure of the function the emulated modem
// presents (mhi/sim: the profile's first ID, sim.Options.IDIndex 0).
func (p *Profile) EmulatedFCCUnlock(idIndex int) FCCUnlock {
	if idIndex < 0 || idIndex >= len(p.IDs) {
		return FCCUnlockNone
	}
	id := p.IDs[idIndex]
	return p.FCCUnlockFor(id.Vendor, id.Device, id.SubVendor, id.SubDevice)
}
