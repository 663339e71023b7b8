package reliability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// The quirk matrix (docs/QUIRKS.md, "Quirk matrix"): every modem profile
// on the emulated modem with its own quirks on (sim.ProfileQuirks), taken
// through the life of a modem: power-up, a data session, data both ways,
// a firmware crash and its recovery, a suspend and resume, data again.
// TestQuirkMatrix and `mhictl sim quirks` run it and print the same table.

// The steps of a matrix row, in order.
const (
	StepPowerUp   = "power-up"   // device and MHI to mission mode, control client open
	StepSession   = "session"    // MBIM or QMI data session (or the IP_SW0 link), stack up
	StepData      = "data"       // a TCP echo through the carrier network, both ways
	StepSysErr    = "sys-err"    // injected SYS_ERR, until the host reports it recovered
	StepSuspend   = "m3-m0"      // Suspend to M3 and Resume to M0 (no-m3: Suspend refused)
	StepDataAgain = "data-again" // the echo again
)

// QuirkMatrixSteps are the step names in the order a row runs them.
var QuirkMatrixSteps = []string{StepPowerUp, StepSession, StepData, StepSysErr, StepSuspend, StepDataAgain}

// DefaultMatrixReadyDelay is how long a slow-ready modem takes to READY
// in the matrix: real ones take seconds (Linux gives them 50 s and more,
// pci_generic ready_timeout_ms); a tenth of a second keeps the wait
// visible and the run short.
const DefaultMatrixReadyDelay = 100 * time.Millisecond

// QuirkMatrixOptions configure RunQuirkMatrix. The zero value runs every
// profile.
type QuirkMatrixOptions struct {
	// Profiles are the modems to run (nil: mhi.Profiles).
	Profiles []*mhi.Profile
	// ReadyDelay is when a modem with the slow-ready quirk comes up
	// READY after power-on or a reset (0: DefaultMatrixReadyDelay).
	ReadyDelay time.Duration
	// Parallel is how many profiles run at once (0: 4).
	Parallel int
	// Bytes is what each data step sends and expects back (0: 64 KiB).
	Bytes int
	// StepTimeout bounds each step (0: 30 s).
	StepTimeout time.Duration
}

func (o *QuirkMatrixOptions) setDefaults() {
	if o.Profiles == nil {
		o.Profiles = mhi.Profiles()
	}
	if o.ReadyDelay <= 0 {
		o.ReadyDelay = DefaultMatrixReadyDelay
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.Bytes <= 0 {
		o.Bytes = 64 << 10
	}
	if o.StepTimeout <= 0 {
		o.StepTimeout = 30 * time.Second
	}
}

// QuirkStep is the outcome of one step of a row.
type QuirkStep struct {
	Name string
	Took time.Duration
	// Note qualifies a step that passed ("no M3: refused").
	Note string
	// Err is why the step failed; nil if it passed.
	Err error
}

// QuirkMatrixRow is one profile's run.
type QuirkMatrixRow struct {
	Profile string
	// Quirks are the quirks the emulated modem played.
	Quirks []sim.Quirk
	// Session is the control protocol and data pair ("mbim IP_HW0",
	// "qmi IP_HW0", "- IP_SW0" for a profile with no control pair).
	Session string
	// Steps ran in the order of QuirkMatrixSteps; after a failed one the
	// rest did not run.
	Steps []QuirkStep
	// Violations are the host protocol violations the strict modem saw.
	Violations []string
	// CloseErr is the teardown's error.
	CloseErr error
}

// Err returns why the row failed, or nil.
func (r *QuirkMatrixRow) Err() error {
	var errs []error
	for _, s := range r.Steps {
		if s.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, s.Err))
		}
	}
	if len(r.Steps) < len(QuirkMatrixSteps) && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("only %d of %d steps ran", len(r.Steps), len(QuirkMatrixSteps)))
	}
	for _, v := range r.Violations {
		errs = append(errs, errors.New("protocol violation: "+v))
	}
	if r.CloseErr != nil {
		errs = append(errs, fmt.Errorf("close: %w", r.CloseErr))
	}
	return errors.Join(errs...)
}

