package main

// Which profiles a kernel drives: mhi_pci_generic's PCI ID table, read
// from the module's .modinfo aliases (-profiles all).

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
	"github.com/mhistack/mhistack/mhi"
)

// kernelProfiles returns the profiles whose first PCI ID the kernel's
// mhi_pci_generic binds to.
func kernelProfiles(k kernelDir) ([]string, error) {
	_, modDir, err := qh.FindKernel(k.dir)
	if err != nil {
		return nil, err
	}
	ko, err := initramfs.Module(modDir, "mhi_pci_generic")
	if err != nil {
		return nil, qh.PrereqError{Msg: err.Error()}
	}
	aliases := pciAliases(ko)
	var names, skipped []string
	for _, p := range mhi.Profiles() {
		if drives(aliases, p) {
			names = append(names, p.Name)
		} else {
			skipped = append(skipped, p.Name)
		}
	}
	fmt.Printf("kernel-crosscheck: kernel %s drives %d profiles; not in its table: %s\n", k.label, len(names), strings.Join(skipped, " "))
	return names, nil
}

// alias is one "pci:" alias of mhi_pci_generic: sub IDs of -1 match any.
type alias struct {
	vendor, device       uint16
	subVendor, subDevice int
}

var aliasRE = regexp.MustCompile(`alias=pci:v0000([0-9A-F]{4})d0000([0-9A-F]{4})sv(\*|0000[0-9A-F]{4})sd(\*|0000[0-9A-F]{4})`)

// pciAliases reads the module's PCI ID table from its .modinfo strings.
func pciAliases(ko []byte) []alias {
	var out []alias
	hex := func(s string) int {
		if s == "*" {
			return -1
		}
		v, _ := strconv.ParseUint(s[len(s)-4:], 16, 16)
		return int(v)
	}
	for _, m := range aliasRE.FindAllSubmatch(ko, -1) {
		out = append(out, alias{uint16(hex(string(m[1]))), uint16(hex(string(m[2]))), hex(string(m[3])), hex(string(m[4]))})
	}
	return out
}

// drives reports whether the kernel binds mhi_pci_generic to the function
// the emulated modem presents for p with p's own configuration: the kernel
// takes the first matching entry of its ID table, and modinfo lists the
// table's aliases in reverse order. A profile told apart by its subsystem
// IDs must hit an entry with those IDs (not the vendor/device wildcard of
// another modem), and a profile without them the wildcard.
func drives(aliases []alias, p *mhi.Profile) bool {
	id := p.IDs[0]
	sv, sd := id.Vendor, id.Device
	if id.MatchSub {
		sv, sd = id.SubVendor, id.SubDevice
	}
	for i := len(aliases) - 1; i >= 0; i-- {
		a := aliases[i]
		if a.vendor == id.Vendor && a.device == id.Device &&
			(a.subVendor < 0 || a.subVendor == int(sv)) && (a.subDevice < 0 || a.subDevice == int(sd)) {
			return id.MatchSub == (a.subVendor >= 0)
		}
	}
	return false
}
