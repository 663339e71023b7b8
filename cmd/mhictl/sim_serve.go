package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/firehose"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
)

// serveBurstIdle is how long a served modem's burst channel keeps polling
// with nothing new before it posts DB_MODE. Linux's host (drivers/bus/mhi/host/main.c)
// rings a burst channel's doorbell and only then clears its doorbell-mode
// flag, without the channel lock that its DB_MODE handler takes; a vCPU
// held up between the two (a doorbell write is an exit to QEMU and a
// message to this server) can see its clear land after a DB_MODE the modem
// posted in the meantime, and then never rings that channel again. With
// 2 ms the kernel cross-check's guests stalled their UL in about one run
// in five on a loaded 2-core host (docs/KERNEL-CROSSCHECK.md); hardware
// answers an MMIO write in about a microsecond and rarely opens the window.
// A longer poll only narrows it; the modem's doorbell-mode watchdog
// (sim.Options.DBModeWatchdog, -dbmode-watchdog) closes it, at the cost of
// about 125 ms of stall each time the race hits. 50 ms stays the default:
// with 2 ms and the watchdog, one full cross-check run still lost 4 of
// 1000 burst pings, cause not found (docs/KERNEL-CROSSCHECK.md).
const serveBurstIdle = 50 * time.Millisecond

// serveReadyDelay is how long a served modem with the slow-ready quirk
// takes to come up READY: long enough to see a host wait for it (and
// report its progress), far inside every budget Linux gives such a
// modem (pci_generic ready_timeout_ms, 50 s and more).
const serveReadyDelay = 2 * time.Second

// quirkFlag collects -quirk NAME[,NAME…]; "list" asks for the registry.
type quirkFlag struct {
	quirks []sim.Quirk
	list   bool
}

func (f *quirkFlag) String() string {
	if f == nil {
		return ""
	}
	var s []string
	for _, q := range f.quirks {
		s = append(s, string(q))
	}
	return strings.Join(s, ",")
}

func (f *quirkFlag) Set(v string) error {
	if v == "list" {
		f.list = true
		return nil
	}
	qs, err := sim.ParseQuirks(v)
	if err != nil {
		return err
	}
	f.quirks = append(f.quirks, qs...)
	return nil
}

// printQuirks writes the quirk registry: name, the models that have it,
// what the modem does, the public source.
func printQuirks(w io.Writer) {
	for _, q := range sim.Registry() {
		var models []string
		if q.Models != nil {
			for _, p := range mhi.Profiles() {
				if q.Models(p) {
					models = append(models, p.Name)
				}
			}
		}
		m := strings.Join(models, " ")
		if m == "" {
			m = "-"
		}
		fmt.Fprintf(w, "%s\n  %s\n  models: %s (%s)\n  source: %s\n", q.Name, q.Description, m, q.ModelsText, q.Source)
	}
}

