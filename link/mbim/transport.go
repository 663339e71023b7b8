package mbim

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi"
)

// StreamTransport adapts a byte stream (a socket, a pipe, a PTY,
// /dev/wwan0mbim0) to Transport. Send writes each fragment with one
// Write; Recv returns what one Read returned.
type StreamTransport struct {
	rw  io.ReadWriteCloser
	wmu sync.Mutex
	buf []byte
}

// NewStreamTransport wraps rw; Close closes it.
func NewStreamTransport(rw io.ReadWriteCloser) *StreamTransport {
	return &StreamTransport{rw: rw, buf: make([]byte, MaxControlTransfer)}
}

// Send implements Transport. ctx is not consulted once the write started:
// a stream cannot take back half a message.
func (s *StreamTransport) Send(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.rw.Write(msg)
	return err
}

// Recv implements Transport. It is called by one goroutine at a time (the
// client's reader); ctx is honoured by closing the stream (Close).
func (s *StreamTransport) Recv(ctx context.Context) ([]byte, error) {
	n, err := s.rw.Read(s.buf)
	if n > 0 {
		return append([]byte(nil), s.buf[:n]...), nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return nil, err
}

// Close implements Transport.
func (s *StreamTransport) Close() error { return s.rw.Close() }

// The MHI control port is the transport on real and emulated modems.
var _ Transport = (*mhi.ControlPort)(nil)

// DialMHI opens the modem's "MBIM" control channel pair (12/13), starts a
// Client on it, opens the function, and ties the client to the
// controller's SYS_ERR recovery (Client.NotifyReset through
// mhi.ControlOptions.OnReset), so that a Session re-opens and re-connects
// after a modem crash. Close the client to release the channels.
func DialMHI(ctx context.Context, c *mhi.Controller, opts Options) (*Client, error) {
	var cl atomic.Pointer[Client]
	port, err := c.OpenControl(ctx, "MBIM", mhi.ControlOptions{OnReset: func() {
		// The reset fan-out only signals: OnReset must not block.
		if c := cl.Load(); c != nil {
			c.NotifyReset()
		}
	}})
	if err != nil {
		return nil, err
	}
	client := NewClient(port, opts)
	cl.Store(client)
	if err := client.Open(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}
