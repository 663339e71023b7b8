package simnet

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/mhistack/mhistack/internal/ctrlstream"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// QMIFunction is the modem's QMI function on the "QMI" channel pair
// (14/15): QMUX frames carrying CTL (client IDs, version info, sync), DMS
// (identity, operating mode), NAS (serving system, signal), UIM (card
// status, PIN), WDS (data calls and their settings) and WDA (data
// format: raw IP, QMAP v1 or v5 aggregation) — docs/QMI.md.
//
// The network behind it — SIM and PIN, radio, registration, packet
// service, the APN and credential rules, the carrier's addresses — is
// the modem's Network, shared with its MBIM function (QMIConfig.Network):
// a PIN entered over QMI unlocks the SIM for MBIM, Network.NetworkDetach
// ends QMI calls too, and both report the same addresses.
//
// The function is strict: a host message that is not a well-formed QMI
// request (bad framing, a response or indication sent by the host, a
// known request with malformed or missing mandatory TLVs, a request for
// a client ID the host does not hold) is a host protocol violation
// (Port.Violation, which fails a strict test with what was wrong), and
// is answered as a modem would (MALFORMED_MESSAGE, MISSING_ARGUMENT,
// INVALID_CLIENT_ID) when it can be.
//
// Client IDs, their calls and the data format outlive the host closing
// and reopening the QMI port (a channel stop and start, which Linux's
// mhi_wwan_ctrl does on every close and open of /dev/wwan0qmi0), as on a
// modem, where `qmicli --client-no-release-cid` and a later
// `--client-cid` rely on it; a modem restart (Port.Boot changes) forgets
// them.
//
// Receive runs on the modem's device goroutine and only queues; the
// function's goroutine (Start..Stop) decodes and answers under the
// network's lock.
type QMIFunction struct {
	cfg QMIConfig
	net *Network // the network and its lock
	log *slog.Logger

	// Guarded by net.mu.
	out      func([]byte) error
	violate  func(rule, detail string)
	stop     func() // stops following the network
	clients  map[qmi.ClientID]*qmiClient
	lastCID  map[qmi.Service]uint8
	format   qmi.DataFormat
	handle   uint32
	lastSS   qmi.ServingSystem
	ssSent   bool
	violated int
	// boot is the Port.Boot of the last run; started: there was one.
	boot    uint64
	started bool

	q     ctrlQueue
	stats qmiCounters
}

// qmiClient is an allocated client ID; for WDS, its call.
type qmiClient struct {
	apn    string // of the call
	family qmi.IPFamily
	mux    uint8
	bound  bool
	handle uint32 // 0: no call
}

// QMIConfig configures the QMI function.
type QMIConfig struct {
	// Network is the modem's network (SIM, radio, registration, packet
	// service, APN rules, carrier), shared with its MBIM function (nil: a
	// network of its own with the zero NetworkConfig).
	Network *Network
	// MaxAggregation is the newest QMAP the modem agrees to in WDA Set
	// Data Format: qmi.AggregationQMAPv5 (default) or qmi.AggregationQMAP
	// (a MAPv1-only modem answers QMAP when asked for QMAPv5).
	MaxAggregation qmi.Aggregation
	// DLMaxDatagrams and DLMaxSize cap what the host may ask for DL
	// aggregation (defaults DefaultAggDatagrams, DefaultAggBytes);
	// ULMaxDatagrams and ULMaxSize are the UL limits the modem answers
	// (defaults 11 and 8192, what Quectel modules answer).
	DLMaxDatagrams, DLMaxSize, ULMaxDatagrams, ULMaxSize uint32
	// Quirks make the function answer as real modems do where they
	// break the spec (docs/QUIRKS.md); the zero value answers by it.
	Quirks QMIQuirks
	// OnViolation receives host protocol violations when the function
	// runs without a Port (Serve); on a Port they go to Port.Violation.
	OnViolation func(error)
	// Logger receives diagnostics (nil: discarded).
	Logger *slog.Logger
}

// QMIQuirks are the spec breaches of real modems' QMI the function can
// play, for testing the host's tolerance of them (docs/QMI.md).
type QMIQuirks struct {
	// StringPad is appended to the strings the modem sends: DMS Get
	// IDs' IMEI, Get Revision, Get Model and NAS's PLMN description
	// ("\x00", "\t", "\r\n": a C string copied with its NUL, an
	// AT-style value).
	StringPad string
	// StrayReplies sends, before each response, four that answer no
	// outstanding request: each has one of the transaction ID, message
	// ID, client ID or service changed (a reply to a transaction the host
	// gave up on, a modem mixing up its clients) and reports
	// QMI_ERR_INTERNAL, so a host that takes one fails.
	StrayReplies bool
	// ShortPLMN cuts the last byte of NAS Get Serving System's current
	// PLMN TLV (0x12): its description's length prefix says more than
	// the TLV holds.
	ShortPLMN bool
}

// ruleQMI names the rule a host breaks with a malformed QMI request.
const ruleQMI = "docs/QMI.md: the host sends well-formed QMUX requests (CTL 8-bit, service 16-bit transactions), with the mandatory TLVs well-formed, for client IDs it holds"

// QMIStats counts what the function did.
type QMIStats struct {
	Requests, Indications, Errors, Violations, Dropped uint64
}

type qmiCounters struct {
	requests, indications, errors, violations, dropped atomic.Uint64
}