func init() {
	register(&command{
		Name:  "sim serve",
		Short: "Serve the emulated modem over vfio-user (QEMU, vfio-user:PATH).",
		Summary: `Run the emulated modem as a vfio-user server (for a QEMU guest, or for
mhistack itself in another process).

The server listens on a UNIX socket for QEMU's vfio-user-pci device
(-device vfio-user-pci,socket=PATH; guest RAM must be memory-backend-memfd
with share=on); the guest kernel then drives the modem as a PCI function.
mhiproxy, the other mhictl commands and stack.Open drive it directly with
-device vfio-user:PATH (docs/VFIO.md §9). SIGUSR1 makes the modem
crash (SYS_ERR); SIGUSR2 logs the carrier networks' counters; SIGINT/SIGTERM
stop the server. -control PATH opens a UNIX socket for faults at run time,
one command per line, one reply line each ("ok ..." or "error ..."):
syserr (alias crash: the firmware crashes, SYS_ERR), slow DURATION (a slow
device: a pause per TRE and per event; slow 0 ends it), m1 (the modem goes
idle), fail-bhi CODE (the next BHI download fails), refuse-pdn
CAUSE[:LIMIT] (the network refuses data sessions with that 3GPP cause, as
-refuse-pdn; refuse-pdn off ends it), deactivate CAUSE (the network ends
every data session with that cause, the modem staying attached), renumber
[VALID] (the network moves every IPv6 session to another /64 while it
stays up: it advertises the new prefix, and the old one deprecated until
VALID, default 5m, has passed), stats
(state, DMA windows, refused DMAs, violations, carrier counters); "mhictl
sim control" is a client. The device DMAs only into memory the client (QEMU) mapped:
an access outside every DMA map is refused and counted (dma_faults). Data channel pairs (IP_HW0, IP_SW0, IP_HW0_MBIM) answer
pings, the MBIM pair runs the emulated MBIM function (link/mbim's peer:
OPEN, BASIC_CONNECT, a data session) and the QMI pair the emulated QMI
function (CTL, DMS, NAS, UIM, WDS, WDA; sharing the MBIM function's SIM,
registration and calls when the profile has both), the AT pair (DUN, else
DUN2) the emulated AT port (mhictl at: ATI, AT+CSQ, AT+COPS?, ... from the
same network) and the NMEA pair the emulated GNSS receiver (mhictl gnss:
GGA, RMC and GSV once a second) unless -function says otherwise;
-function SAHARA=sahara (with -boot pbl, on a modem with a SAHARA pair such
as qcom-qdu100) holds the modem in its SBL, whose Sahara server asks the
host for the images of -sahara-images (docs/FLASHING.md).
-function NAME=carrier puts the carrier network on a data pair: TCP and UDP
to 198.18.0.1 reach this host's 127.0.0.1, other destinations the host's
network, and DL packets are aggregated like a modem (-flush-delay).
-radio PRESET|FILE puts a radio link model on every carrier network's side
of the modem, both ways: a bottleneck rate or trace, a drop-tail or CoDel
queue, one-way delay, loss, handover gaps and RRC promotion after idle
(-radio list prints the presets: lte, nr-sa, nr-mmwave, nr-mmwave-far,
nr-mmwave-far-scaled, congested-cell, handover-train; docs/RADIO.md); its
counters join the
carrier counters (SIGUSR2, stats).
-signal PRESET|FILE plays the emulated cell's signal over time, which the
MBIM and QMI functions both report (RSRP, RSRQ, SINR, RATs, bands): by
default a gentle drift of LTE B3; -signal list prints the presets (drift,
steady, fade, endc, handover), a FILE holds one step per line
(TIME,lte=RSRP/RSRQ/SINR,nr=...,bands=B3+n78; repeat=DURATION).

The modem plays the documented behaviours (quirks) of the profile's model,
e.g. slow-ready (READY comes up -ready-delay after power-on or a reset) or
no-inband-wake (a write to the wake doorbell wedges it); -quirk adds more,
-no-profile-quirks drops the model's, -quirk list prints them all
(docs/QUIRKS.md).`,
		Run: simServe,
	})
}

// functionFlag collects -function NAME=KIND.
type functionFlag map[string]string

func (f functionFlag) String() string {
	var s []string
	for k, v := range f {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func (f functionFlag) Set(v string) error {
	name, kind, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=KIND, got %q", v)
	}
	switch kind {
	case "icmp", "loopback", "mbim", "qmi", "at", "gnss", "none", "carrier", "carrier-qmap", "carrier-qmap5", "firehose", "sahara":
	default:
		return fmt.Errorf("unknown function %q (icmp, carrier, carrier-qmap, carrier-qmap5, loopback, mbim, qmi, at, gnss, firehose, sahara, none)", kind)
	}
	f[name] = kind
	return nil
}

// refusalFlag is -refuse-pdn CAUSE[:LIMIT] (simnet.NetworkConfig's
// ConnectReject, ConnectRejectCalls, ConnectRejectFor).
type refusalFlag struct {
	cause mbim.NwError
	calls int
	d     time.Duration
}

func (f *refusalFlag) String() string {
	switch {
	case f.cause == 0:
		return ""
	case f.calls > 0:
		return fmt.Sprintf("%d:%d", f.cause, f.calls)
	case f.d > 0:
		return fmt.Sprintf("%d:%v", f.cause, f.d)
	}
	return fmt.Sprint(uint32(f.cause))
}

func (f *refusalFlag) Set(v string) error {
	c, limit, hasLimit := strings.Cut(v, ":")
	cause, err := strconv.ParseUint(c, 10, 8)
	if err != nil || cause == 0 {
		return fmt.Errorf("%q: want a 3GPP cause 1..255 (26 insufficient resources, 33 option not subscribed), optionally :COUNT or :DURATION", v)
	}
	*f = refusalFlag{cause: mbim.NwError(cause)}
	if !hasLimit {
		return nil
	}
	if n, err := strconv.Atoi(limit); err == nil {
		if n <= 0 {
			return fmt.Errorf("%q: the count of refused attempts must be positive", v)
		}
		f.calls = n
		return nil
	}
	d, err := time.ParseDuration(limit)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: the limit is a count of attempts (3) or a positive duration (30s)", v)
	}
	f.d = d
	return nil
}

func simServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["sim serve"]
	fs := newFlagSet(c, "-socket PATH [flags]", stderr)
	profile := fs.String("profile", "qcom-sdx55m", "modem `profile` to impersonate (mhi profile table name)")
	socket := fs.String("socket", "", "UNIX socket `path` to listen on (required; a stale socket is replaced)")
	boot := fs.String("boot", "amss", "execution environment at power-on: amss (mission mode firmware) or pbl (boot ROM waiting for a BHI download)")
	strict := fs.Bool("strict", false, "log every host protocol violation as an error and exit 1 if there was any")
	idIndex := fs.Int("id-index", 0, "which of the profile's PCI IDs to present")
	functions := functionFlag{}
	fs.Var(functions, "function", "attach a function to a channel pair: `NAME=KIND`, KIND at (the AT port), gnss (the NMEA port), icmp, carrier (the carrier network in the pair's Linux framing: raw IP, MBIM NTB16 on IP_HW0_MBIM), carrier-qmap, carrier-qmap5 (QMAP MAPv1/MAPv5 for rmnet), loopback, mbim, qmi, firehose (the flash programmer over emulated UFS, for FIREHOSE: mhictl flash -device vfio-user:PATH), sahara (the SBL's Sahara server asking for -sahara-images, for SAHARA; needs -boot pbl and holds the modem in its SBL) or none (repeatable)")
	saharaImages := fs.String("sahara-images", "13:65536", "with a sahara function: the images the emulated SBL asks the host for, in order (`ID:SIZE`[,ID:SIZE...]; the host's file for an ID must hold at least SIZE bytes)")
	flushDelay := fs.Duration("flush-delay", 0, "carrier network: how long a DL frame waits for more packets after its first (0: 200µs)")
	radioName := fs.String("radio", "", "carrier network: put a radio link model between the modem and the network, both ways: a preset `NAME` or a JSON FILE (rate or trace, queue, delay, loss, handover gaps, RRC promotion; docs/RADIO.md); list: print the presets and exit (default: none, packets pass at once)")
	noModeration := fs.Bool("no-moderation", false, "raise an MSI for every event (ignore BEI/INTMODT)")
	burstIdle := fs.Duration("burst-idle", serveBurstIdle, "idle time before a polling burst channel sends DB_MODE (longer than the in-process modem's 2 ms: a host behind QEMU can take milliseconds between its doorbell write and the next instruction, see serveBurstIdle)")
	pollInterval := fs.Duration("poll-interval", 0, "burst channel polling interval (0: modem default)")
	dbModeWatchdog := fs.Duration("dbmode-watchdog", 0, "how often a burst channel in doorbell mode (after its DB_MODE) re-reads the context write pointer and polls again if the host moved it without ringing (0: modem default, 100ms; negative: never); see serveBurstIdle")
	sblTime := fs.Duration("sbl-time", 0, "how long the SBL runs before AMSS with -boot pbl (0: modem default)")
	loseFW := fs.Bool("lose-firmware-on-syserr", false, "come back in PBL after a SYS_ERR recovery reset")
	fullChain := fs.Bool("full-boot-chain", false, "with -boot pbl: the SBL waits for the whole image over BHIe (mhictl fw load -bhie) instead of moving on to mission mode by itself")
	slow := fs.Duration("slow", 0, "sleep this long per TRE and per event (a slow modem)")
	syserrAfter := fs.Duration("syserr-after", 0, "crash (SYS_ERR) once, this long after the modem first reaches mission mode (0: never; SIGUSR1 works any time)")
	once := fs.Bool("once", false, "exit when the first client disconnects (QEMU exited)")
	controlPath := fs.String("control", "", "UNIX socket `path` for run-time faults and counters (see above; a stale socket is replaced)")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logVFIO := fs.Bool("log-messages", false, "log every vfio-user message (at debug level; very verbose)")
	quirks := &quirkFlag{}
	fs.Var(quirks, "quirk", "play a documented real-modem behaviour besides the profile's own (`NAME`[,NAME...], repeatable; list: print them and exit; docs/QUIRKS.md)")
	noProfileQuirks := fs.Bool("no-profile-quirks", false, "do not play the quirks the profile's model has (the modem's, and the carrier's NTB sequence glitches)")
	ntbQuirks := fs.String("ntb-quirk", "", "carrier functions on an MBIM pair: play these DL NTB oddities besides the profile's (`NAME`[,NAME...]: "+
		simnet.NTBQuirkSequence+" (wSequence restarts and repeats), "+simnet.NTBQuirkCyclic+" (last NDP chains back to the first), "+
		simnet.NTBQuirkNonIP+" (an ARP request in the IP session); every 8th NTB; docs/QUIRKS.md)")
	readyDelay := fs.Duration("ready-delay", serveReadyDelay, "with the slow-ready quirk: how long READY takes after power-on or a reset (0: at once)")
	fccLock := fs.Bool("fcc-lock", false, "start FCC-locked, as the presented PCI ID ships (mhi.Profile.FCCLock; a profile whose ID is not locked is a usage error):\n"+
		"the radio stays off until the host runs the vendor unlock (mhiproxy or mhictl -fcc-unlock; docs/GETTING-ONLINE.md)")
	var refusal refusalFlag
	fs.Var(&refusal, "refuse-pdn", "the network refuses data sessions (MBIM CONNECT, QMI WDS Start Network) with this 3GPP `CAUSE[:LIMIT]`: "+
		"for ever, or for LIMIT attempts (a count: 3) or for LIMIT from the first refusal (a duration: 30s), then accepts. "+
		"26 (insufficient resources), 34 or 38 (network failure) pass with time: a host retries with back-off, and stack.Open waits; "+
		"others, such as 33 (option not subscribed) or 27 (unknown APN), fail stack.Open at once (docs/GETTING-ONLINE.md, \"A network that refuses the data session\")")
	signalName := fs.String("signal", signalPresets[0].name, "the emulated cell's signal over time: a preset `NAME` or a FILE of steps (TIME,lte=RSRP/RSRQ/SINR,nr=...,bands=...;\n"+
		"repeat=DURATION; drift=SEED/INTERVAL); list: print the presets and exit (docs/GETTING-ONLINE.md, \"The emulated cell\")")
	simPIN := fs.String("sim-pin", "", "lock the emulated SIM with this `PIN` (3 tries, then the PUK 12345678): the host enters it with -pin (a host takes 4 to 8 digits)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if quirks.list {
		printQuirks(stdout)
		return nil
	}
	if *radioName == "list" {
		printRadioPresets(stdout)
		return nil
	}
	if *signalName == "list" {
		printSignalPresets(stdout)
		return nil
	}
	cell, err := loadSignal(*signalName)
	if err != nil {
		return usagef("-signal: %v", err)
	}
	carrier := simnet.CarrierOptions{FlushDelay: *flushDelay}
	if *radioName != "" {
		cfg, err := radio.Load(*radioName)
		if err != nil {
			return usagef("-radio: %v", err)
		}
		carrier.Radio = &cfg
	}
	if *socket == "" {
		return usagef("-socket is required")
	}
	p, ok := mhi.Lookup(*profile)
	if !ok {
		var names []string
		for _, p := range mhi.Profiles() {
			names = append(names, p.Name)
		}
		return usagef("unknown profile %q; known: %s", *profile, strings.Join(names, " "))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("-log-level: %v", err)
	}
	log, err := newLogger(stderr, *logFormat, level)
	if err != nil {
		return err
	}

	opts := sim.Options{
		Strict:               *strict,
		IDIndex:              *idIndex,
		DisableModeration:    *noModeration,
		BurstIdle:            *burstIdle,
		PollInterval:         *pollInterval,
		DBModeWatchdog:       *dbModeWatchdog,
		SBLTime:              *sblTime,
		LoseFirmwareOnSysErr: *loseFW,
		Quirks:               quirks.quirks,
		NoProfileQuirks:      *noProfileQuirks,
		ReadyDelay:           *readyDelay,
		Logger:               log.With("part", "modem"),
	}
	switch *boot {
	case "amss":
		opts.Boot = sim.BootAMSS
	case "pbl":
		opts.Boot = sim.BootPBL
	default:
		return usagef("-boot %q: want amss or pbl", *boot)
	}
	if *strict {
		opts.OnViolation = func(err error) { log.Error("host protocol violation", "err", err) }
	}
	// The carrier plays the model's NTB quirks unless the profile's
	// quirks are off (simnet.ProfileNTBQuirks).
	var ntbq simnet.NTBQuirks
	if !*noProfileQuirks {
		ntbq = simnet.ProfileNTBQuirks(p)
	}
	if *ntbQuirks != "" {
		var err error
		if ntbq, err = simnet.ParseNTBQuirks(ntbq, *ntbQuirks); err != nil {
			return usagef("-ntb-quirk: %v", err)
		}
	}
	carrier.NTBQuirks = ntbq
	network, err := serveNetwork(p, *idIndex, *fccLock, *simPIN)
	network.Cell = cell
	if err != nil {
		return err
	}
	network.ConnectReject, network.ConnectRejectCalls, network.ConnectRejectFor = refusal.cause, refusal.calls, refusal.d
	carrier.APNs = network.APNs
	fns, err := serveFunctions(p, functions, network, carrier, log)
	if err != nil {
		return err
	}
	defer fns.close()
	responders, carriers := fns.responders, fns.carriers
	opts.Functions = fns.all
	if err := serveSahara(fns, *saharaImages, &opts); err != nil {
		return err
	}
	if fns.qmi != nil {
		// The identity and network the QMI function reports (DMS Get
		// IDs, NAS Get Serving System): the kernel cross-check compares
		// qmicli's answers with them.
		var imei, plmn string
		fns.qmi.Network().Configure(func(c *simnet.NetworkConfig) { imei, plmn = c.DeviceID, c.ProviderID })
		log.Info("qmi function", "channel", "QMI", "imei", imei, "plmn", plmn, "shares_network_with_mbim", fns.mbim != nil)
	}
	modem, err := sim.New(p, opts)
	if err != nil {
		return err
	}
	if *slow > 0 {
		modem.SetSlow(*slow)
	}
	if *fullChain {
		modem.SetFullBootChain(true)
	}

	srvLog := log.With("part", "vfio-user")
	if !*logVFIO && level < slog.LevelInfo {
		// Debug logging of the modem without the per-message flood.
		srvLog = slog.New(levelFloor{srvLog.Handler(), slog.LevelInfo})
	}
	srv, err := vfiouser.New(modem, vfiouser.WithLogger(srvLog))
	if err != nil {
		return err
	}
	l, err := vfiouser.Listen(*socket)
	if err != nil {
		srv.Close()
		return err
	}
	// The signal handlers go in before "serving" is logged: whoever
	// waits for that line may signal at once, and SIGUSR2's default
	// action would kill the process.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	id := srv.Identity()
	log.Info("serving the emulated modem", "profile", p.Name, "pci", fmt.Sprintf("%04x:%04x", id.Vendor, id.Device),
		"socket", *socket, "boot", *boot, "functions", functions.String(), "quirks", fmt.Sprint(modem.Quirks()), "ntb_quirks", ntbq.String())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		if *once {
			c, err := l.AcceptUnix()
			l.Close()
			if err != nil {
				served <- err
				return
			}
			served <- srv.ServeConn(c)
			return
		}
		served <- srv.Serve(l)
	}()
	reqs := make(chan controlRequest)
	var ctl *controlServer
	if *controlPath != "" {
		if ctl, err = listenControl(*controlPath, reqs, log.With("part", "control")); err != nil {
			srv.Close()
			l.Close()
			return err
		}
	}
	handle := func(line string, crash func(string) error) string {
		return control(line, modem, srv, fns.network, crash, func() string { return logCarriers(log, carriers) })
	}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		// A test widens the window between "serving" and the watcher
		// (TestSimServeWithTheCarrierNetworkReportsItsCountersOnSIGUSR2):
		// a signal sent in it must wait in usr1/usr2, not kill us.
		if d, err := time.ParseDuration(os.Getenv("MHICTL_TEST_WATCH_DELAY")); err == nil && d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		watchModem(ctx, log, modem, *syserrAfter, usr1, usr2, func() { logCarriers(log, carriers) }, reqs, handle)
	}()

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case serveErr = <-served:
		served = nil
	}
	if ctl != nil {
		ctl.Close()
		os.Remove(*controlPath)
	}
	cancel()
	srv.Close()
	if served != nil {
		<-served
	}
	l.Close()
	os.Remove(*socket)
	<-watchDone

	violations := summarize(log, srv, modem, responders)
	logCarriers(log, carriers)
	if fns.qmi != nil {
		qs := fns.qmi.Stats()
		log.Info("qmi stats", "requests", qs.Requests, "indications", qs.Indications, "errors", qs.Errors,
			"violations", qs.Violations, "dropped", qs.Dropped)
	}
	if serveErr != nil && !errors.Is(serveErr, vfiouser.ErrClosed) {
		return serveErr
	}
	if *strict && violations > 0 {
		return fmt.Errorf("the host broke %d protocol rules (see the log)", violations)
	}
	return nil
}

