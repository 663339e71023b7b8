package reliability

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// size is a byte count flag that takes KiB, MiB and GiB suffixes.
type size int64

func (s *size) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *size) Set(v string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSuffix(v, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want a byte count such as 64MiB or 1GiB")
	}
	*s = size(n * mult)
	return nil
}

// flagInt is an int flag whose default is smaller under the race
// detector.
func flagInt(name string, def, raceDef int, usage string) *int {
	if underRace {
		def = raceDef
	}
	return flag.Int(name, def, usage)
}

func sizeFlag(name string, def int64, usage string) *size {
	s := size(def)
	flag.Var(&s, name, usage)
	return &s
}

// netpollReady makes the Go runtime open its network poller's
// descriptors (epoll, eventfd), which it does on first use and keeps:
// a test that counts descriptors before its first network call would
// otherwise see two appear (a storm run on its own failed that way).
var netpollReady sync.Once

// openFDs counts the process's open file descriptors.
func openFDs(t testing.TB) int {
	netpollReady.Do(func() {
		if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
			ln.Close()
		}
	})
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}
