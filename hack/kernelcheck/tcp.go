package main

// TCP through the kernel's data path to the host (the tcp-download and tcp-upload checks): the
// modem's data pair runs the carrier network (link/simnet CarrierNetwork,
// `mhictl sim serve -function PAIR=carrier`), which forwards a TCP
// connection to 198.18.0.1:PORT to the host's 127.0.0.1:PORT, where the
// harness serves a blob over HTTP. The guest downloads it with busybox
// wget through mhi_hwip0 (raw IP) or wwan0 (MBIM NTB16) and compares its
// SHA-256; the harness reads the carrier's DL aggregation during the
// transfer (datagrams per NTB) from the modem's "carrier stats" lines,
// which the guest asks for before and after (SIGUSR2).
//
// The QMAP check (mhi_net raw-IP netdev with rmnet on top) needs rmnet,
// which neither Debian kernel builds (CONFIG_RMNET is not set): the
// harness looks for it and says so.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// tcpBlobSize is what the guest downloads: a few MiB, a few seconds in TCG.
const tcpBlobSize = 4 << 20

// tcpChecks are the guest's verdicts of the section, in order (the
// harness adds qmap-rmnet itself).
var tcpChecks = []string{"tcp-download", "tcp-upload"}

// tcpSection is the guest script's TCP part (withTCP puts it in).
const tcpSection = `
# ---- TCP to the host through the carrier network (hack/kernelcheck/tcp.go) ----
tcp_section() {
	local dev=$PINGDEV sum want t0 t1
	if [ -z "@TCPPORT@" ] || [ -z "$dev" ]; then
		for c in tcp-download tcp-upload; do check $c SKIP "no data channel with the carrier network in this run"; done
		return
	fi
	[ -e /sys/class/net/$dev ] || { for c in tcp-download tcp-upload; do check $c FAIL "no $dev"; done; return; }
	ip link set $dev up
	ip addr add 192.0.2.1/24 dev $dev 2>/dev/null
	ip route add 198.18.0.0/15 dev $dev 2>/dev/null
	echo "MHISTACK-REQUEST carrier-stats"
	sleep 1
	t0=$(up)
	sum=$(timeout 120 wget -q -O - http://198.18.0.1:@TCPPORT@/blob | sha256sum | cut -d' ' -f1)
	t1=$(up)
	echo "MHISTACK-REQUEST carrier-stats"
	sleep 1
	if [ "$sum" = "@TCPSUM@" ]; then
		check tcp-download PASS "@TCPSIZE@ bytes from 198.18.0.1 (host 127.0.0.1) through $dev in ${t0}s..${t1}s uptime, sha256 match"
	else
		check tcp-download FAIL "sha256 ${sum:-none} (want @TCPSUM@) through $dev between ${t0}s and ${t1}s uptime"
	fi
	# The other way: the guest's UL, one datagram per NTB on MBIM
	# (mhi_wwan_mbim never aggregates), parsed strictly by the modem.
	# busybox wget sends --post-file as a C string: no NUL bytes in it.
	tr -d '\000' < /dev/urandom | head -c @TCPSIZE@ > /tmp/upload
	want=$(sha256sum /tmp/upload | cut -d' ' -f1)
	t0=$(up)
	sum=$(timeout 120 wget -q -O - --post-file=/tmp/upload http://198.18.0.1:@TCPPORT@/upload)
	t1=$(up)
	rm -f /tmp/upload
	if [ -n "$sum" ] && [ "$sum" = "$want" ]; then
		check tcp-upload PASS "@TCPSIZE@ bytes to 198.18.0.1 (host 127.0.0.1) through $dev in ${t0}s..${t1}s uptime, sha256 match"
	else
		check tcp-upload FAIL "the host saw sha256 ${sum:-nothing} (sent $want) through $dev between ${t0}s and ${t1}s uptime"
	fi
	ip route del 198.18.0.0/15 dev $dev 2>/dev/null
}
tcp_section
# ---- end of the TCP section ----
`

