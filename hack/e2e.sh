#!/usr/bin/env bash
# End-to-end test of mhiproxy with real clients from Debian.
#
# Starts a local HTTP server and a UDP echo server on 127.0.0.1, starts
# mhiproxy on the emulated modem, and fetches through the proxy with
# curl --socks5-hostname, curl --proxy (HTTP CONNECT and absolute URI),
# ncat --proxy-type socks5 and python3's socks module, comparing bytes;
# then a UDP ASSOCIATE round trip with the in-repo client, 200 concurrent
# fetches, ab -k (HTTP/1.0 keep-alive) through the HTTP proxy, the metrics
# endpoint, and a SIGTERM that must exit 0.
#
# The emulated carrier maps 198.18.0.1 to the host's 127.0.0.1 and its DNS
# answers test.mhistack with it, so the servers on the host's loopback are
# reached through the whole path: proxy → stack → link → MHI → modem.
#
#   E2E_MODE=sim   (default) mhiproxy on the emulated modem
#   E2E_MODE=host  the proxy package over the host's network
#                  (hack/proxye2e hostproxy): targets are 127.0.0.1, no
#                  metrics endpoint; for developing this script
#
# Needs curl, ncat, python3-socks and ab (apache2-utils; .ci/run installs
# them).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

mode=${E2E_MODE:-sim}
case $mode in
sim) target_ip=198.18.0.1 ;;
host) target_ip=127.0.0.1 ;;
*) echo "E2E_MODE=$mode: want sim or host" >&2; exit 2 ;;
esac
target_name=test.mhistack
# Debian's python3 has python3-socks; a pyenv python3 first in PATH may not.
python=/usr/bin/python3
[ -x "$python" ] || python=python3

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "e2e: FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done; exit 1; }
ok() { echo "e2e: ok: $*"; passed=$((passed + 1)); }
passed=0

# wait_line FILE REGEX: wait up to 60 s for a line, print its first match.
wait_line() {
	for _ in $(seq 600); do
		if line=$(grep -Eo "$2" "$1" 2>/dev/null | head -n 1) && [ -n "$line" ]; then
			echo "$line"; return 0
		fi
		sleep 0.1
	done
	fail "no line matching '$2' in $1"
}

go build -o "$work/mhiproxy" ./cmd/mhiproxy
go build -o "$work/proxye2e" ./hack/proxye2e
go build -o "$work/mhictl" ./cmd/mhictl

mkdir "$work/www"
head -c 3000000 /dev/urandom >"$work/www/blob"
for i in $(seq 200); do echo "file $i $(head -c 600 /dev/urandom | base64 -w0)" >"$work/www/f$i"; done

"$work/proxye2e" www -dir "$work/www" >"$work/www.log" 2>&1 &
pids+=($!)
www_port=$(wait_line "$work/www.log" 'http 127\.0\.0\.1:[0-9]+' | sed 's/.*://')
"$work/proxye2e" udpecho >"$work/udpecho.log" 2>&1 &
pids+=($!)
udp_port=$(wait_line "$work/udpecho.log" 'udp 127\.0\.0\.1:[0-9]+' | sed 's/.*://')

if [ "$mode" = sim ]; then
	"$work/mhiproxy" -listen 127.0.0.1:0 -metrics 127.0.0.1:0 >"$work/proxy.log" 2>&1 &
else
	"$work/proxye2e" hostproxy -listen 127.0.0.1:0 >"$work/proxy.log" 2>&1 &