// Stats returns the counters.
func (f *QMIFunction) Stats() QMIStats {
	s := &f.stats
	return QMIStats{Requests: s.requests.Load(), Indications: s.indications.Load(), Errors: s.errors.Load(),
		Violations: s.violations.Load(), Dropped: s.dropped.Load()}
}

// NewQMIFunction returns a QMI function; attach it with
// Options.Functions{"QMI": f}.
func NewQMIFunction(cfg QMIConfig) *QMIFunction {
	if cfg.MaxAggregation == qmi.AggregationDisabled {
		cfg.MaxAggregation = qmi.AggregationQMAPv5
	}
	def := func(p *uint32, v uint32) {
		if *p == 0 {
			*p = v
		}
	}
	def(&cfg.DLMaxDatagrams, DefaultAggDatagrams)
	def(&cfg.DLMaxSize, DefaultAggBytes)
	def(&cfg.ULMaxDatagrams, DefaultULDatagrams)
	def(&cfg.ULMaxSize, DefaultULBytes)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := cfg.Network
	if n == nil {
		n = NewNetwork(NetworkConfig{})
	}
	f := &QMIFunction{cfg: cfg, net: n, log: cfg.Logger}
	f.q.dropped = &f.stats.dropped
	return f
}

// Network returns the network the function answers for (to play it in
// tests: NetworkDetach, SetCarrier, Configure).
func (f *QMIFunction) Network() *Network { return f.net }

// DataFormat returns what the last WDA Set Data Format agreed to.
func (f *QMIFunction) DataFormat() qmi.DataFormat {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	return f.format
}

// Calls returns the number of active data calls.
func (f *QMIFunction) Calls() int {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	n := 0
	for _, c := range f.clients {
		if c.handle != 0 {
			n++
		}
	}
	return n
}

// Start implements sim.Function.
// A start in the same modem run as the last (the host reopened the port)
// keeps the client IDs, calls and data format.
func (f *QMIFunction) Start(p *sim.Port) {
	f.startWith(p.Send, func(rule, detail string) { p.Violation(rule, "%s", detail) }, p.Boot(), true)
}

// startWith starts a run whose output goes to send. With sameBoot, a
// run of the same modem boot as the last keeps the clients; otherwise
// (Serve, a restarted modem) the function starts afresh.
func (f *QMIFunction) startWith(send func([]byte) error, violate func(rule, detail string), boot uint64, sameBoot bool) {
	n := f.net
	n.mu.Lock()
	f.out, f.violate = send, violate
	if !sameBoot || !f.started || boot != f.boot {
		f.clients, f.lastCID = map[qmi.ClientID]*qmiClient{}, map[qmi.Service]uint8{}
		f.format = qmi.DataFormat{LinkLayer: qmi.LinkLayerRawIP}
	}
	f.boot, f.started = boot, true
	f.ssSent = false
	f.stop = n.startLocked(f)
	// A modem without an MBIM channel registers when it starts.
	n.radioChangedLocked()
	n.mu.Unlock()
	f.q.start(f.run)
}

// Receive implements sim.Function: it queues one UL transfer (dropped,
// counted, when the queue is full).
func (f *QMIFunction) Receive(td []byte) { f.q.deliver(td, false) }

// Stop implements sim.Function.
func (f *QMIFunction) Stop() {
	f.net.mu.Lock()
	f.out = nil
	stop := f.stop
	f.stop = nil
	f.net.mu.Unlock()
	if stop != nil {
		stop()
	}
	f.q.stop()
}

// Serve runs the function over a byte stream (a pipe in tests, a socket
// for tools) until reading fails; it closes rw before it returns.
func (f *QMIFunction) Serve(rw io.ReadWriteCloser) error {
	return serveStream(rw, qmi.MaxFrame, func(send func([]byte) error) {
		f.startWith(send, func(rule, detail string) {
			if f.cfg.OnViolation != nil {
				f.cfg.OnViolation(&sim.Violation{Rule: rule, Detail: detail})
			}
		}, 0, false)
	}, func(b []byte) { f.q.deliver(b, true) }, f.Stop)
}

func (f *QMIFunction) run(in <-chan []byte, quit <-chan struct{}) {
	// The decoder is the run's own; the lock guards the state the
	// answers read and change (the network's, shared with the MBIM
	// function, the timers and the exported methods). It is taken per message, not per chunk:
	// an answer may wait in Port.Send for DL buffers (up to its
	// SendTimeout), and the device goroutine, which provides them, takes
	// the lock when it starts or stops a function (this one, the MBIM
	// function): holding it across every answer of a chunk would
	// multiply that wait.
	var dec qmi.Decoder
	handle := func(m *qmi.Message) {
		f.net.mu.Lock()
		f.handleLocked(m)
		f.net.mu.Unlock()
	}
	bad := func(err error) {
		f.net.mu.Lock()
		f.malformedLocked(err)
		f.net.mu.Unlock()
	}
	for {
		select {
		case <-quit:
			return
		case td := <-in:
			ctrlstream.Feed(&dec, td, handle, bad)
		}
	}
}

func (f *QMIFunction) violationLocked(format string, args ...any) {
	f.stats.violations.Add(1)
	detail := "QMI: " + fmt.Sprintf(format, args...)
	f.log.Warn("sim qmi: host protocol violation", "detail", detail)
	if f.violate != nil {
		f.violate(ruleQMI, detail)
	}
}

