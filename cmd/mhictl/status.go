package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/stack"
)

func init() {
	register(&command{
		Name:  "status",
		Short: "Bring the modem up and print its session, network, link state.",
		Summary: `Bring the modem up (power, data session on -apn over MBIM or QMI, link)
and print registration, operator, signal, RAT, bands, carrier
aggregation, LTE/NR RSRP/RSRQ/SINR, SIM, packet service, session,
addresses, DNS, MTU and link counters (docs/GETTING-ONLINE.md says where
each comes from). The control protocol is MBIM when
the profile has an MBIM channel and QMI otherwise (telit-fn980-hwv1);
-control forces one. With -device sim the emulated modem (qcom-sdx55m, as
for every command, unless -profile names another) and its carrier network
run in this process; -sim-apn and -sim-absent make the emulated bring-up
fail the way a real one can; -sim-operator and -sim-cell set the emulated
network's name and cell (RATs, signal, bands, drift). A modem whose firmware had crashed into its
RAM-dump mode (EE RDDM) is dumped before it is reset: status reports the
dump and -dump FILE writes it (-sim-crash emulates such a modem).`,
		Run: status,
	})
}

// sessionFlags are the data-session flags of the commands that bring the
// whole stack up (status, capture), plus knobs of the emulated modem.
type sessionFlags struct {
	*deviceFlags
	apn, user, password, pin string
	pinFile, puk             string
	control                  string
	simAPN                   string
	simAbsent                bool
	simCrashDump             []byte // status -sim-crash
	fccUnlock                bool
	allowRoaming, simRoaming bool
	simOperator              string
	simCell                  simCellFlag
}

// simCrashImage is the RAM dump the emulated modem of -sim-crash holds.
func simCrashImage() []byte {
	return bytes.Repeat([]byte("mhictl -sim-crash RAM dump\n"), 1024)
}

func addSessionFlags(fs *flag.FlagSet) *sessionFlags {
	f := &sessionFlags{deviceFlags: addDeviceFlags(fs)}
	fs.StringVar(&f.apn, "apn", "internet", "access point name of the data session")
	fs.StringVar(&f.user, "user", "", "user name of the data session, if the carrier wants one")
	fs.StringVar(&f.password, "password", "", "password of the data session")
	fs.StringVar(&f.pin, "pin", "", "SIM `PIN`, entered once if the SIM asks for it (a rejected PIN is never retried: each try burns one);\n"+
		"prefer -pin-file or the "+stack.PINEnv+" environment variable, which keep it out of the process list")
	fs.StringVar(&f.pinFile, "pin-file", "", "read the SIM PIN from the first line of this `file`")
	fs.StringVar(&f.puk, "puk", "", "SIM `PUK` (8 digits), entered once only if the SIM asks for it, with -pin as the new PIN")
	fs.BoolVar(&f.fccUnlock, "fcc-unlock", false, "run the modem's FCC unlock (the vendor command ModemManager's fcc-unlock.d scripts send) if the\n"+
		"modem is FCC-locked; off by default: unlocking is your legal choice (docs/GETTING-ONLINE.md, \"FCC lock\")")
	fs.BoolVar(&f.allowRoaming, "allow-roaming", false, "bring the data session up while the modem is registered on a visited network (roaming data can cost a lot);\n"+
		"off by default: a roaming modem gets no session (docs/GETTING-ONLINE.md, \"Roaming\")")
	fs.StringVar(&f.control, "control", "", "control `protocol` of the data session: mbim or qmi (default: mbim if the profile has an MBIM channel, else qmi;\n"+
		"a QMI session carries data as QMAP, v5 if the modem agrees)")
	fs.StringVar(&f.simAPN, "sim-apn", "", "-device sim: the only APN the emulated carrier accepts (default: any)")
	fs.BoolVar(&f.simAbsent, "sim-absent", false, "-device sim: emulate a modem without a SIM")
	fs.BoolVar(&f.simRoaming, "sim-roaming", false, "-device sim: the emulated modem registers on a visited network (roaming)")
	addSimRadioFlags(fs, f)
	return f
}

