package ctrlproxy

import (
	"bufio"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a line protocol: every line is answered from a request
// goroutine after release is closed.
type echo struct {
	*Peer
	release chan struct{}
}

// newEcho's Left work sends the client on left and then waits for hold.
func newEcho(t *testing.T, maxClients, maxInFlight int, left chan<- *echo, hold <-chan struct{}) (*Server[*echo], chan struct{}) {
	release := make(chan struct{})
	var s *Server[*echo]
	s = New(Config[*echo]{Proto: "test", MaxClients: maxClients, MaxInFlight: maxInFlight,
		NewClient: func(p *Peer) *echo { return &echo{Peer: p, release: release} },
		Serve: func(e *echo) {
			sc := bufio.NewScanner(e.Conn)
			for sc.Scan() {
				line := sc.Text()
				if !e.Go(func() {
					<-e.release
					e.Put([]byte(line + "\n"))
				}) {
					e.Put([]byte("busy\n"))
				}
			}
		},
		Left: func(e *echo) func() {
			if s.ConnectedLocked(e) {
				t.Error("Left: client still in the set")
			}
			return func() { left <- e; <-hold }
		},
	})
	return s, release
}

func TestServerBoundsRequestsAndWaitsForThemBeforeLeft(t *testing.T) {
	left, hold := make(chan *echo, 1), make(chan struct{})
	s, release := newEcho(t, 1, 1, left, hold)
	a, b := net.Pipe()
	s.ServeConn(a)
	// A second client is refused: MaxClients is 1.
	c, d := net.Pipe()
	s.ServeConn(c)
	if _, err := d.Read(make([]byte, 1)); err == nil {
		t.Error("second client: connection not closed")
	}
	if s.Clients() != 1 {
		t.Errorf("Clients() = %d, want 1", s.Clients())
	}
	r := bufio.NewReader(b)
	go b.Write([]byte("one\ntwo\n"))
	// "one" holds the only request slot: "two" is answered busy.
	if l, err := r.ReadString('\n'); err != nil || l != "busy\n" {
		t.Fatalf("got %q, %v; want busy", l, err)
	}
	close(release)
	if l, err := r.ReadString('\n'); err != nil || l != "one\n" {
		t.Fatalf("got %q, %v; want one", l, err)
	}
	b.Close()
	<-left
	// Its Left work runs: the client still counts (a caller that waits
	// for Clients() == 0 waits for that work too).
	if n := s.Clients(); n != 1 {
		t.Errorf("Clients() = %d while the client's Left work runs, want 1", n)
	}
	close(hold)
	for deadline := time.Now().Add(10 * time.Second); s.Clients() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Clients() = %d after the client's Left work ended", s.Clients())
		}
	}
	detached := 0
	if closed, err := s.Close(func() { detached++ }); !closed || err != nil {
		t.Errorf("Close = %v, %v", closed, err)
	}
	if closed, _ := s.Close(func() { detached++ }); closed || detached != 1 {
		t.Errorf("second Close = %v, detach ran %d times", closed, detached)
	}
}

func TestServerCloseDisconnectsClients(t *testing.T) {
	left, hold := make(chan *echo, 1), make(chan struct{})
	close(hold)
	s, release := newEcho(t, 0, 0, left, hold)
	defer close(release)
	a, b := net.Pipe()
	defer b.Close()
	s.ServeConn(a)
	if _, err := s.Close(func() {}); err != nil {
		t.Fatal(err)
	}
	<-left
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Error("client connection not closed by Close")
	}
	// After Close, new connections are closed at once.
	c, d := net.Pipe()
	s.ServeConn(c)
	if _, err := d.Read(make([]byte, 1)); err == nil {
		t.Error("connection after Close not closed")
	}
}
