package qemuharness

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// BlobServer serves a pseudo-random blob over HTTP on the host's loopback,
// where the emulated modem's carrier network leads 198.18.0.1: GET /blob
// downloads it (GET /blob?rate=N at N bytes per second); POST /upload answers with the body's SHA-256 (hex and a
// newline), which the guest compares with its own.
type BlobServer struct {
	l        net.Listener
	srv      *http.Server
	Blob     []byte
	Sum      string       // SHA-256 of Blob, hex
	Served   atomic.Int64 // bytes of /blob written to connections so far
	Received atomic.Int64 // bytes of /upload bodies read
	Uploads  atomic.Int64 // /upload bodies read to the end
}

// NewBlobServer listens on 127.0.0.1 (a free port) and serves a blob of
// size bytes.
func NewBlobServer(size int) (*BlobServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &BlobServer{l: l, Blob: make([]byte, size)}
	x := uint32(0x6d686973)
	for i := range b.Blob {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.Blob[i] = byte(x)
	}
	b.Sum = fmt.Sprintf("%x", sha256.Sum256(b.Blob))
	mux := http.NewServeMux()
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		// ?rate=BYTES_PER_SECOND paces the download, so that a guest
		// polling its progress sees it in flight.
		rate, _ := strconv.Atoi(r.URL.Query().Get("rate"))
		w.Header().Set("Content-Length", strconv.Itoa(len(b.Blob)))
		// In pieces, so that Served follows the transfer (a harness
		// injects faults mid-transfer by it).
		start := time.Now()
		for off := 0; off < len(b.Blob); off += 64 << 10 {
			if rate > 0 {
				if d := time.Duration(float64(off) / float64(rate) * float64(time.Second)); d > time.Since(start) {
					time.Sleep(d - time.Since(start))
				}
			}
			n, err := w.Write(b.Blob[off:min(off+64<<10, len(b.Blob))])
			b.Served.Add(int64(n))
			if err != nil {
				return
			}
			if f, ok := w.(http.Flusher); ok && rate > 0 {
				f.Flush()
			}
		}
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		b.Received.Add(n)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.Uploads.Add(1)
		fmt.Fprintf(w, "%x\n", h.Sum(nil))
	})
	b.srv = &http.Server{Handler: mux}
	go b.srv.Serve(l)
	return b, nil
}

// Port is the TCP port on 127.0.0.1.
func (b *BlobServer) Port() int { return b.l.Addr().(*net.TCPAddr).Port }

// Close stops the server.
func (b *BlobServer) Close() { b.srv.Close() }
