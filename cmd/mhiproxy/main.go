// Command mhiproxy lets any program use the modem: it brings up the data
// session and serves SOCKS5 (CONNECT, UDP ASSOCIATE) and HTTP proxying
// (CONNECT and absolute URIs) on one port, reaching the targets over the
// modem and resolving names only with the modem's DNS.
//
//	mhiproxy                          # the emulated modem, on 127.0.0.1:1080
//	mhiproxy -device 0000:01:00.0 -apn internet
//	curl --socks5-hostname 127.0.0.1:1080 http://example.com/
//
// See docs/PROXY.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vfiouserclient"
	"github.com/mhistack/mhistack/stack"
	"github.com/mhistack/mhistack/stack/proxy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, openModem)
	stop()
	os.Exit(code)
}

// config is the parsed command line.
type config struct {
	open      openOptions
	devices   []string      // -device, in order; open.Device is the first
	sessions  []sessionSpec // -session, in order
	listen    string
	auth      string
	metrics   string
	pcap      string
	mbimProxy string
	qmiProxy  string
	cpuProf   string
	dumpDir   string
	logLevel  slog.Level
	pool      poolConfig
}

// poolConfig is the HTTP forward proxy's pool of origin connections, as
// the proxy.Server fields of the same names.
type poolConfig struct {
	maxIdlePerOrigin, maxIdle, maxConnsPerOrigin int
	idleTimeout                                  time.Duration
}

// apply sets the pool limits on srv.
func (p poolConfig) apply(srv *proxy.Server) {
	srv.MaxIdleConnsPerOrigin = p.maxIdlePerOrigin
	srv.MaxIdleConns = p.maxIdle
	srv.MaxConnsPerOrigin = p.maxConnsPerOrigin
	srv.PoolIdleTimeout = p.idleTimeout
}

