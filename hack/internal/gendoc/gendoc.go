// Package gendoc keeps a generated section of a Markdown document: the
// text between a Begin and an End marker line is a program's output, the
// rest of the document is prose the program leaves alone. The generators
// (hack/pkggraph, hack/profiledoc) print the section, rewrite it with -w,
// and their tests fail when the document's copy is not what they would
// write now.
package gendoc

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Section names a generated section by its marker lines.
type Section struct {
	Begin, End string
}

// Replace returns doc with the section (markers included) replaced by
// text, which must carry the markers itself.
func (s Section) Replace(doc []byte, text string) ([]byte, error) {
	i, j, err := s.locate(doc)
	if err != nil {
		return nil, err
	}
	return slices.Concat(doc[:i], []byte(text), doc[j:]), nil
}

// Current returns the section as it stands in doc, markers included.
func (s Section) Current(doc []byte) (string, error) {
	i, j, err := s.locate(doc)
	if err != nil {
		return "", err
	}
	return string(doc[i:j]), nil
}

// Rewrite replaces the section of the file at path with text.
func (s Section) Rewrite(path, text string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := s.Replace(doc, text)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// locate returns where the section lies in doc: from its Begin marker to
// past its End marker and the newline after it.
func (s Section) locate(doc []byte) (i, j int, err error) {
	i = bytes.Index(doc, []byte(s.Begin))
	j = bytes.Index(doc, []byte(s.End))
	if i < 0 || j < i {
		return 0, 0, fmt.Errorf("no %q ... %q section", s.Begin, s.End)
	}
	j += len(s.End)
	if j < len(doc) && doc[j] == '\n' {
		j++
	}
	return i, j, nil
}

// Main is a generator's main function: it parses the command line
// (-w, -root DIR), calls generate with the module's root directory and
// prints the section, or with -w rewrites it in doc (relative to the
// root). tool is the generator's name ("pkggraph"), what says what the
// section holds ("package graph").
func (s Section) Main(tool, what, doc string, generate func(root string) (string, error)) {
	write := flag.Bool("w", false, "rewrite the section in "+doc+" instead of printing it")
	root := flag.String("root", ".", "the module's root directory")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./hack/%s [-w] [-root DIR]\n\nPrints the %s section of %s; -w writes it there.\n\n", tool, what, doc)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	text, err := generate(*root)
	if err == nil && !*write {
		_, err = os.Stdout.WriteString(text)
	} else if err == nil {
		err = s.Rewrite(filepath.Join(*root, doc), text)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, tool+":", err)
		os.Exit(1)
	}
}
