package main

// The lock runs (docs/KERNEL-CROSSCHECK.md §9): Linux's MHI drivers carry
// Debian's mbimcli and qmicli to an emulated modem served locked (mhictl
// sim serve -fcc-lock -sim-pin), and the tools must see the locks as
// mhictl status reports them (docs/GETTING-ONLINE.md): the software radio
// off on an FCC-locked modem ("radio fcc-locked"), the SIM asking for
// PIN1 with its 3 tries ("PIN required (3 attempts left)"). One kernel,
// no SYS_ERR, no data: about a minute per run.

import (
	"slices"
	"strings"

	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
)

// lockPIN is the PIN the lock runs' SIM is locked with; the guest never
// enters it (a wrong or right try would change what is checked).
const lockPIN = "2580"

// lockRun is one guest run of the lock runs.
type lockRun struct {
	profile string
	fcc     bool // -fcc-lock: the profile's first PCI ID ships locked
}

// lockRuns: an FCC-locked, PIN-locked Foxconn T99W175 (MBIM only, its
// lock lifted over the MBIM QMI service) and a PIN-locked SDX55 whose
// QMI port qmicli reads (no MHI profile with a QMI port ships FCC-locked).
var lockRuns = []lockRun{
	{profile: "foxconn-t99w175", fcc: true},
	{profile: "qcom-sdx55m"},
}

// lockRunsFor returns the lock runs of the profiles named ("all": every
// run; empty: none), or an error naming a profile no lock run has.
func lockRunsFor(names []string) ([]lockRun, error) {
	if len(names) == 1 && names[0] == "all" {
		return lockRuns, nil
	}
	var out []lockRun
	for _, n := range names {
		i := slices.IndexFunc(lockRuns, func(l lockRun) bool { return l.profile == n })
		if i < 0 {
			return nil, qh.Prereqf("-locks: no lock run on %q (have: all, foxconn-t99w175, qcom-sdx55m)", n)
		}
		out = append(out, lockRuns[i])
	}
	return out, nil
}

// serveArgs are the mhictl sim serve flags that lock the run's modem.
func (l *lockRun) serveArgs() []string {
	args := []string{"-sim-pin", lockPIN}
	if l.fcc {
		args = append(args, "-fcc-lock")
	}
	return args
}

// lockChecks are the verdicts a lock run's guest prints after bring-up.
var lockChecks = []string{"lock-mbim-radio", "lock-mbim-subscriber", "lock-mbim-pin", "lock-qmi-operating-mode", "lock-qmi-card-status"}

