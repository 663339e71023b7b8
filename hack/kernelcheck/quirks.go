package main

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The quirk runs (docs/KERNEL-CROSSCHECK.md §8): Linux against the
// emulated modem playing one of real modems' behaviours
// (docs/QUIRKS.md), one kernel and profile per behaviour. Each behaviour
// gets one verdict line: what Linux did against what its source says it
// does. A behaviour fails the cross-check when the modem did not play it
// or Linux did something its source does not explain; a Linux failure
// that is a documented kernel limitation (behaviour.finding) is reported,
// not counted.

// quirkRun is one guest run of the quirk runs.
type quirkRun struct {
	name    string // names the run's scope and directory (KERNEL/PROFILE+NAME)
	kernel  string // the kernel label it runs on; the last kernel given when absent
	profile string
	pbl     bool // the modem powers up in PBL (firmware over BHI)
	// profileQuirks serves the profile's own quirks (sim.ProfileQuirks);
	// otherwise the modem is spec-exact but for serve.
	profileQuirks bool
	serve         []string // more mhictl sim serve flags
	// steps are the guest's checks after bring_up and ping (guest.go
	// functions), and checks the verdicts they print.
	steps  []string
	checks []string
	// behaviours are judged from this one run.
	behaviours []behaviour
}

// behaviour is one quirk of docs/QUIRKS.md as Linux meets it.
type behaviour struct {
	quirk sim.Quirk
	// source is what Linux's source says it does with the behaviour.
	source string
	// finding, when set, recognises a documented kernel limitation
	// (docs/QUIRKS.md) in a run where Linux failed and says what it saw
	// of it: such a failure is reported, not counted. Any other Linux
	// failure is counted.
	finding func(ev *quirkEvidence) string
	// judge reads the run: played says the modem played the behaviour
	// and the run exercised it (false: our emulator or harness is
	// broken), linuxOK that Linux handled it, did what both did.
	judge func(ev *quirkEvidence) (played, linuxOK bool, did string)
}

// quirkEvidence is what a quirk run left: the guest's verdicts, its
// kernel log and the modem's log.
type quirkEvidence struct {
	checks map[string]check
	dmesg  []string
	mlog   string
}

// quirkRuns are the runs, in order. Together they add about 2 min on a
// quiet 2-core machine (docs/KERNEL-CROSSCHECK.md §8).
var quirkRuns = []quirkRun{
	{
		// The served default for the profile: slow-ready (2 s) and
		// no-inband-wake, the combination the finding of
		// docs/QUIRKS.md was seen with.
		name: "profile-quirks", kernel: "6.12", profile: "quectel-em1xx", profileQuirks: true,
		steps:  []string{"runtime_pm", "syserr_recovery", "ping_check ping-after-syserr", "module_unload"},
		checks: []string{"runtime-pm", "syserr-recovery", "channels-after-syserr", "ping-after-syserr", "module-unload"},
		behaviours: []behaviour{
			{quirk: sim.QuirkSlowReady, judge: judgeSlowReady, finding: suspendDuringMissionMode,
				source: "pm.c mhi_ready_state_transition polls MHISTATUS.READY every 25 ms for ready_timeout_ms, else timeout_ms (pci_generic.c quectel-em1xx: timeout_ms 20000; later kernels add ready_timeout_ms 50000), after a SYS_ERR as at power-up; mhi_pm_disable_transition waits READY timeout_ms after its reset"},
			{quirk: sim.QuirkNoInbandWake, judge: judgeNoInbandWake,
				source: "pci_generic.c: sideband_wake models get no-op wake_get/wake_put/wake_toggle, so mhi_assert_dev_wake never writes the wake doorbell (channel 127)"},
		},
	},
	{
		name: string(sim.QuirkOneMSI), kernel: "6.1", profile: "qcom-sdx55m", serve: []string{"-quirk", string(sim.QuirkOneMSI)},
		steps:  []string{"syserr_recovery", "ping_check ping-after-syserr"},
		checks: []string{"syserr-recovery", "channels-after-syserr", "ping-after-syserr"},
		behaviours: []behaviour{{quirk: sim.QuirkOneMSI, judge: judgeOneMSI,
			source: `pci_generic.c mhi_pci_get_irqs: given fewer vectors than 1 + event rings, "using shared MSI", every event ring's vector patched to 0`}},
	},
	{
		name: string(sim.QuirkSysErrAtPowerUp), kernel: "6.12", profile: "qcom-sdx55m", pbl: true, serve: []string{"-quirk", string(sim.QuirkSysErrAtPowerUp)},
		behaviours: []behaviour{{quirk: sim.QuirkSysErrAtPowerUp, judge: judgeSysErrAtPowerUp,
			source: "pm.c mhi_async_power_up: a device found in SYS_ERR is reset (MHICTRL.RESET, polled clear for timeout_ms), BHI_INTVEC written again, then the PBL transition downloads the firmware (\"bus: mhi: host: Fix check for syserr at power_up\")"}},
	},
	{
		name: string(sim.QuirkD3Cold), kernel: "6.1", profile: "qcom-sdx55m", serve: []string{"-quirk", string(sim.QuirkD3Cold)},
		steps:  []string{"lost_in_m3 d3cold-resume power"},
		checks: []string{"d3cold-resume"},
		behaviours: []behaviour{{quirk: sim.QuirkD3Cold, judge: judgeD3Cold,
			source: "pci_generic.c mhi_pci_runtime_resume: mhi_pm_resume refuses a device not in M3 (\"Resuming from non M3 state\", -EINVAL), the driver then queues its recovery work, which powers the modem down and up (\"bus: mhi: host: pci_generic: Add suspend/resume/recovery procedure\")"}},
	},
}

