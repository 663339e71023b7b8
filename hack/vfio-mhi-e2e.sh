#!/usr/bin/env bash
# mhistack end to end on the real VFIO path: a Debian kernel in QEMU (TCG,
# q35, intel-iommu with interrupt remapping and caching mode) binds the
# emulated modem (mhictl sim serve, served to QEMU's vfio-user-pci device)
# to vfio-pci, and the project's own static mhictl and mhiproxy drive it
# through the guest IOMMU: mhictl list/info/selftest, mhiproxy with 16 MiB
# downloaded and uploaded through the modem's carrier network to a server
# on this host, a SYS_ERR mid-transfer, mhictl fw load -bhie from PBL,
# kill -9 of mhiproxy and a new one, hot-unplug (QMP device_del, vfio-pci's
# request interrupt), and in a flash run mhictl backup, flash and a
# byte-exact read-back through EDL and Firehose. What it proves and what it
# cannot: docs/VFIO.md.
#
# QEMU ≥ 10.1 and the kernel come from hack/kernel-crosscheck.sh (its
# cache under $MHISTACK_CACHE, default /var/cache/mhistack: QEMU is built
# once from Debian's source package, the kernel fetched with apt-get
# download).
#
# Usage: hack/vfio-mhi-e2e.sh [harness flags]   (hack/vfiomhi -help:
#   -profiles, -pbl, -flash, -size, -keep, -v, -timeout)
# Environment: QEMU=/path/to/qemu-system-x86_64 (≥ 10.1) skips the build;
# KERNEL_SUITE=bookworm (6.1, default) or bookworm-backports (6.12).
#
# Exit status: 0 every check passed, 1 a check failed, 2 a prerequisite is
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/local/go/bin/go ] && PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "vfio-mhi-e2e: go not found in PATH" >&2; exit 2; }

qemu=$(hack/kernel-crosscheck.sh --qemu-only)
kernel=$(hack/kernel-crosscheck.sh --kernel-only "${KERNEL_SUITE:-bookworm}")
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
# The guest runs the project's binaries as they ship: static, no cgo.
CGO_ENABLED=0 go build -o "$bin/mhictl" ./cmd/mhictl
CGO_ENABLED=0 go build -o "$bin/mhiproxy" ./cmd/mhiproxy
# Built rather than "go run", which would turn exit status 2 into 1.
go build -o "$bin/vfiomhi" ./hack/vfiomhi
rc=0
"$bin/vfiomhi" -qemu "$qemu" -kernel "$kernel" -mhictl "$bin/mhictl" -mhiproxy "$bin/mhiproxy" "$@" || rc=$?
exit $rc