// Function is sim.Function, named here so the options map reads simply.
type Function = sim.Function

// servedFunctions are what a served modem runs behind its channel pairs.
type servedFunctions struct {
	all        map[string]Function
	responders map[string]*simnet.ICMPResponder
	carriers   map[string]*simnet.CarrierNetwork
	mbim       *simnet.MBIMFunction // on the MBIM pair, or nil
	sahara     *sim.Sahara          // on the SAHARA pair, or nil
	qmi        *simnet.QMIFunction  // on the QMI pair, or nil
	network    *simnet.Network      // the one the control, AT functions share
}

// close stops the carrier networks.
func (s *servedFunctions) close() {
	for _, cn := range s.carriers {
		cn.Close()
	}
}

// serveFunctions builds the functions for profile p: what -function asks
// for (functions, which it completes with the defaults; carrier is the
// base of every carrier network's options), an ICMP
// responder on every data pair it names not, the emulated MBIM function
// on the MBIM pair and the QMI function on the QMI pair. When both
// control functions run they share one simnet.Network (SIM, registration,
// addresses), as on a modem.
func serveFunctions(p *mhi.Profile, functions functionFlag, cfg simnet.NetworkConfig, carrier simnet.CarrierOptions, log *slog.Logger) (*servedFunctions, error) {
	s := &servedFunctions{all: map[string]Function{}, responders: map[string]*simnet.ICMPResponder{}, carriers: map[string]*simnet.CarrierNetwork{}}
	// The data pairs (mhi.DataChannels: the pairs Linux turns into
	// network interfaces, mhi_net and mhi_wwan_mbim) answer pings.
	for _, name := range mhi.DataChannels() {
		if _, _, ok := p.ChannelPair(name); ok {
			if _, set := functions[name]; !set {
				functions[name] = "icmp"
			}
		}
	}
	// The control pairs answer like a modem's MBIM and QMI functions, so
	// that mbimcli on the guest's /dev/wwan0mbim0 and qmicli on its
	// /dev/wwan0qmi0 can bring a session up (hack/kernelcheck,
	// docs/KERNEL-CROSSCHECK.md).
	for name, kind := range map[string]string{mhi.ChannelMBIM: "mbim", mhi.ChannelQMI: "qmi"} {
		if _, _, ok := p.ChannelPair(name); ok {
			if _, set := functions[name]; !set {
				functions[name] = kind
			}
		}
	}
	// The AT port (DUN, else DUN2) answers AT commands from the same
	// network and the NMEA pair streams a GNSS fix, so that mhictl at
	// and mhictl gnss work against the served modem.
	for _, port := range []struct {
		pick func(*mhi.Profile) (string, bool)
		kind string
	}{{(*mhi.Profile).ATChannel, "at"}, {(*mhi.Profile).NMEAChannel, "gnss"}} {
		if name, ok := port.pick(p); ok {
			if _, set := functions[name]; !set {
				functions[name] = port.kind
			}
		}
	}
	for name := range functions {
		if _, _, ok := p.ChannelPair(name); !ok {
			return nil, usagef("profile %s has no channel pair %q", p.Name, name)
		}
	}
	network := simnet.NewNetwork(cfg)
	s.network = network
	for name, kind := range functions {
		switch kind {
		case "mbim":
			if s.mbim != nil {
				s.close()
				return nil, usagef("-function: one mbim function per modem (%s and another pair)", name)
			}
			s.mbim = simnet.NewMBIMFunction(simnet.MBIMConfig{Network: network, Logger: log.With("part", "mbim")})
			s.all[name] = s.mbim
		case "icmp":
			f, err := ownFraming(p, name, kind)
			if err != nil {
				s.close()
				return nil, err
			}
			r := &simnet.ICMPResponder{Framing: f}
			s.responders[name] = r
			s.all[name] = r
		case "carrier", "carrier-qmap", "carrier-qmap5":
			f := map[string]framing.Framing{"carrier-qmap": qmap.Framing{Version: 1}, "carrier-qmap5": qmap.Framing{Version: 5}}[kind]
			if f == nil {
				var err error
				if f, err = ownFraming(p, name, kind); err != nil {
					s.close()
					return nil, err
				}
			}
			co := carrier
			co.Framing, co.Logger = f, log.With("part", "carrier", "channel", name)
			co.Network = network
			cn, err := simnet.NewCarrierNetwork(co)
			if err != nil {
				s.close()
				return nil, err
			}
			s.carriers[name] = cn
			s.all[name] = cn
		case "loopback":
			s.all[name] = &sim.Loopback{}
		case "sahara":
			if s.sahara != nil {
				s.close()
				return nil, usagef("-function: one sahara function per modem (%s and another pair)", name)
			}
			s.sahara = &sim.Sahara{}
			s.all[name] = s.sahara
		case "firehose":
			st, err := simStorage(firehose.MemoryUFS)
			if err != nil {
				s.close()
				return nil, err
			}
			s.all[name] = &sim.Firehose{Storage: st}
		case "qmi":
			if s.qmi != nil {
				s.close()
				return nil, usagef("-function: one qmi function per modem (%s and another pair)", name)
			}
			s.qmi = simnet.NewQMIFunction(simnet.QMIConfig{Network: network, Logger: log.With("part", "qmi")})
			s.all[name] = s.qmi
		case "at":
			s.all[name] = simnet.NewATFunction(network)
		case "gnss":
			s.all[name] = simnet.NewGNSSFunction(simnet.GNSSConfig{})
		case "none":
			s.all[name] = nil
		}
	}
	return s, nil
}