// quirkRunsFor returns the runs that judge one of names ("all": every
// run; empty: none), or an error naming an unknown behaviour.
func quirkRunsFor(names []string) ([]quirkRun, error) {
	if len(names) == 1 && names[0] == "all" {
		return quirkRuns, nil
	}
	known := map[string]bool{}
	for _, q := range quirkRuns {
		for _, b := range q.behaviours {
			known[string(b.quirk)] = true
		}
	}
	for _, n := range names {
		if !known[n] {
			return nil, qh.Prereqf("-quirks: no quirk run judges %q (have: all, %s)", n, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
	}
	var runs []quirkRun
	for _, q := range quirkRuns {
		for _, b := range q.behaviours {
			if slices.Contains(names, string(b.quirk)) {
				runs = append(runs, q)
				break
			}
		}
	}
	return runs, nil
}

// pickKernel returns the kernel the run wants, else the last one given
// (which the verdicts then name).
func (q *quirkRun) pickKernel(ks []kernelDir) kernelDir {
	for _, k := range ks {
		if k.label == q.kernel {
			return k
		}
	}
	return ks[len(ks)-1]
}

// modemArgs are the mhictl sim serve arguments of the run's modem.
func (q *quirkRun) modemArgs() []string {
	args := []string{"sim", "serve", "-profile", q.profile, "-once", "-strict"}
	if !q.profileQuirks {
		args = append(args, "-no-profile-quirks")
	}
	return append(args, q.serve...)
}

// quirkScript is the guest's /init for a quirk run: the init script's
// functions, bring-up and a ping, the run's steps, the kernel log.
func quirkScript(e expect, wait int, steps []string) (string, error) {
	lib, _, ok := strings.Cut(script(e, wait), functionsEnd)
	if !ok {
		return "", errors.New("kernelcheck: the init script has no " + strings.TrimSpace(functionsEnd) + " line")
	}
	return lib + functionsEnd + "\nbring_up\nping_check ping\n" + strings.Join(steps, "\n") + "\nfinish\n", nil
}

// functionsEnd ends the init script's functions (guest.go).
const functionsEnd = "# (end of the functions)\n"

// quirkGuestChecks are the verdicts a quirk run's guest prints.
func (q *quirkRun) guestChecks() []string {
	return append([]string{"modules-load", "mission-mode", "ping"}, q.checks...)
}

// judgeQuirks replaces the run's guest verdicts by one per behaviour.
func (g *guestRun) judgeQuirks(out guestOutput, mlog string) {
	r := g.r
	ev := &quirkEvidence{checks: r.checks, dmesg: out.dmesg, mlog: mlog}
	if len(ev.dmesg) == 0 {
		// A guest stopped by -check-timeout dumped no kernel log; its
		// stall watcher's tail is what there is.
		ev.dmesg = out.stallDmesg
	}
	names := g.quirk.guestChecks()
	for _, n := range r.order {
		if !slices.Contains(names, n) {
			names = append(names, n) // guest-finished, kernel
		}
	}
	guest := guestSummary(r, names)
	r.checks, r.order = nil, nil
	if qh.SummaryRE.FindStringSubmatch(mlog) == nil {
		r.add("modem", false, "the modem printed no summary (crashed?); see "+filepath.Join(g.dir, "modem.log"))
	}
	served := servedQuirks(mlog)
	for _, b := range g.quirk.behaviours {
		name := "quirk " + string(b.quirk)
		played, ok, did := b.judge(ev)
		if !slices.Contains(served, string(b.quirk)) {
			played, did = false, fmt.Sprintf("the modem did not serve %s (its quirks: %v)", b.quirk, served)
		}
		switch {
		case !played:
			r.add(name, false, "not played: "+did+" [guest: "+guest+"]")
		case ok:
			r.add(name, true, "Linux: "+did+"; its source: "+b.source)
		case b.finding != nil && b.finding(ev) != "":
			r.add(name, false, "Linux: "+did+"; its source: "+b.source+" [guest: "+guest+"]")
			r.finding(name, b.finding(ev))
		default:
			r.add(name, false, "Linux: "+did+", which its source does not explain: "+b.source+" [guest: "+guest+"]")
		}
	}
}

// guestSummary is the guest's verdicts in one line: the failed ones with
// their details, the passed ones by name.
func guestSummary(r *result, names []string) string {
	var s []string
	for _, n := range names {
		c, ok := r.checks[n]
		switch {
		case !ok:
			s = append(s, n+" not reached")
		case !c.pass:
			s = append(s, n+" FAIL ("+c.detail+")")
		default:
			s = append(s, n+" PASS")
		}
	}
	return strings.Join(s, ", ")
}

var (
	servingQuirksRE = regexp.MustCompile(`msg="serving the emulated modem" .*quirks="?\[([^\]]*)\]`)
	modemStateRE    = regexp.MustCompile(`(?m)^time=(\S+) .*msg="modem state" state=(\S+) ee=(\S+)`)
)

// servedQuirks are the quirks the modem's "serving" line lists.
func servedQuirks(mlog string) []string {
	m := servingQuirksRE.FindStringSubmatch(mlog)
	if m == nil {
		return nil
	}
	return strings.Fields(m[1])
}

// stateChange is one "modem state" line of the modem's log.
type stateChange struct {
	at        time.Time
	state, ee string
}

func stateChanges(mlog string) []stateChange {
	var s []stateChange
	for _, m := range modemStateRE.FindAllStringSubmatch(mlog, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		s = append(s, stateChange{at, m[2], m[3]})
	}
	return s
}

// readyDelays are the times from each RESET to the READY after it.
func readyDelays(s []stateChange) []time.Duration {
	var d []time.Duration
	for i, c := range s {
		if c.state != "RESET" || i+1 >= len(s) || s[i+1].state != "READY" {
			continue
		}
		d = append(d, s[i+1].at.Sub(c.at))
	}
	return d
}

// dmesgHas reports whether a kernel log line contains sub.
func dmesgHas(dmesg []string, sub string) bool {
	return slices.ContainsFunc(dmesg, func(l string) bool { return strings.Contains(l, sub) })
}

// passed reports whether every named guest check passed.
func (ev *quirkEvidence) passed(names ...string) bool {
	for _, n := range names {
		if c, ok := ev.checks[n]; !ok || !c.pass {
			return false
		}
	}
	return true
}

// violations is the modem's count of host protocol violations (-1: no
// summary) and its first violation lines.
func (ev *quirkEvidence) violations() (int, string) {
	m := qh.SummaryRE.FindStringSubmatch(ev.mlog)
	if m == nil {
		return -1, ""
	}
	n := 0
	fmt.Sscan(m[1], &n)
	return n, qh.FirstLines(ev.mlog, `msg=violation|msg="host protocol violation"`, 2)
}

func roundAll(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(100*time.Millisecond).String())
	}
	return strings.Join(s, " ")
}

