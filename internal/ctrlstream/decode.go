package ctrlstream

import "io"

// Decoder reassembles a control protocol's messages from a byte stream:
// Write appends input; Next returns the next whole message, the zero M
// when it needs more input, or an error for a malformed message, which it
// has skipped (the next call goes on after it).
type Decoder[M comparable] interface {
	Write(b []byte)
	Next() (M, error)
}

// Feed writes chunk to dec and hands every message it completes to
// handle, and every decode error to bad, in stream order.
func Feed[M comparable](dec Decoder[M], chunk []byte, handle func(M), bad func(error)) {
	var none M
	dec.Write(chunk)
	for {
		m, err := dec.Next()
		if err != nil {
			bad(err)
			continue
		}
		if m == none {
			return
		}
		handle(m)
	}
}

// ReadAll reads r, at most bufSize bytes at a time, and feeds what it
// reads to dec (see Feed) until a read fails.
func ReadAll[M comparable](r io.Reader, bufSize int, dec Decoder[M], handle func(M), bad func(error)) {
	buf := make([]byte, bufSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			Feed(dec, buf[:n], handle, bad)
		}
		if err != nil {
			return
		}
	}
}
