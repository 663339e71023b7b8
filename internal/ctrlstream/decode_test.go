package ctrlstream

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// lines decodes newline-terminated messages; "bad" is malformed.
type lines struct{ buf []byte }

func (l *lines) Write(b []byte) { l.buf = append(l.buf, b...) }

func (l *lines) Next() (*string, error) {
	i := bytes.IndexByte(l.buf, '\n')
	if i < 0 {
		return nil, nil
	}
	s := string(l.buf[:i])
	l.buf = l.buf[i+1:]
	if s == "bad" {
		return nil, errors.New("bad")
	}
	return &s, nil
}

func TestReadAllFeedsMessagesAndErrorsInOrder(t *testing.T) {
	var got []string
	ReadAll(bytes.NewReader([]byte("a\nbad\nbc\nd")), 3, &lines{},
		func(s *string) { got = append(got, *s) },
		func(err error) { got = append(got, "error "+err.Error()) })
	if want := []string{"a", "error bad", "bc"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
