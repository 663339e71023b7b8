#!/usr/bin/env bash
# The Linux kernel's own MHI driver drives the emulated modem: runs
# `mhictl sim serve` (a vfio-user server hosting mhi/sim) and boots a Debian
# kernel in QEMU with a vfio-user-pci device connected to it; the guest loads
# mhi_pci_generic, mhi_net, mhi_wwan_ctrl and mhi_wwan_mbim and checks
# mission mode, channels, ports, pings and a 4 MiB TCP transfer each way
# through the data path (the modem's carrier network forwards 198.18.0.1 to
# a server the harness runs on this host's 127.0.0.1), SYS_ERR recovery and
# module unload. Then the quirk runs: one kernel per real-modem behaviour
# of docs/QUIRKS.md (slow READY, sideband wake, one MSI, SYS_ERR at
# power-up, D3cold), one PASS/FAIL line each (-quirks; a documented kernel
# limitation is reported, not counted). Then the lock runs (-locks): the
# guest's mbimcli and qmicli read an FCC-locked, PIN-locked modem (mhictl
# sim serve -fcc-lock -sim-pin). The recipe and the QEMU quirks are
# in docs/KERNEL-CROSSCHECK.md; the guest checks are in hack/kernelcheck.
#
# QEMU needs the vfio-user client (10.1 or later). Debian bookworm has none,
# so the script builds qemu-system-x86_64 from Debian's qemu source package
# (the newest version ≥ 10.1 the mirror serves, sid or trixie-backports),
# once, and keeps the binary under $MHISTACK_CACHE/qemu (default
# /var/cache/mhistack/qemu). Kernels are fetched with apt-get download into
# $MHISTACK_CACHE/kernels; nothing is installed by the checks themselves.
#
# Usage:
#   hack/kernel-crosscheck.sh --install-build-deps   # apt-get install what the QEMU build needs (CI)
#   hack/kernel-crosscheck.sh [harness flags]        # obtain QEMU + kernels, run every check
#   hack/kernel-crosscheck.sh --qemu-only            # just obtain QEMU, print its path
#   hack/kernel-crosscheck.sh --kernel-only SUITE    # just fetch SUITE's kernel, print LABEL=DIR
# Harness flags (hack/kernelcheck -help): -profiles, -pbl, -quirks, -locks, -keep,
# -timeout, -check-timeout (a guest with no verdict for that long is
# stopped) …
# Environment: QEMU=/path/to/qemu-system-x86_64 skips the build;
# MHISTACK_CACHE moves the cache; KERNEL_SUITES="bookworm" runs the 6.1
# kernel only (default "bookworm bookworm-backports": 6.1 and 6.12).
#
# Exit status: 0 every check passed, 1 a check failed, 2 a prerequisite is
# missing (no QEMU ≥ 10.1 source on the mirror, no kernel package, no tools).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

cache=${MHISTACK_CACHE:-/var/cache/mhistack}
qcache=$cache/qemu
min_qemu=10.1
log() { printf 'kernel-crosscheck: %s\n' "$*" >&2; }
die() { log "$*"; exit 2; }

# The Debian mirror the system already uses: private source lists point at
# it without touching the system's apt configuration.
mirror_uri() {
	local uri=""
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
	fi
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^https?:/){print $i; exit}}' /etc/apt/sources.list)
	fi
	echo "${uri:-http://deb.debian.org/debian}"
}

# private_apt DIR LINE... : an apt configuration with only these sources;
# prints the apt-get options that select it.
private_apt() {
	local dir=$1; shift
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
	printf '%s\n' "$@" > "$dir/sources.list"
	echo "-o Dir::Etc::sourcelist=$dir/sources.list -o Dir::Etc::sourceparts=- -o Dir::State::Lists=$dir/lists -o Dir::Cache=$dir/cache -o APT::Sandbox::User=root"
}

keyring=/usr/share/keyrings/debian-archive-keyring.gpg

bpo_apt() {
	private_apt "$cache/apt-bpo" "deb [signed-by=$keyring] $(mirror_uri) bookworm-backports main"
}

