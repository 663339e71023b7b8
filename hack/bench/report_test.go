package main

import (
	"strings"
	"testing"
)

// TestKeepHandSections: a rewrite of docs/BENCHMARKS.md keeps the
// hand-measured sections after the marker, once.
func TestKeepHandSections(t *testing.T) {
	hand := handMarker + "\n\n## By hand\n\nab numbers\n"
	old := "# Benchmarks\n\n## 1. old\n\n" + hand
	doc := keepHandSections("# Benchmarks\n\n## 1. new\n", old)
	if !strings.HasSuffix(doc, hand) || !strings.Contains(doc, "## 1. new") || strings.Contains(doc, "## 1. old") {
		t.Fatalf("rewrite:\n%s", doc)
	}
	if again := keepHandSections(doc, old); again != doc {
		t.Fatalf("kept twice:\n%s", again)
	}
	if plain := keepHandSections("# B\n", "# B\n## 1. old\n"); plain != "# B\n" {
		t.Fatalf("without a marker: %q", plain)
	}
}