// lockSection is the guest's checks; @RADIO@ is the software radio state
// mbimcli should read (off when FCC-locked), @MODE@ the QMI operating
// mode, @QMISKIP@ why the QMI checks do not run (empty: they do).
const lockSection = `
# ---- locks as mbimcli and qmicli see them (hack/kernelcheck/locks.go) ----
lock_section() {
	local out
	wait_for 10 test -e /dev/wwan0mbim0
	if [ ! -e /dev/wwan0mbim0 ] || [ ! -x /usr/bin/mbimcli ]; then
		for c in lock-mbim-radio lock-mbim-subscriber lock-mbim-pin; do check $c FAIL "no /dev/wwan0mbim0 or no mbimcli in the initramfs"; done
	else
		mbim() { timeout 60 /usr/bin/mbimcli -d /dev/wwan0mbim0 "$@" 2>&1; }
		out=$(mbim --query-radio-state); echo "$out" | sed 's/^/mbimcli| /'
		if echo "$out" | grep -qi "software radio state: '@RADIO@'"; then check lock-mbim-radio PASS "$(echo "$out" | grep -i 'radio state' | tr -s ' \t' ' ' | tr '\n' ';')"; else check lock-mbim-radio FAIL "want software radio state '@RADIO@': $(echo $out | head -c 300)"; fi
		out=$(mbim --query-subscriber-ready-status); echo "$out" | sed 's/^/mbimcli| /'
		if echo "$out" | grep -qi "ready state: 'device-locked'"; then check lock-mbim-subscriber PASS "ready state 'device-locked'"; else check lock-mbim-subscriber FAIL "want ready state 'device-locked': $(echo $out | head -c 300)"; fi
		out=$(mbim --query-pin-state); echo "$out" | sed 's/^/mbimcli| /'
		if echo "$out" | grep -qi "type: 'pin1'" && echo "$out" | grep -qi "state: 'locked'" && echo "$out" | grep -qi "attempts: '3'"; then
			check lock-mbim-pin PASS "$(echo "$out" | grep -iE 'type|state|attempts' | tr -s ' \t' ' ' | tr '\n' ';')"
		else
			check lock-mbim-pin FAIL "want PIN1 locked, 3 attempts: $(echo $out | head -c 300)"
		fi
	fi
	if [ -n "@QMISKIP@" ]; then for c in lock-qmi-operating-mode lock-qmi-card-status; do check $c SKIP "@QMISKIP@"; done; return; fi
	wait_for 10 test -e /dev/wwan0qmi0
	if [ ! -e /dev/wwan0qmi0 ] || [ ! -x /usr/bin/qmicli ]; then
		for c in lock-qmi-operating-mode lock-qmi-card-status; do check $c FAIL "no /dev/wwan0qmi0 or no qmicli in the initramfs"; done
		return
	fi
	qmi() { timeout 60 /usr/bin/qmicli -d /dev/wwan0qmi0 "$@" 2>&1; }
	out=$(qmi --dms-get-operating-mode); echo "$out" | sed 's/^/qmicli| /'
	if echo "$out" | grep -qi "mode: '@MODE@'"; then check lock-qmi-operating-mode PASS "$(echo "$out" | grep -i 'mode:' | tr -s ' \t' ' ' | tr '\n' ';')"; else check lock-qmi-operating-mode FAIL "want mode '@MODE@': $(echo $out | head -c 300)"; fi
	out=$(qmi --uim-get-card-status); echo "$out" | sed 's/^/qmicli| /'
	if echo "$out" | grep -qi "PIN1 state: 'enabled-not-verified'" && echo "$out" | grep -qi "PIN1 retries: '3'"; then
		check lock-qmi-card-status PASS "$(echo "$out" | grep -iE 'application state|PIN1 state|PIN1 retries' | tr -s ' \t' ' ' | tr '\n' ';')"
	else
		check lock-qmi-card-status FAIL "want PIN1 enabled-not-verified, 3 retries: $(echo $out | head -c 400)"
	fi
}
lock_section
# ---- end of the lock section ----
`

// lockScript is the guest's /init for a lock run: the init script's
// functions, bring-up, the lock checks, the kernel log.
func lockScript(e expect, wait int, l *lockRun) (string, error) {
	lib, err := quirkScript(e, wait, nil)
	if err != nil {
		return "", err
	}
	lib, _, _ = strings.Cut(lib, functionsEnd)
	radio, mode := "on", "online"
	if l.fcc {
		radio, mode = "off", "low-power"
	}
	skip := ""
	if !slices.Contains(e.ports, "qmi0") {
		skip = "no QMI port: the profile, or this kernel's mhi_pci_generic for it, has no QMI channel"
	}
	sec := strings.NewReplacer("@RADIO@", radio, "@MODE@", mode, "@QMISKIP@", skip).Replace(lockSection)
	return lib + functionsEnd + "\nbring_up\n" + strings.TrimPrefix(sec, "\n") + "finish\n", nil
}

// judgeLocks keeps the guest's verdicts and fails each lock check the
// guest never printed.
func (g *guestRun) judgeLocks() {
	for _, n := range append([]string{"modules-load", "mission-mode"}, lockChecks...) {
		if _, ok := g.r.checks[n]; !ok {
			g.r.add(n, false, "not reached")
		}
	}
}
