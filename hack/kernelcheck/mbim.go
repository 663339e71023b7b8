package main

// MBIM control plane in the guest (docs/KERNEL-CROSSCHECK.md §2, the mbim-* checks): Debian's mbimcli,
// copied into the initramfs with its shared libraries, talks over the
// kernel's /dev/wwan0mbim0 (mhi_wwan_ctrl) to the emulated modem's MBIM
// function (link/simnet MBIMFunction, attached by `mhictl sim serve`):
// device caps, subscriber status, registration, the MBIMEx 2.0 signal
// (RSRP/SNR per RAT) and the LTE serving cell of MS BASE_STATIONS_INFO
// (mbimcli --device-open-ms-mbimex-v2 negotiates MBIMEx 2.0, so the
// function answers BASE_STATIONS_INFO in its 1.0/2.0 layout; mhistack
// itself asks for 3.0), CONNECT (with
// --no-close, since a CLOSE ends the data session on a modem) and IP
// configuration, then a ping through the data interface with the
// address the modem assigned.

import (
	"os"
	"slices"
	"strings"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
)

// mbimChecks are the MBIM verdicts, in the order the section prints them.
var mbimChecks = []string{"mbim-device-caps", "mbim-subscriber", "mbim-registration", "mbim-signal", "mbim-base-stations",
	"mbim-connect", "mbim-ip-config", "mbim-ping"}

// mbimcliPath is the host's mbimcli (libmbim-utils).
const mbimcliPath = "/usr/bin/mbimcli"

// addMbimcli puts mbimcli and its shared libraries into files (addTool).
// Without mbimcli on the host the section reports that and fails its
// checks.
func addMbimcli(files map[string]initramfs.Entry) error {
	if _, err := os.Stat(mbimcliPath); err != nil {
		return nil
	}
	return addTool(files, mbimcliPath)
}