// check validates the device flags and -control.
func (f *sessionFlags) check() error {
	if err := f.deviceFlags.check(); err != nil {
		return err
	}
	if f.control != "" && f.control != "mbim" && f.control != "qmi" {
		return usagef("-control: want mbim or qmi, got %q", f.control)
	}
	return nil
}

// openStack brings the modem up to a configured stack.
func (f *sessionFlags) openStack(ctx context.Context) (*stack.Stack, error) {
	pin, err := stack.ReadPIN(f.pin, f.pinFile)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if f.puk != "" && pin == "" {
		return nil, usagef("-puk needs the new PIN: give it with -pin, -pin-file or %s", stack.PINEnv)
	}
	opts := stack.Options{Device: f.device, Profile: f.profile, Control: f.control, APN: f.apn, User: f.user, Password: f.password,
		PIN: pin, PUK: f.puk, FCCUnlock: f.fccUnlock, AllowRoaming: f.allowRoaming}
	if f.device == "sim" {
		opts.Profile = f.simProfile().Name
		opts.Sim.NetworkConfig.APN = f.simAPN
		opts.Sim.NetworkConfig.SIMAbsent = f.simAbsent
		opts.Sim.NetworkConfig.Roaming = f.simRoaming
		opts.Sim.Modem.CrashedRDDM = f.simCrashDump
		opts.Sim.NetworkConfig.ProviderName = f.simOperator
		opts.Sim.NetworkConfig.Cell = f.simCell.cell
	}
	s, err := stack.Open(ctx, opts)
	if err != nil {
		return nil, hint(sessionHint(fmt.Errorf("bring-up: %w", err)))
	}
	return s, nil
}

// sessionHint says what to do about data-session failures.
func sessionHint(err error) error {
	switch {
	case errors.Is(err, stack.ErrFCCLocked), errors.Is(err, stack.ErrSIMLocked):
		return err // its text names the flag
	case errors.Is(err, mbim.ErrSIMNotInserted):
		return fmt.Errorf("%w; insert a SIM (and power-cycle the modem)", err)
	case errors.Is(err, mbim.ErrPINRequired):
		return fmt.Errorf("%w; give the SIM PIN with -pin", err)
	case errors.Is(err, mbim.ErrBadAPN):
		return fmt.Errorf("%w; check -apn against the carrier's settings", err)
	case errors.Is(err, mbim.ErrBadCredentials):
		return fmt.Errorf("%w; check -user and -password", err)
	case errors.Is(err, mbim.ErrRadioOff):
		return fmt.Errorf("%w; the radio is switched off (airplane mode?)", err)
	case errors.Is(err, mbim.ErrNoService), errors.Is(err, qmi.ErrNoService):
		return fmt.Errorf("%w; no network to register on: check the antennas and coverage", err)
	case errors.Is(err, qmi.ErrSIM) && strings.Contains(err.Error(), "PIN"):
		return fmt.Errorf("%w; give the SIM PIN with -pin", err)
	case errors.Is(err, qmi.ErrSIM):
		return fmt.Errorf("%w; insert a SIM (and power-cycle the modem)", err)
	case errors.Is(err, qmi.ErrCallFailed) && strings.Contains(err.Error(), "3GPP cause 27"):
		return fmt.Errorf("%w; check -apn against the carrier's settings", err)
	case errors.Is(err, qmi.ErrCallFailed) && strings.Contains(err.Error(), "3GPP cause 29"):
		return fmt.Errorf("%w; check -user and -password", err)
	}
	return err
}

// Radio states status reports: a session came up (so the radio is on),
// or the modem is FCC-locked.
const (
	radioOn        = "on"
	radioFCCLocked = "fcc-locked"
)