// serveNetwork is the configuration of a served modem's network: any
// APN gets the default session, and the named APNs of stack.Open's
// emulated network (simnet.DefaultAPNs: ims, corp.mhistack and the
// IPv6-only v6only.mhistack and v6only-nsp.mhistack) get theirs. fccLock
// locks the radio with the procedure of the PCI ID idIndex presents; pin
// locks the SIM.
func serveNetwork(p *mhi.Profile, idIndex int, fccLock bool, pin string) (simnet.NetworkConfig, error) {
	cfg := simnet.NetworkConfig{APNs: simnet.DefaultAPNs()[1:], PIN: pin}
	if fccLock {
		if cfg.FCCLock = p.EmulatedFCCUnlock(idIndex); cfg.FCCLock == mhi.FCCUnlockNone {
			return cfg, usagef("-fcc-lock: PCI ID %d of profile %s does not ship FCC-locked (docs/GETTING-ONLINE.md lists the locked ones)", idIndex, p.Name)
		}
	}
	return cfg, nil
}

// ownFraming is the framing the data pair name of p carries without a
// QMI session (mhi.Profile.PairPath, link.FramingFor), for -function
// name=kind; a pair whose framing is not known is a usage error.
func ownFraming(p *mhi.Profile, name, kind string) (framing.Framing, error) {
	dp, err := p.PairPath(name)
	if err != nil {
		return nil, usagef("-function %s=%s: %v (carrier-qmap and carrier-qmap5 name their framing)", name, kind, err)
	}
	return link.FramingFor(dp)
}

