package main

// QMI control plane in the guest (docs/KERNEL-CROSSCHECK.md §2, the qmi-*
// checks): Debian's qmicli, copied into the initramfs with its shared
// libraries, talks directly (no qmi-proxy) over the kernel's
// /dev/wwan0qmi0 (mhi_wwan_ctrl on the profile's QMI channel pair) to the
// emulated modem's QMI function (link/simnet QMIFunction, attached by
// `mhictl sim serve`, sharing the MBIM function's network when the
// profile has both): device IDs, serving system, a WDS call started on a
// client ID kept across qmicli runs (--client-no-release-cid,
// --client-cid), its packet service status and settings, and its stop.
// The harness compares the IMEI and PLMN qmicli printed with what the
// modem logged (qmiIdentity).

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
)

// qmiChecks are the QMI verdicts, in the order the section prints them.
var qmiChecks = []string{"qmi-dms-ids", "qmi-nas-serving-system", "qmi-wds-start-network", "qmi-wds-packet-status", "qmi-wds-settings", "qmi-wds-stop-network"}

// qmicliPath is the host's qmicli (libqmi-utils).
const qmicliPath = "/usr/bin/qmicli"

// requireQMICLI is the environment variable that turns a missing qmicli
// from a skip into a failure (CI sets it).
const requireQMICLI = "MHISTACK_REQUIRE_QMICLI"

// addQmicli puts qmicli and its shared libraries into files (addTool),
// when the host has it.
func addQmicli(files map[string]initramfs.Entry) error {
	if _, err := os.Stat(qmicliPath); err != nil {
		return nil
	}
	return addTool(files, qmicliPath)
}

// qmiPlan says whether the QMI section runs for e (the profile and this
// kernel's configuration have a QMI port, the host has qmicli) and, when
// it does not, the verdict (SKIP, or FAIL for a missing qmicli when
// MHISTACK_REQUIRE_QMICLI=1) and the reason.
func qmiPlan(e expect, profileHasQMI, haveQmicli, require bool) (verdict, reason string) {
	switch {
	case !slices.Contains(e.ports, "qmi0") && !profileHasQMI:
		return "SKIP", "the profile has no QMI channel"
	case !slices.Contains(e.ports, "qmi0"):
		return "SKIP", "this kernel's mhi_pci_generic has no QMI channel for the profile"
	case !haveQmicli && require:
		return "FAIL", "no " + qmicliPath + " on the host (apt-get install libqmi-utils) and " + requireQMICLI + "=1"
	case !haveQmicli:
		return "SKIP", "no " + qmicliPath + " on the host (apt-get install libqmi-utils; " + requireQMICLI + "=1 makes this a failure)"
	}
	return "", ""
}

// qmiSection is the guest script's QMI part (withQMI puts it in);
// @QMICHECKS@ is qmiChecks, @QMIVERDICT@ and @QMISKIP@ what qmiPlan said.
// qmicli prints "Field: 'value'" (most answers) or "Field: value" (WDS
// current settings), indented; qmi_field takes the value after a field
// name, whatever precedes it.
const qmiSection = `
# ---- QMI control plane (hack/kernelcheck/qmi.go) ----
qmi_all() { local v=$1 c; shift; for c in @QMICHECKS@; do check $c $v "$*"; done; }
qmi_field() { sed -n "s/.*$1: '\{0,1\}\([^' ]*\).*/\1/p" | head -n 1; }
qmi_section() {
	local dev=/dev/wwan0qmi0 qmicli=/usr/bin/qmicli out imei reg ps mcc mnc radio handle cid st addr gw
	if [ -n "@QMISKIP@" ]; then qmi_all @QMIVERDICT@ "@QMISKIP@"; return; fi
	[ -e $dev ] || { qmi_all FAIL "no $dev"; return; }
	[ -x $qmicli ] || { qmi_all FAIL "no $qmicli in the initramfs"; return; }
	qmi() { timeout 60 $qmicli -d $dev "$@" 2>&1; }
	out=$(qmi --dms-get-ids); echo "$out" | sed 's/^/qmicli| /'
	imei=$(echo "$out" | qmi_field IMEI)
	if [ -n "$imei" ]; then check qmi-dms-ids PASS "IMEI $imei"; else check qmi-dms-ids FAIL "no IMEI: $(echo $out | head -c 300)"; fi
	out=$(qmi --nas-get-serving-system); echo "$out" | sed 's/^/qmicli| /'
	reg=$(echo "$out" | qmi_field 'Registration state')
	ps=$(echo "$out" | qmi_field PS)
	mcc=$(echo "$out" | qmi_field MCC); mnc=$(echo "$out" | qmi_field MNC)
	radio=$(echo "$out" | qmi_field '\[0\]')
	if [ "$reg" = registered ] && [ "$ps" = attached ]; then
		check qmi-nas-serving-system PASS "registered, PS attached, radio ${radio:-?}, MCC $mcc MNC $mnc"
	else
		check qmi-nas-serving-system FAIL "registration '${reg:-?}', PS '${ps:-?}': $(echo $out | head -c 300)"
	fi
	# The call's client ID outlives each qmicli run: a released WDS
	# client ends its call, on a modem as on the emulated one.
	out=$(qmi --wds-start-network=apn=internet,ip-type=4 --client-no-release-cid); echo "$out" | sed 's/^/qmicli| /'
	handle=$(echo "$out" | qmi_field 'Packet data handle')
	cid=$(echo "$out" | qmi_field CID)
	if [ -n "$handle" ] && [ -n "$cid" ]; then
		check qmi-wds-start-network PASS "packet data handle $handle on WDS client $cid"
	else
		check qmi-wds-start-network FAIL "handle '${handle:-?}', client '${cid:-?}': $(echo $out | head -c 300)"
		for c in qmi-wds-packet-status qmi-wds-settings qmi-wds-stop-network; do check $c FAIL "no call"; done
		return
	fi
	out=$(qmi --client-cid=$cid --client-no-release-cid --wds-get-packet-service-status); echo "$out" | sed 's/^/qmicli| /'
	st=$(echo "$out" | qmi_field 'Connection status')
	if [ "$st" = connected ]; then check qmi-wds-packet-status PASS "connected (client $cid)"; else check qmi-wds-packet-status FAIL "connection status '${st:-?}': $(echo $out | head -c 300)"; fi
	out=$(qmi --client-cid=$cid --client-no-release-cid --wds-get-current-settings); echo "$out" | sed 's/^/qmicli| /'
	addr=$(echo "$out" | qmi_field 'IPv4 address')
	gw=$(echo "$out" | qmi_field 'IPv4 gateway address')
	if [ -n "$addr" ] && [ -n "$gw" ]; then check qmi-wds-settings PASS "IPv4 $addr gateway $gw MTU $(echo "$out" | qmi_field MTU)"; else check qmi-wds-settings FAIL "no IPv4 address/gateway: $(echo $out | head -c 300)"; fi
	# Stopped on the call's client, which qmicli then releases; a new
	# client sees no call.
	out=$(qmi --client-cid=$cid --wds-stop-network=$handle); echo "$out" | sed 's/^/qmicli| /'
	if echo "$out" | grep -q 'Network stopped'; then
		st=$(qmi --wds-get-packet-service-status | qmi_field 'Connection status')
		if [ "$st" = disconnected ]; then check qmi-wds-stop-network PASS "stopped, client $cid released; a new client reads disconnected"; else check qmi-wds-stop-network FAIL "stopped, but a new client reads '${st:-?}'"; fi
	else
		check qmi-wds-stop-network FAIL "$(echo $out | head -c 300)"
	fi
}
qmi_section
# ---- end of the QMI section ----
`

