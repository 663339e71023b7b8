package proxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// bulkSource is a target whose every Read fills the buffer it is given
// until size bytes have gone: a download that is always ahead of the
// relay. Writes are discarded.
type bulkSource struct {
	size  int
	chunk int   // when not 0, the most one read returns
	reads []int // the length of every read's buffer
}

func (s *bulkSource) Read(p []byte) (int, error) {
	if s.size == 0 {
		return 0, io.EOF
	}
	s.reads = append(s.reads, len(p))
	n := min(len(p), s.size)
	if s.chunk > 0 {
		n = min(n, s.chunk)
	}
	clear(p[:n])
	s.size -= n
	return n, nil
}

func (s *bulkSource) Write(p []byte) (int, error)      { return len(p), nil }
func (s *bulkSource) Close() error                     { return nil }
func (s *bulkSource) CloseWrite() error                { return nil }
func (s *bulkSource) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s *bulkSource) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *bulkSource) SetDeadline(time.Time) error      { return nil }
func (s *bulkSource) SetReadDeadline(time.Time) error  { return nil }
func (s *bulkSource) SetWriteDeadline(time.Time) error { return nil }

// TestRelayMovesABulkDownloadInLargePieces: once a read fills the small
// buffer, the relay reads and writes in bulkBufSize pieces, so a
// download reaches the client in a quarter of the writes.
func TestRelayMovesABulkDownloadInLargePieces(t *testing.T) {
	const size = 1 << 20
	src := &bulkSource{size: size}
	writes := relayDownload(t, src)
	want := 1 + (size-copyBufSize+bulkBufSize-1)/bulkBufSize
	if writes != want {
		t.Errorf("%d bytes reached the client in %d writes, want %d (one of %d, then %d-byte ones); reads: %v",
			size, writes, want, copyBufSize, bulkBufSize, src.reads)
	}
	if len(src.reads) < 2 || src.reads[0] != copyBufSize || src.reads[1] != bulkBufSize {
		t.Errorf("read sizes %v: want %d first, then %d", src.reads, copyBufSize, bulkBufSize)
	}
}

// TestRelayKeepsTheSmallBufferForShortReads: a connection whose reads
// never fill the small buffer (interactive traffic) never takes a large
// one.
func TestRelayKeepsTheSmallBufferForShortReads(t *testing.T) {
	src := &bulkSource{size: 100 << 10, chunk: copyBufSize - 1}
	relayDownload(t, src)
	for i, n := range src.reads {
		if n != copyBufSize {
			t.Fatalf("read %d had a %d-byte buffer, want %d: reads %v", i, n, copyBufSize, src.reads)
		}
	}
}

// relayDownload relays src to a client over the host's loopback until
// src ends, checks that every byte arrived, and returns how many writes
// carried them to the client.
func relayDownload(t *testing.T, src *bulkSource) int {
	t.Helper()
	size := int64(src.size)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	counted := &writeCounter{}
	proxySide := &countedConn{sc, &counted.writes}
	client.(*net.TCPConn).CloseWrite() // the upload ends at once
	got := make(chan int64, 1)
	go func() { n, _ := io.Copy(io.Discard, client); got <- n }()
	up, down := (&Server{}).relay(proxySide, src, nil)
	if n := <-got; up != 0 || down != size || n != size {
		t.Fatalf("relay moved %d up, %d down, client read %d; want 0, %d, %d", up, down, n, size, size)
	}
	return int(counted.writes.Load())
}
