package sim

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// relayBufSize is the chunk a forwarded TCP flow moves per read and
// write: a bulk stream's host socket gets one write (one syscall) per
// 256 KiB instead of per segment or per 32 KiB. io.CopyBuffer would not
// use such a buffer here: *net.TCPConn implements ReaderFrom and
// WriterTo, whose generic paths copy through io.Copy's own 32 KiB.
const relayBufSize = 256 << 10

// relayBufs holds the flows' copy buffers (*[]byte of relayBufSize), so
// that short flows do not allocate 512 KiB each.
var relayBufs = sync.Pool{New: func() any {
	b := make([]byte, relayBufSize)
	return &b
}}

// errRelayEnd is a copy that ended because the endpoint failed (reset,
// aborted), not at the peer's FIN.
var errRelayEnd = errors.New("sim: carrier relay: endpoint failed")

// copyToHost copies what the host's stack sends on the carrier's
// endpoint ep to hc, reading ep directly with one waiter entry for the
// flow's life (gonet registers one per blocking read). It returns nil at
// the stream's end (FIN), an error otherwise.
func copyToHost(hc net.Conn, ep tcpip.Endpoint, wq *waiter.Queue) error {
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	entry, ready := waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	// One writer for the flow: as an io.Writer it escapes, so a new one
	// per read would be an allocation per read.
	w := new(tcpip.SliceWriter)
	for {
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
func copyFromHost(ep tcpip.Endpoint, wq *waiter.Queue, hc net.Conn) error {
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	entry, room := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	var r bytes.Reader
	for {
		n, rerr := hc.Read(buf)
		for off := 0; off < n; {
			r.Reset(buf[off:n])
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
