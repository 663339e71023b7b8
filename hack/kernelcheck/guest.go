package main

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
)

// modules are the guest's modules in load order (dependencies first):
// the MHI core, the WWAN core, the PCI controller driver, then the clients
// (docs/PROTOCOL.md §7). dyndbg on the core makes its state-machine
// messages (dev_dbg) reach dmesg, where the SYS_ERR check finds them.
var modules = []struct{ name, args string }{
	{"mhi", "dyndbg=+p"},
	{"wwan", ""},
	{"mhi_pci_generic", ""},
	{"mhi_net", ""},
	{"mhi_wwan_ctrl", ""},
	{"mhi_wwan_mbim", ""},
}

// moduleNames are the names of modules, in order.
func moduleNames() []string {
	var names []string
	for _, m := range modules {
		names = append(names, m.name)
	}
	return names
}

// portTypes maps channel names to the WWAN port types mhi_wwan_ctrl gives
// them (docs/PROTOCOL.md §7.3; the Debian 6.1 and 6.12 modules' aliases:
// DUN, DUN2, MBIM, QMI, DIAG, FIREHOSE; FIREHOSE runs only in EDL).
var portTypes = map[string]string{"DUN": "at", "DUN2": "at", "MBIM": "mbim", "QMI": "qmi", "DIAG": "qcdm"}

// netdevs maps data channel names to the interfaces their drivers create:
// mhi_net names them mhi_hwip%d/mhi_swip%d, mhi_wwan_mbim wwan%d.
var netdevs = map[string]string{mhi.ChannelIPHW0: "mhi_hwip0", mhi.ChannelIPSW0: "mhi_swip0", mhi.ChannelIPHW0MBIM: "wwan0"}

// expect is what the guest should find for a profile in mission mode.
type expect struct {
	channels []string // channel device names (mhi0_NAME)
	// absent are the profile's channels this kernel's mhi_pci_generic
	// does not know at all: the host, not the device, decides which
	// channels exist, and the profile table follows a later mainline.
	absent  []string
	ports   []string // /dev/wwan0 + this ("mbim0", "at0", …)
	netdevs []string
	// pingDev is where the ping check runs: the interface of the data
	// path's pair (expectFor), raw IP mhi_hwip0 or MBIM wwan0; "" none.
	pingDev string
	// loseFirmware: the modem comes back in PBL after a crash (PBL runs).
	loseFirmware bool
	// noM3: the model has no M3 (Profile.NoM3, the no-m3 quirk): Linux
	// leaves its runtime PM off, so the M3 checks do not apply.
	noM3 bool
	// tcpPort, tcpSum: the harness's blob server on the host's loopback
	// and the blob's SHA-256, for the TCP section (tcp.go); port 0: no
	// carrier network on the data pair.
	tcpPort int
	tcpSum  string
	// qmiVerdict, qmiReason: why the QMI section does not run (qmiPlan;
	// empty: it runs) and what its checks then report.
	qmiVerdict, qmiReason string
	// stallDump: seconds without a verdict after which the guest prints
	// its kernel log's tail (stallDumpAfter; 0: never).
	stallDump int
}

// configLag lists channels of the profile table that the configs of the
// Debian kernels (6.1, 6.12) do not have for that modem yet: the table
// follows a later mainline (docs/PROTOCOL.md §6.2 marks them "newer").
// Channels whose name the module never mentions are found automatically.
var configLag = map[string][]string{
	"NMEA": {"telit-fn990", "telit-fe990a", "telit-fn990b40", "telit-fe990b40", "telit-fn920c04"},
}

func lags(profile, channel string) bool {
	for _, p := range configLag[channel] {
		if p == profile {
			return true
		}
	}
	return false
}