type statusOut struct {
	Device       string       `json:"device"`
	Profile      string       `json:"profile"`
	APN          string       `json:"apn"`
	Radio        string       `json:"radio"` // radioOn, or radioFCCLocked (the bring-up stopped there)
	Registration string       `json:"registration"`
	ProviderID   string       `json:"provider_id"`
	ProviderName string       `json:"provider_name"`
	Roaming      string       `json:"roaming,omitempty"`
	DataClasses  string       `json:"data_classes"`
	RSSI         uint32       `json:"rssi"`               // MBIM coded RSSI (0..31, 99 unknown)
	RSSIdBm      *int         `json:"rssi_dbm,omitempty"` // nil when unknown
	ErrorRate    uint32       `json:"error_rate"`         // MBIM coded (0..7, 99 unknown)
	PacketSvc    string       `json:"packet_service"`
	UplinkBps    uint64       `json:"uplink_bps"`
	DownlinkBps  uint64       `json:"downlink_bps"`
	Session      string       `json:"session"`
	IPType       string       `json:"ip_type"`
	LinkUp       bool         `json:"link_up"`
	IPv4         []string     `json:"ipv4"`
	IPv6         []string     `json:"ipv6"`
	DNS          []string     `json:"dns"`
	MTU          uint32       `json:"mtu"`
	Counters     linkCounters `json:"counters"`
	radioOut
	// CrashDump is set when the modem's firmware had crashed into RDDM
	// and the bring-up collected its RAM dump.
	CrashDump *dumpOut `json:"crash_dump,omitempty"`
}

type dumpOut struct {
	Bytes int    `json:"bytes"`
	Time  string `json:"time"`           // RFC 3339, UTC
	File  string `json:"file,omitempty"` // where -dump wrote it
}

type linkCounters struct {
	RXPackets   uint64 `json:"rx_packets"`
	RXBytes     uint64 `json:"rx_bytes"`
	TXPackets   uint64 `json:"tx_packets"`
	TXBytes     uint64 `json:"tx_bytes"`
	RXDrops     uint64 `json:"rx_drops"`
	TXDrops     uint64 `json:"tx_drops"`
	RXErrors    uint64 `json:"rx_errors"`
	RXAllocFail uint64 `json:"rx_alloc_fail"`
}

func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["status"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] [-apn APN] [flags]", stderr)
	sf := addSessionFlags(fs)
	dumpFile := fs.String("dump", "", "write the RAM dump to this `file` if the modem's firmware had crashed (EE RDDM) and the\n"+
		"bring-up collected it before resetting the modem; status reports such a dump either way")
	simCrash := fs.Bool("sim-crash", false, "-device sim: the emulated modem starts crashed in RDDM, holding a test RAM dump")
	if err := parseNoArgs(fs, args, sf.check); err != nil {
		return err
	}
	if *simCrash {
		if sf.device != "sim" {
			return usagef("-sim-crash needs -device sim")
		}
		sf.simCrashDump = simCrashImage()
	}
	ctx, cancel := sf.context(ctx)
	defer cancel()
	s, err := sf.openStack(ctx)
	if errors.Is(err, stack.ErrFCCLocked) {
		// The bring-up stops at the radio: say so, then why.
		if sf.device == "sim" {
			sf.profile = sf.simProfile().Name
		}
		out := &statusOut{Device: sf.device, Profile: sf.profile, Radio: radioFCCLocked}
		if sf.json {
			writeJSON(stdout, out)
		} else {
			fmt.Fprintf(stdout, "device  %s  %s\nradio   %s\n", out.Device, out.Profile, out.Radio)
		}
	}
	if err != nil {
		return err
	}
	defer s.Close()
	out, err := collectStatus(ctx, sf, s)
	if err != nil {
		return hint(err)
	}
	if out.radioOut, err = collectRadio(ctx, s); err != nil {
		return hint(err)
	}
	if d, ok := s.Controller().LastCrashDump(); ok {
		out.CrashDump = &dumpOut{Bytes: len(d.Data), Time: d.Time.UTC().Format(time.RFC3339Nano)}
		if *dumpFile != "" {
			if err := os.WriteFile(*dumpFile, d.Data, 0o600); err != nil {
				return fmt.Errorf("-dump: %w", err)
			}
			out.CrashDump.File = *dumpFile
		}
	}
	if sf.json {
		return writeJSON(stdout, out)
	}
	printStatus(stdout, out)
	return nil
}

