package mbim

import (
	"context"
	"io"

	"github.com/mhistack/mhistack/internal/ctrlclient"
	"github.com/mhistack/mhistack/internal/ctrlstream"
	"github.com/mhistack/mhistack/mhi"
)

// StreamTransport adapts a byte stream (a socket, a pipe, a PTY,
// /dev/wwan0mbim0) to Transport. Send writes each fragment with one
// Write; Recv returns what one Read returned (at most
// MaxControlTransfer bytes).
type StreamTransport = ctrlstream.Stream

// NewStreamTransport wraps rw; Close closes it.
func NewStreamTransport(rw io.ReadWriteCloser) *StreamTransport {
	return ctrlstream.New(rw, MaxControlTransfer)
}

// The MHI control port is the transport on real and emulated modems.
var _ Transport = (*mhi.ControlPort)(nil)

// DialMHI opens the modem's "MBIM" control channel pair (12/13), starts a
// Client on it, opens the function, and ties the client to the
// controller's SYS_ERR recovery (Client.NotifyReset through
// mhi.ControlOptions.OnReset), so that a Session re-opens and re-connects
// after a modem crash. Close the client to release the channels.
func DialMHI(ctx context.Context, c *mhi.Controller, opts Options) (*Client, error) {
	return ctrlclient.Dial(func(onReset func()) (Transport, error) {
		return c.OpenControl(ctx, "MBIM", mhi.ControlOptions{OnReset: onReset})
	}, func(t Transport) *Client { return NewClient(t, opts) }, (*Client).NotifyReset,
		func(cl *Client) error { return cl.Open(ctx) })
}