fi
proxy_pid=$!
pids+=($proxy_pid)
ready=$(wait_line "$work/proxy.log" 'listening on .*')
echo "e2e: $ready"
proxy=$(echo "$ready" | sed -E 's/listening on ([^ ]+) .*/\1/')
proxy_port=${proxy##*:}

want=$(sha256sum <"$work/www/blob" | cut -d' ' -f1)
check() { # check NAME FILE
	got=$(sha256sum <"$2" | cut -d' ' -f1)
	[ "$got" = "$want" ] || fail "$1: fetched bytes differ ($(stat -c %s "$2") bytes)"
	ok "$1 ($(stat -c %s "$2") bytes identical)"
}

curl -fsS --max-time 60 --socks5-hostname "$proxy" "http://$target_name:$www_port/blob" -o "$work/out1" || fail "curl --socks5-hostname"
check "curl --socks5-hostname (name resolved by the modem's DNS)" "$work/out1"

curl -fsS --max-time 60 --socks5 "$proxy" "http://$target_ip:$www_port/blob" -o "$work/out2" || fail "curl --socks5"
check "curl --socks5 (IPv4 address)" "$work/out2"

curl -fsS --max-time 60 --proxy "http://$proxy" --proxytunnel "http://$target_name:$www_port/blob" -o "$work/out3" || fail "curl --proxy --proxytunnel"
check "curl --proxy --proxytunnel (HTTP CONNECT)" "$work/out3"

curl -fsS --max-time 60 --proxy "http://$proxy" "http://$target_name:$www_port/blob" -o "$work/out4" || fail "curl --proxy"
check "curl --proxy (absolute-URI forwarding)" "$work/out4"

printf 'GET /blob HTTP/1.0\r\nHost: x\r\n\r\n' |
	timeout 60 ncat --proxy "$proxy" --proxy-type socks5 "$target_ip" "$www_port" >"$work/out5.raw" || fail "ncat"
# Strip the response head: everything up to the first empty line.
$python -c 'import sys; d=open(sys.argv[1],"rb").read(); sys.stdout.buffer.write(d.split(b"\r\n\r\n",1)[1])' "$work/out5.raw" >"$work/out5"
check "ncat --proxy-type socks5" "$work/out5"

$python - "$proxy_port" "$target_name" "$www_port" "$work/out6" <<'EOF' || fail "python3 socks"
import socks, sys
port, host, wport, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
s = socks.socksocket()
s.set_proxy(socks.SOCKS5, "127.0.0.1", port, rdns=True)
s.settimeout(60)
s.connect((host, wport))
s.sendall(b"GET /blob HTTP/1.0\r\nHost: x\r\n\r\n")
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
open(out, "wb").write(data.split(b"\r\n\r\n", 1)[1])
EOF
check "python3 socks (PySocks, remote DNS)" "$work/out6"

"$work/proxye2e" udp -proxy "$proxy" -to "$target_ip:$udp_port" -n 20 || fail "UDP ASSOCIATE to an IP"
ok "UDP ASSOCIATE round trip to $target_ip"
"$work/proxye2e" udp -proxy "$proxy" -to "$target_name:$udp_port" -n 5 || fail "UDP ASSOCIATE to a name"
ok "UDP ASSOCIATE round trip to $target_name"

# 200 connections at once: curl's parallel mode, one connection per URL.
urls=()
for i in $(seq 200); do urls+=("http://$target_name:$www_port/f$i" -o "$work/par/f$i"); done
mkdir "$work/par"
start=$(date +%s.%N)
curl -fsS --no-progress-meter --max-time 120 --parallel --parallel-max 200 --parallel-immediate --no-keepalive \
	--socks5-hostname "$proxy" "${urls[@]}" || fail "200 concurrent fetches"
end=$(date +%s.%N)
for i in $(seq 200); do
	cmp -s "$work/www/f$i" "$work/par/f$i" || fail "concurrent fetch f$i differs"
done
ok "200 concurrent fetches identical ($(awk "BEGIN { printf \"%.2f\", $end - $start }") s)"

# ab speaks HTTP/1.0 and, with -k, asks for keep-alive: the proxy must
# answer "Connection: keep-alive" with a length, or close (RFC 9112 §9.3);
# a proxy that keeps the connection without saying so hangs ab.
command -v ab >/dev/null || fail "ab not installed (apt-get install apache2-utils)"
timeout 120 ab -q -k -s 30 -n 2000 -c 20 -X "$proxy" "http://$target_ip:$www_port/f1" >"$work/ab.log" 2>&1 ||
	fail "ab -k through the HTTP proxy (exit $?)"
grep -Eq '^Failed requests: +0$' "$work/ab.log" || fail "ab -k: failed requests"
grep -Eq '^Complete requests: +2000$' "$work/ab.log" || fail "ab -k: not all requests completed"
grep -Eq '^Keep-Alive requests: +2000$' "$work/ab.log" || fail "ab -k: connections not kept alive"
ok "ab -k through the HTTP proxy: 2000 HTTP/1.0 keep-alive requests ($(grep -Eo '[0-9.]+ \[#/sec\]' "$work/ab.log" | cut -d' ' -f1) req/s)"

if [ "$mode" = sim ]; then
	metrics=$(echo "$ready" | grep -Eo 'http://[^ ]+/metrics')
	m=$(curl -fsS --max-time 10 "$metrics") || fail "metrics endpoint"
	grep -Eq '^mhiproxy_proxy_socks_connects(\{[^}]*\})? [1-9]' <<<"$m" || fail "metrics lack proxy counters"
	grep -Eq '^mhiproxy_stack_dialed(\{[^}]*\})? [1-9]' <<<"$m" || fail "metrics lack stack counters"
	grep -Eq '^mhiproxy_stack_link_rx_bytes(\{[^}]*\})? [1-9]' <<<"$m" || fail "metrics lack link counters"
	grep -Eq '^mhiproxy_mhi_interrupts(\{[^}]*\})? [1-9]' <<<"$m" || fail "metrics lack MHI counters"
	ok "metrics endpoint answers ($(echo "$m" | grep -vc '^#') series)"
fi

kill -TERM "$proxy_pid"
code=0
wait "$proxy_pid" || code=$?
[ "$code" -eq 0 ] || fail "SIGTERM: exit status $code"
ok "SIGTERM exits 0"