// RunQuirkMatrix runs the matrix: each profile on an emulated modem of
// its own, o.Parallel at a time, with one echo server on the host's
// loopback that the carrier network reaches (simnet.TestAddr4). The rows
// come in the order of o.Profiles. An error means the matrix could not
// run at all; a profile that fails is a row whose Err is not nil.
func RunQuirkMatrix(ctx context.Context, o QuirkMatrixOptions) ([]QuirkMatrixRow, error) {
	o.setDefaults()
	echo, err := listenHost(func(c net.Conn) { io.Copy(c, c) })
	if err != nil {
		return nil, fmt.Errorf("quirk matrix: echo server: %w", err)
	}
	defer echo.close()
	rows := make([]QuirkMatrixRow, len(o.Profiles))
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i, p := range o.Profiles {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rows[i] = runMatrixRow(ctx, p, &o, echo.addr().String())
		})
	}
	wg.Wait()
	return rows, nil
}

// matrixRun is one profile's pipeline while its row runs.
type matrixRun struct {
	o     *QuirkMatrixOptions
	p     *mhi.Profile
	echo  string // the echo server as the carrier reaches it
	row   *QuirkMatrixRow
	sm    *stack.Modem // nil for a profile without a control pair
	ctrl  *mhi.Controller
	modem *sim.Modem
	st    *stack.Stack
	// closers tear the pipeline down, last first.
	closers []func() error
	rng     *rand.Rand

	mu         sync.Mutex
	violations []string
}

func runMatrixRow(ctx context.Context, p *mhi.Profile, o *QuirkMatrixOptions, echo string) QuirkMatrixRow {
	row := QuirkMatrixRow{Profile: p.Name}
	r := &matrixRun{o: o, p: p, echo: echo, row: &row, rng: rand.New(rand.NewPCG(uint64(len(p.Name)), 7))}
	steps := []func(context.Context) (string, error){r.powerUp, r.session, r.data, r.sysErr, r.suspendResume, r.data}
	for i, step := range steps {
		sctx, cancel := context.WithTimeout(ctx, o.StepTimeout)
		t0 := time.Now()
		note, err := step(sctx)
		cancel()
		row.Steps = append(row.Steps, QuirkStep{Name: QuirkMatrixSteps[i], Took: time.Since(t0), Note: note, Err: err})
		if err != nil {
			break
		}
	}
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		if err := r.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	row.CloseErr = errors.Join(errs...)
	r.mu.Lock()
	row.Violations = r.violations
	r.mu.Unlock()
	return row
}

// simOptions are the emulated modem's: strict, its violations recorded
// in the row, the profile's quirks on, slow-ready scaled down.
func (r *matrixRun) simOptions() sim.Options {
	return sim.Options{
		Strict:     true,
		ReadyDelay: r.o.ReadyDelay,
		OnViolation: func(err error) {
			r.mu.Lock()
			r.violations = append(r.violations, err.Error())
			r.mu.Unlock()
		},
	}
}

// powerUp brings the modem to mission mode: with a control pair through
// stack.OpenModem (MHI and the MBIM or QMI client), without one (IP_SW0
// only: SA8775P, QDU100) on mhitest's rig with the carrier network on
// the data pair.
func (r *matrixRun) powerUp(ctx context.Context) (string, error) {
	dp, err := r.p.DataPath("", "")
	if err != nil {
		return "", err
	}
	r.row.Session = string(dp.Control) + " " + dp.Channel
	if dp.Control == "" {
		r.row.Session = "- " + dp.Channel
		return "", r.powerUpBare(ctx, dp)
	}
	// FCCUnlock: the models that ship FCC-locked (mhi.Profile.FCCLock)
	// start locked on the emulated modem too; the matrix unlocks them as a
	// user who chose to would (docs/GETTING-ONLINE.md).
	m, err := stack.OpenModem(ctx, stack.Options{Profile: r.p.Name, FCCUnlock: true, Sim: stack.SimOptions{Modem: r.simOptions()}})
	if err != nil {
		return "", err
	}
	r.closers = append(r.closers, m.Close)
	r.sm, r.ctrl = m, m.Controller()
	dev, ok := r.ctrl.Device().(*vpci.Device)
	if !ok {
		return "", fmt.Errorf("the controller drives a %T, not the emulated modem's bus device", r.ctrl.Device())
	}
	if r.modem, ok = dev.Model().(*sim.Modem); !ok {
		return "", fmt.Errorf("the bus device models a %T, not a sim.Modem", dev.Model())
	}
	r.row.Quirks = r.modem.Quirks()
	return "", nil
}

