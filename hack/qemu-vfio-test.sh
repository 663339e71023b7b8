#!/usr/bin/env bash
# Runs the mhi/pci/vfio tests against the real Linux vfio-pci driver inside
# a QEMU guest (TCG, q35, intel-iommu with interrupt remapping, QEMU's edu
# and nvme devices). Needs: qemu-system-x86, busybox-static, apt-get and
# dpkg-deb (to fetch Debian's kernel into the cache), Go. It installs
# nothing itself; .ci/run installs the packages. Extra arguments go to the
# harness (hack/qemuvfio): e.g. -keep, -run TestGuestEdu, -kernel/-modules.
#
# Exit status: 0 pass, 1 test failure or timeout, 2 missing prerequisite.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
# The harness also checks that it is the static build.
[ -x /bin/busybox ] || missing+=(busybox-static)
command -v dpkg-deb >/dev/null || missing+=(dpkg)
command -v apt-get >/dev/null || { echo "qemu-vfio-test: apt-get not found: pass -kernel and -modules of a Linux kernel with VFIO modules" >&2; }
[ -x /usr/local/go/bin/go ] && PATH=$PATH:/usr/local/go/bin
if ! command -v go >/dev/null; then
	echo "qemu-vfio-test: go not found in PATH" >&2
	exit 2
fi
if [ ${#missing[@]} -gt 0 ]; then
	echo "qemu-vfio-test: missing: ${missing[*]}" >&2
	echo "qemu-vfio-test: install with: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 2
fi
# Built rather than "go run", which would turn exit status 2 into 1.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/qemuvfio" ./hack/qemuvfio
rc=0
"$bin/qemuvfio" "$@" || rc=$?
exit $rc