# --install-build-deps: what configure and ninja need (docs/KERNEL-CROSSCHECK.md
# §1, QEMU). meson ≥ 1.5 and pycotap ≥ 1.1 come from bookworm-backports because
# the +ds tarball has no python/wheels; the rest is bookworm.
install_build_deps() {
	local aptb debs
	aptb=$(bpo_apt)
	# shellcheck disable=SC2086
	apt-get $aptb -qq update
	debs=$cache/bpo-debs
	mkdir -p "$debs"
	# shellcheck disable=SC2086
	(cd "$debs" && rm -f ./*.deb && apt-get $aptb -qq download meson python3-pycotap)
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"$debs"/meson_*.deb "$debs"/python3-pycotap_*.deb \
		ninja-build libglib2.0-dev libpixman-1-dev flex bison libfdt-dev \
		python3-venv python3-setuptools gcc make pkg-config zlib1g-dev xz-utils \
		seabios qemu-system-data busybox-static >/dev/null
}

# has_vfio_user QEMU: the binary runs here and knows vfio-user-pci.
has_vfio_user() {
	# Read the whole list first: grep -q exits at the first match, and
	# under pipefail QEMU's SIGPIPE would fail a binary that has it.
	local devices
	devices=$("$1" -L /usr/share/seabios -L /usr/share/qemu -device help 2>/dev/null) || return 1
	grep -q '"vfio-user-pci"' <<<"$devices"
}

# version_ge A B: Debian version A ≥ B.
version_ge() { dpkg --compare-versions "$1" ge "$2"; }

# build_qemu: fetch the newest qemu source package ≥ $min_qemu that the
# mirror serves, build qemu-system-x86_64 with the vfio-user client, cache
# the stripped binary. Prints the binary's path.
build_qemu() {
	local apts uri versions v got="" tried=() src deb build out t0
	uri=$(mirror_uri)
	# sid first (the doc's 10.2.2 came from there), then trixie-backports.
	apts=$(private_apt "$cache/apt-src" \
		"deb-src [signed-by=$keyring] $uri sid main" \
		"deb-src [signed-by=$keyring] $uri trixie-backports main")
	# shellcheck disable=SC2086
	if ! apt-get $apts -qq update >&2; then
		die "cannot read the deb-src indexes of sid/trixie-backports from $uri: no QEMU ≥ $min_qemu source (set QEMU=/path/to/qemu-system-x86_64 with vfio-user-pci)"
	fi
	# shellcheck disable=SC2086
	versions=$(apt-cache $apts madison qemu | awk -F'|' '$3 ~ /Sources/ {gsub(/ /,"",$2); print $2}' | sort -u | sort -r -V)
	out=$cache/qemu-dl
	for v in $versions; do
		version_ge "$v" "1:$min_qemu" || continue
		tried+=("$v")
		rm -rf "$out"; mkdir -p "$out"
		log "fetching Debian source qemu=$v"
		# shellcheck disable=SC2086
		if (cd "$out" && apt-get $apts -qq source --download-only "qemu=$v" >&2); then
			got=$v
			break
		fi
		log "qemu=$v is listed but could not be downloaded (the mirror lags its index); trying an older one"
	done
	if [ -z "$got" ]; then
		die "no QEMU ≥ $min_qemu source could be fetched from $uri (versions listed: ${versions//$'\n'/ }; tried: ${tried[*]:-none}). Set QEMU=/path/to/qemu-system-x86_64 built with the vfio-user client."
	fi
	for tool in meson ninja gcc pkg-config flex bison; do
		command -v "$tool" >/dev/null || die "building QEMU needs $tool: run hack/kernel-crosscheck.sh --install-build-deps"
	done
	version_ge "$(meson --version)" 1.5.0 || die "meson $(meson --version) is older than 1.5: run hack/kernel-crosscheck.sh --install-build-deps (bookworm-backports meson)"
	src=$cache/qemu-src; deb=$cache/qemu-deb; build=$cache/qemu-build
	rm -rf "$src" "$deb" "$build"; mkdir -p "$src" "$deb" "$build"
	tar -xJf "$out"/qemu_*.orig.tar.xz -C "$src" --strip-components=1
	tar -xJf "$out"/qemu_*.debian.tar.xz -C "$deb"
	# The DFSG tarball lacks the firmware blobs; Debian's own patches stop
	# the build from unpacking/installing them (firmware comes from the
	# seabios and qemu-system-data packages at run time, -L).
	for p in skip-unpack-edk2-blobs skip-install-dtb; do
		if [ -f "$deb/debian/patches/$p.patch" ]; then
			(cd "$src" && patch -p1 --forward -s < "$deb/debian/patches/$p.patch") || die "Debian patch $p does not apply to qemu $got"
		else
			log "Debian patch $p not in qemu $got: building without it"
		fi
	done
	t0=$(date +%s)
	log "configuring qemu $got (x86_64-softmmu, TCG)"
	# --python: a python3 earlier in PATH (pyenv) would not see Debian's meson.
	(cd "$build" && "$src/configure" --target-list=x86_64-softmmu --disable-docs --disable-werror \
		--without-default-features --enable-tcg --enable-kvm --disable-install-blobs \
		--firmwarepath=/usr/share/qemu:/usr/share/seabios --python=/usr/bin/python3 >"$build/configure.log" 2>&1) ||
		{ tail -n 30 "$build/configure.log" >&2; die "QEMU configure failed (log: $build/configure.log)"; }
	log "building qemu $got with $(nproc) jobs (about 3.5 min on 2 cores)"
	(cd "$build" && ninja -j"$(nproc)" qemu-system-x86_64 >"$build/ninja.log" 2>&1) ||
		{ tail -n 30 "$build/ninja.log" >&2; echo "kernel-crosscheck: QEMU build failed (log: $build/ninja.log)" >&2; exit 1; }
	log "qemu $got built in $(( $(date +%s) - t0 )) s"
	local tag=${got#*:}
	mkdir -p "$qcache/$tag/bin"
	strip -o "$qcache/$tag/bin/qemu-system-x86_64" "$build/qemu-system-x86_64"
	echo "$tag" > "$qcache/current"
	# The 270 MB build tree is not needed again; the binary is the cache.
	rm -rf "$src" "$deb" "$build" "$out"
	echo "$qcache/$tag/bin/qemu-system-x86_64"
}

# find_qemu: $QEMU, else the cached build, else a fresh build.
find_qemu() {
	local q
	if [ -n "${QEMU:-}" ]; then
		has_vfio_user "$QEMU" || die "QEMU=$QEMU has no vfio-user-pci device (needs QEMU ≥ $min_qemu)"
		echo "$QEMU"; return
	fi
	if [ -f "$qcache/current" ]; then
		q=$qcache/$(cat "$qcache/current")/bin/qemu-system-x86_64
		if [ -x "$q" ] && has_vfio_user "$q"; then
			log "using cached QEMU $(cat "$qcache/current")"
			echo "$q"; return
		fi
	fi
	q=$(build_qemu)
	has_vfio_user "$q" || { log "the QEMU just built ($q) has no vfio-user-pci device"; exit 1; }
	echo "$q"
}

case "${1:-}" in
--install-build-deps)
	install_build_deps
	exit 0
	;;
--qemu-only)
	find_qemu
	exit 0
	;;
esac

[ -x /usr/local/go/bin/go ] && PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || die "go not found in PATH"
for tool in apt-get dpkg-deb xz; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
[ -f /usr/share/seabios/bios-256k.bin ] || die "no SeaBIOS: apt-get install seabios qemu-system-data"

# fetch_kernel SUITE: download (apt-get download) and unpack (dpkg-deb -x)
# the kernel that SUITE's linux-image-amd64 depends on, cached; prints
# "LABEL=DIR" with LABEL the kernel's major.minor version.
fetch_kernel() {
	local suite=$1 apt="" pkg dir debs
	case $suite in
	bookworm) ;;
	bookworm-backports)
		apt=$(bpo_apt)
		# shellcheck disable=SC2086
		[ -n "$(ls "$cache/apt-bpo/lists" 2>/dev/null | grep -v partial)" ] || apt-get $apt -qq update >&2 ||
			die "cannot read the bookworm-backports index from $(mirror_uri)"
		;;
	*) die "unknown kernel suite $suite (bookworm, bookworm-backports)" ;;
	esac
	# shellcheck disable=SC2086
	pkg=$(apt-cache $apt depends linux-image-amd64 2>/dev/null | awk '$1=="Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
	[ -n "$pkg" ] || die "cannot tell which kernel $suite's linux-image-amd64 depends on (run apt-get update)"
	dir=$cache/kernels
	mkdir -p "$dir"
	debs=$(ls "$dir/${pkg}"_*.deb 2>/dev/null | tail -n 1 || true)
	if [ -z "$debs" ]; then
		log "downloading $pkg ($suite)"
		# shellcheck disable=SC2086
		(cd "$dir" && apt-get $apt -qq download "$pkg" >&2) || die "apt-get download $pkg failed"
		debs=$(ls "$dir/${pkg}"_*.deb | tail -n 1)
	fi
	if [ ! -f "${debs%.deb}/.extracted" ]; then
		rm -rf "${debs%.deb}"
		dpkg-deb -x "$debs" "${debs%.deb}" || die "dpkg-deb -x $debs failed"
		touch "${debs%.deb}/.extracted"
	fi
	echo "$(echo "$pkg" | sed -E 's/^linux-image-([0-9]+\.[0-9]+).*/\1/')=${debs%.deb}"
}

# --kernel-only SUITE: just fetch SUITE's kernel (cached), print LABEL=DIR
# (hack/vfio-mhi-e2e.sh uses it).
if [ "${1:-}" = --kernel-only ]; then
	[ -n "${2:-}" ] || die "--kernel-only needs a suite (bookworm, bookworm-backports)"
	fetch_kernel "$2"
	exit 0
fi

suites=${KERNEL_SUITES:-bookworm bookworm-backports}
qemu=$(find_qemu)
kargs=()
for s in $suites; do
	kargs+=(-kernel "$(fetch_kernel "$s")")
done
# Built rather than "go run", which would turn exit status 2 into 1.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/mhictl" ./cmd/mhictl
go build -o "$bin/kernelcheck" ./hack/kernelcheck
log "QEMU $qemu; kernels ${kargs[*]}"
rc=0
"$bin/kernelcheck" -qemu "$qemu" -mhictl "$bin/mhictl" "${kargs[@]}" "$@" || rc=$?
exit $rc