// judgeSlowReady: the modem's READY came ReadyDelay (2 s) after every
// reset, among them the SYS_ERR recovery's; Linux waited for it there and
// at power-down and recovered.
func judgeSlowReady(ev *quirkEvidence) (bool, bool, string) {
	delays := readyDelays(stateChanges(ev.mlog))
	slow := 0
	for _, d := range delays {
		if d >= 1900*time.Millisecond {
			slow++
		}
	}
	if slow == 0 {
		return false, false, fmt.Sprintf("no READY came 2 s after a reset (RESET→READY: %s)", roundAll(delays))
	}
	failedReady := dmesgHas(ev.dmesg, "failed to enter MHI Ready") || dmesgHas(ev.dmesg, "failed to enter READY state")
	ok := ev.passed("syserr-recovery", "module-unload") && !failedReady
	did := fmt.Sprintf("modem READY %s after its resets; Linux's SYS_ERR recovery: %s; power-down, which waits for READY: %s",
		roundAll(delays), status(ev, "syserr-recovery"), status(ev, "module-unload"))
	if failedReady {
		did += "; dmesg: READY timed out"
	}
	return true, ok, did
}

// judgeNoInbandWake: Linux suspended and resumed the modem (its wake
// votes ran) and never wrote channel doorbell 127, which the modem would
// have reported as a violation and wedged on.
func judgeNoInbandWake(ev *quirkEvidence) (bool, bool, string) {
	s := stateChanges(ev.mlog)
	m3, m0after := 0, 0
	for i, c := range s {
		if c.state == "M3" {
			m3++
			if i+1 < len(s) && s[i+1].state == "M0" {
				m0after++
			}
		}
	}
	n, lines := ev.violations()
	if n < 0 {
		return false, false, "the modem printed no summary"
	}
	if m3 == 0 || m0after == 0 {
		return false, false, fmt.Sprintf("the wake paths never ran: %d M3 entries, %d resumes to M0 (runtime-pm: %s)", m3, m0after, ev.checks["runtime-pm"].detail)
	}
	wrote := strings.Contains(ev.mlog, fmt.Sprintf("channel doorbell %d written", mhi.WakeDoorbellChannel))
	did := fmt.Sprintf("%d suspends to M3, %d resumes to M0, data and a SYS_ERR recovery; the wake doorbell never written (%d violations)", m3, m0after, n)
	if wrote || n > 0 {
		did = fmt.Sprintf("%d violations: %s", n, lines)
	}
	return true, !wrote && n == 0, did
}

