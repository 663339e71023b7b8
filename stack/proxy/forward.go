package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hopHeaders are connection-specific and not forwarded, RFC 9110 §7.6.1.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders removes the hopHeaders and the fields that
// Connection names from h, a header as http.ReadRequest or ReadResponse
// parsed it (its names canonical).
func removeHopHeaders(h http.Header) {
	for _, f := range h["Connection"] {
		for f != "" {
			var name string
			name, f, _ = strings.Cut(f, ",")
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for name := range h {
		if isHopHeader(name) {
			delete(h, name)
		}
	}
}

// isHopHeader reports whether a canonical name is one of hopHeaders.
func isHopHeader(name string) bool { return slices.Contains(hopHeaders, name) }

// httpForward sends one absolute-URI request to its origin over the
// server's pool (pool.go) and the response back. It reports whether the
// client connection may carry another request. The goroutine serving the
// client does it all itself: it writes the request on the pooled
// connection and reads the response from it; only a request body is
// streamed on a goroutine of its own (upload), so that an origin that
// answers before the body has arrived is heard.
//
// Persistence toward the client follows RFC 9112 §9.3: an HTTP/1.1
// client keeps the connection unless it or the response says "close"; an
// HTTP/1.0 client only when it asked with "Connection: keep-alive", and
// then the response says "Connection: keep-alive" back (a 1.0 client
// otherwise waits for the close). Either way the response must carry its
// own length: a body that ends only when the origin closes is delimited
// toward the client by closing too. An HTTP/1.0 client never gets
// Transfer-Encoding (RFC 9112 §6.1): a chunked body goes to it as is,
// ended by the close. Persistence toward the origin is the pool's: the
// client's "close" ends the client's connection, not the origin's.
func (s *Server) httpForward(c net.Conn, br *bufio.Reader, pr *proxyRequest) (keepAlive bool) {
	req := pr.req
	keepAlive = !req.Close // what net/http parsed: 1.1 unless "close", 1.0 only with "keep-alive"
	client10 := !req.ProtoAtLeast(1, 1)
	s.stats.HTTPForwards.Add(1)

	removeHopHeaders(req.Header)
	if client10 {
		// A server ignores a 1.0 request's 100-continue (RFC 9110
		// §10.1.1), and a 1.0 client gets no 1xx (§15.2).
		req.Header.Del("Expect")
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	body := &clientBody{r: req.Body, eof: !hasBody}
	defer func() {
		if !body.stop(c) {
			// The next request would start inside this one's body.
			keepAlive = false
		}
	}()
	down := &idleConn{Conn: c, idle: s.idleTimeout(), counter: &s.stats.BytesDown}
	pool := s.originPool()
	key := pr.target.String()
	for attempt := 0; ; attempt++ {
		oc, err := pool.get(s.context(), key, pr.target, attempt > 0)
		if err != nil {
			s.logger().Info("proxy: http forward failed", "client", c.RemoteAddr(), "target", key, "err", err)
			s.httpError(c, dialStatus(err), err)
			return false
		}
		retriable := !hasBody && idempotent(req.Method)
		if oc.reused && !retriable && oc.closedByOrigin() {
			// Cheaper to look than to fail a request that cannot be
			// sent again: the origin closed the idle connection.
			pool.drop(oc)
			attempt--
			continue
		}
		if oc.reused {
			s.stats.HTTPPoolHits.Add(1)
		} else {
			s.stats.HTTPPoolMisses.Add(1)
		}
		x := exchange{s: s, oc: oc, req: req, body: body, client: c, clientBuf: br, down: down, client10: client10}
		sent, err := x.run(pool.keepAlive())
		if err == nil {
			if !x.keepClient {
				keepAlive = false
			}
			return keepAlive
		}
		// A connection that idled in the pool may have been closed by
		// the origin just before the request went out on it: net/http's
		// rule, RFC 9112 §9.3.1, is to send an idempotent request again,
		// once, on a new connection, when nothing came back on the
		// old one. A body already taken from the client cannot be sent
		// again.
		if !sent && attempt == 0 && oc.reused && oc.nread == 0 && retriable && !isTimeout(err) {
			s.logger().Debug("proxy: pooled origin connection closed, retrying on a new one", "target", key, "err", err)
			continue
		}
		s.logger().Info("proxy: http forward failed", "client", c.RemoteAddr(), "target", key, "err", err)
		s.httpError(c, dialStatus(err), fmt.Errorf("origin %s: %w", key, err))
		return false
	}
}

// idempotent reports whether a request of this method may be sent again,
// RFC 9110 §9.2.2.
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// max1xx bounds the interim responses the proxy reads before the final
// one; an origin sending them without end is cut off.
const max1xx = 8

// continueTimeout is how long a request body that expects 100-continue
// waits for the origin to say 100 (or anything) before it is sent
// anyway, as net/http's DefaultTransport and curl wait (RFC 9110
// §10.1.1: an origin of HTTP/1.0 never says it).
const continueTimeout = time.Second

// uploadGrace is how long a request body that is still being written
// when its response has been relayed whole may take to finish before it
// is cut off (and the connection closed), as net/http's Transport waits
// before it reuses a connection (50 ms).
const uploadGrace = 50 * time.Millisecond

// exchange is one request and its response on one origin connection.
type exchange struct {
	s         *Server
	oc        *originConn
	req       *http.Request
	body      *clientBody
	client    net.Conn
	clientBuf *bufio.Reader // the client's connection's reader, under body
	down      *idleConn     // the client's connection, for responses
	client10  bool
	// keepClient is false when the client's connection cannot carry
	// another request (the response was delimited by the close).
	keepClient bool
}

// run writes the request, reads the response and relays it, and gives
// the connection back to the pool or closes it. An error before anything
// was sent to the client is returned for the caller to answer (sent is
// false then); once the response head went out, a failure ends the
// client's connection (nil error, keepClient false).
func (x *exchange) run(poolOn bool) (sent bool, err error) {
	oc, req := x.oc, x.req
	pool := x.s.originPool()
	oc.nread = 0
	if err := writeRequestHead(oc.bw, req, !poolOn); err != nil {
		pool.drop(oc)
		return false, err
	}
	var up *upload
	if x.body.eof {
		if err := oc.bw.Flush(); err != nil {
			pool.drop(oc)
			return false, err
		}
	} else {
		up = startUpload(oc, req, x.body, x.clientBuf, hasContinue(req.Header))
	}
	// finish ends the upload: at once (the client's read cut short and
	// the origin's write failed) unless it is done or, after a whole
	// response, about to be (the origin may answer as soon as it has
	// read the body, before the write of it returns here). It reports
	// whether the whole request went out.
	finish := func(grace bool) bool {
		if up == nil {
			return true
		}
		var late <-chan time.Time
		if grace {
			t := time.NewTimer(uploadGrace)
			defer t.Stop()
			late = t.C
		}
		select {
		case err := <-up.done:
			return err == nil
		case <-late:
		}
		up.decide(false)
		x.body.stop(x.client)
		oc.SetWriteDeadline(time.Unix(1, 0))
		<-up.done
		return false
	}
	resp, err := x.readResponse(up)
	if err != nil {
		finish(false)
		pool.drop(oc)
		if e := up.clientBroke(); e != nil {
			err = e // why the origin connection was closed under the response
		}
		return false, err
	}
	if up != nil {
		up.decide(false) // a final answer came before 100: the body is not wanted
	}
	complete, err := x.relay(resp)
	if !finish(complete && err == nil) || !complete || resp.Close || !poolOn {
		pool.drop(oc)
	} else {
		pool.put(oc)
	}
	if err != nil {
		x.keepClient = false
	}
	return true, nil
}

// readResponse reads the final response, relaying interim ones (1xx) to
// an HTTP/1.1 client; 100 also lets the body go.
func (x *exchange) readResponse(up *upload) (*http.Response, error) {
	oc := x.oc
	for range max1xx {
		oc.limit.reset()
		resp, err := http.ReadResponse(oc.br, x.req)
		oc.limit.off()
		if err != nil {
			return nil, fmt.Errorf("reading the response: %w", err)
		}
		if resp.StatusCode >= 200 {
			return resp, nil
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// The proxy forwards no Upgrade: 101 answers nothing it sent.
			return nil, errors.New("origin switched protocols (101) unasked")
		}
		if resp.StatusCode == http.StatusContinue && up != nil {
			up.decide(true)
		}
		if !x.client10 {
			if err := writeInterim(x.down, resp); err != nil {
				return nil, err
			}
		}
	}
	return nil, fmt.Errorf("more than %d interim (1xx) responses", max1xx)
}

// writeInterim sends a 1xx response on to the client, its hop-by-hop
// fields removed.
func writeInterim(w io.Writer, resp *http.Response) error {
	removeHopHeaders(resp.Header)
	var b strings.Builder
	writeStatusLine(&b, resp)
	writeFields(&b, resp.Header, false)
	b.WriteString("\r\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// relay sends the final response to the client and reports whether it
// was read whole from the origin (so that the connection may carry
// another request). An error is the client's or the origin's failure
// after the head may have gone out.
func (x *exchange) relay(resp *http.Response) (complete bool, err error) {
	req := x.req
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	bodyless := req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	// The origin's own framing: a body that ends at the close leaves
	// nothing to reuse (net/http says Close for it already).
	if !bodyless && resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 {
		resp.Close = true
	}
	originClose := resp.Close
	// The proxy's own version goes to the client (RFC 9110 §6.2,
	// writeStatusLine): an HTTP/1.0 origin's response is framed by the
	// proxy's rules below.
	keepAlive := !x.req.Close
	if x.client10 && len(resp.TransferEncoding) > 0 {
		resp.TransferEncoding = nil
		resp.ContentLength = -1
	}
	if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 {
		// The close delimits the body (and writeResponse says
		// "Connection: close", for a bodiless response too, as
		// Response.Write does for any HTTP/1.1 response of unknown
		// length).
		keepAlive = false
	}
	if keepAlive && x.client10 {
		resp.Header["Connection"] = keepAliveValue
	}
	x.keepClient = keepAlive
	// The head goes in pieces (four per header field) and the chunked
	// framing apart from the data: written straight to the client that
	// was a system call each. respWriter gathers them with the body and
	// sends what it holds once the next read of the origin would wait
	// (nothing waits in it while the origin is waited for: a streamed
	// body streams on).
	rw := newRespWriter(x.down, x.oc, resp.ContentLength)
	defer rw.release()
	ob := &originBody{ReadCloser: resp.Body, rw: rw, eof: resp.Body == http.NoBody}
	err = writeResponse(rw, resp, req.Method, !keepAlive, ob)
	if err == nil {
		err = rw.flush()
	}
	resp.Close = originClose
	return err == nil && ob.eof, err
}

// writeRequestHead writes req's head toward the origin in origin-form
// (RFC 9112 §3.2.1) with the Host of its absolute URI (§3.2.2), its
// fields but the hop-by-hop ones (removed before) and its framing:
// Content-Length, or chunked with the trailer fields it declared. close
// asks the origin to close after the response.
func writeRequestHead(w *bufio.Writer, req *http.Request, close bool) error {
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(req.URL.Host)
	w.WriteString("\r\n")
	switch {
	case req.ContentLength > 0:
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(req.ContentLength, 10))
		w.WriteString("\r\n")
	case req.ContentLength < 0:
		w.WriteString("Transfer-Encoding: chunked\r\n")
		if len(req.Trailer) > 0 {
			names := make([]string, 0, len(req.Trailer))
			for name := range req.Trailer {
				names = append(names, name)
			}
			sort.Strings(names)
			w.WriteString("Trailer: ")
			w.WriteString(strings.Join(names, ", "))
			w.WriteString("\r\n")
		}
	case req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch || req.Header["Content-Length"] != nil:
		// Many servers want a length on these even when it is 0.
		w.WriteString("Content-Length: 0\r\n")
	}
	if close {
		w.WriteString("Connection: close\r\n")
	}
	writeFields(w, req.Header, true)
	_, err := w.WriteString("\r\n")
	return err
}

// keepAliveValue is the Connection field of a response kept alive for
// an HTTP/1.0 client.
var keepAliveValue = []string{"keep-alive"}

// hasContinue reports whether h expects 100-continue, RFC 9110 §10.1.1.
func hasContinue(h http.Header) bool {
	for _, v := range h.Values("Expect") {
		if strings.EqualFold(strings.TrimSpace(v), "100-continue") {
			return true
		}
	}
	return false
}

// upload streams a request body from the client to the origin on its
// own goroutine, owned by the exchange, which always waits for done.
type upload struct {
	done chan error
	// go is told once whether to send a body that expects 100-continue.
	goOn chan bool
	once sync.Once
	// clientErr is set before the origin connection is closed under
	// the response because the client's body broke off.
	clientErr atomic.Pointer[clientBodyError]
}

// clientBroke is the client's failure that ended the upload, if any.
func (u *upload) clientBroke() error {
	if u == nil {
		return nil
	}
	if e := u.clientErr.Load(); e != nil {
		return e
	}
	return nil
}

func (u *upload) decide(send bool) {
	u.once.Do(func() { u.goOn <- send })
}

// startUpload starts streaming body after the head that is in oc.bw:
// chunked when the client sent it so (and then with the trailer fields
// the client sent after it), else exactly ContentLength bytes. With
// expect it first sends the head alone and waits for 100 (decide) or
// continueTimeout.
func startUpload(oc *originConn, req *http.Request, body *clientBody, client *bufio.Reader, expect bool) *upload {
	u := &upload{done: make(chan error, 1), goOn: make(chan bool, 1)}
	go func() { u.done <- u.run(oc, req, body, client, expect) }()
	return u
}

var errBodyNotWanted = errors.New("the origin answered before 100-continue: body not sent")

// clientBodyError is a request body that could not be read from the
// client.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string {
	return "reading the request body from the client: " + e.err.Error()
}
func (e *clientBodyError) Unwrap() error { return e.err }

func (u *upload) run(oc *originConn, req *http.Request, body *clientBody, client *bufio.Reader, expect bool) error {
	w := oc.bw
	if expect {
		if err := w.Flush(); err != nil {
			return err
		}
		t := time.NewTimer(continueTimeout)
		select {
		case send := <-u.goOn:
			t.Stop()
			if !send {
				return errBodyNotWanted
			}
		case <-t.C:
			u.decide(true) // later decisions are moot
		}
	}
	chunked := req.ContentLength < 0
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	for {
		if client.Buffered() == 0 {
			// The next read may wait for the client: what is held goes
			// first (the head with a body that was in its buffer).
			if err := w.Flush(); err != nil {
				return err
			}
		}
		n, rerr := body.Read(*buf)
		if n > 0 {
			if chunked {
				w.WriteString(strconv.FormatInt(int64(n), 16))
				w.WriteString("\r\n")
			}
			w.Write((*buf)[:n])
			if chunked {
				w.WriteString("\r\n")
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// The client's body broke off (it closed, or sent a bad
			// chunk): the origin would wait for the rest, and the
			// response with it. Closing the origin connection ends
			// that wait.
			e := &clientBodyError{rerr}
			u.clientErr.Store(e)
			oc.Conn.Close()
			return e
		}
	}
	if chunked {
		w.WriteString("0\r\n")
		if err := req.Trailer.Write(w); err != nil {
			return err
		}
		w.WriteString("\r\n")
	}
	return w.Flush()
}

// clientBody is a forwarded request's body, read from the client by the
// request's upload goroutine. stop ends that: once it returns, no read
// reaches the client's connection.
type clientBody struct {
	mu      sync.Mutex
	r       io.ReadCloser
	eof     bool // the body was read to its end
	stopped bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return 0, net.ErrClosed
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// stop forbids further reads and reports whether the body was read to
// its end, so that the client's next request starts where it should. A
// read in progress on c is cut short by an expired read deadline (the
// connection is not kept then).
func (b *clientBody) stop(c net.Conn) (complete bool) {
	if !b.mu.TryLock() {
		c.SetReadDeadline(time.Unix(1, 0))
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	b.stopped = true
	return b.eof
}

// respWriter gathers a forwarded response on its way to the client:
// the head, the chunk framing and the body, in one buffer that is sent
// when it is full or when the next read of the origin would wait. On a
// page of 50 objects (table 11 of docs/BENCHMARKS.md) a response had
// gone out in at least three writes, each a wake-up of the client: the
// head alone, the few KiB of body that net/http's reader held behind
// the head, then the rest; gathered, most objects go out in one or two.
//
// A body of known length is read straight into the buffer (ReadFrom);
// one of more than fits a small buffer takes a bulkBufSize one (as the
// relay does once a read fills its small one), so that a download
// crosses to the client in large pieces.
type respWriter struct {
	w      io.Writer
	origin interface{ readable() bool } // what the response is read from
	buf    *[]byte
	bulk   bool
	n      int // bytes held in buf
	// copying is set while ReadFrom runs: it decides before each of its
	// reads itself, and a flush inside its read would move the buffer
	// under it.
	copying bool
}

func newRespWriter(w io.Writer, origin interface{ readable() bool }, contentLength int64) *respWriter {
	rw := &respWriter{w: w, origin: origin}
	if contentLength > copyBufSize-maxGatheredHead {
		rw.buf, rw.bulk = bulkBufs.Get().(*[]byte), true
	} else {
		rw.buf = copyBufs.Get().(*[]byte)
	}
	return rw
}

// maxGatheredHead is the room for a response head that decides whether
// a body of known length fits the small buffer with it.
const maxGatheredHead = 4 << 10

func (rw *respWriter) release() {
	if rw.bulk {
		bulkBufs.Put(rw.buf)
	} else {
		copyBufs.Put(rw.buf)
	}
	rw.buf = nil
}

// WriteString is Write for a string: what the head writers write.
func (rw *respWriter) WriteString(s string) (int, error) {
	b := *rw.buf
	if rw.n+len(s) > len(b) {
		if err := rw.flush(); err != nil {
			return 0, err
		}
		if len(s) > len(b) {
			return rw.w.Write([]byte(s))
		}
	}
	rw.n += copy(b[rw.n:], s)
	return len(s), nil
}

// Write holds p, sending what is held first when p does not fit; a p
// larger than the whole buffer goes through without being copied.
func (rw *respWriter) Write(p []byte) (int, error) {
	b := *rw.buf
	if rw.n+len(p) > len(b) {
		if err := rw.flush(); err != nil {
			return 0, err
		}
		if len(p) > len(b) {
			return rw.w.Write(p)
		}
	}
	rw.n += copy(b[rw.n:], p)
	return len(p), nil
}

// flush sends what is held.
func (rw *respWriter) flush() error {
	if rw.n == 0 {
		return nil
	}
	_, err := rw.w.Write((*rw.buf)[:rw.n])
	rw.n = 0
	return err
}

// beforeRead sends what is held unless the origin's bytes are already
// queued (readable), so that a read that waits never holds data back.
func (rw *respWriter) beforeRead() error {
	if rw.n > 0 && !rw.origin.readable() {
		return rw.flush()
	}
	return nil
}

// ReadFrom is how Response.Write copies a body of known or
// close-delimited length: into the buffer behind what it holds, so
// that the head and the first piece of the body go together.
func (rw *respWriter) ReadFrom(r io.Reader) (int64, error) {
	rw.copying = true
	defer func() { rw.copying = false }()
	var total int64
	for {
		b := *rw.buf
		if rw.n == len(b) {
			if err := rw.flush(); err != nil {
				return total, err
			}
		}
		if err := rw.beforeRead(); err != nil {
			return total, err
		}
		n, err := r.Read(b[rw.n:])
		rw.n += n
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// originBody is the response body as Response.Write reads it: each
// read first lets rw send what it holds if the read may wait (see
// respWriter.beforeRead); eof records that the body was read to its end.
type originBody struct {
	io.ReadCloser
	rw  *respWriter
	eof bool
}

func (b *originBody) Read(p []byte) (int, error) {
	if !b.rw.copying {
		if err := b.rw.beforeRead(); err != nil {
			return 0, err
		}
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}