// watchModem logs the modem's state changes (what a kernel cross-check
// compares dmesg with), crashes it on SIGUSR1, and once after syserrAfter
// in mission mode; SIGUSR2 calls report. usr1 and usr2 receive the
// signals (the caller installs them). Control requests go to handle,
// which gets the same SYS_ERR injection. It returns when ctx ends.
func watchModem(ctx context.Context, log *slog.Logger, m *sim.Modem, syserrAfter time.Duration, usr1, usr2 <-chan os.Signal, report func(),
	reqs <-chan controlRequest, handle func(line string, crash func(why string) error) string) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var crashAt time.Time
	crashed := syserrAfter <= 0
	lastS, lastEE := m.State()
	log.Info("modem state", "state", lastS, "ee", lastEE)
	var lastImg [2]uint32
	crash := func(why string) error {
		log.Info("injecting SYS_ERR", "why", why)
		if err := m.TriggerSysErr(); err != nil {
			log.Warn("SYS_ERR injection failed", "err", err)
			return err
		}
		// TriggerSysErr returns once SYS_ERR is visible, but the host
		// may reset the modem before the next poll: log it now.
		lastS = mhi.StateSysErr
		log.Info("modem state", "state", lastS, "ee", lastEE)
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-usr1:
			_ = crash("SIGUSR1")
		case <-usr2:
			report()
		case r := <-reqs:
			r.reply <- handle(r.line, crash)
		case <-tick.C:
		}
		s, ee := m.State()
		if s != lastS || ee != lastEE {
			log.Info("modem state", "state", s, "ee", ee)
			lastS, lastEE = s, ee
		}
		// A download shows as a new session id (the host picks a
		// random non-zero one per transfer, docs/PROTOCOL.md §1.2/§1.3).
		for i, img := range [2]sim.BootImage{m.BHIImage(), m.BHIeImage()} {
			if img.Session != 0 && img.Session != lastImg[i] {
				lastImg[i] = img.Session
				log.Info("boot image received", "via", [2]string{"BHI", "BHIe"}[i], "size", img.Size,
					"sha256", fmt.Sprintf("%x", img.SHA256), "session", fmt.Sprintf("%#x", img.Session))
			}
		}
		if !crashed && crashAt.IsZero() && s == mhi.StateM0 && ee == mhi.EEAMSS {
			crashAt = time.Now().Add(syserrAfter)
		}
		if !crashed && !crashAt.IsZero() && time.Now().After(crashAt) {
			crashed = true
			_ = crash(fmt.Sprintf("-syserr-after %v in mission mode", syserrAfter))
		}
	}
}