// collectStatus asks the modem (MBIM or QMI) and the stack what status
// prints.
func collectStatus(ctx context.Context, sf *sessionFlags, s *stack.Stack) (*statusOut, error) {
	if s.QMI() != nil {
		return collectStatusQMI(ctx, sf, s)
	}
	cl := s.MBIM()
	reg, err := cl.RegisterState(ctx)
	if err != nil {
		return nil, fmt.Errorf("REGISTER_STATE: %w", err)
	}
	sig, err := cl.SignalState(ctx)
	if err != nil {
		return nil, fmt.Errorf("SIGNAL_STATE: %w", err)
	}
	ps, err := cl.PacketService(ctx)
	if err != nil {
		return nil, fmt.Errorf("PACKET_SERVICE: %w", err)
	}
	cs, err := cl.ConnectState(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("CONNECT: %w", err)
	}
	out := &statusOut{
		Device:       sf.device,
		Profile:      s.Controller().Profile().Name,
		Radio:        radioOn,
		APN:          sf.apn,
		Registration: reg.State.String(),
		ProviderID:   reg.ProviderID,
		ProviderName: reg.ProviderName,
		Roaming:      reg.RoamingText,
		DataClasses:  reg.AvailableDataClasses.String(),
		RSSI:         sig.RSSI,
		ErrorRate:    sig.ErrorRate,
		PacketSvc:    ps.State.String(),
		UplinkBps:    ps.UplinkSpeed,
		DownlinkBps:  ps.DownlinkSpeed,
		Session:      cs.ActivationState.String(),
		IPType:       cs.IPType.String(),
		LinkUp:       s.LinkUp(),
		IPv4:         []string{},
		IPv6:         []string{},
		DNS:          []string{},
		MTU:          s.MTU(),
	}
	if dbm, ok := sig.DBm(); ok {
		out.RSSIdBm = &dbm
	}
	stackStatus(out, s)
	return out, nil
}

// collectStatusQMI asks NAS (on a client ID of its own, released after)
// what a QMI modem has of status's fields; the session's state is the
// link's.
func collectStatusQMI(ctx context.Context, sf *sessionFlags, s *stack.Stack) (*statusOut, error) {
	qc := s.QMI()
	cid, err := qc.AllocateCID(ctx, qmi.ServiceNAS)
	if err != nil {
		return nil, fmt.Errorf("QMI: %w", err)
	}
	defer qc.ReleaseCID(context.WithoutCancel(ctx), qmi.ClientID{Service: qmi.ServiceNAS, Client: cid})
	nas := qmi.NAS{ServiceClient: qc.Service(qmi.ServiceNAS, cid)}
	ss, err := nas.ServingSystem(ctx)
	if err != nil {
		return nil, err
	}
	out := &statusOut{
		Device:       sf.device,
		Profile:      s.Controller().Profile().Name,
		Radio:        radioOn,
		APN:          sf.apn,
		Registration: ss.Registration.String(),
		RSSI:         99,
		ErrorRate:    99,
		PacketSvc:    "detached",
		Session:      "deactivated",
		IPType:       "none",
		LinkUp:       s.LinkUp(),
		IPv4:         []string{},
		IPv6:         []string{},
		DNS:          []string{},
		MTU:          s.MTU(),
	}
	var radios []string
	for _, ri := range ss.RadioInterfaces {
		radios = append(radios, ri.String())
	}
	out.DataClasses = strings.Join(radios, "|")
	if p := ss.PLMN; p != nil {
		out.ProviderName = p.Description
		if p.MCC != 0 {
			out.ProviderID = fmt.Sprintf("%03d%02d", p.MCC, p.MNC)
		}
	}
	if ss.Registration == qmi.Registered {
		// MBIM's words, so status reads the same on both.
		out.Registration = "home"
		if ss.HasRoaming && ss.Roaming == 0 {
			out.Registration = "roaming"
		}
	}
	if ss.PSAttach == qmi.Attached {
		out.PacketSvc = "attached"
	}
	if s.LinkUp() {
		out.Session = "activated"
	}
	if sig, err := nas.SignalStrength(ctx); err == nil {
		dbm := int(sig.Strength)
		out.RSSIdBm = &dbm
		// The MBIM coding status prints: -113 dBm + 2 per step.
		out.RSSI = uint32(min(max((dbm+113)/2, 0), 31))
	}
	stackStatus(out, s)
	v4, v6 := len(out.IPv4) > 0, len(out.IPv6) > 0
	switch {
	case v4 && v6:
		out.IPType = "ipv4v6"
	case v4:
		out.IPType = "ipv4"
	case v6:
		out.IPType = "ipv6"
	}
	return out, nil
}

