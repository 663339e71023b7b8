// Package ctrlstream is the transport of a modem control client (MBIM,
// QMI): the interface an *mhi.ControlPort satisfies, and its adapter for
// a byte stream (a socket, a pipe, a PTY, a character device).
package ctrlstream

import (
	"context"
	"io"
	"sync"
)

// Transport carries a control protocol's messages: Send writes one
// message (or fragment); Recv returns the next chunk of the modem's
// output, which clients read as a byte stream.
type Transport interface {
	Send(ctx context.Context, msg []byte) error
	Recv(ctx context.Context) ([]byte, error)
	Close() error
}

// Stream adapts a byte stream to Transport. Send writes each message with
// one Write; Recv returns what one Read returned.
type Stream struct {
	rw  io.ReadWriteCloser
	wmu sync.Mutex
	buf []byte
}

// New wraps rw, reading at most bufSize bytes at a time; Close closes rw.
func New(rw io.ReadWriteCloser, bufSize int) *Stream {
	return &Stream{rw: rw, buf: make([]byte, bufSize)}
}

// Send implements Transport. ctx is not consulted once the write started:
// a stream cannot take back half a message.
func (s *Stream) Send(ctx context.Context, msg []byte) error {
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
func (s *Stream) Recv(ctx context.Context) ([]byte, error) {
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
func (s *Stream) Close() error { return s.rw.Close() }