// malformedLocked reports a frame the decoder refused and, when its
// header was readable and it was a request, answers MALFORMED_MESSAGE.
func (f *QMIFunction) malformedLocked(err error) {
	f.violationLocked("%v", err)
	var fe *qmi.FormatError
	if errors.As(err, &fe) && fe.Header && fe.Kind == qmi.Request {
		req := &qmi.Message{Service: fe.Service, Client: fe.Client, TID: fe.TID, ID: fe.ID}
		f.sendLocked(req.Reply(qmi.ErrMalformedMessage))
	}
}

func (f *QMIFunction) sendLocked(m *qmi.Message) {
	if f.out == nil {
		f.stats.dropped.Add(1)
		return
	}
	switch {
	case m.Kind == qmi.Indication:
		f.stats.indications.Add(1)
	case m.Result() != nil:
		f.stats.errors.Add(1)
	}
	b, err := m.Marshal()
	if err == nil {
		err = f.out(b)
	}
	if err != nil {
		f.stats.dropped.Add(1)
		f.log.Debug("sim qmi: send failed", "msg", m.String(), "err", err)
	}
}

// handleLocked answers one host message.
func (f *QMIFunction) handleLocked(m *qmi.Message) {
	if m.FromModem || m.Kind != qmi.Request {
		f.violationLocked("the host sent a %s with the modem's QMUX flag %v (%s)", m.Kind, m.FromModem, m)
		return
	}
	f.stats.requests.Add(1)
	var code qmi.ErrorCode
	var tlvs []qmi.TLV
	var err error
	if m.Service == qmi.ServiceCTL {
		code, tlvs, err = f.ctlLocked(m)
	} else {
		c := f.clients[qmi.ClientID{Service: m.Service, Client: m.Client}]
		if c == nil {
			f.violationLocked("%s for client ID %d, which the host does not hold", m, m.Client)
			f.sendLocked(m.Reply(qmi.ErrInvalidClientID))
			return
		}
		code = qmi.ErrInvalidQMICommand
		for _, sv := range qmiServices {
			if sv.Service == m.Service {
				code, tlvs, err = sv.handle(f, m, c)
			}
		}
	}
	if err != nil {
		// A request the host built wrong: its mandatory TLVs are
		// missing or malformed.
		f.violationLocked("%s: %v", m, err)
		code = qmi.ErrMalformedMessage
		if errors.Is(err, errMissing) {
			code = qmi.ErrMissingArgument
		}
		tlvs = nil
	}
	r := m.Reply(code, tlvs...)
	if f.cfg.Quirks.StrayReplies {
		f.strayRepliesLocked(r)
	}
	f.sendLocked(r)
}

// strayRepliesLocked sends the replies QMIQuirks.StrayReplies describes
// ahead of r: r with one matching field changed at a time, each an
// error. The transaction ID is moved by half its space, away from the
// host's other outstanding requests.
func (f *QMIFunction) strayRepliesLocked(r *qmi.Message) {
	half := uint16(0x8000)
	if r.Service == qmi.ServiceCTL {
		half = 0x80
	}
	for _, change := range []func(*qmi.Message){
		func(s *qmi.Message) { s.TID ^= half },
		func(s *qmi.Message) { s.ID ^= 0x0100 },
		func(s *qmi.Message) { s.Client ^= 0x80 },
		func(s *qmi.Message) { s.Service ^= 0x80 },
	} {
		s := &qmi.Message{Service: r.Service, Client: r.Client, FromModem: true, Kind: qmi.Response, TID: r.TID, ID: r.ID,
			TLVs: []qmi.TLV{qmi.ResultTLV(qmi.ErrInternal)}}
		change(s)
		f.sendLocked(s)
	}
}

// errMissing marks a parse error for a missing mandatory TLV.
var errMissing = errors.New("mandatory TLV missing")

// parseErr classifies a codec error: a missing mandatory TLV is answered
// MISSING_ARGUMENT, anything else MALFORMED_MESSAGE.
func parseErr(err error) error {
	var fe *qmi.FormatError
	if errors.As(err, &fe) && fe.Missing {
		return fmt.Errorf("%w: %w", errMissing, err)
	}
	return err
}

// qmiServices are the services the function answers besides CTL, with
// the versions CTL Get Version Info reports and their handlers: a new
// service is an entry here, a new request a case in its service's
// handler.
var qmiServices = []struct {
	qmi.ServiceVersion
	handle func(f *QMIFunction, m *qmi.Message, c *qmiClient) (qmi.ErrorCode, []qmi.TLV, error)
}{
	{qmi.ServiceVersion{Service: qmi.ServiceWDS, Major: 1, Minor: 67}, (*QMIFunction).wdsLocked},
	{qmi.ServiceVersion{Service: qmi.ServiceDMS, Major: 1, Minor: 14}, (*QMIFunction).dmsLocked},
	{qmi.ServiceVersion{Service: qmi.ServiceNAS, Major: 1, Minor: 25}, (*QMIFunction).nasLocked},
	{qmi.ServiceVersion{Service: qmi.ServiceUIM, Major: 1, Minor: 46}, (*QMIFunction).uimLocked},
	{qmi.ServiceVersion{Service: qmi.ServiceWDA, Major: 1, Minor: 16}, (*QMIFunction).wdaLocked},
}

// qmiVersions is CTL Get Version Info's list.
func qmiVersions() []qmi.ServiceVersion {
	v := []qmi.ServiceVersion{{Service: qmi.ServiceCTL, Major: 1, Minor: 5}}
	for _, sv := range qmiServices {
		v = append(v, sv.ServiceVersion)
	}
	return v
}