// withTCP inserts the TCP section into a filled-in init script before
// the SYS_ERR part (and before the MBIM section, which withMBIM puts at
// the same place afterwards). port 0: no carrier in this run.
func withTCP(script string, port int, sum string) string {
	i := strings.Index(script, mbimAnchor)
	if i < 0 {
		return script
	}
	p := ""
	if port != 0 {
		p = strconv.Itoa(port)
	}
	sec := strings.NewReplacer("@TCPPORT@", p, "@TCPSUM@", sum, "@TCPSIZE@", strconv.Itoa(tcpBlobSize)).Replace(tcpSection)
	return script[:i] + strings.TrimPrefix(sec, "\n") + "\n" + script[i:]
}

// carrierPair is the data pair the run puts the carrier network on: the
// one the ping checks use.
func carrierPair(e expect) string {
	for name, dev := range netdevs {
		if dev == e.pingDev {
			return name
		}
	}
	return ""
}

var carrierStatsRE = regexp.MustCompile(`msg="carrier stats" channel=\S+ ul_packets=(\d+) dl_packets=(\d+) dl_frames=(\d+) .* dropped=(\d+)`)

// aggregation reads the carrier's DL aggregation during the transfer
// from the first two "carrier stats" lines (asked for before and after
// it).
func aggregation(log string) (string, bool) {
	m := carrierStatsRE.FindAllStringSubmatch(log, 2)
	if len(m) < 2 {
		return fmt.Sprintf("the modem logged %d of the 2 carrier stats it was asked for", len(m)), false
	}
	n := func(i, j int) uint64 { v, _ := strconv.ParseUint(m[i][j], 10, 64); return v }
	ul, dl, frames, dropped := n(1, 1)-n(0, 1), n(1, 2)-n(0, 2), n(1, 3)-n(0, 3), n(1, 4)-n(0, 4)
	if frames == 0 {
		return fmt.Sprintf("UL %d packets, DL %d datagrams in raw IP transfers (no aggregation on raw IP), %d dropped", ul, dl, dropped), true
	}
	return fmt.Sprintf("UL %d packets; DL %d datagrams in %d NTBs: %.1f per NTB, %d dropped", ul, dl, frames, float64(dl)/float64(frames), dropped), true
}

// rmnetSupport says whether the kernel can run the QMAP check: rmnet
// (drivers/net/ethernet/qualcomm/rmnet) as a module or built in.
func rmnetSupport(kdir, modDir string) (bool, string) {
	var found []string
	filepath.WalkDir(modDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "rmnet.ko") {
			found = append(found, strings.TrimPrefix(p, modDir+"/"))
		}
		return nil
	})
	cfgs, _ := filepath.Glob(filepath.Join(kdir, "boot/config-*"))
	setting := "no boot/config-* in the package"
	if len(cfgs) == 1 {
		cfg, _ := os.ReadFile(cfgs[0])
		setting = "CONFIG_RMNET absent from " + filepath.Base(cfgs[0])
		for _, l := range strings.Split(string(cfg), "\n") {
			if strings.HasPrefix(l, "CONFIG_RMNET=") || l == "# CONFIG_RMNET is not set" {
				setting = fmt.Sprintf("%q in %s", l, filepath.Base(cfgs[0]))
			}
		}
	}
	if len(found) == 0 {
		return false, fmt.Sprintf("this kernel has no rmnet: %s, no rmnet.ko under kernel/drivers/net/ethernet/qualcomm/rmnet; mhi_net hands QMAP frames to nothing", setting)
	}
	return true, fmt.Sprintf("%s (%s)", strings.Join(found, " "), setting)
}

// The TCP checks report after the ping checks, before the MBIM section.
func init() {
	i := slices.Index(guestChecks, "mbim-device-caps")
	if i < 0 {
		i = slices.Index(guestChecks, "syserr-recovery")
	}
	if i < 0 {
		i = len(guestChecks)
	}
	guestChecks = slices.Concat(guestChecks[:i:i], tcpChecks, guestChecks[i:])
}
