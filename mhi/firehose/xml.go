package firehose

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Bounds on what either side writes.
const (
	// MaxDocument bounds one XML document (programmers report
	// MaxXMLSizeInBytes 4096; logs can be longer).
	MaxDocument = 64 << 10
	// MaxElements bounds the elements of one document.
	MaxElements = 256
	maxAttrs    = 64
)

// ErrSyntax wraps every refusal of a malformed or oversized document.
var ErrSyntax = errors.New("firehose: malformed document")

// Attr is one attribute, in document order.
type Attr struct{ Name, Value string }

// Element is one child of <data>: a command (program, read …), a
// <response> or a <log>.
type Element struct {
	Name  string
	Attrs []Attr
}

// Get returns the value of attribute name (names compare exactly, as the
// programmers do).
func (e Element) Get(name string) (string, bool) {
	for _, a := range e.Attrs {
		if a.Name == name {
			return a.Value, true
		}
	}
	return "", false
}

// Value is Get without the presence flag.
func (e Element) Value(name string) string { v, _ := e.Get(name); return v }

// Elem builds an element from name and alternating attribute names and
// values.
func Elem(name string, kv ...string) Element {
	e := Element{Name: name}
	for i := 0; i+1 < len(kv); i += 2 {
		e.Attrs = append(e.Attrs, Attr{kv[i], kv[i+1]})
	}
	return e
}

const xmlHeader = `<?xml version="1.0" encoding="UTF-8" ?>`

// AppendDocument encodes elements as one Firehose document after dst.
func AppendDocument(dst []byte, elems ...Element) []byte {
	dst = append(dst, xmlHeader...)
	dst = append(dst, "<data>"...)
	for _, e := range elems {
		dst = append(dst, '<')
		dst = append(dst, e.Name...)
		for _, a := range e.Attrs {
			dst = append(dst, ' ')
			dst = append(dst, a.Name...)
			dst = append(dst, `="`...)
			var b bytes.Buffer
			_ = xml.EscapeText(&b, []byte(a.Value))
			dst = append(dst, b.Bytes()...)
			dst = append(dst, '"')
		}
		dst = append(dst, " />"...)
	}
	return append(dst, "</data>"...)
}

// ParseDocument decodes one document: the elements directly inside
// <data>, in order. Text, comments and processing instructions are
// skipped; nested elements are refused.
func ParseDocument(b []byte) ([]Element, error) {
	return parseElements(b, "data", MaxDocument, MaxElements)
}

// parseElements decodes the flat children of root.
func parseElements(b []byte, root string, maxBytes, maxElems int) ([]Element, error) {
	if len(b) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrSyntax, len(b), maxBytes)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	var out []Element
	depth, sawData, closed := 0, false, false
	for {
		tok, err := d.RawToken()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch {
			case closed:
				return nil, fmt.Errorf("%w: element <%s> after </data>", ErrSyntax, t.Name.Local)
			case depth == 0 && t.Name.Local == root && !sawData:
				sawData = true
			case depth == 1:
				if len(out) == maxElems {
					return nil, fmt.Errorf("%w: more than %d elements", ErrSyntax, maxElems)
				}
				if len(t.Attr) > maxAttrs {
					return nil, fmt.Errorf("%w: <%s> has %d attributes", ErrSyntax, t.Name.Local, len(t.Attr))
				}
				e := Element{Name: t.Name.Local, Attrs: make([]Attr, 0, len(t.Attr))}
				for _, a := range t.Attr {
					if _, dup := e.Get(a.Name.Local); dup {
						return nil, fmt.Errorf("%w: <%s> repeats attribute %s", ErrSyntax, t.Name.Local, a.Name.Local)
					}
					e.Attrs = append(e.Attrs, Attr{a.Name.Local, a.Value})
				}
				out = append(out, e)
			default:
				return nil, fmt.Errorf("%w: unexpected <%s> at depth %d", ErrSyntax, t.Name.Local, depth)
			}
			depth++
		case xml.EndElement:
			depth--
			if depth == 0 {
				closed = true
			}
		}
	}
	if !sawData || !closed {
		return nil, fmt.Errorf("%w: no complete <%s> element", ErrSyntax, root)
	}
	return out, nil
}

// dataEnd ends every document.
var dataEnd = []byte("</data>")

// Splitter cuts a byte stream into documents: on stream transports (USB,
// a tty) several documents, or a document and raw data, can share one
// read, and one document can span reads. Bytes after a document stay for
// the next call (or for a raw read: Take).
type Splitter struct{ buf []byte }

// Write appends received bytes.
func (s *Splitter) Write(b []byte) { s.buf = append(s.buf, b...) }

// Buffered returns how many bytes wait.
func (s *Splitter) Buffered() int { return len(s.buf) }

// Next returns the next complete document, or ok false when more bytes
// are needed. Leading whitespace and NULs are dropped. A stream that has
// more than MaxDocument bytes without a document end is an error.
func (s *Splitter) Next() (doc []byte, ok bool, err error) {
	s.buf = bytes.TrimLeft(s.buf, " \t\r\n\x00")
	i := bytes.Index(s.buf, dataEnd)
	if i < 0 {
		if len(s.buf) > MaxDocument {
			n := len(s.buf)
			s.buf = nil
			return nil, false, fmt.Errorf("%w: %d bytes without </data>", ErrSyntax, n)
		}
		return nil, false, nil
	}
	n := i + len(dataEnd)
	doc = bytes.Clone(s.buf[:n])
	s.buf = s.buf[n:]
	return doc, true, nil
}

// Take removes and returns up to n buffered bytes (raw data).
func (s *Splitter) Take(n int) []byte {
	n = min(n, len(s.buf))
	b := s.buf[:n]
	s.buf = s.buf[n:]
	return b
}

// Reset drops everything buffered.
func (s *Splitter) Reset() { s.buf = nil }

// IsDocument reports whether b starts like an XML document (after
// whitespace), as qdl tells a running programmer from a Sahara HELLO.
func IsDocument(b []byte) bool {
	return strings.HasPrefix(string(bytes.TrimLeft(b, " \t\r\n\x00")), "<?xml")
}