// summarize logs what crossed the link and what the modem saw, and
// returns the number of host protocol violations.
func summarize(log *slog.Logger, srv *vfiouser.Server, m *sim.Modem, responders map[string]*simnet.ICMPResponder) uint64 {
	ss, ms := srv.Stats(), m.Stats()
	log.Info("summary",
		"violations", ms.Violations, "dma_faults", ss.DMAFaults,
		"connections", ss.Connections, "messages", ss.Messages, "bad_messages", ss.BadMessages,
		"mmio_reads", ss.MMIOReads, "mmio_writes", ss.MMIOWrites, "mmio_unclaimed", ss.MMIOUnclaimed,
		"dma_maps", ss.DMAMaps, "dma_read", ss.DMABytesRead, "dma_written", ss.DMABytesWritten,
		"msi_raised", ss.MSIRaised, "msi_delivered", ss.MSIDelivered, "msi_dropped", ss.MSIDropped,
		"resets", ss.DeviceResets, "commands", ms.Commands, "events", ms.Events, "event_drops", ms.EventDrops,
		"tds_ul", ms.TDsUL, "packets_dl", ms.PacketsDL, "db_modes", ms.DBModes, "wp_without_doorbell", ms.WPWithoutDoorbell, "power_losses", ms.PowerLosses, "ul_drops", ms.ULDrops, "dl_drops", ms.DLDrops)
	for name, r := range responders {
		log.Info("icmp responder", "channel", name, "replies", r.Replies.Load(), "ignored", r.Ignored.Load(),
			"malformed", r.Malformed.Load(), "dropped", r.Dropped.Load())
	}
	for _, v := range m.Violations() {
		log.Warn("violation", "err", v)
	}
	for _, f := range srv.Faults() {
		log.Warn("dma fault", "fault", f.Error())
	}
	return ms.Violations
}