const usageText = `Usage: mhiproxy [flags]

mhiproxy brings up the modem's data session and serves SOCKS5 (RFC 1928:
CONNECT and UDP ASSOCIATE, RFC 1929 username/password) and HTTP proxying
(CONNECT and absolute http:// URIs) on one port. Targets are reached over
the modem; domain names are resolved only by the modem's DNS servers.
With no flags it runs on the emulated modem on 127.0.0.1:1080. The data
session runs on MBIM when the modem profile has an MBIM channel and on QMI
(with QMAP data framing) otherwise; -control chooses.

More data sessions: each -session apn=NAME,listen=ADDR brings up one more
session (its own addresses and DNS servers: an MBIM session ID or QMAP mux
ID on the same modem) and serves it on its own listener, so a client picks
the session by the port it connects to. More modems: -device may be given
several times; device=N in -session picks the (N+1)-th (default the first).
The first -device runs the -apn session on -listen; a later device needs
at least one -session.

	mhiproxy -apn internet -session apn=ims,listen=127.0.0.1:1081
	mhiproxy -device sim -device sim:telit-fn980-hwv1 \
	    -session device=1,apn=internet,listen=127.0.0.1:1082

Flags:
`

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("mhiproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var((*listFlag)(&c.devices), "device", "the modem: `sim` for the emulated modem (sim:PROFILE: that modem, e.g. sim:telit-fn980-hwv1), a PCI address\n"+
		"(0000:01:00.0) bound to vfio-pci, or vfio-user:PATH for a vfio-user server's UNIX socket (mhictl sim serve -socket\n"+
		"PATH in another process); repeat it for several modems (default sim)")
	fs.Var(sessionsFlag{&c.sessions}, "session", "one more data session with its own listener: `apn=NAME,listen=ADDR`[,device=N][,user=U,password=P]\n"+
		"(device N counts -device flags from 0); repeat it for more; each session has its own addresses and DNS servers,\n"+
		"-auth applies to every listener, a non-loopback listen needs -auth")
	fs.StringVar(&c.open.Stack.Profile, "profile", "", "modem `profile` (mhi table name): with -device sim the modem to emulate (default qcom-sdx55m;\n"+
		"telit-fn980-hwv1 has only QMI control); with a PCI address it overrides matching by PCI IDs")
	fs.StringVar(&c.open.Stack.Control, "control", "", "control `protocol` of the data session: mbim or qmi (default: mbim if the profile has an MBIM channel,\n"+
		"else qmi; a QMI session carries data as QMAP, v5 if the modem agrees; -mbim-proxy needs mbim, -qmi-proxy qmi)")
	fs.StringVar(&c.open.APN, "apn", "", "access point name for the data session (empty: the modem's default bearer)")
	fs.StringVar(&c.open.APNUser, "apn-user", "", "APN username, for carriers that require PAP/CHAP")
	fs.StringVar(&c.open.APNPassword, "apn-password", "", "APN password")
	pin := fs.String("pin", "", "SIM `PIN`, entered once if the SIM asks for it (a rejected PIN is never retried: each try burns one);\n"+
		"prefer -pin-file or the "+stack.PINEnv+" environment variable, which keep it out of the process list")
	pinFile := fs.String("pin-file", "", "read the SIM PIN from the first line of this `file`")
	fs.StringVar(&c.open.Stack.PUK, "puk", "", "SIM `PUK` (8 digits), entered once only if the SIM asks for it (its PIN tries used up),\n"+
		"with -pin (or -pin-file, "+stack.PINEnv+") as the new PIN")
	fs.BoolVar(&c.open.Stack.FCCUnlock, "fcc-unlock", false, "run the modem's FCC unlock if the modem is FCC-locked (laptop SKUs whose radio stays off until the host\n"+
		"sends the vendor command ModemManager's fcc-unlock.d scripts send); off by default: unlocking is your legal choice")
	fs.BoolVar(&c.open.Stack.AllowRoaming, "allow-roaming", false, "bring the data session up while the modem is registered on a visited network (roaming data can cost a lot);\n"+
		"off by default: a roaming modem gets no session (docs/GETTING-ONLINE.md, \"Roaming\")")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:1080", "`address` for SOCKS5 and HTTP proxy clients (one port serves both); a non-loopback address requires -auth")
	fs.StringVar(&c.auth, "auth", "", "require clients to authenticate: `user:pass`, or \"random\" to generate a password and print it (SOCKS5 RFC 1929 and HTTP Basic)")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics (link, MHI, stack, proxy, radio signal) at http://`address`/metrics, e.g. 127.0.0.1:9108;\n"+
		"it covers every session and device: each series is labelled device=N (the -device index), a session's and\n"+
		"its listener's also listen=ADDR (the listener's address)")
	fs.StringVar(&c.pcap, "pcap", "", "write every packet on the modem link to this pcap `file`")
	fs.Var(&socketNameFlag{&c.mbimProxy, mbim.ProxySocket}, "mbim-proxy", "serve libmbim's proxy protocol on the abstract Unix socket @mbim-proxy, the fixed name\n"+
		"mbimcli -p and ModemManager connect to, so they share the modem (-mbim-proxy=NAME: another abstract name)")
	fs.Var(&socketNameFlag{&c.qmiProxy, qmi.ProxySocket}, "qmi-proxy", "serve libqmi's proxy protocol on the abstract Unix socket @qmi-proxy, the fixed name\n"+
		"qmicli -p and ModemManager connect to, so they share a QMI data session's modem (-qmi-proxy=NAME: another\n"+
		"abstract name); qmicli needs --device-open-qmi unless its -d path is a real QMI port")
	fs.StringVar(&c.cpuProf, "cpuprofile", "", "write a CPU profile (runtime/pprof, for go tool pprof) of the whole run to `file`; it is complete at exit")
	fs.StringVar(&c.dumpDir, "dump-dir", "", "write the RAM dump of every modem firmware crash (RDDM, collected before the modem is reset)\n"+
		"to this existing `directory`, as DEVICE-YYYYMMDDTHHMMSS.mmmZ.rddm (UTC); the log names each file")
	fs.IntVar(&c.pool.maxIdlePerOrigin, "pool-idle-per-origin", proxy.DefaultMaxIdleConnsPerOrigin,
		"HTTP forwarding (absolute http:// URIs) keeps origin connections open for the next request: at most `n` idle\n"+
			"ones per origin (host:port); -1 turns the pool off (a new origin connection per request)")
	fs.IntVar(&c.pool.maxIdle, "pool-idle", proxy.DefaultMaxIdleConns, "at most `n` idle pooled origin connections in all (per listener)")
	fs.IntVar(&c.pool.maxConnsPerOrigin, "pool-conns-per-origin", proxy.DefaultMaxConnsPerOrigin,
		"at most `n` connections to one origin, busy or idle, per listener; further requests wait for one to be free")
	fs.DurationVar(&c.pool.idleTimeout, "pool-idle-timeout", proxy.DefaultPoolIdleTimeout, "close a pooled origin connection idle this `long`")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn or error (logs go to stderr)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (all options are flags; see -help)", fs.Arg(0))
	}
	var err error
	if c.pool.maxIdlePerOrigin == 0 || c.pool.maxIdle <= 0 || c.pool.maxConnsPerOrigin <= 0 || c.pool.idleTimeout <= 0 {
		return nil, errors.New("-pool-idle-per-origin (or -1 for no pool), -pool-idle, -pool-conns-per-origin and -pool-idle-timeout must be positive")
	}
	if c.open.Stack.PIN, err = stack.ReadPIN(*pin, *pinFile); err != nil {
		return nil, err
	}
	if c.open.Stack.PUK != "" && c.open.Stack.PIN == "" {
		return nil, errors.New("-puk needs the new PIN: give it with -pin, -pin-file or " + stack.PINEnv)
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", *level)
	}
	if p := c.open.Stack.Profile; p != "" {
		if _, ok := mhi.Lookup(p); !ok {
			return nil, fmt.Errorf("-profile %q: no such modem profile (mhictl list -profiles names them)", p)
		}
	}
	switch c.open.Stack.Control {
	case "", "mbim", "qmi":
	default:
		return nil, fmt.Errorf("-control %q: want mbim or qmi", c.open.Stack.Control)
	}
	if c.open.Stack.Control == "qmi" && c.mbimProxy != "" {
		return nil, fmt.Errorf("-mbim-proxy needs an MBIM data session; -control qmi runs it on QMI")
	}
	if c.open.Stack.Control == "mbim" && c.qmiProxy != "" {
		return nil, fmt.Errorf("-qmi-proxy needs a QMI data session; -control mbim runs it on MBIM")
	}
	if c.mbimProxy != "" && c.qmiProxy != "" {
		return nil, fmt.Errorf("-mbim-proxy and -qmi-proxy: the data session runs on one control protocol; choose the one -control picks")
	}
	if len(c.devices) == 0 {
		c.devices = []string{"sim"}
	}
	seen := map[string]bool{}
	for _, d := range c.devices {
		prof, isSim := strings.CutPrefix(d, "sim:")
		switch {
		case d == "sim" || isSim:
			if isSim {
				if _, ok := mhi.Lookup(prof); !ok {
					return nil, fmt.Errorf("-device %q: no such modem profile %q (mhictl list -profiles names them)", d, prof)
				}
			}
		case isPCIAddress(d) || isVFIOUser(d):
			if seen[d] {
				return nil, fmt.Errorf("-device %s given twice: a modem runs its sessions in one place (use -session)", d)
			}
			seen[d] = true
		default:
			return nil, fmt.Errorf("-device %q: want sim, sim:PROFILE, a PCI address like 0000:01:00.0 or vfio-user:PATH", d)
		}
	}
	c.open.Device = c.devices[0]
	used := make([]bool, len(c.devices))
	used[0] = true
	for _, ss := range c.sessions {
		if ss.device >= len(c.devices) {
			return nil, fmt.Errorf("-session device=%d: there are %d -device flags (counted from 0)", ss.device, len(c.devices))
		}
		used[ss.device] = true
		h, _, err := net.SplitHostPort(ss.listen)
		if err != nil {
			return nil, fmt.Errorf("-session listen=%q: %v", ss.listen, err)
		}
		if !isLoopback(h) && c.auth == "" {
			return nil, fmt.Errorf("-session listen=%s is not a loopback address: refusing to run an open proxy; add -auth user:pass or -auth random", ss.listen)
		}
	}
	for i, u := range used {
		if !u {
			return nil, fmt.Errorf("-device %s has no -session (add -session device=%d,apn=...,listen=...)", c.devices[i], i)
		}
	}
	if c.dumpDir != "" {
		if err := checkDumpDir(c.dumpDir); err != nil {
			return nil, err
		}
	}
	if c.auth != "" && c.auth != "random" {
		user, _, ok := strings.Cut(c.auth, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("-auth: want user:pass or random")
		}
	}
	host, _, err := net.SplitHostPort(c.listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %v", c.listen, err)
	}
	if !isLoopback(host) && c.auth == "" {
		return nil, fmt.Errorf("-listen %s is not a loopback address: refusing to run an open proxy; add -auth user:pass or -auth random", c.listen)
	}
	return c, nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(*f, ",")
}
func (f *listFlag) Set(v string) error { *f = append(*f, v); return nil }

