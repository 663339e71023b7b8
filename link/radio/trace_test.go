package radio

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseMahimahiTrace(t *testing.T) {
	for _, c := range []struct {
		in     string
		period time.Duration
		mean   int64
	}{
		// mm-link(1): a file holding "1" is a 12 Mbit/s link.
		{"1\n", time.Millisecond, 12e6},
		// Two chances in each of 4 ms: 24 Mbit/s.
		{"1\n1\n2\n2\n3\n3\n4\n4\n", 4 * time.Millisecond, 24e6},
		// One chance every other millisecond: 6 Mbit/s.
		{"2\n4\n6\n8\n", 8 * time.Millisecond, 6e6},
	} {
		tr, err := ParseTrace([]byte(c.in))
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if tr.Period() != c.period || tr.MeanRate() != c.mean {
			t.Errorf("%q: period %v mean %d, want %v %d", c.in, tr.Period(), tr.MeanRate(), c.period, c.mean)
		}
	}
}

func TestParseCSVTrace(t *testing.T) {
	tr, err := ParseTrace([]byte("# a comment\n0,1000\n500, 3000\n1000,0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Period() != time.Second || tr.MeanRate() != 2e6 || tr.RateAt(700*time.Millisecond) != 3e6 || tr.RateAt(1200*time.Millisecond) != 1e6 {
		t.Errorf("period %v mean %d", tr.Period(), tr.MeanRate())
	}
	// A packet crossing the switch: 1000 bytes from 496 ms take 4 ms
	// at 1 Mbit/s (500 bytes) and then 500 bytes at 3 Mbit/s (1.33 ms).
	if got := tr.finish(496*time.Millisecond, 8000); got < 501333*time.Microsecond || got > 501334*time.Microsecond {
		t.Errorf("finish %v", got)
	}
}

func TestParseTraceRefusesBadInput(t *testing.T) {
	for _, in := range []string{"", "# only\n", "0,1000\n", "5,1000\n10,0\n", "0,1000\n0,1\n", "0,-1\n9,0\n",
		"0,0\n1000,0\n", "3\n2\n", "x\n", "-1\n", "0,1e400\n10,0\n", "99999999999999\n"} {
		if _, err := ParseTrace([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestLoadPresetOrFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "down.csv"), []byte("0,5000\n1000,5000\n"), 0o644)
	f := filepath.Join(dir, "my.json")
	os.WriteFile(f, []byte(`{"base":"lte","seed":9,"down":{"trace":"down.csv","codel":true},
		"up":{"burst":{"p":0.01,"r":0.5,"loss_bad":1}},"handover":{"every_ms":5000,"gap_ms":40,"drop_queue":true}}`), 0o644)
	c, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "my.json" || c.Seed != 9 || c.Down.Trace.MeanRate() != 5e6 || !c.Down.Queue.CoDel || c.Up.Burst.P != 0.01 ||
		c.Up.Rate != 6e6 || c.Handover.Every != 5*time.Second || !c.Handover.DropQueue || c.RRC.Promotion != 760*time.Millisecond {
		t.Errorf("loaded %+v", c)
	}
	if _, err := Load("nr-sa"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"no-such-preset", filepath.Join(dir, "missing.json")} {
		if _, err := Load(bad); err == nil {
			t.Errorf("%s loaded", bad)
		}
	}
	if _, err := ParseConfig([]byte(`{"down":{"rate_kbps":1000}}`), nil); err == nil {
		t.Error("a rate without a queue accepted")
	}
	if _, err := ParseConfig([]byte(`{"down":{"speed":1}}`), nil); err == nil {
		t.Error("unknown field accepted")
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add([]byte("time_ms,rate_kbps\n0,10000\n1000,2000\n2000,0\n"))
	f.Add([]byte("1\n1\n2\n5\n5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := ParseTrace(b)
		if err != nil {
			return
		}
		// Any accepted trace lets a 64 KiB packet through in bounded time.
		start := time.Duration(len(b)) * time.Millisecond
		if end := tr.finish(start, 65535*8); end <= start || end-start > 44*tr.Period()+tr.Period() {
			t.Fatalf("64 KiB from %v done at %v (period %v)", start, end, tr.Period())
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"base":"nr-sa","down":{"delay_ms":5,"jitter_ms":1,"queue_packets":10}}`))
	f.Add([]byte(`{"up":{"rate_kbps":100,"queue_bytes":3000,"trace":"x"},"rrc":{"idle_ms":1,"promotion_ms":2}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b, func(string) ([]byte, error) { return []byte("0,1000\n100,0\n"), nil })
		if err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("ParseConfig returned an invalid config: %v", err)
			}
		}
	})
}
