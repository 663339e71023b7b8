package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vfio"
)

func init() {
	register(&command{
		Name:  "list",
		Short: "List the modems on the PCI bus and whether they can be opened.",
		Summary: `Scan /sys/bus/pci for modems in the profile table and say, for each, which
profile matches, which driver holds it, its IOMMU group, and whether it is
ready to be opened with -device ADDRESS (bound to vfio-pci) or what is missing.
-profiles lists the profile table instead.`,
		Run: list,
	})
}

// modemEntry is one PCI function that matches a profile.
type modemEntry struct {
	Address    string `json:"address"`
	ID         string `json:"id"`
	Profile    string `json:"profile"`
	Model      string `json:"model"`
	Driver     string `json:"driver"`
	IOMMUGroup *int   `json:"iommu_group"`
	VFIOReady  bool   `json:"vfio_ready"`
	Why        string `json:"why,omitempty"` // what to do when not ready
}

func list(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["list"]
	fs := newFlagSet(c, "[flags]", stderr)
	root := fs.String("sysfs", "/sys", "sysfs mount `point` (tests point it at a fake tree)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	profiles := fs.Bool("profiles", false, "list the known modem profiles instead of scanning")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *profiles {
		return listProfiles(stdout, *asJSON)
	}
	mods, err := scanModems(vfio.Sysfs{Root: *root})
	if err != nil {
		return err
	}
	if *asJSON {
		if mods == nil {
			mods = []modemEntry{}
		}
		return writeJSON(stdout, mods)
	}
	if len(mods) == 0 {
		fmt.Fprintf(stdout, "no known MHI modem found under %s/bus/pci/devices (mhictl list -profiles shows the IDs looked for; -device sim uses the emulated modem)\n", *root)
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ADDRESS\tID\tPROFILE\tDRIVER\tIOMMU\tVFIO")
	for _, m := range mods {
		group := "-"
		if m.IOMMUGroup != nil {
			group = strconv.Itoa(*m.IOMMUGroup)
		}
		ready := "ready"
		if !m.VFIOReady {
			ready = "no: " + m.Why
		}
		drv := m.Driver
		if drv == "" {
			drv = "(none)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Address, m.ID, m.Profile, drv, group, ready)
	}
	return w.Flush()
}

// scanModems walks bus/pci/devices and keeps the functions a profile
// matches (with subsystem IDs, honouring the table order).
func scanModems(s vfio.Sysfs) ([]modemEntry, error) {
	dir := filepath.Join(s.Root, "bus/pci/devices")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist: is sysfs mounted (or -sysfs wrong)?", dir)
	}
	if err != nil {
		return nil, err
	}
	var out []modemEntry
	for _, e := range ents {
		addr := e.Name()
		vendor, device, err := s.ID(addr)
		if err != nil {
			continue // not a readable PCI function
		}
		sv, sd := readHex16(filepath.Join(dir, addr, "subsystem_vendor")), readHex16(filepath.Join(dir, addr, "subsystem_device"))
		p, ok := mhi.Match(vendor, device, sv, sd)
		if !ok {
			continue
		}
		m := modemEntry{
			Address: addr,
			ID:      fmt.Sprintf("%04x:%04x [%04x:%04x]", vendor, device, sv, sd),
			Profile: p.Name,
			Model:   p.Description,
		}
		m.Driver, _ = s.Driver(addr)
		if g, err := s.IOMMUGroup(addr); err == nil {
			m.IOMMUGroup = &g
		}
		m.VFIOReady, m.Why = vfioReadiness(s, m)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, nil
}

// vfioReadiness says whether vfio.Open would work, or what to do first.
func vfioReadiness(s vfio.Sysfs, m modemEntry) (bool, string) {
	switch {
	case m.IOMMUGroup == nil:
		return false, "no IOMMU group: enable the IOMMU (intel_iommu=on / amd_iommu=on on the kernel command line)"
	case m.Driver != vfio.VFIODriver:
		now := "no driver"
		if m.Driver != "" {
			now = "driver " + m.Driver
		}
		return false, fmt.Sprintf("bound to %s: run hack/vfio-bind.sh bind %s (as root)", now, m.Address)
	}
	if others, err := s.GroupDevices(*m.IOMMUGroup); err == nil {
		for _, o := range others {
			if o == m.Address {
				continue
			}
			if drv, _ := s.Driver(o); drv != "" && drv != vfio.VFIODriver && drv != "pcieport" {
				return false, fmt.Sprintf("IOMMU group %d also holds %s (driver %s): bind it to vfio-pci too or move the modem", *m.IOMMUGroup, o, drv)
			}
		}
	}
	return true, ""
}

// readHex16 reads a sysfs ID file ("0x17cb"); 0 when absent.
func readHex16(path string) uint16 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 16)
	if err != nil {
		return 0
	}
	return uint16(v)
}

type profileEntry struct {
	Name     string   `json:"name"`
	Model    string   `json:"model"`
	IDs      []string `json:"ids"`
	Firmware string   `json:"firmware,omitempty"`
	EDL      string   `json:"edl,omitempty"`
	Trigger  bool     `json:"edl_trigger"`
}

func listProfiles(stdout io.Writer, asJSON bool) error {
	var out []profileEntry
	for _, p := range mhi.Profiles() {
		e := profileEntry{Name: p.Name, Model: p.Description, Firmware: p.FirmwareImage, EDL: p.EDLImage, Trigger: p.EDLTrigger}
		for _, id := range p.IDs {
			e.IDs = append(e.IDs, id.String())
		}
		out = append(out, e)
	}
	if asJSON {
		return writeJSON(stdout, out)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROFILE\tEDL TRIGGER\tPCI IDS")
	for _, e := range out {
		fmt.Fprintf(w, "%s\t%v\t%s\n", e.Name, e.Trigger, strings.Join(e.IDs, ", "))
	}
	return w.Flush()
}