// judgeOneMSI: with one vector offered Linux shares it, names vector 0 in
// every event ring context (any other is a violation) and moves data
// through a SYS_ERR recovery.
func judgeOneMSI(ev *quirkEvidence) (bool, bool, string) {
	n, lines := ev.violations()
	shared := dmesgHas(ev.dmesg, "using shared MSI")
	ok := shared && n == 0 && ev.passed("ping", "syserr-recovery", "ping-after-syserr")
	did := fmt.Sprintf("shared MSI: %v; ping %s; SYS_ERR recovery %s; ping after it %s; %d violations",
		shared, status(ev, "ping"), status(ev, "syserr-recovery"), status(ev, "ping-after-syserr"), n)
	if n > 0 {
		did += ": " + lines
	}
	return n >= 0, ok, did
}

// judgeSysErrAtPowerUp: the modem came out of power-on in SYS_ERR in PBL;
// Linux reset it out of SYS_ERR, downloaded the firmware and reached
// mission mode.
func judgeSysErrAtPowerUp(ev *quirkEvidence) (bool, bool, string) {
	s := stateChanges(ev.mlog)
	if len(s) == 0 || s[0].state != "SYS_ERR" {
		first := "none"
		if len(s) > 0 {
			first = s[0].state + "/" + s[0].ee
		}
		return false, false, "the modem's first state was " + first + ", not SYS_ERR"
	}
	images := len(qh.ImageRE.FindAllString(ev.mlog, -1))
	found := dmesgHas(ev.dmesg, "state: SYS ERROR")
	n, lines := ev.violations()
	ok := found && images > 0 && n == 0 && ev.passed("mission-mode", "ping")
	did := fmt.Sprintf("found the modem in SYS_ERR at power-up: %v; %d boot images sent; mission mode %s; ping %s; states %s; %d violations",
		found, images, status(ev, "mission-mode"), status(ev, "ping"), qh.StateTrail(ev.mlog, 8), n)
	if n > 0 {
		did += ": " + lines
	}
	return true, ok, did
}