func (f *QMIFunction) ctlLocked(m *qmi.Message) (qmi.ErrorCode, []qmi.TLV, error) {
	switch m.ID {
	case qmi.CTLGetVersionInfo:
		return 0, qmi.VersionInfoTLVs(qmiVersions()), nil
	case qmi.CTLSync:
		// Every client ID is released (and every call they held).
		for id := range f.clients {
			f.releaseLocked(id)
		}
		return 0, nil, nil
	case qmi.CTLAllocateCID:
		s, err := qmi.ParseAllocateCIDRequest(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		known := false
		for _, v := range qmiServices {
			known = known || v.Service == s
		}
		if !known {
			return qmi.ErrInvalidServiceType, nil, nil
		}
		// Client IDs count 1..254 per service, the first free one
		// after the last allocated.
		id := f.lastCID[s]
		for range 254 {
			id = id%254 + 1
			if f.clients[qmi.ClientID{Service: s, Client: id}] == nil {
				f.clients[qmi.ClientID{Service: s, Client: id}] = &qmiClient{family: qmi.IPv4}
				f.lastCID[s] = id
				return 0, []qmi.TLV{qmi.ClientID{Service: s, Client: id}.TLV()}, nil
			}
		}
		return qmi.ErrClientIDsExhausted, nil, nil
	case qmi.CTLReleaseCID:
		id, err := qmi.ParseClientID(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		if f.clients[id] == nil {
			f.violationLocked("%s releases client ID %d of %s, which the host does not hold", m, id.Client, id.Service)
			return qmi.ErrInvalidClientID, nil, nil
		}
		f.releaseLocked(id)
		return 0, []qmi.TLV{id.TLV()}, nil
	}
	return qmi.ErrInvalidQMICommand, nil, nil
}

// releaseLocked drops a client ID; a WDS client's call ends with it.
func (f *QMIFunction) releaseLocked(id qmi.ClientID) {
	delete(f.clients, id)
}

func (f *QMIFunction) dmsLocked(m *qmi.Message, _ *qmiClient) (qmi.ErrorCode, []qmi.TLV, error) {
	n := f.net
	cfg := &n.cfg
	switch m.ID {
	case qmi.DMSGetIDs:
		return 0, qmi.IDs{IMEI: f.padded(cfg.DeviceID)}.TLVs(), nil
	case qmi.DMSGetRevision:
		return 0, []qmi.TLV{{Type: 0x01, Value: []byte(f.padded(cfg.FirmwareInfo))}}, nil
	case qmi.DMSGetModel:
		return 0, []qmi.TLV{{Type: 0x01, Value: []byte(f.padded(cfg.HardwareInfo))}}, nil
	case qmi.DMSGetOperatingMode:
		return 0, []qmi.TLV{{Type: 0x01, Value: []byte{byte(f.modeLocked())}}}, nil
	case qmi.DMSFoxconnGetFirmwareVersion, qmi.DMSFoxconnSetFCCAuth:
		if code, tlvs, ok, err := n.foxconnDMSLocked(m); ok {
			return code, tlvs, err
		}
	case qmi.DMSSetOperatingMode:
		mode, err := qmi.ParseOperatingMode(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		switch mode {
		case qmi.ModeOnline:
			if !n.st.hwOn {
				return qmi.ErrHardwareRestricted, nil, nil
			}
			if n.st.fccLocked {
				// One of the two errors ModemManager takes as
				// "FCC-locked, run the unlock" (Internal,
				// InvalidTransition).
				return qmi.ErrInternal, nil, nil
			}
			n.st.swOn = true
		case qmi.ModeLowPower, qmi.ModePersistentLowPower, qmi.ModeOnlyLowPower, qmi.ModeOffline:
			n.st.swOn = false
		default:
			return qmi.ErrInvalidArgument, nil, nil
		}
		n.radioChangedLocked()
		return 0, nil, nil
	}
	return qmi.ErrInvalidQMICommand, nil, nil
}

// padded returns s with QMIQuirks.StringPad.
func (f *QMIFunction) padded(s string) string { return s + f.cfg.Quirks.StringPad }

func (f *QMIFunction) modeLocked() qmi.OperatingMode {
	if f.net.st.radioOn() {
		return qmi.ModeOnline
	}
	return qmi.ModeLowPower
}

// servingSystemLocked maps the network state to NAS's view.
func (f *QMIFunction) servingSystemLocked() qmi.ServingSystem {
	st, cfg := &f.net.st, &f.net.cfg
	ss := qmi.ServingSystem{CSAttach: qmi.Detached, PSAttach: qmi.Detached, Network: qmi.NetworkType3GPP}
	switch {
	case st.reg.Registered():
		ss.Registration = qmi.Registered
		ss.CSAttach = qmi.Attached
		lte, nr, _ := f.net.baseLocked()
		if lte != nil {
			ss.RadioInterfaces = append(ss.RadioInterfaces, qmi.RadioLTE)
		}
		if nr != nil {
			ss.RadioInterfaces = append(ss.RadioInterfaces, qmi.Radio5GNR)
		}
		ss.HasRoaming, ss.Roaming = true, 1 // home
		if st.reg == mbim.RegisterRoaming || st.reg == mbim.RegisterPartner {
			ss.Roaming = 0
		}
		ss.PLMN = plmnOf(cfg.ProviderID, f.padded(cfg.ProviderName))
	case st.reg == mbim.RegisterSearching:
		ss.Registration = qmi.Searching
	case st.reg == mbim.RegisterDenied:
		ss.Registration = qmi.RegistrationDenied
	default:
		ss.Registration = qmi.NotRegistered
	}
	if st.ps == mbim.PacketServiceAttached {
		ss.PSAttach = qmi.Attached
	}
	return ss
}

// plmnOf splits an MCC+MNC provider ID ("00101") into NAS's numbers.
func plmnOf(id, name string) *qmi.PLMN {
	if len(id) < 5 || len(id) > 6 {
		return &qmi.PLMN{Description: name}
	}
	mcc, err1 := strconv.Atoi(id[:3])
	mnc, err2 := strconv.Atoi(id[3:])
	if err1 != nil || err2 != nil {
		return &qmi.PLMN{Description: name}
	}
	return &qmi.PLMN{MCC: uint16(mcc), MNC: uint16(mnc), Description: name}
}

func (f *QMIFunction) nasLocked(m *qmi.Message, _ *qmiClient) (qmi.ErrorCode, []qmi.TLV, error) {
	st := &f.net.st
	switch m.ID {
	case qmi.NASGetServingSystem:
		ss := f.servingSystemLocked()
		tlvs := ss.TLVs()
		if last := &tlvs[len(tlvs)-1]; f.cfg.Quirks.ShortPLMN && last.Type == 0x12 {
			last.Value = last.Value[:len(last.Value)-1]
		}
		return 0, tlvs, nil
	case qmi.NASGetSignalStrength, qmi.NASGetSignalInfo:
		c := f.net.cellLocked()
		if !c.Registered {
			return qmi.ErrNoNetworkFound, nil, nil
		}
		if m.ID == qmi.NASGetSignalInfo {
			si := signalInfoOf(c)
			return 0, si.TLVs(), nil
		}
		sig := qmi.SignalStrength{Strength: int8(c.RSSIdBm), Radio: qmi.RadioLTE}
		if l := c.LTE; l != nil {
			sig.HasRSRP, sig.LTERSRP, sig.HasSNR, sig.LTESNR = true, int16(math.Round(l.RSRP)), true, int16(math.Round(l.SINR*10))
		} else {
			sig.Radio = qmi.Radio5GNR
		}
		return 0, sig.TLVs(), nil
	case qmi.NASGetOperatorName:
		if !st.reg.Registered() {
			return qmi.ErrNoNetworkFound, nil, nil
		}
		o := qmi.OperatorName{PLMNNames: []qmi.PLMNName{qmi.EncodePLMNName(f.net.cfg.ProviderName)}}
		return 0, o.TLVs(), nil
	case qmi.NASGetRFBandInfo:
		c := f.net.cellLocked()
		if !c.Registered {
			return qmi.ErrNoNetworkFound, nil, nil
		}
		var bands qmi.RFBands
		for _, cc := range c.Components {
			if b, ok := bandOf(cc); ok {
				radio := qmi.RadioLTE
				if cc.NR {
					radio = qmi.Radio5GNR
				}
				bands = append(bands, qmi.RFBand{Radio: radio, Band: b, Channel: uint16(min(cc.Channel, 0xFFFF))})
			}
		}
		return 0, bands.TLVs(), nil
	case qmi.NASGetLTECphyCAInfo:
		c := f.net.cellLocked()
		if !c.Registered || c.LTE == nil {
			return qmi.ErrNoNetworkFound, nil, nil
		}
		ca := caInfoOf(c)
		return 0, ca.TLVs(), nil
	}
	return qmi.ErrInvalidQMICommand, nil, nil
}

// signalInfoOf codes the cell's measurements as Get Signal Info does:
// dBm and dB as integers, SNR in 0.1 dB.
func signalInfoOf(c CellState) qmi.SignalInfo {
	var si qmi.SignalInfo
	r := func(v, scale float64) int16 { return int16(max(-32767, min(32767, math.Round(v*scale)))) }
	if l := c.LTE; l != nil {
		si.LTE = &qmi.LTESignal{RSSI: int8(c.RSSIdBm), RSRQ: int8(max(-128, min(127, math.Round(l.RSRQ)))), RSRP: r(l.RSRP, 1), SNR: r(l.SINR, 10)}
	}
	if n := c.NR; n != nil {
		si.NR = &qmi.NRSignal{RSRP: r(n.RSRP, 1), SNR: r(n.SINR, 10), RSRQ: r(n.RSRQ, 1), HasRSRQ: true}
	}
	return si
}

// caInfoOf lists the LTE component carriers: the first is the primary
// cell, the others active secondary cells.
func caInfoOf(c CellState) qmi.CAInfo {
	var ca qmi.CAInfo
	for _, cc := range c.Components {
		b, ok := bandOf(cc)
		if cc.NR || !ok {
			continue
		}
		cell := qmi.Cell{PCI: cc.PCI, EARFCN: uint16(min(cc.Channel, 0xFFFF)), Bandwidth: bandwidthCode(cc), Band: b}
		if ca.PCell == nil {
			ca.PCell = &cell
			continue
		}
		cell.State, cell.Index = qmi.SCellActivated, uint8(min(len(ca.SCells)+1, 255))
		ca.SCells = append(ca.SCells, cell)
	}
	return ca
}

func bandOf(cc Component) (qmi.Band, bool) {
	if cc.NR {
		return qmi.NRBand(cc.Band)
	}
	return qmi.LTEBand(cc.Band)
}

// bandwidthCode is QmiNasDLBandwidth of a carrier (0xFF unknown).
func bandwidthCode(cc Component) uint32 {
	lte := map[int]uint32{1: 0, 3: 1, 5: 2, 10: 3, 15: 4, 20: 5}
	nr := map[int]uint32{5: 6, 10: 7, 15: 8, 20: 9, 25: 10, 30: 11, 40: 12, 50: 13, 60: 14, 80: 15, 90: 16, 100: 17, 200: 18, 400: 19, 70: 24}
	m := lte
	if cc.NR {
		m = nr
	}
	if v, ok := m[cc.BandwidthMHz]; ok {
		return v
	}
	return 0xFF
}

func (f *QMIFunction) cardStatusLocked() qmi.CardStatus {
	st, cfg := &f.net.st, &f.net.cfg
	cs := qmi.CardStatus{IndexGWPrimary: 0, Index1xPrimary: 0xFFFF, IndexGWSecondary: 0xFFFF, Index1xSecondary: 0xFFFF}
	if st.ready == mbim.ReadySIMNotInserted {
		cs.IndexGWPrimary = 0xFFFF
		cs.Cards = []qmi.Card{{State: qmi.CardAbsent}}
		return cs
	}
	app := qmi.App{Type: qmi.AppTypeUSIM, State: uint8(qmi.AppReady), AID: []byte{0xA0, 0, 0, 0, 0x87, 0x10, 0x02},
		PIN1State: qmi.PINDisabled, PIN1Retries: uint8(cfg.PINAttempts), PUK1Retries: 10, PIN2State: qmi.PINEnabledNotVerified,
		PIN2Retries: 3, PUK2Retries: 10}
	if cfg.PIN != "" {
		app.PIN1State = qmi.PINEnabledVerified
	}
	switch {
	case st.pinLocked && st.pinType == mbim.PINTypePUK1 && st.pukLeft == 0:
		app.State, app.PIN1State, app.PIN1Retries, app.PUK1Retries = uint8(qmi.AppPUKRequired), qmi.PINPermanentlyBlocked, 0, 0
	case st.pinLocked && st.pinType == mbim.PINTypePUK1:
		app.State, app.PIN1State, app.PIN1Retries, app.PUK1Retries = uint8(qmi.AppPUKRequired), qmi.PINBlocked, 0, uint8(st.pukLeft)
	case st.pinLocked:
		app.State, app.PIN1State, app.PIN1Retries = uint8(qmi.AppPINRequired), qmi.PINEnabledNotVerified, uint8(st.attempts)
	}
	cs.Cards = []qmi.Card{{State: qmi.CardPresent, Apps: []qmi.App{app}}}
	return cs
}

func (f *QMIFunction) uimLocked(m *qmi.Message, _ *qmiClient) (qmi.ErrorCode, []qmi.TLV, error) {
	n := f.net
	switch m.ID {
	case qmi.UIMGetCardStatus:
		cs := f.cardStatusLocked()
		return 0, cs.TLVs(), nil
	case qmi.UIMVerifyPIN:
		v, err := qmi.ParseVerifyPIN(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		retries := func() []qmi.TLV {
			r := qmi.Retries{Verify: uint8(n.st.attempts), Unblock: uint8(n.st.pukLeft)}
			if n.st.pinLocked && n.st.pinType == mbim.PINTypePUK1 {
				r.Verify = 0
			}
			return []qmi.TLV{r.TLV()}
		}
		switch {
		case n.st.ready == mbim.ReadySIMNotInserted:
			return qmi.ErrUIMUninitialized, nil, nil
		case v.ID != qmi.PIN1:
			return qmi.ErrInvalidPINID, retries(), nil
		case !n.st.pinLocked:
			return qmi.ErrNoEffect, retries(), nil
		case n.st.pinType == mbim.PINTypePUK1:
			return qmi.ErrPINBlocked, retries(), nil
		}
		if !n.enterPINLocked(v.PIN) {
			if n.st.pinType == mbim.PINTypePUK1 {
				return qmi.ErrPINBlocked, retries(), nil
			}
			return qmi.ErrIncorrectPIN, retries(), nil
		}
		return 0, retries(), nil
	case qmi.UIMUnblockPIN:
		u, err := qmi.ParseUnblockPIN(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		tlv := func() []qmi.TLV {
			return []qmi.TLV{qmi.Retries{Verify: uint8(n.st.attempts), Unblock: uint8(n.st.pukLeft)}.TLV()}
		}
		switch {
		case n.st.ready == mbim.ReadySIMNotInserted:
			return qmi.ErrUIMUninitialized, nil, nil
		case u.ID != qmi.PIN1:
			return qmi.ErrInvalidPINID, tlv(), nil
		case !n.st.pinLocked || n.st.pinType != mbim.PINTypePUK1:
			return qmi.ErrNoEffect, tlv(), nil
		case n.st.pukLeft == 0:
			return qmi.ErrPINAlwaysBlocked, tlv(), nil
		}
		if !n.enterPUKLocked(u.PUK, u.NewPIN) {
			if n.st.pukLeft == 0 {
				return qmi.ErrPINAlwaysBlocked, tlv(), nil
			}
			return qmi.ErrIncorrectPIN, tlv(), nil
		}
		return 0, tlv(), nil
	}
	return qmi.ErrInvalidQMICommand, nil, nil
}

// callEnd maps a refused call to WDS's verbose call end reason: a 3GPP
// cause when the network gave one, else an internal reason.
func callEnd(nw mbim.NwError) qmi.CallEnd {
	if nw != 0 {
		return qmi.CallEnd{HasReason: true, Reason: 1, HasVerbose: true, VerboseType: qmi.Verbose3GPP, Verbose: int16(nw)}
	}
	return qmi.CallEnd{HasReason: true, Reason: 1, HasVerbose: true, VerboseType: qmi.VerboseInternal, Verbose: 201}
}

func (f *QMIFunction) wdsLocked(m *qmi.Message, c *qmiClient) (qmi.ErrorCode, []qmi.TLV, error) {
	n := f.net
	// The call's address pool: its APN's, the mux ID's share of it
	// (mux k+1 is the pool's k-th session, NetworkConfig.APNs).
	carrier := func(apn string) *Carrier {
		pool, _ := n.cfg.carrierFor(apn)
		sc := n.renumberedLocked(pool.ForSession(int(c.mux) - 1))
		return &sc
	}
	switch m.ID {
	case qmi.WDSBindMuxDataPort:
		b, err := qmi.ParseBindMuxDataPort(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		if b.Endpoint.Type != qmi.EndpointPCIe || b.MuxID == 0 || b.MuxID == 0xFF {
			return qmi.ErrInvalidArgument, nil, nil
		}
		if c.handle != 0 {
			return qmi.ErrIncompatibleState, nil, nil
		}
		c.mux, c.bound = b.MuxID, true
		return 0, nil, nil
	case qmi.WDSSetIPFamily:
		fam, err := qmi.ParseIPFamily(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		if fam != qmi.IPv4 && fam != qmi.IPv6 {
			return qmi.ErrInvalidArgument, nil, nil
		}
		c.family = fam
		return 0, nil, nil
	case qmi.WDSStartNetwork:
		req, err := qmi.ParseStartNetwork(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		if c.handle != 0 {
			return qmi.ErrNoEffect, nil, nil
		}
		fam := c.family
		if req.Family != qmi.IPFamilyUnspecified {
			fam = req.Family
		}
		if fam != qmi.IPv4 && fam != qmi.IPv6 {
			return qmi.ErrInvalidArgument, nil, nil
		}
		if st, nw := n.admitCallLocked(req.APN, req.User, req.Password, fam); st != mbim.StatusNone {
			return qmi.ErrCallFailed, callEnd(nw).TLVs(), nil
		}
		car := carrier(req.APN)
		if (fam == qmi.IPv4 && !car.IPv4.IsValid()) || (fam == qmi.IPv6 && !car.IPv6.IsValid()) {
			// The network has no address of this family (3GPP
			// cause 50/51: PDN type IPv4/IPv6 only allowed).
			nw := mbim.NwError(51)
			if fam == qmi.IPv6 {
				nw = 50
			}
			return qmi.ErrCallFailed, callEnd(nw).TLVs(), nil
		}
		if f.format.DLAggregation != qmi.AggregationDisabled && !c.bound {
			f.violationLocked("%s with QMAP aggregation on but no mux ID bound (WDS Bind Mux Data Port first)", m)
			return qmi.ErrIncompatibleState, nil, nil
		}
		f.handle++
		if f.handle == 0 {
			f.handle = 1
		}
		c.family, c.handle, c.apn = fam, f.handle, req.APN
		f.indicateStatusLocked(m.Client, c, qmi.StatusConnected, qmi.CallEnd{})
		if fam == qmi.IPv6 {
			n.raChangedLocked()
		}
		return 0, []qmi.TLV{{Type: 0x01, Value: le32(c.handle)}}, nil
	case qmi.WDSStopNetwork:
		h, err := qmi.ParseHandle(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		if c.handle == 0 || h != c.handle {
			return qmi.ErrInvalidHandle, nil, nil
		}
		c.handle = 0
		f.indicateStatusLocked(m.Client, c, qmi.StatusDisconnected, qmi.CallEnd{HasReason: true, Reason: 2})
		return 0, nil, nil
	case qmi.WDSGetPacketServiceStatus:
		s := qmi.StatusDisconnected
		if c.handle != 0 {
			s = qmi.StatusConnected
		}
		return 0, []qmi.TLV{{Type: 0x01, Value: []byte{byte(s)}}}, nil
	case qmi.WDSGetCurrentSettings:
		if len(m.TLVs) > 0 {
			if _, err := qmi.GetCurrentSettingsMask(m); err != nil {
				return 0, nil, parseErr(err)
			}
		}
		if c.handle == 0 {
			return qmi.ErrOutOfCall, nil, nil
		}
		car := carrier(c.apn)
		s := qmi.Settings{MTU: car.MTU, Family: c.family}
		if c.family == qmi.IPv4 {
			s.IPv4, s.IPv4Gateway, s.IPv4DNS = car.IPv4, car.IPv4Gateway, car.IPv4DNS
		} else {
			s.IPv6, s.IPv6Gateway, s.IPv6DNS = car.IPv6, car.IPv6Gateway, car.IPv6DNS
		}
		return 0, s.TLVs(), nil
	}
	return qmi.ErrInvalidQMICommand, nil, nil
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

func (f *QMIFunction) indicateStatusLocked(client uint8, c *qmiClient, s qmi.ConnectionStatus, end qmi.CallEnd) {
	ps := qmi.PacketStatus{Status: s, End: end, Family: c.family}
	f.sendLocked(ps.Indication(client))
}

func (f *QMIFunction) wdaLocked(m *qmi.Message, _ *qmiClient) (qmi.ErrorCode, []qmi.TLV, error) {
	switch m.ID {
	case qmi.WDAGetDataFormat:
		return 0, f.format.ResponseTLVs(), nil
	case qmi.WDASetDataFormat:
		req, err := qmi.ParseSetDataFormat(m)
		if err != nil {
			return 0, nil, parseErr(err)
		}
		if req.LinkLayer != qmi.LinkLayerRawIP {
			// This modem serves raw IP only (no 802.3 framing).
			return qmi.ErrInvalidArgument, nil, nil
		}
		if req.Endpoint != (qmi.Endpoint{}) && req.Endpoint.Type != qmi.EndpointPCIe {
			return qmi.ErrInvalidArgument, nil, nil
		}
		agreed := func(a qmi.Aggregation) qmi.Aggregation {
			switch {
			case a == qmi.AggregationDisabled:
				return a
			case a == qmi.AggregationQMAPv5 && f.cfg.MaxAggregation == qmi.AggregationQMAPv5:
				return a
			case a >= qmi.AggregationQMAP && a <= qmi.AggregationQMAPv5:
				return qmi.AggregationQMAP
			}
			return qmi.AggregationDisabled
		}
		d := qmi.DataFormat{LinkLayer: qmi.LinkLayerRawIP, ULAggregation: agreed(req.ULAggregation), DLAggregation: agreed(req.DLAggregation)}
		if d.DLAggregation != qmi.AggregationDisabled {
			d.DLMaxDatagrams, d.DLMaxSize = f.cfg.DLMaxDatagrams, f.cfg.DLMaxSize
			if req.DLMaxDatagrams != 0 {
				d.DLMaxDatagrams = min(req.DLMaxDatagrams, d.DLMaxDatagrams)
			}
			if req.DLMaxSize != 0 {
				d.DLMaxSize = min(req.DLMaxSize, d.DLMaxSize)
			}
		}
		if d.ULAggregation != qmi.AggregationDisabled {
			d.ULMaxDatagrams, d.ULMaxSize = f.cfg.ULMaxDatagrams, f.cfg.ULMaxSize
		}
		f.format = d
		return 0, d.ResponseTLVs(), nil
	}
	return qmi.ErrInvalidQMICommand, nil, nil
}

// ipv6SessionsLocked implements follower: the connected IPv6 calls, on
// their mux ID.
func (f *QMIFunction) ipv6SessionsLocked(yield func(session uint8, c Carrier)) {
	for id, c := range f.clients {
		if id.Service == qmi.ServiceWDS && c.handle != 0 && c.family == qmi.IPv6 {
			pool, _ := f.net.cfg.carrierFor(c.apn)
			yield(c.mux, pool.ForSession(int(c.mux)-1))
		}
	}
}

// networkEventLocked follows the network: a change of registration,
// packet service or carrier is reported as networkChangedLocked says.
func (f *QMIFunction) networkEventLocked(ev netEvent, nw mbim.NwError) {
	switch ev {
	case evCallsDeactivated:
		// Calls ended by a detach or a lost registration end in
		// networkChangedLocked, after the Serving System that says why.
		if f.out == nil {
			return
		}
		for id, c := range f.clients {
			if id.Service == qmi.ServiceWDS && c.handle != 0 {
				c.handle = 0
				f.indicateStatusLocked(id.Client, c, qmi.StatusDisconnected, callEnd(nw))
			}
		}
	case evRegistration, evPacketService:
		f.networkChangedLocked()
	case evCarrier:
		f.networkChangedLocked()
		f.reconfiguredLocked()
	}
}

// reconfiguredLocked tells each connected call that its settings changed
// (addresses, DNS servers, MTU): a Packet Service Status indication,
// still connected, with "reconfiguration required" set, after which the
// host reads them again (WDS Get Runtime Settings).
func (f *QMIFunction) reconfiguredLocked() {
	if f.out == nil {
		return
	}
	for id, c := range f.clients {
		if id.Service == qmi.ServiceWDS && c.handle != 0 {
			ps := qmi.PacketStatus{Status: qmi.StatusConnected, Reconfigure: true, Family: c.family}
			f.sendLocked(ps.Indication(id.Client))
		}
	}
}

// networkChangedLocked follows the shared network: a call the network can
// no longer carry (detached, deregistered, radio off) ends with a Packet
// Service Status indication; NAS clients get a Serving System indication
// when registration or attach changed.
func (f *QMIFunction) networkChangedLocked() {
	if f.out == nil {
		return
	}
	st := &f.net.st
	// Serving System first: a host that lost its call learns why.
	if ss := f.servingSystemLocked(); !f.ssSent || ss.Registration != f.lastSS.Registration || ss.PSAttach != f.lastSS.PSAttach {
		f.lastSS, f.ssSent = ss, true
		for id := range f.clients {
			if id.Service == qmi.ServiceNAS {
				m := &qmi.Message{Service: qmi.ServiceNAS, Client: id.Client, FromModem: true, Kind: qmi.Indication,
					ID: qmi.NASGetServingSystem, TLVs: ss.TLVs()}
				f.sendLocked(m)
			}
		}
	}
	up := st.radioOn() && st.reg.Registered() && st.ps == mbim.PacketServiceAttached
	for id, c := range f.clients {
		if id.Service == qmi.ServiceWDS && c.handle != 0 && !up {
			c.handle = 0
			f.indicateStatusLocked(id.Client, c, qmi.StatusDisconnected, callEnd(st.regNw))
		}
	}
}