// expectFor returns what a kernel whose mhi_pci_generic module is ko
// should show for profile p.
func expectFor(p *mhi.Profile, ko []byte) expect {
	var e expect
	e.noM3 = p.NoM3
	seen := map[string]bool{}
	count := map[string]int{}
	var names []string
	for _, c := range p.Channels {
		if seen[c.Name] || !c.EE.Has(mhi.EEAMSS) {
			continue
		}
		seen[c.Name] = true
		names = append(names, c.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		if !knowsChannel(ko, n) || lags(p.Name, n) {
			e.absent = append(e.absent, n)
			delete(seen, n)
			continue
		}
		e.channels = append(e.channels, "mhi0_"+n)
		if t, ok := portTypes[n]; ok {
			e.ports = append(e.ports, fmt.Sprintf("%s%d", t, count[t]))
			count[t]++
		}
		if d, ok := netdevs[n]; ok {
			e.netdevs = append(e.netdevs, d)
		}
	}
	// The ping checks run on the data pair a session uses
	// (mhi.Profile.DataPath), when this kernel creates it. The profiles
	// whose only data pair is IP_SW0 (SA8775P, QDU100) are not WWAN
	// modems: the ping, TCP and QMAP checks do not run there.
	if dp, err := p.DataPath("", ""); err == nil && seen[dp.Channel] && dp.Channel != mhi.ChannelIPSW0 {
		e.pingDev = netdevs[dp.Channel]
	}
	return e
}

// knowsChannel reports whether the module's string table holds name as a
// whole string: channel names are NUL-terminated literals in .rodata, so
// a kernel whose channel tables never mention a name cannot create it.
func knowsChannel(ko []byte, name string) bool {
	return bytes.Contains(ko, []byte("\x00"+name+"\x00"))
}

// Guest checks, in the order the init script runs them. The harness
// reports one that never printed a verdict as failed ("not reached").
var guestChecks = []string{
	"modules-load", "mission-mode", "channels", "wwan-ports", "netdevs", "ping", "runtime-pm", "syserr-in-m3", "ping-sizes", "ping-burst",
	"syserr-recovery", "channels-after-syserr", "ping-after-syserr",
	"module-unload", "module-reload",
}

// initScript is the guest's /init (busybox sh). Verdicts go to the serial
// console as "MHISTACK-CHECK name PASS|FAIL detail"; the SYS_ERR check
// asks the harness to crash the modem with "MHISTACK-REQUEST syserr".
// Kernel messages are dumped between MHISTACK-DMESG markers at the end.
const initScript = qh.GuestPreamble + `
CHANNELS="@CHANNELS@"
PORTS="@PORTS@"
NETDEVS="@NETDEVS@"
PINGDEV="@PINGDEV@"
LOSEFW=@LOSEFW@
NOM3=@NOM3@
WAIT=@WAIT@
STALL=@STALL@

# The stall watcher: a check that hangs (the shell blocked in the kernel,
# a wait that never ends) prints nothing; once STALL seconds pass without
# a verdict it prints the kernel log's tail, once per stall, each line
# prefixed MHISTACK-STALL-DMESG, for the harness, which stops the guest
# at -check-timeout. A grandchild, so that the checks' "wait" does not
# wait for it.
check() { echo "MHISTACK-CHECK $1 $2 $3"; up > /tmp/last-verdict.new; mv /tmp/last-verdict.new /tmp/last-verdict; }
if [ "$STALL" -gt 0 ]; then
	up > /tmp/last-verdict
	( (
	dumped=""
	while [ ! -e /tmp/stall-watcher-stop ] && sleep 5; do
		l=$(cat /tmp/last-verdict 2>/dev/null)
		[ -n "$l" ] && [ "$l" != "$dumped" ] || continue
		now=$(up)
		if [ $(( ${now%.*} - ${l%.*} )) -ge $STALL ]; then
			dumped=$l
			echo "MHISTACK-STALL no verdict since ${l}s (uptime ${now}s): kernel log follows"
			dmesg | tail -n 150 | sed 's/^/MHISTACK-STALL-DMESG /'
		fi
	done
	) & )
fi
# (end of the stall watcher)

# Errors of the MHI stack in dmesg since line $1 (expected SYS_ERR
# processing lines are not errors).
# After a doubly detected SYS_ERR the kernel may be left believing the
# modem is in READY (see main.go knownKernelMessages): its runtime suspend
# then fails, which is the kernel's doing, not the modem's.
errors_since() {
	local known='SYS ERROR|SYS_ERROR|System error detected|Triggering|error_detected'
	if dmesg | grep -q 'Error moving to state POWER ON RESET from M0'; then
		known="$known|Could not enter M0/M1 state|failed to suspend device: -5"
	fi
	dmesg | tail -n +$1 | grep -iE 'mhi|wwan|0000:00:' |
		grep -iE 'fail|timeout|timed out|unable|could not|error|warn|BUG|call trace' |
		grep -vE "$known" | head -n 5
}
all_channels() { for c in $CHANNELS; do [ -e /sys/bus/mhi/devices/$c ] || return 1; done; }
missing_channels() { for c in $CHANNELS; do [ -e /sys/bus/mhi/devices/$c ] || echo -n "$c "; done; }
any_channel() { ls /sys/bus/mhi/devices/ 2>/dev/null | grep -q '^mhi0_'; }
present() { ls /sys/bus/mhi/devices/ 2>/dev/null | grep '^mhi0_' | tr '\n' ' '; }
# same_channels LIST: exactly the channel devices of LIST exist (the ones
# present before a SYS_ERR or an unload came back).
same_channels() { [ "$(present)" = "$1" ]; }
ifindex() { cat /sys/class/net/$1/ifindex 2>/dev/null || echo none; }

load_modules() {
	local fail=""
	for m in @MODULES@; do
		insmod /lib/modules/${m%%:*}.ko $(echo ${m#*:} | tr ',' ' ') || fail="$fail ${m%%:*}"
	done
	echo "$fail"
}

# ping_check NAME: address the interface, ping the modem's side.
ping_check() {
	local name=$1
	if [ -z "$PINGDEV" ]; then check $name PASS "no data channel in this profile"; return; fi
	if [ ! -e /sys/class/net/$PINGDEV ]; then check $name FAIL "no $PINGDEV"; return; fi
	ip link set $PINGDEV up
	ip addr add 192.0.2.1/24 dev $PINGDEV 2>/dev/null
	# One warm-up packet: the driver queues its RX buffers when the
	# interface comes up.
	ping -c 1 -W 5 192.0.2.2 >/dev/null 2>&1
	local rx=$(pings 5)
	if [ "$rx" = 5 ]; then
		check $name PASS "$rx/5 echo replies through $PINGDEV"
	else
		check $name FAIL "$rx/5 echo replies through $PINGDEV"
	fi
}

# pings COUNT [PING OPTIONS]: COUNT echo requests to 192.0.2.2, one ping
# process each, one after the other; prints how many were answered.
# busybox ping waits -W seconds only for the first reply: once one came
# it waits about two round trips (at least 1 s) after its last request
# and counts a later reply as lost, so "ping -c 2 -i 0.2" fails when the
# second reply is a second late, which a guest starved on a loaded host
# does (docs/KERNEL-CROSSCHECK.md §7). A lone request gets the whole -W.
pings() {
	local n=$1 rx=0 i=0
	shift
	while [ $i -lt $n ]; do
		ping -c 1 -W 5 "$@" 192.0.2.2 2>&1 | grep -q ' 1 packets received' && rx=$((rx + 1))
		i=$((i + 1))
	done
	echo $rx
}

# ping_sizes: echo requests from empty to larger than the DL buffers
# (MRU 32768: the reply then arrives in OVERFLOW pieces the driver must
# chain), each answered exactly.
ping_sizes() {
	[ -n "$PINGDEV" ] && [ -e /sys/class/net/$PINGDEV ] || { check ping-sizes FAIL "no ${PINGDEV:-data interface}"; return; }
	ip link set $PINGDEV mtu 60000 || { check ping-sizes FAIL "cannot set MTU 60000 on $PINGDEV"; return; }
	bad=""
	for size in 0 1 56 1472 4000 16000 32740 32741 40000 59000; do
		rx=$(pings 2 -s $size)
		[ "$rx" = 2 ] || bad="$bad $size:$rx/2"
	done
	ip link set $PINGDEV mtu 1500
	if [ -z "$bad" ]; then check ping-sizes PASS "2/2 replies for 0..59000 data bytes through $PINGDEV"; else check ping-sizes FAIL "sizes:$bad"; fi
}

# icmp_count NAME: the guest's Icmp counter NAME (OutEchos, InEchoReps)
# from /proc/net/snmp, found by its header (the columns differ between
# kernels).
icmp_count() {
	awk -v n="$1" '$1 == "Icmp:" { if (!c) { for (i = 2; i <= NF; i++) if ($i == n) c = i } else { print $c; exit } }' ${SNMP:-/proc/net/snmp}
}

# echo_reps_since BASE N: at least N echo replies since InEchoReps was BASE.
echo_reps_since() {
	[ $(( $(icmp_count InEchoReps) - $1 )) -ge $2 ]
}

# ping_burst: back-to-back echo requests (-A: the next as soon as the reply
# is in), four streams at once: many ring wraps, burst-mode polling and
# DB_MODE, moderated interrupts. -w 60 bounds a stream whose replies stop
# (-A then falls back to one request a second: 250 s); a healthy burst
# takes a few seconds.
# What the check holds the modem and the drivers to is the guest's IP
# layer: every echo request sent (Icmp OutEchos) has its reply delivered
# (Icmp InEchoReps). ping's own count can be lower: every raw ICMP socket
# gets every stream's replies, and a reply that finds its socket's
# receive buffer full is dropped there (busybox ping asks for a receive
# buffer of a few replies' size, and each reply's buffer is charged at
# mhi_net's receive size, the channel's MRU), so a ping that has another
# stream's reply unread can lose its own. Those socket drops are
# reported, not failed; a reply missing at the IP layer fails.
ping_burst() {
	[ -n "$PINGDEV" ] && [ -e /sys/class/net/$PINGDEV ] || { check ping-burst FAIL "no ${PINGDEV:-data interface}"; return; }
	local out0 in0
	out0=$(icmp_count OutEchos); in0=$(icmp_count InEchoReps)
	for i in 1 2 3 4; do
		ping -A -q -c 250 -W 5 -w 60 -s $((i * 300)) 192.0.2.2 > /tmp/burst$i 2>&1 &
	done
	wait
	# busybox ping -A may send a few more than -c while waiting for the
	# last replies, and exits once -c replies are in: count replies. A
	# ping that dies (sendto failing: no route, no buffer space, the
	# interface gone) prints no statistics; say what it printed.
	local rx=0 tx=0 bad="" i l t r sent got
	for i in 1 2 3 4; do
		l=$(grep 'packets transmitted' /tmp/burst$i | head -n 1)
		t=$(echo "$l" | sed -n 's/^\([0-9]*\) packets transmitted.*/\1/p')
		r=$(echo "$l" | sed -n 's/.* \([0-9]*\) packets received.*/\1/p')
		if [ -z "$t" ] || [ -z "$r" ]; then
			bad="$bad stream -s $((i * 300)) printed no statistics: [$(tail -n 3 /tmp/burst$i | tr '\n' ' ')]"
			continue
		fi
		tx=$((tx + t)); rx=$((rx + r))
	done
	# Replies still on their way when a ping gave up count when they
	# arrive: wait up to 5 s for the IP layer to see them all.
	sent=$(( $(icmp_count OutEchos) - out0 ))
	wait_for 5 echo_reps_since $in0 $sent
	got=$(( $(icmp_count InEchoReps) - in0 ))
	if [ -n "$bad" ]; then
		check ping-burst FAIL "$rx replies to $tx requests in the streams with statistics;$bad; $PINGDEV $(cat /sys/class/net/$PINGDEV/operstate 2>/dev/null || echo gone)"
	elif [ $got -lt $sent ]; then
		check ping-burst FAIL "$got echo replies reached the guest's IP layer for $sent requests sent (Icmp InEchoReps/OutEchos); ping counted $rx/1000: $(cat /tmp/burst* | grep -E 'transmitted|round' | tr '\n' ' ')"
	elif [ $rx -eq 1000 ]; then
		check ping-burst PASS "$rx replies to $tx requests, 4 streams back to back; every request's reply reached the IP layer ($got/$sent)"
	else
		check ping-burst PASS "every request's reply reached the IP layer ($got/$sent); ping counted $rx/1000 ($((1000 - rx)) dropped at the ping sockets' receive buffers)"
	fi
}

# runtime_pm: mhi_pci_generic allows runtime PM in mission mode with a
# 2 s autosuspend delay; an idle modem is suspended (MHI M3) and traffic
# resumes it (M0).
runtime_pm() {
	local d=$(ls -d /sys/bus/pci/drivers/mhi-pci-generic/0000:* 2>/dev/null | head -n 1)
	[ -n "$d" ] || { check runtime-pm FAIL "no device bound to mhi-pci-generic"; return; }
	if [ "$NOM3" = 1 ]; then
		check runtime-pm SKIP "the model has no M3 (no-m3; docs/QUIRKS.md)"
		return
	fi
	echo auto > $d/power/control
	if ! wait_for 15 grep -q suspended $d/power/runtime_status; then
		check runtime-pm FAIL "not suspended after 15 s idle: runtime_status $(cat $d/power/runtime_status), control $(cat $d/power/control)"
		return
	fi
	local at=$(up)
	[ -n "$PINGDEV" ] || { check runtime-pm PASS "suspended at ${at}s (no data interface to resume it)"; return; }
	local rx=$(pings 3)
	if [ "$rx" = 3 ]; then
		check runtime-pm PASS "suspended at ${at}s, resumed by traffic: 3/3 replies, now $(cat $d/power/runtime_status)"
	else
		check runtime-pm FAIL "suspended at ${at}s, then ping: $rx/3 replies; runtime_status $(cat $d/power/runtime_status)"
	fi
}

# syserr_in_m3: SYS_ERR while runtime-suspended (before the bursts, whose
# runtime PM leak would keep the modem awake): in M3 with the function in D3hot and
# bus mastering off the modem can signal nothing (no event, and the bus
# drops the MSI); the kernel finds SYS_ERR when traffic resumes it and
# recovers by powering the modem down and up. The kmsg markers bound the
# resume failure the kernel logs for it (main.go tolerates it there).
syserr_in_m3() {
	if [ "$LOSEFW" = 1 ]; then
		# The modem comes back in PBL after this crash, and Linux's
		# power-up reads the EE before it resets the modem out of
		# SYS_ERR, so it waits for READY in vain ("Recovery failed").
		check syserr-in-m3 SKIP "not with a modem that loses its firmware on SYS_ERR (docs/KERNEL-CROSSCHECK.md §4)"
		return
	fi
	lost_in_m3 syserr-in-m3 syserr
}

# lost_in_m3 NAME HOW: the runtime-suspended modem is lost, HOW "syserr"
# (the harness crashes it) or "power" (the d3cold quirk: the modem went
# back to its power-on state as it entered M3, docs/QUIRKS.md). Traffic
# resumes it; the kernel finds it not in M3 and must bring it back to
# mission mode: the same channels, the interface recreated (new ifindex),
# data moving.
lost_in_m3() {
	local name=$1 how=$2 what="crashed while suspended"
	local d=$(ls -d /sys/bus/pci/drivers/mhi-pci-generic/0000:* 2>/dev/null | head -n 1) dev=$PINGDEV
	[ "$how" = power ] && what="lost power in M3"
	if [ "$NOM3" = 1 ]; then
		check $name SKIP "the model has no M3 (no-m3; docs/QUIRKS.md)"
		return
	fi
	[ -n "$d" ] && [ -n "$dev" ] || { check $name FAIL "no device or no data interface"; return; }
	echo auto > $d/power/control
	if ! wait_for 15 grep -q suspended $d/power/runtime_status; then
		check $name FAIL "not suspended after 15 s idle: runtime_status $(cat $d/power/runtime_status)"
		return
	fi
	local before=$(ifindex "$dev") chans=$(present)
	echo "mhistack: syserr-in-m3 begin" > /dev/kmsg
	[ "$how" = syserr ] && echo "MHISTACK-REQUEST syserr"
	sleep 1
	# The interface may be one the kernel recreated since it was set up
	# (with d3cold every runtime suspend loses the modem): down, no
	# address, so a ping would never leave.
	ip link set $dev up; ip addr add 192.0.2.1/24 dev $dev 2>/dev/null
	ping -c 1 -W 2 192.0.2.2 >/dev/null 2>&1 # the traffic resumes the modem
	back() { same_channels "$chans" && [ -e /sys/class/net/$dev ] && [ "$(ifindex $dev)" != "$before" ]; }
	if ! wait_for $WAIT back; then
		echo "mhistack: syserr-in-m3 end" > /dev/kmsg
		check $name FAIL "$what, not recovered within ${WAIT}s: channels $(present); $dev ifindex $before -> $(ifindex $dev)"
		return
	fi
	echo "mhistack: syserr-in-m3 end" > /dev/kmsg
	if [ "$how" = power ]; then
		# Every runtime suspend loses the modem again (d3cold), and a
		# loaded guest can be idle 2 s before its pings: forbid runtime
		# PM while the data path is checked. mhi_pci_generic allows it
		# again at each mission mode, so a recovery already under way
		# is waited for and the forbid repeated.
		settled() {
			echo on > $d/power/control
			grep -q '^on' $d/power/control && grep -q active $d/power/runtime_status &&
				same_channels "$chans" && [ -e /sys/class/net/$dev ]
		}
		wait_for 30 settled
	fi
	ip link set $dev up; ip addr add 192.0.2.1/24 dev $dev 2>/dev/null
	local rx=$(pings 3)
	if [ "$rx" = 3 ]; then
		check $name PASS "$what, found at resume, recovered ($dev ifindex $before -> $(ifindex $dev)), 3/3 replies"
	else
		check $name FAIL "$what, recovered, but ping: $rx/3 replies"
	fi
}

# bring_up: load the modules; mhi_pci_generic's probe waits for mission
# mode (mhi_sync_power_up), and channel devices exist only in mission mode.
bring_up() {
	local fail t0 errs
	fail=$(load_modules)
	t0=$(up)
	if [ -z "$fail" ]; then check modules-load PASS "@MODNAMES@"; else check modules-load FAIL "insmod failed:$fail"; fi
	echo "MHISTACK-INFO kernel-config $(dmesg | sed -n 's/.*MHI PCI device found: //p' | head -n 1)"
	if wait_for $WAIT any_channel; then
		errs=$(errors_since 1)
		if [ -z "$errs" ]; then
			check mission-mode PASS "channel devices after $(up)s uptime (modules loaded at ${t0}s)"
		else
			check mission-mode FAIL "reached, but dmesg: $(echo $errs | head -c 300)"
		fi
	else
		check mission-mode FAIL "no channel device after ${WAIT}s; dmesg: $(errors_since 1 | tr '\n' ' ' | head -c 300)"
	fi
}

# syserr_recovery: the harness makes the modem crash; the kernel must
# reset it, bring it back to mission mode and recreate the channel devices
# (so the interface comes back with a new ifindex).
syserr_recovery() {
	local dev=${PINGDEV:-} before chans n1 ts seen
	before=$(ifindex "$dev")
	chans=$(present)
	n1=$(( $(dmesg | wc -l) + 1 ))
	echo "MHISTACK-REQUEST syserr"
	recovered() {
		dmesg | tail -n +$n1 | grep -q 'SYS ERROR' || return 1
		dmesg | tail -n +$n1 | grep -q 'Processing Mission Mode transition' || return 1
		same_channels "$chans" || return 1
		[ -z "$dev" ] || [ "$before" = none ] || { [ -e /sys/class/net/$dev ] && [ "$(ifindex $dev)" != "$before" ]; }
	}
	ts=$(up)
	wait_for $WAIT recovered
	local ok=$?
	echo "mhistack: syserr-recovery end" > /dev/kmsg
	if [ $ok = 0 ]; then
		check syserr-recovery PASS "SYS_ERR handled, mission mode again by $(up)s (requested at ${ts}s; $dev ifindex $before -> $(ifindex $dev))"
	else
		seen=$(dmesg | tail -n +$n1 | grep -E 'SYS ERROR|Mission Mode|READY' | head -n 4 | tr '\n' ' ')
		check syserr-recovery FAIL "not recovered within ${WAIT}s: dmesg since the request: ${seen:-nothing about it}"
	fi
	if same_channels "$chans"; then check channels-after-syserr PASS "$chans"; else check channels-after-syserr FAIL "before: $chans; now: $(present)"; fi
}

# module_unload: power-down, by unloading the clients and the controller
# driver (mhi_power_down).
module_unload() {
	local n2 fail="" ts te errs
	n2=$(( $(dmesg | wc -l) + 1 ))
	ts=$(up)
	for m in mhi_net mhi_wwan_mbim mhi_wwan_ctrl mhi_pci_generic; do
		timeout 60 rmmod $m || fail="$fail $m"
	done
	te=$(up)
	errs=$(errors_since $n2)
	if [ -z "$fail" ] && [ -z "$errs" ] && ! any_channel; then
		check module-unload PASS "power-down from ${ts}s to ${te}s"
	else
		check module-unload FAIL "rmmod failed:${fail:- none}; channels left: $(ls /sys/bus/mhi/devices 2>/dev/null | tr '\n' ' '); dmesg: $(echo $errs | head -c 300)"
	fi
}

# finish: the kernel log between the MHISTACK-DMESG markers, the end
# marker, power off.
finish() {
	echo "MHISTACK-DMESG-BEGIN"
	dmesg
	echo "MHISTACK-DMESG-END"
	echo "MHISTACK-DONE uptime=$(up)"
	poweroff -f
}
# (end of the functions)

bring_up

if wait_for 10 all_channels; then check channels PASS "$CHANNELS"; else check channels FAIL "missing: $(missing_channels)"; fi

missing=""
for p in $PORTS; do wait_for 5 test -e /dev/wwan0$p || missing="$missing wwan0$p"; done
if [ -z "$missing" ]; then check wwan-ports PASS "$(ls /dev | grep '^wwan' | tr '\n' ' ')"; else check wwan-ports FAIL "missing:$missing (have: $(ls /dev | grep '^wwan' | tr '\n' ' '))"; fi

missing=""
for d in $NETDEVS; do wait_for 5 test -e /sys/class/net/$d || missing="$missing $d"; done
if [ -z "$missing" ]; then check netdevs PASS "$NETDEVS"; else check netdevs FAIL "missing:$missing (have: $(ls /sys/class/net | tr '\n' ' '))"; fi

ping_check ping
# Before the bursts: Linux's mhi_queue takes its runtime PM reference only
# after the TRE is in the ring, so a doorbell rung meanwhile from another
# CPU (DB_MODE handling) can get the TRE completed first; the completion's
# put then underflows and the late get leaks, and the modem never
# suspends again ("Runtime PM usage count underflow!", seen with four
# back-to-back ping streams on two vCPUs, 6.1 and 6.12).
runtime_pm
syserr_in_m3
ping_sizes
ping_burst

# SYS_ERR: the harness makes the modem crash; the kernel must reset it,
# bring it back to mission mode and recreate the channel devices (so the
# interface comes back with a new ifindex).
syserr_recovery
ping_check ping-after-syserr


# Power-down: unload the clients and the controller driver (mhi_power_down).
chans=$(present)
module_unload

# Power-up again from the state power-down left the modem in.
n3=$(( $(dmesg | wc -l) + 1 ))
fail=""
for m in mhi_pci_generic mhi_net mhi_wwan_ctrl mhi_wwan_mbim; do
	insmod /lib/modules/$m.ko || fail="$fail $m"
done
if [ -z "$fail" ] && wait_for $WAIT same_channels "$chans" && [ -z "$(errors_since $n3)" ]; then
	check module-reload PASS "mission mode again, the same channels back"
else
	check module-reload FAIL "insmod failed:${fail:- none}; channels before: $chans; now: $(present); dmesg: $(errors_since $n3 | tr '\n' ' ' | head -c 300)"
fi

finish
`

// script fills in the init script for a profile.
func script(e expect, wait int) string {
	var mods, names []string
	for _, m := range modules {
		mods = append(mods, m.name+":"+strings.ReplaceAll(m.args, " ", ","))
		names = append(names, m.name)
	}
	r := strings.NewReplacer(
		"@CHANNELS@", strings.Join(e.channels, " "),
		"@PORTS@", strings.Join(e.ports, " "),
		"@NETDEVS@", strings.Join(e.netdevs, " "),
		"@PINGDEV@", e.pingDev,
		"@LOSEFW@", map[bool]string{false: "0", true: "1"}[e.loseFirmware],
		"@NOM3@", map[bool]string{false: "0", true: "1"}[e.noM3],
		"@WAIT@", fmt.Sprint(wait),
		"@STALL@", fmt.Sprint(e.stallDump),
		"@MODULES@", strings.Join(mods, " "),
		"@MODNAMES@", strings.Join(names, " "),
	)
	// The TCP section (tcp.go), then the MBIM (mbim.go) and QMI (qmi.go)
	// sections.
	return withQMI(withMBIM(withTCP(r.Replace(initScript), e.tcpPort, e.tcpSum), slices.Contains(e.ports, "mbim0")), e.qmiVerdict, e.qmiReason)
}