// stackStatus fills in what the stack knows: addresses, DNS, counters.
func stackStatus(out *statusOut, s *stack.Stack) {
	for _, p := range s.Addresses() {
		if p.Addr().Is4() {
			out.IPv4 = append(out.IPv4, p.String())
		} else {
			out.IPv6 = append(out.IPv6, p.String())
		}
	}
	for _, a := range s.DNSServers() {
		out.DNS = append(out.DNS, a.String())
	}
	st := s.Stats()
	out.Counters = linkCounters{RXPackets: st.RXPackets, RXBytes: st.RXBytes, TXPackets: st.TXPackets, TXBytes: st.TXBytes}
	if l := st.Link; l != nil {
		out.Counters = countersOf(l)
	}
}

func countersOf(l *link.Stats) linkCounters {
	d := l.RXDrops
	t := l.TXDrops
	return linkCounters{
		RXPackets: l.RXPackets, RXBytes: l.RXBytes, TXPackets: l.TXPackets, TXBytes: l.TXBytes,
		RXDrops:     d.Oversize + d.Truncated + d.Protocol + d.Checksum + d.NotAttached + d.Backlog + d.Session,
		TXDrops:     t.TooBig + t.Timeout + t.LinkDown + t.Closed,
		RXErrors:    l.RXErrors,
		RXAllocFail: l.RXAllocFail,
	}
}

func printStatus(w io.Writer, o *statusOut) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "device\t%s\t%s\n", o.Device, o.Profile)
	op := o.ProviderName
	if o.ProviderID != "" {
		op += " (" + o.ProviderID + ")"
	}
	fmt.Fprintf(tw, "radio\t%s\n", o.Radio)
	fmt.Fprintf(tw, "registration\t%s\t%s\n", o.Registration, o.DataClasses)
	if o.Roaming != "" {
		op += ", roaming " + o.Roaming
	}
	fmt.Fprintf(tw, "operator\t%s\n", op)
	sig := fmt.Sprintf("rssi %d", o.RSSI)
	if o.RSSIdBm != nil {
		sig += fmt.Sprintf(" (%d dBm)", *o.RSSIdBm)
	} else {
		sig += " (unknown)"
	}
	fmt.Fprintf(tw, "signal\t%s, error rate %d\n", sig, o.ErrorRate)
	printRadio(tw, &o.radioOut, o.ProviderName)
	fmt.Fprintf(tw, "packet service\t%s\tUL %s, DL %s\n", o.PacketSvc, bps(o.UplinkBps), bps(o.DownlinkBps))
	fmt.Fprintf(tw, "session\t%s\tAPN %q, %s, link %s\n", o.Session, o.APN, o.IPType, upDown(o.LinkUp))
	fmt.Fprintf(tw, "IPv4\t%s\n", orDash(o.IPv4))
	fmt.Fprintf(tw, "IPv6\t%s\n", orDash(o.IPv6))
	fmt.Fprintf(tw, "DNS\t%s\n", orDash(o.DNS))
	fmt.Fprintf(tw, "MTU\t%d\n", o.MTU)
	c := o.Counters
	fmt.Fprintf(tw, "rx\t%d packets\t%d bytes\t%d drops\t%d errors\t%d rx_alloc_fail\n", c.RXPackets, c.RXBytes, c.RXDrops, c.RXErrors, c.RXAllocFail)
	fmt.Fprintf(tw, "tx\t%d packets\t%d bytes\t%d drops\n", c.TXPackets, c.TXBytes, c.TXDrops)
	if d := o.CrashDump; d != nil {
		where := "not written (-dump FILE writes it)"
		if d.File != "" {
			where = "written to " + d.File
		}
		fmt.Fprintf(tw, "crash dump\t%d bytes collected at %s, %s\n", d.Bytes, d.Time, where)
	}
	tw.Flush()
}

func orDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

func bps(v uint64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1f Gbit/s", float64(v)/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f Mbit/s", float64(v)/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kbit/s", float64(v)/1e3)
	}
	return fmt.Sprintf("%d bit/s", v)
}
