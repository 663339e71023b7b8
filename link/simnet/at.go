package simnet

import (
	"fmt"
	"strings"
	"sync"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi/sim"
)

// ATFunction is the emulated modem's AT command port (the DUN pair): it
// answers a small command set from the modem's Network, in the verbose
// result format (ITU-T V.250 §5.7.1, ATV1) without echo (ATE0):
//
//	ATI, AT+CGMI, AT+CGMM, AT+CGMR  identity
//	AT+CSQ                          signal (3GPP TS 27.007 §8.5)
//	AT+COPS?                        operator (§7.3), long alphanumeric
//	AT+CPIN?                        SIM (§8.3)
//	AT+CFUN?                        radio (§8.2)
//	AT                              OK
//
// and anything else with ERROR. A started AT port follows the network as
// a QMI function does: a modem with only an AT port still registers.
type ATFunction struct {
	net *Network

	mu       sync.Mutex // guards the fields below; Receive runs on the device goroutine
	port     *sim.Port
	line     []byte
	overflow bool // the line outgrew maxATLine: it is answered ERROR
	stop     func()
}

// NewATFunction returns an AT port on net (nil: a network of its own
// with the default configuration).
func NewATFunction(net *Network) *ATFunction {
	if net == nil {
		net = NewNetwork(NetworkConfig{})
	}
	return &ATFunction{net: net}
}

// maxATLine bounds a command line (V.250 §5.2.1 asks for at least 40
// characters; TS 27.007 modems take a few hundred).
const maxATLine = 1024

// Start implements sim.Function.
func (f *ATFunction) Start(p *sim.Port) {
	f.mu.Lock()
	f.port, f.line = p, f.line[:0]
	f.mu.Unlock()
	n := f.net
	n.mu.Lock()
	stop := n.startLocked(f)
	n.radioChangedLocked()
	n.mu.Unlock()
	f.mu.Lock()
	f.stop = stop
	f.mu.Unlock()
}

// Stop implements sim.Function.
func (f *ATFunction) Stop() {
	f.mu.Lock()
	stop := f.stop
	f.port, f.stop = nil, nil
	f.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (f *ATFunction) networkEventLocked(netEvent, mbim.NwError) {}

// ipv6SessionsLocked: the AT port starts no data sessions.
func (f *ATFunction) ipv6SessionsLocked(func(uint8, Carrier)) {}

// Receive implements sim.Function: bytes up to CR are a command line
// (S3, V.250 §6.2.1); LF and control bytes are ignored.
func (f *ATFunction) Receive(td []byte) {
	f.mu.Lock()
	p := f.port
	var lines []string
	for _, c := range td {
		switch {
		case c == '\r':
			l := string(f.line)
			if f.overflow {
				l = "!" // no command: ERROR
			}
			lines = append(lines, l)
			f.line, f.overflow = f.line[:0], false
		case c < 0x20 || c > 0x7E:
		case len(f.line) >= maxATLine:
			f.overflow = true
		default:
			f.line = append(f.line, c)
		}
	}
	f.mu.Unlock()
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if p != nil {
			_ = p.Send([]byte(f.answer(l)))
		}
	}
}

// answer returns the reply to one command line.
func (f *ATFunction) answer(line string) string {
	n := f.net
	n.mu.Lock()
	defer n.mu.Unlock()
	cfg, st := &n.cfg, &n.st
	info := func(lines ...string) string {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString("\r\n" + l + "\r\n")
		}
		return b.String() + "\r\nOK\r\n"
	}
	switch cmd := strings.ToUpper(strings.TrimSpace(line)); cmd {
	case "AT":
		return "\r\nOK\r\n"
	case "ATI":
		return info("Manufacturer: mhistack", "Model: "+cfg.HardwareInfo, "Revision: "+cfg.FirmwareInfo, "IMEI: "+cfg.DeviceID)
	case "AT+CGMI":
		return info("mhistack")
	case "AT+CGMM":
		return info(cfg.HardwareInfo)
	case "AT+CGMR":
		return info(cfg.FirmwareInfo)
	case "AT+CSQ":
		rssi, ber := uint32(99), uint32(99)
		if st.reg.Registered() && st.signal.RSSI != 99 {
			rssi, ber = min(st.signal.RSSI, 31), min(st.signal.ErrorRate, 7)
		}
		return info(fmt.Sprintf("+CSQ: %d,%d", rssi, ber))
	case "AT+COPS?":
		if !st.reg.Registered() {
			return info("+COPS: 0")
		}
		// <AcT> (TS 27.007 §7.3): 7 E-UTRAN, 13 E-UTRA-NR dual
		// connectivity, 11 NR connected to 5GCN.
		act := 7
		switch lte, nr, _ := n.baseLocked(); {
		case lte != nil && nr != nil:
			act = 13
		case nr != nil:
			act = 11
		}
		return info(fmt.Sprintf("+COPS: 0,0,%q,%d", strings.ReplaceAll(cfg.ProviderName, `"`, ""), act))
	case "AT+CPIN?":
		switch {
		case st.ready == mbim.ReadySIMNotInserted:
			return "\r\n+CME ERROR: 10\r\n" // SIM not inserted (§9.2.1)
		case st.pinLocked && st.pinType == mbim.PINTypePUK1:
			return info("+CPIN: SIM PUK")
		case st.pinLocked:
			return info("+CPIN: SIM PIN")
		}
		return info("+CPIN: READY")
	case "AT+CFUN?":
		if st.radioOn() {
			return info("+CFUN: 1")
		}
		return info("+CFUN: 4") // transmit and receive disabled
	}
	return "\r\nERROR\r\n"
}
