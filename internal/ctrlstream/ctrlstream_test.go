package ctrlstream

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
)

func TestStreamSendRecvClose(t *testing.T) {
	a, b := net.Pipe()
	s := New(a, 4)
	go func() {
		buf := make([]byte, 8)
		n, _ := b.Read(buf)
		b.Write(buf[:n])
		b.Close()
	}()
	if err := s.Send(context.Background(), []byte("abc")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Recv(context.Background())
	if err != nil || string(got) != "abc" {
		t.Fatalf("Recv = %q, %v", got, err)
	}
	if _, err := s.Recv(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after the peer closed = %v, want EOF", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Send(ctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a cancelled context = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