// judgeD3Cold: the modem lost its state as it entered M3 (power gone:
// power_losses in its summary, a state too short for its log to show);
// Linux found it not in M3 at resume and recovered it.
func judgeD3Cold(ev *quirkEvidence) (bool, bool, string) {
	lost := 0
	if m := powerLossesRE.FindStringSubmatch(ev.mlog); m != nil {
		fmt.Sscan(m[1], &lost)
	}
	if lost == 0 {
		return false, false, fmt.Sprintf("the modem never lost power in M3 (states %s; d3cold-resume: %s)", qh.StateTrail(ev.mlog, 10), status(ev, "d3cold-resume"))
	}
	nonM3 := dmesgHas(ev.dmesg, "Resuming from non M3 state")
	n, _ := ev.violations()
	ok := ev.passed("d3cold-resume") && n == 0
	did := fmt.Sprintf("runtime-suspended, the modem lost power in M3 (%d times); %q at resume: %v; d3cold-resume %s; %d violations",
		lost, "Resuming from non M3 state", nonM3, status(ev, "d3cold-resume"), n)
	return true, ok, did
}

// powerLossesRE: the modem's count of power losses it played.
var powerLossesRE = regexp.MustCompile(`msg=summary .*\bpower_losses=(\d+)`)

// suspendDuringMissionMode recognises the Linux race of docs/QUIRKS.md
// ("Against Linux"): after a SYS_ERR recovery that took longer than
// mhi_pci_generic's 2 s autosuspend delay, pm_runtime_allow in its
// mission-mode callback runtime-suspends the modem (M3) while the
// mission-mode transition waits in __mhi_device_get_sync for M0; with
// sideband wake the wake vote is a no-op, so nothing stops the suspend
// and nothing resumes the modem: the channel devices never come back.
// Its signature, between the recovery's start and its verdict: "Allowing
// M3 transition" after the last "Processing Mission Mode transition",
// and no resume ("Entered with PM state") after it.
func suspendDuringMissionMode(ev *quirkEvidence) string {
	if ev.passed("syserr-recovery") {
		return ""
	}
	log := between(ev.dmesg, "SYS ERROR Detect", "mhistack: syserr-recovery end")
	i := -1
	for k, l := range log {
		if strings.Contains(l, "Processing Mission Mode transition") {
			i = k
		}
	}
	if i < 0 {
		return ""
	}
	rest := log[i:]
	j := slices.IndexFunc(rest, func(l string) bool { return strings.Contains(l, "Allowing M3 transition") })
	if j < 0 || dmesgHas(rest[j:], "Entered with PM state") {
		return ""
	}
	return "Linux runtime-suspended the modem during its mission-mode transition and never resumed it (" +
		strings.TrimSpace(rest[0]) + " / " + strings.TrimSpace(rest[j]) + "): the race of docs/QUIRKS.md, \"Against Linux\""
}

// between returns the lines of log from the first containing from (the
// start when none does: a stall watcher's tail may begin after it) to the
// first after it containing to (the end when none does).
func between(log []string, from, to string) []string {
	i := max(slices.IndexFunc(log, func(l string) bool { return strings.Contains(l, from) }), 0)
	j := slices.IndexFunc(log[i:], func(l string) bool { return strings.Contains(l, to) })
	if j < 0 {
		return log[i:]
	}
	return log[i : i+j]
}

func status(ev *quirkEvidence, name string) string {
	c, ok := ev.checks[name]
	switch {
	case !ok:
		return "not reached"
	case c.pass:
		return "PASS"
	}
	return "FAIL (" + c.detail + ")"
}
