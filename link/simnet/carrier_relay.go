package simnet

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// relayBufSize is the chunk a forwarded TCP flow moves per read and
// write: a bulk stream's host socket gets one write (one syscall) per
// 256 KiB instead of per segment or per 32 KiB. io.CopyBuffer would not
// use such a buffer here: *net.TCPConn implements ReaderFrom and
// WriterTo, whose generic paths copy through io.Copy's own 32 KiB.
const relayBufSize = 256 << 10

// relayBufs holds the flows' copy chunks (*[]byte of relayBufSize). A
// direction of a flow holds one only while it has data to move: it takes
// one when its source is readable and puts it back before it waits for
// the source again, so an idle flow holds none (it held two, 512 KiB,
// when a direction kept its chunk for the flow's life) and the chunks of
// many flows are the few that are busy.
var relayBufs = sync.Pool{New: func() any {
	b := make([]byte, relayBufSize)
	return &b
}}

// relayChunks is how a network's flows take chunks from relayBufs,
// counting the ones they hold (CarrierStats.RelayChunks).
type relayChunks struct{ held atomic.Int64 }

func (c *relayChunks) get() *[]byte {
	c.held.Add(1)
	return relayBufs.Get().(*[]byte)
}

func (c *relayChunks) put(bp *[]byte) {
	c.held.Add(-1)
	relayBufs.Put(bp)
}

// errRelayEnd is a copy that ended because the endpoint failed (reset,
// aborted), not at the peer's FIN.
var errRelayEnd = errors.New("simnet: carrier relay: endpoint failed")

// copyToHost copies what the host's stack sends on the carrier's
// endpoint ep to hc, reading ep directly with one waiter entry for the
// flow's life (gonet registers one per blocking read). It returns nil at
// the stream's end (FIN), an error otherwise.
func copyToHost(chunks *relayChunks, hc net.Conn, ep tcpip.Endpoint, wq *waiter.Queue) error {
	var bp *[]byte
	defer func() {
		if bp != nil {
			chunks.put(bp)
		}
	}()
	entry, ready := waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	// One writer for the flow: as an io.Writer it escapes, so a new one
	// per read would be an allocation per read.
	w := new(tcpip.SliceWriter)
	for {
		if bp == nil {
			bp = chunks.get()
		}
		buf := *bp
		*w = buf
		res, err := ep.Read(w, tcpip.ReadOptions{})
		switch err.(type) {
		case nil:
			// Receive-buffer moderation, as gonet's Read does it: the
			// window grows with what the application drains per RTT.
			ep.ModerateRecvBuf(res.Count)
			if _, err := hc.Write(buf[:res.Count]); err != nil {
				return err
			}
		case *tcpip.ErrWouldBlock:
			// Nothing to move: the chunk goes back while we wait.
			chunks.put(bp)
			bp = nil
			<-ready
		case *tcpip.ErrClosedForReceive:
			return nil
		default:
			return errRelayEnd
		}
	}
}

// copyFromHost copies what hc receives to the carrier's endpoint ep, in
// reads of up to relayBufSize, waiting for send-buffer room on one waiter
// entry. It returns nil at hc's EOF, an error otherwise.
func copyFromHost(chunks *relayChunks, ep tcpip.Endpoint, wq *waiter.Queue, hc net.Conn) error {
	src := newHostReader(chunks, hc)
	defer src.release()
	entry, room := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	var r bytes.Reader
	for {
		buf, rerr := src.read()
		for off := 0; off < len(buf); {
			r.Reset(buf[off:])
			k, err := ep.Write(&r, tcpip.WriteOptions{})
			off += int(k)
			switch err.(type) {
			case nil:
			case *tcpip.ErrWouldBlock:
				<-room
			default:
				return errRelayEnd
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// hostReader reads a host socket into a pooled chunk that it takes only
// once the socket is readable: a blocking Read needs its buffer before
// the data arrives, so on a socket it reads through the descriptor
// (syscall.RawConn), taking the chunk when a read can return data and
// putting it back when the socket would block. A net.Conn without a
// descriptor (a DialHost of a test) is read with a blocking Read into a
// chunk the flow keeps.
type hostReader struct {
	chunks *relayChunks
	hc     net.Conn
	raw    syscall.RawConn // nil: blocking reads into a kept chunk
	bp     *[]byte         // the chunk, while held
	n      int             // result of the last raw read
	err    error
	read1  func(fd uintptr) bool // rawRead as a func value, made once
}

func newHostReader(chunks *relayChunks, hc net.Conn) *hostReader {
	h := &hostReader{chunks: chunks, hc: hc}
	if sc, ok := hc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			h.raw = raw
			h.read1 = h.rawRead
		}
	}
	return h
}

// read returns the next data of the socket (valid until the next call)
// and io.EOF at its end or the error that ended it.
func (h *hostReader) read() ([]byte, error) {
	if h.raw == nil {
		if h.bp == nil {
			h.bp = h.chunks.get()
		}
		n, err := h.hc.Read(*h.bp)
		return (*h.bp)[:n], err
	}
	h.n, h.err = 0, nil
	if err := h.raw.Read(h.read1); err != nil {
		// The connection was closed (a reset of the flow) or failed.
		return nil, err
	}
	if h.err != nil {
		return nil, h.err
	}
	if h.n == 0 {
		return nil, io.EOF
	}
	return (*h.bp)[:h.n], nil
}

// rawRead is the RawConn.Read callback: one read(2) into the chunk,
// taken for it and put back if the socket has nothing (false: the
// runtime's poller waits for readability and calls again).
func (h *hostReader) rawRead(fd uintptr) bool {
	if h.bp == nil {
		h.bp = h.chunks.get()
	}
	for {
		n, err := syscall.Read(int(fd), *h.bp)
		switch err {
		case nil:
			h.n = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			h.chunks.put(h.bp)
			h.bp = nil
			return false
		default:
			h.err = err
			return true
		}
	}
}

// release puts back the chunk the reader holds.
func (h *hostReader) release() {
	if h.bp != nil {
		h.chunks.put(h.bp)
		h.bp = nil
	}
}