// powerUpBare powers up a profile without a control pair, its carrier
// network on the data pair dp.Channel.
func (r *matrixRun) powerUpBare(ctx context.Context, dp mhi.DataPath) error {
	f, err := link.FramingFor(dp)
	if err != nil {
		return err
	}
	cn, err := simnet.NewCarrierNetwork(simnet.CarrierOptions{Framing: f})
	if err != nil {
		return err
	}
	r.closers = append(r.closers, cn.Close)
	rig, err := mhitest.Start(mhitest.Options{Profile: r.p, Sim: r.simOptions(), Functions: map[string]sim.Function{dp.Channel: cn}, NoPowerUp: true})
	if err != nil {
		return err
	}
	r.closers = append(r.closers, rig.Close)
	r.ctrl, r.modem = rig.Controller, rig.Modem
	r.row.Quirks = r.modem.Quirks()
	return rig.PowerUp(ctx)
}

// session opens the data session and a stack on it: Modem.OpenSession,
// or for a profile without a control pair a link endpoint on the data
// pair with the carrier's addresses.
func (r *matrixRun) session(ctx context.Context) (string, error) {
	if r.sm != nil {
		s, err := r.sm.OpenSession(ctx, stack.SessionOptions{APN: "internet"})
		if err != nil {
			return "", err
		}
		r.st = s
		return "", nil
	}
	dp, err := r.p.DataPath("", "")
	if err != nil {
		return "", err
	}
	f, err := link.FramingFor(dp)
	if err != nil {
		return "", err
	}
	ep, err := link.New(ctx, r.ctrl, link.Options{Channel: dp.Channel, Framing: f})
	if err != nil {
		return "", err
	}
	car := simnet.DefaultCarrier()
	s, err := stack.New(ep, stack.Config{
		Addresses:  []netip.Prefix{car.IPv4, car.IPv6},
		DNSServers: append(append([]netip.Addr(nil), car.IPv4DNS...), car.IPv6DNS...),
	})
	if err != nil {
		ep.Close()
		ep.Wait()
		return "", err
	}
	r.st = s
	r.closers = append(r.closers, func() error {
		err := s.Close()
		ep.Wait()
		return err
	})
	return "static " + car.IPv4.String(), nil
}

// data sends o.Bytes to the echo server through the stack and checks
// that the same bytes come back.
func (r *matrixRun) data(ctx context.Context) (string, error) {
	c, err := r.st.DialContext(ctx, "tcp4", r.echo)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	out := make([]byte, r.o.Bytes)
	for i := range out {
		out[i] = byte(r.rng.Uint32())
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(out)
		werr <- err
	}()
	in := make([]byte, len(out))
	_, rerr := io.ReadFull(c, in)
	if rerr != nil {
		c.Close() // ends the writer
	}
	if err := <-werr; err != nil {
		return "", fmt.Errorf("send: %w", err)
	}
	if rerr != nil {
		return "", fmt.Errorf("receive: %w", rerr)
	}
	if !bytes.Equal(in, out) {
		return "", fmt.Errorf("%d bytes came back different from what was sent", len(in))
	}
	return "", nil
}

// sysErr crashes the modem's firmware and waits for the host's
// EventRecovered and, on a modem with a data session, for the session to
// be back: the crash resets the modem's control function, which ends the
// session (the stack's link goes down), and the session comes up again
// (link up).
func (r *matrixRun) sysErr(ctx context.Context) (string, error) {
	recovered, unsub := onRecovered(r.ctrl)
	defer unsub()
	for len(r.st.Events()) > 0 {
		<-r.st.Events()
	}
	if err := r.modem.TriggerSysErr(); err != nil {
		return "", err
	}
	select {
	case <-recovered:
	case <-ctx.Done():
		st, ee, mission := r.ctrl.State()
		return "", fmt.Errorf("no recovery (host in %s/%s, mission %v): %w", st, ee, mission, ctx.Err())
	}
	if r.sm == nil {
		return "", nil
	}
	down := false
	for {
		select {
		case e := <-r.st.Events():
			switch e.Kind {
			case stack.EventLinkDown:
				down = true
			case stack.EventLinkUp:
				if down {
					return "session back", nil
				}
			}
		case <-ctx.Done():
			return "", fmt.Errorf("recovered, but the data session is not back (link lost: %v): %w", down, ctx.Err())
		}
	}
}