// sessionSpec is one -session: a data session and its listener.
type sessionSpec struct {
	apn, user, password string
	listen              string
	device              int
}

// sessionsFlag is -session apn=NAME,listen=ADDR[,device=N][,user=U,password=P].
type sessionsFlag struct{ v *[]sessionSpec }

func (f sessionsFlag) String() string { return "" }
func (f sessionsFlag) Set(v string) error {
	var ss sessionSpec
	has := map[string]bool{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q: want key=value (apn, listen, device, user, password)", kv)
		}
		if has[k] {
			return fmt.Errorf("%s given twice", k)
		}
		has[k] = true
		switch k {
		case "apn":
			ss.apn = val
		case "listen":
			ss.listen = val
		case "user":
			ss.user = val
		case "password":
			ss.password = val
		case "device":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return fmt.Errorf("device=%q: want the index of a -device flag (0, 1, …)", val)
			}
			ss.device = n
		default:
			return fmt.Errorf("unknown key %q (want apn, listen, device, user, password)", k)
		}
	}
	if !has["listen"] {
		return fmt.Errorf("%q: listen=ADDR is required (each session has its own listener)", v)
	}
	*f.v = append(*f.v, ss)
	return nil
}

// socketNameFlag is -mbim-proxy and -qmi-proxy: alone it means the
// library's fixed name (def), =NAME another abstract name, =false off.
type socketNameFlag struct {
	v   *string
	def string
}