// withQMI inserts the QMI section into a filled-in init script, before
// the SYS_ERR check (after the MBIM section). Without the anchor the
// section is left out and its checks report "not reached".
func withQMI(script, verdict, reason string) string {
	i := strings.Index(script, mbimAnchor)
	if i < 0 {
		return script
	}
	sec := strings.NewReplacer(
		"@QMICHECKS@", strings.Join(qmiChecks, " "),
		"@QMIVERDICT@", verdict,
		"@QMISKIP@", strings.ReplaceAll(reason, `"`, `'`),
	).Replace(qmiSection)
	return script[:i] + strings.TrimPrefix(sec, "\n") + "\n" + script[i:]
}

// qmiModemRE finds what `mhictl sim serve` logs about its QMI function.
var qmiModemRE = regexp.MustCompile(`msg="qmi function" .*imei=(\S+) plmn=(\S+)`)

var (
	imeiRE = regexp.MustCompile(`^IMEI (\S+)`)
	plmnRE = regexp.MustCompile(`MCC (\d+) MNC (\d+)`)
)

// qmiIdentity checks what qmicli read in the guest against the modem's
// log: the IMEI of qmi-dms-ids and the PLMN of qmi-nas-serving-system
// are the emulated modem's (a qmicli that misparsed the answers, or a
// function that answered someone else's, fails here).
func qmiIdentity(r *result, mlog string) {
	m := qmiModemRE.FindStringSubmatch(mlog)
	r.amend("qmi-dms-ids", func(ch *check) {
		if !ch.pass {
			return
		}
		got := imeiRE.FindStringSubmatch(ch.detail)
		switch {
		case m == nil:
			ch.pass, ch.detail = false, ch.detail+"; the modem logged no QMI identity"
		case got == nil || got[1] != m[1]:
			ch.pass, ch.detail = false, ch.detail+"; the modem's IMEI is "+m[1]
		default:
			ch.detail += " (the modem's)"
		}
	})
	r.amend("qmi-nas-serving-system", func(ch *check) {
		if !ch.pass {
			return
		}
		got := plmnRE.FindStringSubmatch(ch.detail)
		switch {
		case m == nil:
			ch.pass, ch.detail = false, ch.detail+"; the modem logged no PLMN"
		case got == nil || !samePLMN(m[2], got[1], got[2]):
			ch.pass, ch.detail = false, ch.detail+"; the modem's PLMN is "+m[2]
		default:
			ch.detail += " (the modem's " + m[2] + ")"
		}
	})
}

// samePLMN reports whether the MCC+MNC provider ID id ("00101") is the
// MCC and MNC numbers qmicli printed.
func samePLMN(id, mcc, mnc string) bool {
	if len(id) < 5 {
		return false
	}
	a, err1 := strconv.Atoi(id[:3])
	b, err2 := strconv.Atoi(id[3:])
	return err1 == nil && err2 == nil && fmt.Sprint(a) == mcc && fmt.Sprint(b) == mnc
}

// The QMI checks report after the MBIM checks, before SYS_ERR.
func init() {
	i := slices.Index(guestChecks, "syserr-recovery")
	if i < 0 {
		i = len(guestChecks)
	}
	guestChecks = slices.Concat(guestChecks[:i:i], qmiChecks, guestChecks[i:])
}