// mbimSection is the guest script's MBIM part (withMBIM puts it in);
// @MBIMCHECKS@ is mbimChecks, @MBIMPORT@ 1 when /dev/wwan0mbim0 is
// expected (else the checks SKIP).
const mbimSection = `
# ---- MBIM control plane (hack/kernelcheck/mbim.go) ----
mbim_fail_all() { for c in @MBIMCHECKS@; do check $c FAIL "$1"; done; }
mbim_section() {
	local dev=/dev/wwan0mbim0 out addr gw ifc
	if [ "@MBIMPORT@" != 1 ]; then for c in @MBIMCHECKS@; do check $c SKIP "no MBIM channel in the profile or in this kernel's configuration for it"; done; return; fi
	[ -e $dev ] || { mbim_fail_all "no $dev"; return; }
	[ -x /usr/bin/mbimcli ] || { mbim_fail_all "no mbimcli in the initramfs (install libmbim-utils on the host)"; return; }
	mbim() { timeout 60 /usr/bin/mbimcli -d $dev "$@" 2>&1; }
	out=$(mbim --query-device-caps); echo "$out" | sed 's/^/mbimcli| /'
	if echo "$out" | grep -q "Device ID: '[0-9]"; then check mbim-device-caps PASS "$(echo "$out" | grep -E 'Device ID|Firmware' | tr -s ' \t' ' ' | tr '\n' ';')"; else check mbim-device-caps FAIL "$(echo $out | head -c 300)"; fi
	out=$(mbim --query-subscriber-ready-status); echo "$out" | sed 's/^/mbimcli| /'
	if echo "$out" | grep -q "Ready state: 'initialized'"; then check mbim-subscriber PASS "$(echo "$out" | grep -E 'Ready state|Subscriber ID' | tr -s ' \t' ' ' | tr '\n' ';')"; else check mbim-subscriber FAIL "$(echo $out | head -c 300)"; fi
	out=$(mbim --query-registration-state); echo "$out" | sed 's/^/mbimcli| /'
	if echo "$out" | grep -q "Register state: 'home'"; then check mbim-registration PASS "$(echo "$out" | grep -E 'Register state|Provider ID' | tr -s ' \t' ' ' | tr '\n' ';')"; else check mbim-registration FAIL "$(echo $out | head -c 300)"; fi
	# MBIMEx 2.0, negotiated by mbimcli (DEVICE_SERVICES, then MS VERSION).
	out=$(mbim --device-open-ms-mbimex-v2 --query-signal-state); echo "$out" | sed 's/^/mbimcli| /'
	if echo "$out" | grep -q "RSRP: '-[0-9]* dBm'"; then check mbim-signal PASS "$(echo "$out" | grep -E 'RSRP/SNR info|RSRP:|SNR:' | tr -s ' \t' ' ' | tr '\n' ';')"; else check mbim-signal FAIL "no MBIMEx 2.0 RSRP: $(echo $out | head -c 300)"; fi
	out=$(mbim --device-open-ms-mbimex-v2 --ms-query-base-stations-info); echo "$out" | sed 's/^/mbimcli| /'
	if echo "$out" | grep -q "EARFCN: [0-9]"; then check mbim-base-stations PASS "$(echo "$out" | grep -E 'EARFCN|Physical cell id|RSRP|RSRQ' | tr -s ' \t' ' ' | tr '\n' ';')"; else check mbim-base-stations FAIL "no LTE serving cell: $(echo $out | head -c 300)"; fi
	# --no-close: CLOSE would end the data session, as on a real modem.
	out=$(mbim --connect=apn=internet --no-close); echo "$out" | sed 's/^/mbimcli| /'
	if echo "$out" | grep -q "Activation state: 'activated'"; then check mbim-connect PASS "session 0 activated"; else check mbim-connect FAIL "$(echo $out | head -c 300)"; fi
	addr=$(echo "$out" | sed -n "s/^ *IP \[0\]: '\([0-9.]*\/[0-9]*\)'.*/\1/p" | head -n 1)
	gw=$(echo "$out" | sed -n "s/^ *Gateway: '\([0-9.]*\)'.*/\1/p" | head -n 1)
	if [ -n "$addr" ] && [ -n "$gw" ]; then check mbim-ip-config PASS "IPv4 $addr gateway $gw"; else check mbim-ip-config FAIL "no IPv4 address/gateway in: $(echo $out | head -c 300)"; fi
	ifc=wwan0; [ -e /sys/class/net/$ifc ] || ifc=$PINGDEV
	if [ -z "$ifc" ] || [ ! -e /sys/class/net/$ifc ] || [ -z "$addr" ]; then check mbim-ping FAIL "no data interface or address"; return; fi
	ip addr flush dev $ifc
	ip addr add $addr dev $ifc
	ip link set $ifc up
	out=$(ping -c 3 -W 5 $gw 2>&1); echo "$out" | sed 's/^/ping| /'
	if echo "$out" | grep -q '3 packets received'; then check mbim-ping PASS "3/3 replies from $gw through $ifc ($addr)"; else check mbim-ping FAIL "$(echo "$out" | grep transmitted)"; fi
	ip addr flush dev $ifc
}
mbim_section
# ---- end of the MBIM section ----
`

// mbimAnchor is the init-script line the section goes before: after the
// ping checks, before the harness crashes the modem.
const mbimAnchor = "# SYS_ERR: the harness makes the modem crash"

// withMBIM inserts the MBIM section into a filled-in init script. Without
// the anchor the section is left out and its checks report "not reached".
func withMBIM(script string, port bool) string {
	i := strings.Index(script, mbimAnchor)
	if i < 0 {
		return script
	}
	sec := strings.NewReplacer("@MBIMCHECKS@", strings.Join(mbimChecks, " "), "@MBIMPORT@", map[bool]string{false: "0", true: "1"}[port]).Replace(mbimSection)
	return script[:i] + strings.TrimPrefix(sec, "\n") + "\n" + script[i:]
}

// The MBIM checks report between the ping checks and SYS_ERR.
func init() {
	i := slices.Index(guestChecks, "syserr-recovery")
	if i < 0 {
		i = len(guestChecks)
	}
	guestChecks = slices.Concat(guestChecks[:i:i], mbimChecks, guestChecks[i:])
}
