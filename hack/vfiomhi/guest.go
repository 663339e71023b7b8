package main

import (
	"fmt"
	"strings"

	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
)

// pblChecks and checks are the guest's verdicts, in the order the init
// script gives them; one that never reported fails as "not reached".
var (
	pblChecks   = []string{"vfio-bind", "fw-load-bhie"}
	flashChecks = []string{"vfio-bind", "backup", "flash", "read-back"}
	checks      = []string{"vfio-bind", "list", "info", "selftest", "proxy-up", "download", "upload", "counters",
		"syserr-mid-transfer", "kill9-restart", "hot-unplug"}
)

// guestVars fill in the init script.
type guestVars struct {
	vendor, device string // the modem's PCI IDs, 4 hex digits
	pbl            bool
	flash          bool // the flash run: /flash holds flashSet's files and /flash/want the read-backs
	modules        []string
	port           int    // the blob server's port on the host's 127.0.0.1
	sum            string // its blob's SHA-256
	size           int
	selftestCh     string // channel pair selftest loops on
	fwSum          string // SHA-256 of /fw.img
}

// initScript is the guest's /init. Each check prints MHISTACK-BEGIN name
// when it starts (the harness times it) and a verdict; MHISTACK-REQUEST
// lines ask the harness to act on the modem or on QEMU (main.go): a fault
// through the modem's control socket, a QMP device_del.
const initScript = qh.GuestPreamble + `
begin() { echo "MHISTACK-BEGIN $1"; }
# show FILE: a command's output on the console, indented.
show() { sed 's/^/    | /' "$1"; }
size_of() { wc -c < "$1" 2>/dev/null || echo 0; }
PORT=@PORT@
SIZE=@SIZE@
# kill9-restart and hot-unplug download at this pace (bytes/s), so that
# the transfer is still in flight when their reader has the first MiB.
PACE=$(( SIZE / 4 ))
SUM=@SUM@
URL=http://198.18.0.1:$PORT
PROXY=http://127.0.0.1:1080
for m in @MODULES@; do insmod /lib/modules/$m.ko || echo "insmod $m failed"; done
# mhiproxy listens on 127.0.0.1: the guest's loopback must be up.
ip link set lo up

begin vfio-bind
ADDR=""
for d in /sys/bus/pci/devices/*; do
	if [ "$(cat $d/vendor)" = "0x@VENDOR@" ] && [ "$(cat $d/device)" = "0x@DEVICE@" ]; then ADDR=${d##*/}; fi
done
if [ -z "$ADDR" ]; then
	check vfio-bind FAIL "no @VENDOR@:@DEVICE@ function: $(ls /sys/bus/pci/devices | tr '\n' ' ')"
else
	echo vfio-pci > /sys/bus/pci/devices/$ADDR/driver_override
	echo $ADDR > /sys/bus/pci/drivers_probe
	drv=$(basename "$(readlink /sys/bus/pci/devices/$ADDR/driver)")
	grp=$(basename "$(readlink /sys/bus/pci/devices/$ADDR/iommu_group)")
	if [ "$drv" = vfio-pci ] && [ -e /dev/vfio/$grp ]; then
		check vfio-bind PASS "$ADDR bound to vfio-pci, IOMMU group $grp ($(ls /sys/kernel/iommu_groups/$grp/devices | tr '\n' ' ')), $(dmesg | grep -m1 -o 'DMAR: IOMMU enabled' || echo 'DMAR?')"
	else
		check vfio-bind FAIL "$ADDR driver '$drv' group '$grp'"
	fi
fi

if [ @PBL@ = 1 ]; then
	begin fw-load-bhie
	if mhictl fw load -bhie -image /fw.img -device $ADDR -json -timeout 60s > /tmp/fw.json 2>/tmp/fw.err; then
		show /tmp/fw.json
		if grep -q '"mission_mode": *true' /tmp/fw.json && grep -q '"sha256": *"@FWSUM@"' /tmp/fw.json; then
			check fw-load-bhie PASS "$(tr -d '\n ' < /tmp/fw.json | grep -o '"method":"[^"]*","ee":"[^"]*"'), image sha256 @FWSUM@"
		else
			check fw-load-bhie FAIL "not in mission mode or wrong image: $(tr -d '\n' < /tmp/fw.json | head -c 300)"
		fi
	else
		show /tmp/fw.err
		check fw-load-bhie FAIL "$(tail -n 2 /tmp/fw.err | tr '\n' ' ' | head -c 300)"
	fi
	echo "MHISTACK-DONE uptime=$(up)"
	poweroff -f
fi

if [ @FLASH@ = 1 ]; then
	# Each mhictl command enters EDL (doorbell-91 cookie, SoC reset), loads
	# the programmer over BHI and talks Firehose on FIREHOSE; the second
	# and third start from the programmer's EE.
	FL="-device $ADDR -programmer /flash/prog_firehose.mbn -quiet -timeout 60s"
	begin backup
	if mhictl backup $FL -o /tmp/bk /flash/rawprogram0.xml > /tmp/bk.out 2>&1; then
		show /tmp/bk.out
		check backup PASS "$(head -n 1 /tmp/bk.out)"
	else
		show /tmp/bk.out
		check backup FAIL "$(tail -n 2 /tmp/bk.out | tr '\n' ' ' | head -c 300)"
	fi
	begin flash
	if mhictl flash $FL -backup /tmp/bk -verify -json /flash/rawprogram0.xml /flash/patch0.xml > /tmp/fl.json 2>/tmp/fl.err; then
		show /tmp/fl.json
		check flash PASS "$(tr -d '\n ' < /tmp/fl.json | head -c 240)"
	else
		show /tmp/fl.err
		check flash FAIL "$(tail -n 2 /tmp/fl.err | tr '\n' ' ' | head -c 300)"
	fi
	begin read-back
	if mhictl backup $FL -o /tmp/rb /flash/rawprogram0.xml > /tmp/rb.out 2>&1; then
		bad=""
		for w in /flash/want/*; do cmp -s "$w" "/tmp/rb/${w##*/}" || bad="$bad ${w##*/}"; done
		if [ -z "$bad" ]; then
			check read-back PASS "$(ls /flash/want | wc -l) partitions read back byte-exact (patch applied): $(cd /tmp/rb && sha256sum $(ls /flash/want) | cut -c1-12 | tr '\n' ' ')"
		else
			check read-back FAIL "differs from what was flashed:$bad"
		fi
	else
		show /tmp/rb.out
		check read-back FAIL "$(tail -n 2 /tmp/rb.out | tr '\n' ' ' | head -c 300)"
	fi
	echo "MHISTACK-DONE uptime=$(up)"
	poweroff -f
fi

begin list
mhictl list > /tmp/list 2>&1; show /tmp/list
if grep "^$ADDR" /tmp/list | grep -q 'vfio-pci' && grep "^$ADDR" /tmp/list | grep -qw ready; then
	check list PASS "$(grep "^$ADDR" /tmp/list | tr -s ' \t' ' ')"
else
	check list FAIL "$(grep "^$ADDR" /tmp/list | tr -s ' \t' ' ')"
fi

begin info
if mhictl info -device $ADDR > /tmp/info 2>&1; then
	show /tmp/info
	check info PASS "$(grep -iE 'state|ee|exec' /tmp/info | tr -s ' \t\n' ' ' | head -c 200)"
else
	show /tmp/info
	check info FAIL "$(tail -n 2 /tmp/info | tr '\n' ' ' | head -c 300)"
fi

begin selftest
if mhictl selftest -device $ADDR -channel @SELFTESTCH@ -count 300 -size 1500 > /tmp/st 2>&1; then
	show /tmp/st
	check selftest PASS "@SELFTESTCH@: $(tr -s ' \t\n' ' ' < /tmp/st | head -c 200)"
else
	show /tmp/st
	check selftest FAIL "@SELFTESTCH@: $(tail -n 2 /tmp/st | tr '\n' ' ' | head -c 300)"
fi

# The upload body, made before the clock of the transfer checks starts:
# busybox wget sends --post-file as a C string, so no NUL bytes.
tr -d '\000' < /dev/urandom | head -c $SIZE > /tmp/up

# start_proxy LOG: mhiproxy on the device in the background (PROXYPID);
# waits for its ready line.
start_proxy() {
	mhiproxy -device $ADDR -metrics 127.0.0.1:9108 > /tmp/proxy.out 2> $1 &
	PROXYPID=$!
	wait_for 90 grep -q 'listening on' /tmp/proxy.out
}
# get PATH OUT: download through the proxy.
get() { http_proxy=$PROXY timeout 120 wget -q -O "$2" "$URL$1"; }

begin proxy-up
if start_proxy /tmp/proxy.log; then
	check proxy-up PASS "$(cat /tmp/proxy.out | head -n 1)"
else
	show /tmp/proxy.log
	check proxy-up FAIL "no ready line: $(tail -n 3 /tmp/proxy.log | tr '\n' ' ' | head -c 300)"
fi

begin download
t0=$(up)
get /blob /tmp/dl; rc=$?
t1=$(up)
got=$(sha256sum /tmp/dl | cut -d' ' -f1)
if [ $rc = 0 ] && [ "$got" = "$SUM" ]; then
	check download PASS "$SIZE bytes from 198.18.0.1 (host 127.0.0.1) in $t0..${t1}s uptime, sha256 match"
else
	check download FAIL "wget $rc, $(size_of /tmp/dl) bytes, sha256 $got"
fi
rm -f /tmp/dl

begin upload
want=$(sha256sum /tmp/up | cut -d' ' -f1)
t0=$(up)
got=$(http_proxy=$PROXY timeout 120 wget -q -O - --post-file /tmp/up $URL/upload)
t1=$(up)
if [ "$got" = "$want" ]; then
	check upload PASS "$SIZE bytes to the host in $t0..${t1}s uptime, sha256 match"
else
	check upload FAIL "host sha256 '${got}', want $want"
fi

begin counters
if wget -q -O /tmp/metrics http://127.0.0.1:9108/metrics; then
	grep -E '^mhiproxy_(stack|mhi)_' /tmp/metrics | grep -vE ' 0$' > /tmp/m
	show /tmp/m
	rx=$(grep -m1 -E '^mhiproxy_stack_.*rx_bytes' /tmp/m | cut -d' ' -f2)
	if [ -n "$rx" ]; then
		check counters PASS "$(wc -l < /tmp/m) non-zero link/MHI/stack counters; $(grep -m1 -E '^mhiproxy_stack_.*rx_bytes' /tmp/m)"
	else
		check counters FAIL "no rx_bytes counter in $(wc -l < /tmp/metrics) metrics lines"
	fi
else
	check counters FAIL "GET /metrics failed"
fi

# SYS_ERR while a download runs: the harness crashes the modem once the
# host has sent part of the blob; MHI recovers through the real interrupt
# path and TCP carries on.
begin syserr-mid-transfer
get /blob /tmp/dl &
WPID=$!
echo "MHISTACK-REQUEST syserr-mid-download"
wait $WPID; rc=$?
got=$(sha256sum /tmp/dl | cut -d' ' -f1)
if [ $rc = 0 ] && [ "$got" = "$SUM" ]; then
	check syserr-mid-transfer PASS "download completed intact across the modem's SYS_ERR; $(grep -ciE 'sys.?err' /tmp/proxy.log) SYS_ERR lines in mhiproxy's log"
else
	check syserr-mid-transfer FAIL "wget $rc, $(size_of /tmp/dl) bytes, sha256 $got; mhiproxy: $(grep -iE 'sys.?err|error' /tmp/proxy.log | tail -n 2 | tr '\n' ' ' | head -c 300)"
fi
rm -f /tmp/dl

# kill -9 of mhiproxy mid-transfer: the reader of a paced download kills
# it once the first MiB has arrived (no polling: a fork costs a lot in a
# busy TCG guest); then a new mhiproxy on the same device.
begin kill9-restart
rm -f /tmp/rest
tb=$(up)
# From the kill until a new mhiproxy has reset it, the modem keeps moving
# data the dead process left queued, and the kernel has turned bus
# mastering off: the harness tolerates those refused DMAs (main.go).
http_proxy=$PROXY timeout 120 wget -q -O - "$URL/blob?rate=$PACE" 2>/dev/null |
	( head -c 1048576 > /dev/null; echo "MHISTACK-WINDOW begin kill9"; up > /tmp/tk; kill -9 $PROXYPID; wc -c > /tmp/rest )
wait $PROXYPID 2>/dev/null
tk=$(cat /tmp/tk 2>/dev/null)
rest=$(cat /tmp/rest 2>/dev/null || echo 0)
t0=$(up)
midway=yes
if [ -z "$tk" ] || [ $(( rest + 1048576 )) -ge $SIZE ]; then midway=no; fi
if start_proxy /tmp/proxy2.log; then
	t1=$(up)
	echo "MHISTACK-WINDOW end kill9"
	get /blob /tmp/dl; rc=$?
	got=$(sha256sum /tmp/dl | cut -d' ' -f1)
	if [ $midway = no ]; then
		check kill9-restart FAIL "not killed mid-transfer: killed at '${tk}', $rest bytes after the first MiB"
	elif [ $rc = 0 ] && [ "$got" = "$SUM" ]; then
		check kill9-restart PASS "download began at ${tb}s, mhiproxy killed at ${tk}s after 1 MiB (+$rest bytes) of $SIZE; the new mhiproxy was up in $t0..${t1}s uptime and downloaded $SIZE bytes intact"
	else
		check kill9-restart FAIL "new mhiproxy up, download: wget $rc, $(size_of /tmp/dl) bytes, sha256 $got"
	fi
else
	show /tmp/proxy2.log
	check kill9-restart FAIL "no new mhiproxy after kill -9: $(tail -n 3 /tmp/proxy2.log | tr '\n' ' ' | head -c 300)"
fi
rm -f /tmp/dl

# Hot-unplug while a download runs: QMP device_del; vfio-pci asks mhiproxy
# to release the device (request interrupt); the device must go, mhiproxy
# must say why and answer clients with an error instead of hanging.
begin hot-unplug
rm -f /tmp/hrest
# The reader asks for the unplug once the first MiB of a paced download
# has arrived, and counts what comes after.
http_proxy=$PROXY timeout 120 wget -q -O - "$URL/blob?rate=$PACE" 2>/dev/null |
	( head -c 1048576 > /dev/null; echo "MHISTACK-WINDOW begin unplug"; echo "MHISTACK-REQUEST unplug"; up > /tmp/t0; wc -c > /tmp/hrest ) &
WPID=$!
wait_for 60 [ -e /tmp/t0 ]
gone=no
wait_for 40 [ ! -e /sys/bus/pci/devices/$ADDR ] && gone=yes
t0=$(cat /tmp/t0 2>/dev/null)
t1=$(up)
ended=no
wait_for 15 sh -c "! kill -0 $WPID 2>/dev/null" && ended=yes
alive=no
kill -0 $PROXYPID 2>/dev/null && alive=yes
t2=$(up)
http_proxy=$PROXY timeout 20 wget -q -O /dev/null $URL/blob > /tmp/after 2>&1; rc=$?
t3=$(up)
sleep 0.5
show /tmp/proxy2.log
dmesg | grep -iE 'vfio|pciehp|0000:01:00' | tail -n 8 > /tmp/dm; show /tmp/dm
why=$(grep -iE 'removed|release|unplug' /tmp/proxy2.log | head -n 1 | head -c 200)
rest=$(cat /tmp/hrest 2>/dev/null || echo none)
if [ $gone = yes ] && [ $ended = yes ] && [ $alive = yes ] && [ $rc != 0 ] && [ $rc != 143 ] && [ -n "$why" ] && [ "$rest" != none ] && [ $(( rest + 1048576 )) -lt $SIZE ]; then
	check hot-unplug PASS "unplug asked after 1 MiB of $SIZE; device gone ${t0}..${t1}s uptime, the running download ended (+$rest bytes), mhiproxy alive and answered a new client with an error in $t2..${t3}s ($(tr '\n' ' ' < /tmp/after | head -c 100)); mhiproxy: $why"
else
	check hot-unplug FAIL "unplug asked after 1 MiB, then $rest bytes came; device gone: $gone (${t0}..${t1}s), running download ended: $ended, mhiproxy alive: $alive, new client: wget $rc in $t2..${t3}s ($(tr '\n' ' ' < /tmp/after | head -c 100)), mhiproxy says: ${why:-nothing about the removal}"
fi
kill $PROXYPID 2>/dev/null

echo "MHISTACK-DONE uptime=$(up)"
poweroff -f
`

// script fills in the init script.
func script(v guestVars) string {
	pbl, flash := "0", "0"
	if v.pbl {
		pbl = "1"
	}
	if v.flash {
		flash = "1"
	}
	return strings.NewReplacer(
		"@VENDOR@", v.vendor, "@DEVICE@", v.device,
		"@PBL@", pbl, "@FLASH@", flash,
		"@MODULES@", strings.Join(v.modules, " "),
		"@PORT@", fmt.Sprint(v.port), "@SUM@", v.sum, "@SIZE@", fmt.Sprint(v.size),
		"@SELFTESTCH@", v.selftestCh, "@FWSUM@", v.fwSum,
	).Replace(initScript)
}