// suspendResume suspends the modem to M3 and resumes it to M0. A profile
// without M3 (NoM3) must have Suspend refused with errors.ErrUnsupported,
// the device left in M0.
func (r *matrixRun) suspendResume(ctx context.Context) (string, error) {
	if r.p.NoM3 {
		err := r.ctrl.Suspend(ctx)
		if !errors.Is(err, errors.ErrUnsupported) {
			return "", fmt.Errorf("Suspend of a model without M3 = %v, want errors.ErrUnsupported", err)
		}
		if st, _ := r.modem.State(); st != mhi.StateM0 {
			return "", fmt.Errorf("modem in %s after the refused Suspend, want M0", st)
		}
		return "no M3: refused", nil
	}
	// Suspend refuses while UL transfers are outstanding (ErrBusy): the
	// TCP close of the data step may still be on its way.
	for {
		err := r.ctrl.Suspend(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, mhi.ErrBusy) {
			return "", fmt.Errorf("Suspend: %w", err)
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return "", fmt.Errorf("Suspend: UL never idle: %w", err)
		}
	}
	if st, _ := r.modem.State(); st != mhi.StateM3 {
		return "", fmt.Errorf("modem in %s after Suspend, want M3", st)
	}
	if err := r.ctrl.Resume(ctx); err != nil {
		return "", fmt.Errorf("Resume: %w", err)
	}
	if st, _, mission := r.ctrl.State(); st != mhi.StateM0 || !mission {
		return "", fmt.Errorf("host in %s (mission %v) after Resume, want M0", st, mission)
	}
	return "", nil
}

// WriteQuirkMatrix prints rows as a table: profile, the quirks played,
// the session, each step's outcome and time, and the verdict; then each
// failed row's errors.
func WriteQuirkMatrix(w io.Writer, rows []QuirkMatrixRow, o QuirkMatrixOptions) error {
	o.setDefaults()
	fmt.Fprintf(w, "quirk matrix: %d profiles on the emulated modem, each with its profile quirks on (strict: a host protocol violation fails the row)\n", len(rows))
	fmt.Fprintf(w, "slow-ready plays READY %v after power-on and every reset (scaled down: real modems take seconds; the host's budget is the profile's ReadyTimeout)\n\n", o.ReadyDelay)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "PROFILE\tQUIRKS\tSESSION")
	for _, s := range QuirkMatrixSteps {
		fmt.Fprint(tw, "\t"+strings.ToUpper(s))
	}
	fmt.Fprint(tw, "\tRESULT\n")
	failed := 0
	for i := range rows {
		row := &rows[i]
		q := "-"
		if len(row.Quirks) > 0 {
			var qs []string
			for _, x := range row.Quirks {
				qs = append(qs, string(x))
			}
			q = strings.Join(qs, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s", row.Profile, q, row.Session)
		for j := range QuirkMatrixSteps {
			cell := "-"
			if j < len(row.Steps) {
				s := row.Steps[j]
				verdict := "ok"
				if s.Err != nil {
					verdict = "FAIL"
				}
				cell = fmt.Sprintf("%s %v", verdict, s.Took.Round(time.Millisecond))
				if s.Note != "" {
					cell += " (" + s.Note + ")"
				}
			}
			fmt.Fprint(tw, "\t"+cell)
		}
		verdict := "ok"
		if row.Err() != nil {
			verdict = "FAIL"
			failed++
		}
		fmt.Fprintf(tw, "\t%s\n", verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d of %d profiles passed every step\n", len(rows)-failed, len(rows))
	for i := range rows {
		if err := rows[i].Err(); err != nil {
			fmt.Fprintf(w, "%s: %v\n", rows[i].Profile, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}
	return nil
}
