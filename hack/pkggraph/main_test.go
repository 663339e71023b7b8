package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/internal/layers"
)

// TestArchitectureDocIsCurrent fails when docs/ARCHITECTURE.md's package
// graph is not what `go run ./hack/pkggraph -w` writes now.
func TestArchitectureDocIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list on the whole module")
	}
	root := filepath.Join("..", "..")
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, Doc))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Current(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s's package graph is stale: run `go run ./hack/pkggraph -w`", Doc)
	}
}

// TestArchitectureDocNamesEveryPackage fails when a package of the module
// has no line in docs/ARCHITECTURE.md's prose (its job), above the
// generated graph.
func TestArchitectureDocNamesEveryPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list on the whole module")
	}
	root := filepath.Join("..", "..")
	pkgs, err := layers.List(root, "./...")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, Doc))
	if err != nil {
		t.Fatal(err)
	}
	prose, _, ok := strings.Cut(string(doc), Begin)
	if !ok {
		t.Fatalf("%s has no generated section", Doc)
	}
	for _, p := range pkgs {
		if !strings.Contains(prose, "`"+p.Path+"`") {
			t.Errorf("%s does not say what package %s is for (a row in \"Each package's job\")", Doc, p.Path)
		}
	}
}

// TestRenderLeavesOutImpliedImportsAndReplaceKeepsTheProse: stack → link →
// mhi makes stack → mhi implied; the table still lists it; Replace
// swaps only the section.
func TestRenderLeavesOutImpliedImportsAndReplaceKeepsTheProse(t *testing.T) {
	pkgs := []layers.Package{
		{Path: "link", Imports: []string{"mhi"}},
		{Path: "mhi"},
		{Path: "stack", Imports: []string{"link", "mhi"}},
	}
	s := Render(pkgs)
	if !strings.Contains(s, "  stack --> link\n") || !strings.Contains(s, "  link --> mhi\n") || strings.Contains(s, "stack --> mhi") {
		t.Errorf("edges:\n%s", s)
	}
	if !strings.Contains(s, "| `stack` | stack | `link`, `mhi` |") {
		t.Errorf("table:\n%s", s)
	}
	doc := []byte("# title\n\nprose\n\n" + Begin + "\nold\n" + End + "\n\nmore prose\n")
	out, err := Replace(doc, s)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# title\n\nprose\n\n" + s + "\nmore prose\n"; string(out) != want {
		t.Errorf("Replace:\n%s\nwant\n%s", out, want)
	}
	if got, _ := Current(out); got != s {
		t.Errorf("Current after Replace:\n%s", got)
	}
}