func (f *socketNameFlag) String() string {
	if f == nil || f.v == nil {
		return ""
	}
	return *f.v
}
func (f *socketNameFlag) IsBoolFlag() bool { return true }
func (f *socketNameFlag) Set(v string) error {
	switch v {
	case "true":
		*f.v = f.def
	case "false", "":
		*f.v = ""
	default:
		if strings.ContainsAny(v, "/\x00") {
			return fmt.Errorf("want an abstract socket name without '/' (the default is %s)", f.def)
		}
		*f.v = v
	}
	return nil
}

// isLoopback reports whether host (from -listen) is loopback only. An
// empty host or a name other than localhost binds more widely, or may.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// isVFIOUser accepts vfio-user: and a socket path.
func isVFIOUser(s string) bool {
	path, ok := strings.CutPrefix(s, vfiouserclient.Prefix)
	return ok && path != ""
}

// isPCIAddress accepts domain:bus:device.function as sysfs spells it.
func isPCIAddress(s string) bool {
	var dom, bus, dev, fn uint
	n, err := fmt.Sscanf(s, "%4x:%2x:%2x.%1x", &dom, &bus, &dev, &fn)
	return err == nil && n == 4 && len(s) == len("0000:01:00.0") && dev < 32 && fn < 8
}

// run is mhiproxy without the process around it: it returns the exit
// status (0 after a signal-initiated shutdown, 1 for a failed bring-up or
// serve, 2 for bad flags).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, open opener) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "mhiproxy:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if cfg.cpuProf != "" {
		f, err := os.Create(cfg.cpuProf)
		if err != nil {
			fmt.Fprintln(stderr, "mhiproxy: -cpuprofile:", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			fmt.Fprintln(stderr, "mhiproxy: -cpuprofile:", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if err := serve(ctx, cfg, stdout, log, open); err != nil {
		fmt.Fprintln(stderr, "mhiproxy:", err)
		return 1
	}
	return 0
}

// serve brings the modem up, serves until ctx ends, then shuts down.
func serve(ctx context.Context, cfg *config, stdout io.Writer, log *slog.Logger, open opener) error {
	srv := &proxy.Server{Logger: log}
	cfg.pool.apply(srv)
	switch cfg.auth {
	case "":
	case "random":
		pass, err := randomPassword()
		if err != nil {
			return err
		}
		srv.Credentials = proxy.CheckPassword("mhiproxy", pass)
		fmt.Fprintf(stdout, "auth: user mhiproxy password %s\n", pass)
	default:
		user, pass, _ := strings.Cut(cfg.auth, ":")
		srv.Credentials = proxy.CheckPassword(user, pass)
	}
	// Listen before bringing the modem up: a port in use is reported at
	// once, not after a minute of modem boot.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	slns := make([]net.Listener, len(cfg.sessions))
	for i, ss := range cfg.sessions {
		if slns[i], err = net.Listen("tcp", ss.listen); err != nil {
			return fmt.Errorf("-session listen=%s: %w", ss.listen, err)
		}
		defer slns[i].Close()
	}
	var mln net.Listener
	if cfg.metrics != "" {
		if mln, err = net.Listen("tcp", cfg.metrics); err != nil {
			return fmt.Errorf("-metrics: %w", err)
		}
		defer mln.Close()
	}

	cfg.open.Logger = log
	if cfg.dumpDir != "" {
		cfg.open.Stack.OnCrashDump = crashDumpWriter(cfg.dumpDir, cfg.open.Device, log)
	}
	octx, cancel := context.WithTimeout(ctx, bringUpTimeout)
	nw, err := open(octx, cfg.open)
	cancel()
	if err != nil {
		return fmt.Errorf("bringing up %s: %w", cfg.open.Device, err)
	}
	defer nw.Close()
	useNetwork(srv, nw)

	// The other sessions: the first on a further device brings that
	// modem up (with the -session's APN), the others open on a modem
	// already up. Deferred closes run sessions first, modems last.
	modems := map[int]network{0: nw}
	ssrvs := make([]*proxy.Server, len(cfg.sessions))
	snws := make([]network, len(cfg.sessions))
	metrics := sessionMetrics(nw, srv, 0, ln.Addr(), true)
	for i, ss := range cfg.sessions {
		octx, cancel := context.WithTimeout(ctx, bringUpTimeout)
		var snw network
		m := modems[ss.device]
		if m != nil {
			snw, err = m.OpenSession(octx, ss)
		} else {
			oo := openOptions{Device: cfg.devices[ss.device], APN: ss.apn, APNUser: ss.user, APNPassword: ss.password, Logger: log}
			snw, err = open(octx, oo)
			modems[ss.device] = snw
		}
		cancel()
		if err != nil {
			return fmt.Errorf("bringing up -session apn=%s on %s: %w", ss.apn, cfg.devices[ss.device], err)
		}
		defer snw.Close()
		snws[i] = snw
		ssrvs[i] = &proxy.Server{Logger: log, Credentials: srv.Credentials}
		cfg.pool.apply(ssrvs[i])
		useNetwork(ssrvs[i], snw)
		metrics = append(metrics, sessionMetrics(snw, ssrvs[i], ss.device, slns[i].Addr(), m == nil)...)
	}

	if cfg.pcap != "" {
		f, err := os.Create(cfg.pcap)
		if err != nil {
			return fmt.Errorf("-pcap: %w", err)
		}
		defer f.Close()
		stop, err := nw.CapturePcap(f)
		if err != nil {
			return fmt.Errorf("-pcap: %w", err)
		}
		defer func() {
			if err := stop(); err != nil {
				log.Warn("pcap capture stopped early", "file", cfg.pcap, "err", err)
			}
		}()
	}
	if cfg.mbimProxy != "" {
		stop, err := nw.ServeMBIMProxy(cfg.mbimProxy)
		if err != nil {
			return fmt.Errorf("-mbim-proxy: %w", err)
		}
		defer stop()
	}
	if cfg.qmiProxy != "" {
		stop, err := nw.ServeQMIProxy(cfg.qmiProxy)
		if err != nil {
			return fmt.Errorf("-qmi-proxy: %w", err)
		}
		defer stop()
	}

	errc := make(chan error, 2+len(ssrvs))
	go func() { errc <- srv.Serve(ln) }()
	for i, ssrv := range ssrvs {
		go func() { errc <- ssrv.Serve(slns[i]) }()
	}
	var msrv *http.Server
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metricsHandler(metrics))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := msrv.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}

	ready := fmt.Sprintf("listening on %s via %s, ip %s", ln.Addr(), nw.Describe(), addressList(nw))
	if mln != nil {
		ready += fmt.Sprintf(", metrics http://%s/metrics", mln.Addr())
	}
	fmt.Fprintln(stdout, ready)
	for i, ss := range cfg.sessions {
		fmt.Fprintf(stdout, "listening on %s via %s, apn %s, ip %s\n", slns[i].Addr(), snws[i].Describe(), ss.apn, addressList(snws[i]))
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case serveErr = <-errc:
	}
	if msrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		msrv.Shutdown(sctx)
		cancel()
	}
	srv.Close()
	for _, ssrv := range ssrvs {
		ssrv.Close()
	}
	if errors.Is(serveErr, proxy.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// sessionMetrics are the -metrics sources of one session: its stack's
// (nw.Metrics) and its listener's, labelled with the index of its -device
// flag and the listener's address; and, when the session brought its
// modem up (ownsDevice), the modem's MHI counters, labelled with the
// device only, so that they appear once per modem, not once per session.
func sessionMetrics(nw network, srv *proxy.Server, device int, listen net.Addr, ownsDevice bool) []metricSource {
	dev := strconv.Itoa(device)
	session := prometheus.Labels{"device": dev, "listen": listen.String()}
	var srcs []metricSource
	for _, src := range nw.Metrics() {
		switch {
		case !src.perDevice:
			src.labels = session
		case ownsDevice:
			src.labels = prometheus.Labels{"device": dev}
		default:
			continue
		}
		srcs = append(srcs, src)
	}
	return append(srcs, metricSource{name: "proxy", stats: func() any { return srv.Stats() }, kind: proxyKind, labels: session})
}

// useNetwork makes srv reach targets through nw.
func useNetwork(srv *proxy.Server, nw network) {
	srv.Dialer = nw
	srv.Resolver = nw
	srv.PacketListener = proxy.PacketListenerFunc(func(_ context.Context, network, address string) (net.PacketConn, error) {
		return nw.ListenPacket(network, address)
	})
}

// addressList is nw's addresses for the ready line, without the IPv6
// link-local one (derived from the global address).
func addressList(nw network) string {
	var ips []string
	for _, p := range nw.Addresses() {
		if p.Addr().IsLinkLocalUnicast() {
			continue
		}
		ips = append(ips, p.Addr().String())
	}
	return strings.Join(ips, " ")
}

// bringUpTimeout bounds the modem's bring-up: a real modem's boot to
// mission mode, registration and attach take up to a minute or two.
const bringUpTimeout = 3 * time.Minute

// randomPassword is 128 bits, URL-safe so it pastes into proxy URLs.
func randomPassword() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