# locked_modem N: a fresh FCC-locked, PIN-locked T99W175 with the carrier
# network on its data pair, serving at $work/modemN.sock.
sim_pin=2580
locked_modem() {
	"$work/mhictl" sim serve -profile foxconn-t99w175 -fcc-lock -sim-pin "$sim_pin" \
		-function IP_HW0_MBIM=carrier -socket "$work/modem$1.sock" >"$work/modem$1.log" 2>&1 &
	pids+=($!)
	modem_pid=$!
	wait_line "$work/modem$1.log" 'serving the emulated modem' >/dev/null
}
# refused N FLAG ARGS...: mhiproxy on a fresh locked modem with ARGS exits
# non-zero within 10 s, and its error names FLAG.
refused() {
	local n=$1 flag=$2 code=0 start end
	shift 2
	locked_modem "$n"
	start=$(date +%s.%N)
	timeout 10 "$work/mhiproxy" -device "vfio-user:$work/modem$n.sock" -apn v6only-nsp.mhistack -listen 127.0.0.1:0 "$@" \
		>"$work/refused$n.log" 2>&1 || code=$?
	end=$(date +%s.%N)
	kill "$modem_pid"
	[ "$code" -ne 0 ] || fail "mhiproxy without $flag served"
	[ "$code" -ne 124 ] || fail "mhiproxy without $flag: no exit within 10 s"
	grep -q -- "$flag" "$work/refused$n.log" || fail "mhiproxy without $flag: the error does not name $flag"
	ok "without $flag: exit $code in $(awk "BEGIN { printf \"%.2f\", $end - $start }") s: $(grep -o -- "[^:;]*$flag[^)]*)" "$work/refused$n.log" | head -n 1 | sed 's/^ *//')"
}

if [ "$mode" = sim ]; then
	refused 1 -fcc-unlock -pin "$sim_pin"
	refused 2 -pin -fcc-unlock
	locked_modem 3
	"$work/mhiproxy" -device "vfio-user:$work/modem3.sock" -apn v6only-nsp.mhistack -fcc-unlock -pin "$sim_pin" \
		-listen 127.0.0.1:0 -metrics 127.0.0.1:0 >"$work/online.log" 2>&1 &
	pids+=($!)
	online_pid=$!
	ready=$(wait_line "$work/online.log" 'listening on .*')
	echo "e2e: FCC-locked, PIN-locked, IPv6-only: $ready"
	echo "$ready" | grep -Eq ', ip [0-9a-f:]+:[0-9a-f:]+(,| |$)' || fail "not an IPv6-only session: $ready"
	proxy=$(echo "$ready" | sed -E 's/listening on ([^ ]+) .*/\1/')
	metrics=$(echo "$ready" | grep -Eo 'http://[^ ]+/metrics')
	# clat: packets the stack's CLAT translated so far (awk reads the whole exposition: an early
	# exit made curl fail writing to the closed pipe, exit 23, once the page outgrew the pipe).
	clat() { curl -fsS --max-time 10 "$metrics" | awk '/^mhiproxy_stack_clat_translated[{ ]/ && !n++ { print $NF }'; }
	c0=$(clat)
	curl -fsS --max-time 60 --socks5 "$proxy" "http://$target_ip:$www_port/blob" -o "$work/v6-1" || fail "IPv6-only: curl --socks5 $target_ip"
	c1=$(clat)
	[ "${c1:-0}" -gt "${c0:-0}" ] || fail "IPv6-only: the fetch from $target_ip did not go through the CLAT ($c0 -> $c1 packets)"
	check "IPv6-only APN: curl --socks5 to the IPv4 literal $target_ip (through the CLAT: $((c1 - c0)) packets)" "$work/v6-1"
	curl -fsS --max-time 60 --socks5-hostname "$proxy" "http://test4.mhistack:$www_port/blob" -o "$work/v6-2" || fail "IPv6-only: curl --socks5-hostname test4.mhistack"
	c2=$(clat)
	[ "$c2" = "$c1" ] || fail "IPv6-only: the fetch from test4.mhistack went through the CLAT ($c1 -> $c2 packets), not the DNS64's IPv6 address"
	check "IPv6-only APN: curl --socks5-hostname to test4.mhistack, A record only (the DNS64's IPv6 address, no CLAT)" "$work/v6-2"
	curl -fsS --max-time 60 --proxy "http://$proxy" --proxytunnel "http://$target_ip:$www_port/blob" -o "$work/v6-3" || fail "IPv6-only: curl --proxy --proxytunnel $target_ip"
	check "IPv6-only APN: curl --proxy --proxytunnel to $target_ip" "$work/v6-3"
	curl -fsS --max-time 60 --proxy "http://$proxy" "http://test4.mhistack:$www_port/blob" -o "$work/v6-4" || fail "IPv6-only: curl --proxy test4.mhistack"
	check "IPv6-only APN: curl --proxy (absolute URI) to test4.mhistack" "$work/v6-4"
	kill -TERM "$online_pid"
	code=0
	wait "$online_pid" || code=$?
	[ "$code" -eq 0 ] || fail "FCC-locked, PIN-locked modem: SIGTERM: exit status $code"
	grep -q "$sim_pin" "$work/online.log" && fail "mhiproxy printed the PIN"
	grep -q 'running the FCC unlock' "$work/online.log" || fail "mhiproxy did not log the FCC unlock it ran"
	ok "FCC unlock and PIN entered by mhiproxy (-fcc-unlock -pin); SIGTERM exits 0; the PIN is not in its log"
fi
echo "$passed passed, 0 failed"
