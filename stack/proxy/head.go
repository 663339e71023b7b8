package proxy

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The proxy writes the heads it forwards itself instead of with
// Response.Write and Header.WriteSubset: those cost a formatted status
// line, a copy of the response, a transfer writer, a sorter from a pool
// and a write per piece on every request (docs/PERFORMANCE.md, table
// 11). The rules are net/http's, kept here in one place.

// writeStatusLine writes "HTTP/1.1 NNN reason": the proxy speaks its own
// version (RFC 9110 §6.2); the code and reason are the origin's as
// http.ReadResponse kept them in Status, the standard reason when the
// origin sent none.
func writeStatusLine(w io.StringWriter, resp *http.Response) {
	w.WriteString("HTTP/1.1 ")
	code, reason := statusParts(resp)
	w.WriteString(code)
	w.WriteString(" ")
	w.WriteString(reason)
	w.WriteString("\r\n")
}

// statusParts splits resp.Status ("200 OK") into the three digits and
// the reason without allocating; a Status that does not start with its
// code (a Response made by hand) is formatted as Response.Write does.
func statusParts(resp *http.Response) (code, reason string) {
	s := resp.Status
	if len(s) >= 3 && (len(s) == 3 || s[3] == ' ') && isDigit(s[0]) && isDigit(s[1]) && isDigit(s[2]) &&
		int(s[0]-'0')*100+int(s[1]-'0')*10+int(s[2]-'0') == resp.StatusCode {
		code = s[:3]
		if len(s) > 4 {
			reason = s[4:]
		}
	} else {
		code = fmt.Sprintf("%03d", resp.StatusCode)
		reason = strings.TrimPrefix(s, strconv.Itoa(resp.StatusCode)+" ")
	}
	if reason == "" {
		if reason = http.StatusText(resp.StatusCode); reason == "" {
			reason = "status code " + strconv.Itoa(resp.StatusCode)
		}
	}
	return code, reason
}

// writeFields writes h's fields sorted by name, as Header.Write does,
// but the framing ones the caller writes itself (Content-Length,
// Transfer-Encoding, Trailer; and Host when host is set). Like
// Header.Write it drops a name that is not a token and turns CR and LF
// in a value into spaces.
func writeFields(w io.StringWriter, h http.Header, host bool) {
	var arr [32]string
	keys := arr[:0]
	for k := range h {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		case "Host":
			if host {
				continue
			}
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !isToken(k) {
			continue
		}
		for _, v := range h[k] {
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v)
			}
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(strings.Trim(v, " \t"))
			w.WriteString("\r\n")
		}
	}
}

// bodyAllowed reports whether a response with this status may have a
// body, RFC 9110 §15.2, §15.3.5, §15.4.5.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// writeResponse writes a final response read by http.ReadResponse for a
// request of method to w with the framing Response.Write gives it:
// "Connection: close" when close is set, then Content-Length, or
// "Transfer-Encoding: chunked" with the Trailer field it declared, or
// neither for a body that ends at the close; "Content-Length: 0" for an
// empty body the status allows; then the other fields and the body,
// read from body (the response's, wrapped). A response to HEAD, a 204
// and a 304 have no body (RFC 9112 §6.3), nor is the chunked coding
// named for a 204 or a 304. The body is read to its end.
func writeResponse(w *respWriter, resp *http.Response, method string, close bool, body io.Reader) error {
	head := method == http.MethodHead
	bodyless := head || !bodyAllowed(resp.StatusCode)
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	cl := resp.ContentLength
	if chunked {
		cl = -1
	}
	writeStatusLine(w, resp)
	if close {
		w.WriteString("Connection: close\r\n")
	}
	switch {
	case cl > 0 || cl == 0 && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch || bodyAllowed(resp.StatusCode)):
		var num [20]byte
		w.WriteString("Content-Length: ")
		w.WriteString(string(strconv.AppendInt(num[:0], cl, 10)))
		w.WriteString("\r\n")
	case chunked && (head || !bodyless):
		w.WriteString("Transfer-Encoding: chunked\r\n")
		if len(resp.Trailer) > 0 {
			names := make([]string, 0, len(resp.Trailer))
			for k := range resp.Trailer {
				names = append(names, http.CanonicalHeaderKey(k))
			}
			slices.Sort(names)
			w.WriteString("Trailer: ")
			w.WriteString(strings.Join(names, ","))
			w.WriteString("\r\n")
		}
	}
	writeFields(w, resp.Header, false)
	if _, err := w.WriteString("\r\n"); err != nil {
		return err
	}
	switch {
	case bodyless:
		return nil
	case chunked:
		return writeChunked(w, body, resp)
	}
	n, err := w.ReadFrom(body)
	if err != nil {
		return err
	}
	if cl >= 0 && n != cl {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", cl, n)
	}
	return nil
}

// writeChunked writes body in the chunked coding (RFC 9112 §7.1), one
// chunk per read, then the last chunk and resp's trailer fields (which
// http.ReadResponse fills in at the end of the body).
func writeChunked(w *respWriter, body io.Reader, resp *http.Response) error {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	var num [20]byte
	for {
		n, err := body.Read(*buf)
		if n > 0 {
			w.WriteString(string(strconv.AppendInt(num[:0], int64(n), 16)))
			w.WriteString("\r\n")
			w.Write((*buf)[:n])
			if _, werr := w.WriteString("\r\n"); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	w.WriteString("0\r\n")
	writeFields(w, resp.Trailer, false)
	_, err := w.WriteString("\r\n")
	return err
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isToken reports whether s is a field name: a token, RFC 9110 §5.6.2.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
