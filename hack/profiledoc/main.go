// Command profiledoc writes docs/PROTOCOL.md §6.3's modem table from the
// modem table of package mhi (mhi.Profiles, mhi/profiles_table.go): how
// many modems there are, each modem's PCI IDs, channel layout, MRU,
// timeouts, images and flags, and every channel layout in full.
//
//	go run ./hack/profiledoc        # print the generated section
//	go run ./hack/profiledoc -w     # rewrite it in docs/PROTOCOL.md
//
// The section lies between the Begin and End markers; the rest of the
// document is prose and is left alone. The package's test fails when the
// document is not what -w would write, so the table cannot go stale.
package main

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/mhistack/mhistack/hack/internal/gendoc"
	"github.com/mhistack/mhistack/mhi"
)

// Markers around the generated section.
const (
	Begin = "<!-- BEGIN profiledoc: generated from mhi/profiles_table.go by `go run ./hack/profiledoc -w`, do not edit -->"
	End   = "<!-- END profiledoc -->"
)

// Doc is the document the section lives in, relative to the module root.
const Doc = "docs/PROTOCOL.md"

var markers = gendoc.Section{Begin: Begin, End: End}

func main() {
	markers.Main("profiledoc", "modem table", Doc, func(string) (string, error) { return Render(mhi.Profiles()), nil })
}

// Check returns an error when doc's section is not what Render(profiles)
// writes.
func Check(doc []byte, profiles []*mhi.Profile) error {
	got, err := markers.Current(doc)
	if err != nil {
		return err
	}
	if got != Render(profiles) {
		return fmt.Errorf("%s's modem table is stale: run `go run ./hack/profiledoc -w`", Doc)
	}
	return nil
}

// layout is one channel and event ring configuration and the modems that
// use it; it is named after the first of them in table order.
type layout struct {
	name     string
	channels []mhi.ChannelConfig
	rings    []mhi.EventRingConfig
	users    []string
}

// layouts groups profiles by their channel and event ring tables, in the
// order of first use.
func layouts(profiles []*mhi.Profile) (all []*layout, of map[*mhi.Profile]*layout) {
	of = map[*mhi.Profile]*layout{}
	for _, p := range profiles {
		var l *layout
		for _, c := range all {
			if reflect.DeepEqual(c.channels, p.Channels) && reflect.DeepEqual(c.rings, p.EventRings) {
				l = c
				break
			}
		}
		if l == nil {
			l = &layout{name: p.Name, channels: p.Channels, rings: p.EventRings}
			all = append(all, l)
		}
		l.users = append(l.users, p.Name)
		of[p] = l
	}
	return all, of
}

// Render writes the section for profiles (mhi.Profiles's output, in
// matching order), markers included.
func Render(profiles []*mhi.Profile) string {
	all, of := layouts(profiles)
	ids := 0
	for _, p := range profiles {
		ids += len(p.IDs)
	}
	var b strings.Builder
	b.WriteString(Begin + "\n\n")
	fmt.Fprintf(&b, "%d modems, %d PCI ID entries, %d channel layouts. Rows are in matching order: the first\n", len(profiles), ids, len(all))
	b.WriteString("profile with an ID that matches a function is its profile.\n\n")
	b.WriteString("| Name | Description | PCI ID [subsystem] | Layout | MRU | Timeout | ReadyTimeout | fw | edl | sideband wake | EDL trigger | FCC lock | MBIM session offset |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range profiles {
		idList := make([]string, len(p.IDs))
		for i, id := range p.IDs {
			idList[i] = id.String()
		}
		fcc := "—"
		if l := p.FCCLock; l.Unlock != mhi.FCCUnlockNone {
			locked := make([]string, len(l.IDs))
			for i, id := range l.IDs {
				locked[i] = id.String()
			}
			fcc = fmt.Sprintf("%s: %s", l.Unlock, strings.Join(locked, ", "))
		}
		offset := "—"
		if p.MBIMSessionOffset != 0 {
			offset = fmt.Sprint(p.MBIMSessionOffset)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			p.Name, p.Description, strings.Join(idList, ", "), of[p].name, p.MRU,
			seconds(p.Timeout), seconds(p.ReadyTimeout), orDash(p.FirmwareImage), orDash(p.EDLImage),
			yesNo(p.SidebandWake), yesNo(p.EDLTrigger), fcc, offset)
	}
	b.WriteString("\nThe layouts, in the notation of §6.2 (`UL/DL NAME (elements, event ring)`; EE AMSS unless\n")
	b.WriteString("marked):\n\n")
	b.WriteString("| Layout | Used by | Channels | Event rings |\n|---|---|---|---|\n")
	for _, l := range all {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", l.name, strings.Join(l.users, ", "), channels(l.channels), rings(l.rings))
	}
	b.WriteString("\n" + End + "\n")
	return b.String()
}

// channels writes a layout's channel pairs: "4/5 DIAG (16, ER1)", with
// "32/256" when UL and DL rings differ in size, "ER2/ER3" when they
// complete on different event rings, and the EE and burst when not plain.
func channels(cs []mhi.ChannelConfig) string {
	var out []string
	for _, ul := range cs {
		if ul.Dir != mhi.ChanTypeOutbound {
			continue
		}
		dl := ul
		for _, c := range cs {
			if c.Num == ul.Num+1 {
				dl = c
			}
		}
		s := fmt.Sprintf("%d/%d %s (%s, %s", ul.Num, dl.Num, ul.Name,
			both(ul.Elements, dl.Elements, ""), both(ul.EventRing, dl.EventRing, "ER"))
		if ee := eeName(ul.EE); ee != "" {
			s += ", " + ee
		}
		if ul.Burst {
			s += ", burst"
		}
		out = append(out, s+")")
	}
	return strings.Join(out, "; ")
}

// both writes a UL/DL value once when they agree.
func both(ul, dl int, prefix string) string {
	if ul == dl {
		return fmt.Sprintf("%s%d", prefix, ul)
	}
	return fmt.Sprintf("%s%d/%s%d", prefix, ul, prefix, dl)
}

// eeName names a channel's EE mask unless it is AMSS alone.
func eeName(m mhi.EEMask) string {
	if m == 1<<mhi.EEAMSS {
		return ""
	}
	var names []string
	for e := mhi.EE(0); e < 16; e++ {
		if m.Has(e) {
			names = append(names, e.String())
		}
	}
	return "EE " + strings.Join(names, "+")
}

// rings writes a layout's event rings: "ER0 CTRL 64; ER4 HW_DATA 1024 (ch 100)".
func rings(rs []mhi.EventRingConfig) string {
	kind := map[mhi.EventRingKind]string{
		mhi.EventRingCtrl: "CTRL", mhi.EventRingData: "DATA", mhi.EventRingSWData: "SW_DATA", mhi.EventRingHWData: "HW_DATA",
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("ER%d %s %d", i, kind[r.Kind], r.Elements)
		if r.Hardware() {
			out[i] += fmt.Sprintf(" (ch %d)", r.Channel)
		}
	}
	return strings.Join(out, "; ")
}

// seconds writes a timeout as "8 s" ("—" when unset).
func seconds(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