// logCarriers logs each carrier network's counters ("carrier stats"):
// what the kernel cross-check reads DL aggregation from.
func logCarriers(log *slog.Logger, carriers map[string]*simnet.CarrierNetwork) string {
	var sum []string
	for name, cn := range carriers {
		cs := cn.Stats()
		perFrame := 0.0
		if cs.DLFrames > 0 {
			perFrame = float64(cs.DLPackets) / float64(cs.DLFrames)
		}
		log.Info("carrier stats", "channel", name, "ul_packets", cs.ULPackets, "dl_packets", cs.DLPackets,
			"dl_frames", cs.DLFrames, "per_frame", fmt.Sprintf("%.1f", perFrame), "echoes", cs.Echoes,
			"tcp_flows", cs.TCPFlows, "udp_flows", cs.UDPFlows, "refused", cs.Refused, "dns", cs.DNSQueries, "dropped", cs.Dropped)
		sum = append(sum, fmt.Sprintf("%s: ul_packets=%d dl_packets=%d dl_frames=%d tcp_flows=%d dropped=%d",
			name, cs.ULPackets, cs.DLPackets, cs.DLFrames, cs.TCPFlows, cs.Dropped))
		for _, d := range []struct {
			dir string
			st  radio.Stats
		}{{"down", cs.RadioDown}, {"up", cs.RadioUp}} {
			if d.st.Enqueued == 0 {
				continue
			}
			st := d.st
			log.Info("radio stats", "channel", name, "dir", d.dir, "enqueued", st.Enqueued, "delivered", st.Delivered,
				"dropped_queue", st.DroppedQueue, "dropped_aqm", st.DroppedAQM, "dropped_loss", st.DroppedLoss, "dropped_gap", st.DroppedGap,
				"max_queue_delay", st.MaxQueueDelay, "max_queued_bytes", st.MaxQueuedBytes, "promotions", st.Promotions)
			sum = append(sum, fmt.Sprintf("%s radio %s: enqueued=%d delivered=%d dropped_queue=%d dropped_aqm=%d dropped_loss=%d dropped_gap=%d",
				name, d.dir, st.Enqueued, st.Delivered, st.DroppedQueue, st.DroppedAQM, st.DroppedLoss, st.DroppedGap))
		}
	}
	sort.Strings(sum)
	return strings.Join(sum, "; ")
}

// printRadioPresets writes the radio presets: name, what it is, its
// sources.
func printRadioPresets(w io.Writer) {
	for _, p := range radio.Presets() {
		fmt.Fprintf(w, "%s\n  %s\n", p.Name, p.Summary)
		for _, src := range p.Sources {
			fmt.Fprintf(w, "  source: %s\n", src)
		}
	}
}

func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	o := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, usagef("-log-format %q: want text or json", format)
}

// levelFloor drops records below min: the vfio-user server logs every
// message at debug, which -log-level debug alone should not turn on.
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelFloor) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFloor{h.Handler.WithAttrs(a), h.min}
}

func (h levelFloor) WithGroup(n string) slog.Handler {
	return levelFloor{h.Handler.WithGroup(n), h.min}
}

// serveSahara gives the sahara function, if one runs, the images of
// -sahara-images (ID:SIZE[,ID:SIZE...]) and holds the modem in its SBL
// (sim.Options.StayInSBL), where the SAHARA pair lives; the modem must
// boot from PBL to reach it.
func serveSahara(fns *servedFunctions, images string, opts *sim.Options) error {
	if fns.sahara == nil {
		return nil
	}
	if opts.Boot != sim.BootPBL {
		return usagef("-function ...=sahara: the SAHARA pair runs in the SBL; add -boot pbl")
	}
	for _, f := range strings.Split(images, ",") {
		id, size, ok := strings.Cut(strings.TrimSpace(f), ":")
		i, err1 := strconv.ParseUint(id, 0, 32)
		n, err2 := strconv.ParseUint(size, 0, 31)
		if !ok || err1 != nil || err2 != nil || n == 0 {
			return usagef("-sahara-images: %q is not ID:SIZE (SIZE 1..2^31-1 bytes)", f)
		}
		fns.sahara.Images = append(fns.sahara.Images, sim.SaharaImage{ID: uint32(i), Size: int(n)})
	}
	opts.StayInSBL = true
	return nil
}
