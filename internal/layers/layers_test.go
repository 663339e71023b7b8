package layers

import (
	"slices"
	"testing"
)

// TestTreeIsLayered checks the repository's own package graph: every
// import that breaks the rules of the package doc is named.
func TestTreeIsLayered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list on the whole module")
	}
	pkgs, err := List("../..", "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: not the module's root?", len(pkgs))
	}
	for _, b := range Check(pkgs) {
		t.Error(b)
	}
}

// TestCheckNamesEachBrokenRule runs the rules on a graph with one breach
// of each, the first three as the tree had them before link/simnet and
// link/framing existed (mhi/sim imported link's codecs; link/mbim imported
// link for the framing contract; mhi's FuzzHostileDevice ran a
// link.Endpoint). A test of link may use link/simnet.
func TestCheckNamesEachBrokenRule(t *testing.T) {
	pkgs := []Package{
		{Path: "mhi/sim", Imports: []string{"internal/csum", "link", "link/mbim", "mhi", "mhi/pci"}},
		{Path: "link/mbim", Imports: []string{"internal/ctrlstream", "link", "mhi"}},
		{Path: "link/framing", Imports: []string{"internal/csum"}},
		{Path: "link", Imports: []string{"link/framing", "link/simnet", "mhi"}},
		{Path: "link/simnet", Imports: []string{"link/framing", "link/mbim", "mhi/sim", "stack"}},
		{Path: "stack", Imports: []string{"link", "link/simnet", "mhi/sim"}},
		{Path: "cmd/mhictl", Imports: []string{"stack", "reliability"}},
		{Path: "tools/x"},
		{Path: "mhi", TestImports: []string{"link", "mhi/sim"}},
		{Path: "link", TestImports: []string{"link/simnet"}},
	}
	got := Check(pkgs)
	want := []string{
		"link imports link/simnet: only stack and the tools above it plug in the emulated network",
		"link/framing imports internal/csum: link/framing is a leaf and imports nothing of the project",
		"link/mbim imports link: the codecs use link/framing, not the endpoint or the emulated network",
		"link/simnet imports stack: link is below stack",
		"mhi's tests import link: mhi is below link",
		"mhi/sim imports link/mbim: mhi is below link",
		"mhi/sim imports link: mhi is below link",
		"tools/x: top-level directory has no floor in internal/layers.Floors",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Check:\n got %q\nwant %q", got, want)
	}
}
