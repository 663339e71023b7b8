// Package layers states mhistack's package layering as data and checks a
// package graph against it. The floors, from the top:
//
//	cmd, hack, reliability  programs, CI tools, system tests
//	stack                   the gVisor stack and the net-shaped API
//	link                    the link endpoint, the wire formats, the emulated modem's network
//	mhi                     the MHI engine, PCI backends, the emulated modem's device model
//	internal                pieces shared across floors
//
// A package imports only packages on its own floor or below, and within
// the link floor: link/framing imports nothing of the project (it is the
// contract both sides of a data channel share), the codecs (link/mbim,
// link/qmap, link/qmi) do not import link or link/simnet, and no package
// under link/ imports link/simnet (the emulated modem's network, which
// only stack and the tools above it plug in). A package's tests keep to
// the floor order as well but may use any package of their floor (link's
// tests run on link/simnet's networks); the link floor's own rules cover
// the code a program links. docs/ARCHITECTURE.md explains the layers;
// internal/layers' test enforces them on the tree and hack/pkggraph draws
// the graph in that document.
package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

// Module is the module path every rule is relative to.
const Module = "github.com/mhistack/mhistack"

// Floors are the top-level directories from the lowest floor up; a
// directory's floor is its index.
var Floors = [][]string{
	{"internal"},
	{"mhi"},
	{"link"},
	{"stack"},
	{"cmd", "hack", "reliability"},
}

// Package is what the rules need of a package: its path relative to the
// module ("link/mbim"), the module's packages it imports, also relative,
// and those its tests import besides (in-package and external tests).
type Package struct {
	Path        string
	Imports     []string
	TestImports []string
}

// Floor returns the floor of a package path relative to the module, or -1
// when its top-level directory has none (the rules then refuse it: a new
// top-level directory needs a floor).
func Floor(rel string) int {
	top, _, _ := strings.Cut(rel, "/")
	for i, dirs := range Floors {
		for _, d := range dirs {
			if d == top {
				return i
			}
		}
	}
	return -1
}

// FloorName names floor i by its directories ("cmd, hack, reliability").
func FloorName(i int) string {
	if i < 0 || i >= len(Floors) {
		return "no floor"
	}
	return strings.Join(Floors[i], ", ")
}

// under reports whether rel is dir or a package below it.
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// codecs are the wire-format packages of the link floor.
var codecs = map[string]bool{"link/mbim": true, "link/qmap": true, "link/qmi": true}

// Check returns one line per import that breaks the rules, naming the
// importer, the imported package and the rule, sorted; none for a
// well-layered graph.
func Check(pkgs []Package) []string {
	var bad []string
	for _, p := range pkgs {
		from := Floor(p.Path)
		if from < 0 {
			bad = append(bad, fmt.Sprintf("%s: top-level directory has no floor in internal/layers.Floors", p.Path))
			continue
		}
		for _, imp := range p.Imports {
			to := Floor(imp)
			switch {
			case to > from:
				bad = append(bad, fmt.Sprintf("%s imports %s: %s is below %s", p.Path, imp, FloorName(from), FloorName(to)))
			case p.Path == "link/framing":
				bad = append(bad, fmt.Sprintf("%s imports %s: link/framing is a leaf and imports nothing of the project", p.Path, imp))
			case codecs[p.Path] && (imp == "link" || under(imp, "link/simnet")):
				bad = append(bad, fmt.Sprintf("%s imports %s: the codecs use link/framing, not the endpoint or the emulated network", p.Path, imp))
			case under(p.Path, "link") && !under(p.Path, "link/simnet") && under(imp, "link/simnet"):
				bad = append(bad, fmt.Sprintf("%s imports %s: only stack and the tools above it plug in the emulated network", p.Path, imp))
			}
		}
		for _, imp := range p.TestImports {
			if to := Floor(imp); to > from {
				bad = append(bad, fmt.Sprintf("%s's tests import %s: %s is below %s", p.Path, imp, FloorName(from), FloorName(to)))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// List runs `go list -json` on patterns in dir and returns the module's
// packages with their imports of the module's packages and their tests'
// further imports, relative to the module, sorted by path.
func List(dir string, patterns ...string) ([]Package, error) {
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Imports,TestImports,XTestImports"}, patterns...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, stderr.Bytes())
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var lp struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&lp); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		rel, ok := relative(lp.ImportPath)
		if !ok {
			continue
		}
		p := Package{Path: rel}
		for _, imp := range lp.Imports {
			if r, ok := relative(imp); ok {
				p.Imports = append(p.Imports, r)
			}
		}
		for _, imp := range append(lp.TestImports, lp.XTestImports...) {
			if r, ok := relative(imp); ok && r != rel && !slices.Contains(p.Imports, r) && !slices.Contains(p.TestImports, r) {
				p.TestImports = append(p.TestImports, r)
			}
		}
		sort.Strings(p.Imports)
		sort.Strings(p.TestImports)
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Path < pkgs[j].Path })
	return pkgs, nil
}

// relative strips the module path; false for packages outside the module.
func relative(path string) (string, bool) {
	if path == Module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(path, Module+"/")
	return rel, ok
}
