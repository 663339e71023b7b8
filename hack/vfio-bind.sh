#!/usr/bin/env bash
# Binds a PCI function to vfio-pci for mhistack, and gives it back.
#
#   hack/vfio-bind.sh status ADDR   IOMMU group, driver, group members, /dev/vfio node
#   hack/vfio-bind.sh bind   ADDR   unbind the current driver, bind vfio-pci (driver_override)
#   hack/vfio-bind.sh unbind ADDR   unbind vfio-pci, clear the override, rebind the original driver
#
# ADDR is a PCI address as in 'lspci -D' (0000:01:00.0; 01:00.0 is accepted).
# bind remembers the original driver in /run/mhistack/vfio-bind/ADDR so that
# unbind can restore it. Needs root. See docs/VFIO.md.
set -euo pipefail

SYS=${SYSFS_ROOT:-/sys}
STATE=${VFIO_BIND_STATE:-/run/mhistack/vfio-bind}

die() { echo "vfio-bind: $*" >&2; exit 1; }
usage() { sed -n '2,11s/^# \{0,1\}//p' "$0" >&2; exit 2; }

[ $# -eq 2 ] || usage
cmd=$1
addr=$(echo "$2" | tr 'A-F' 'a-f')
case $addr in
	????:??:??.?) ;;
	??:??.?) addr=0000:$addr ;;
	*) die "'$2' is not a PCI address like 0000:01:00.0" ;;
esac
dev=$SYS/bus/pci/devices/$addr
[ -e "$dev" ] || die "no PCI device $addr (lspci -D lists them)"

driver() { [ -e "$dev/driver" ] && basename "$(readlink "$dev/driver")" || true; }
group() { [ -e "$dev/iommu_group" ] && basename "$(readlink "$dev/iommu_group")" || true; }

status() {
	local g d
	g=$(group)
	echo "device:       $addr [$(cat "$dev/vendor"):$(cat "$dev/device")]"
	echo "driver:       $(driver || true)"
	echo "override:     $(cat "$dev/driver_override" 2>/dev/null || echo -)"
	if [ -z "$g" ]; then
		echo "iommu group:  none: enable the IOMMU (VT-d/AMD-Vi in firmware; intel_iommu=on or amd_iommu=on)"
		return
	fi
	echo "iommu group:  $g ($([ -e /dev/vfio/$g ] && echo /dev/vfio/$g || echo "no /dev/vfio/$g yet"))"
	for d in "$SYS/kernel/iommu_groups/$g/devices/"*; do
		local a drv
		a=$(basename "$d")
		drv=$( [ -e "$d/driver" ] && basename "$(readlink "$d/driver")" || echo none)
		echo "  member:     $a driver $drv"
	done
	[ -f "$STATE/$addr" ] && echo "saved driver: $(cat "$STATE/$addr")"
	[ -d "$dev/vfio-dev" ] && echo "vfio cdev:    /dev/vfio/devices/$(ls "$dev/vfio-dev")"
	return 0
}

bind() {
	[ -n "$(group)" ] || die "$addr has no IOMMU group: enable the IOMMU (VT-d/AMD-Vi in firmware; intel_iommu=on or amd_iommu=on on the kernel command line)"
	[ -d "$SYS/bus/pci/drivers/vfio-pci" ] || modprobe vfio-pci 2>/dev/null || true
	[ -d "$SYS/bus/pci/drivers/vfio-pci" ] || die "driver vfio-pci not available: modprobe vfio-pci"
	local cur
	cur=$(driver)
	if [ "$cur" = vfio-pci ]; then
		echo "$addr already bound to vfio-pci"
		return
	fi
	mkdir -p "$STATE"
	echo "$cur" > "$STATE/$addr"
	echo vfio-pci > "$dev/driver_override"
	[ -n "$cur" ] && echo "$addr" > "$SYS/bus/pci/drivers/$cur/unbind"
	echo "$addr" > "$SYS/bus/pci/drivers_probe"
	[ "$(driver)" = vfio-pci ] || die "$addr did not bind to vfio-pci (dmesg says why); hack/vfio-bind.sh unbind $addr gives it back to ${cur:-the kernel}"
	echo "$addr: ${cur:-no driver} -> vfio-pci (group $(group))"
	local g=$(group) d
	for d in "$SYS/kernel/iommu_groups/$g/devices/"*; do
		local a=$(basename "$d") drv
		[ "$a" = "$addr" ] && continue
		drv=$( [ -e "$d/driver" ] && basename "$(readlink "$d/driver")" || echo "")
		case $drv in
			""|vfio-pci|pci-stub) ;;
			*) echo "warning: group $g also holds $a (driver $drv): bind it too, or the group is not viable" >&2 ;;
		esac
	done
}

unbind() {
	local orig=""
	[ -f "$STATE/$addr" ] && orig=$(cat "$STATE/$addr")
	echo > "$dev/driver_override"
	[ "$(driver)" = vfio-pci ] && echo "$addr" > "$SYS/bus/pci/drivers/vfio-pci/unbind"
	if [ -n "$orig" ]; then
		echo "$addr" > "$SYS/bus/pci/drivers/$orig/bind" || echo "$addr" > "$SYS/bus/pci/drivers_probe"
	else
		# No record: let the kernel pick the driver it would at boot.
		echo "$addr" > "$SYS/bus/pci/drivers_probe" 2>/dev/null || true
	fi
	rm -f "$STATE/$addr"
	echo "$addr: vfio-pci -> $(driver || true)"
}

case $cmd in
	status) status ;;
	bind) bind ;;
	unbind) unbind ;;
	*) usage ;;
esac
