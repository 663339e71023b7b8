package firehose_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/firehose"
)

func TestEvalReadsTheExpressionsOfQdlsFiles(t *testing.T) {
	crc := func(s, n uint64) (uint32, error) { return uint32(s*1000 + n), nil }
	env := firehose.Env{NumDiskSectors: 8192, CRC32: crc}
	for expr, want := range map[string]uint64{
		"0": 0, "6": 6, "2054.": 2054, "0x10": 16,
		"NUM_DISK_SECTORS-5.": 8187, "NUM_DISK_SECTORS-1": 8191, "NUM_DISK_SECTORS-6.": 8186,
		"(4096*NUM_DISK_SECTORS)-20480.": 4096*8192 - 20480,
		"CRC32(2,4096)":                  6096, "CRC32(NUM_DISK_SECTORS-5.,4096)": 8187*1000 + 4096,
		" 1 + 2 ": 3,
	} {
		got, err := firehose.Eval(expr, env)
		if err != nil || got != want {
			t.Errorf("Eval(%q) = %d, %v; want %d", expr, got, err, want)
		}
	}
	for _, bad := range []string{"", "5-6", "NUM_DISK_SECTORS+", "CRC32(1)", "0x", "abc", "18446744073709551615+1", "((((((((((((((((((1))))))))))))))))))", "1 2"} {
		if _, err := firehose.Eval(bad, env); !errors.Is(err, firehose.ErrExpr) {
			t.Errorf("Eval(%q) = %v, want ErrExpr", bad, err)
		}
	}
	if _, err := firehose.Eval("CRC32(1,92)", firehose.Env{NumDiskSectors: 1}); err == nil {
		t.Error("CRC32 without a disk evaluated")
	}
}

func TestParseDocumentTakesLogsAndResponse(t *testing.T) {
	doc := []byte(`<?xml version="1.0" encoding="UTF-8" ?>
<data><log value="INFO: &quot;hi&quot;"/><!-- c --><response value="ACK" rawmode="true"/></data>`)
	es, err := firehose.ParseDocument(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []firehose.Element{firehose.Elem("log", "value", `INFO: "hi"`), firehose.Elem("response", "value", "ACK", "rawmode", "true")}
	if !reflect.DeepEqual(es, want) {
		t.Fatalf("got %+v", es)
	}
	for _, bad := range []string{`<data><a><b/></a></data>`, `<other/>`, `<data>`, `<data/><data/>`, `<data><a x="1" x="2"/></data>`} {
		if _, err := firehose.ParseDocument([]byte(bad)); !errors.Is(err, firehose.ErrSyntax) {
			t.Errorf("%s: %v, want ErrSyntax", bad, err)
		}
	}
}

// TestSplitterCutsStreams: two documents and raw bytes in one read, a
// document over two reads.
func TestSplitterCutsStreams(t *testing.T) {
	var s firehose.Splitter
	a := firehose.AppendDocument(nil, firehose.Elem("log", "value", "x"))
	b := firehose.AppendDocument(nil, firehose.Elem("response", "value", "ACK"))
	s.Write(append(append([]byte{}, a...), b[:10]...))
	if d, ok, _ := s.Next(); !ok || !bytes.Equal(d, a) {
		t.Fatal("first document")
	}
	if _, ok, _ := s.Next(); ok {
		t.Fatal("half a document returned")
	}
	s.Write(append(b[10:], "RAW"...))
	if d, ok, _ := s.Next(); !ok || !bytes.Equal(d, b) {
		t.Fatal("second document")
	}
	if r := s.Take(10); string(r) != "RAW" {
		t.Fatalf("raw %q", r)
	}
}

func TestRawprogramAndPatchFilesRoundTrip(t *testing.T) {
	b, _ := os.ReadFile("testdata/rawprogram0.xml")
	ps, err := firehose.ParseRawprogram(b)
	if err != nil || len(ps) != 5 {
		t.Fatalf("%d programs, %v", len(ps), err)
	}
	if ps[3].StartSector != "NUM_DISK_SECTORS-5." || ps[3].NumSectors != 5 || ps[3].Label != "BackupGPT" || ps[1].NumSectors != 0 {
		t.Errorf("parsed %+v", ps)
	}
	again, err := firehose.ParseRawprogram(firehose.AppendRawprogram(nil, ps))
	if err != nil || !reflect.DeepEqual(again, ps) {
		t.Errorf("round trip: %v", err)
	}
	b, _ = os.ReadFile("testdata/patch0.xml")
	pa, err := firehose.ParsePatches(b)
	if err != nil || len(pa) != 14 || pa[13].Value != "CRC32(NUM_DISK_SECTORS-1.,92)" || pa[13].SizeInBytes != 4 {
		t.Fatalf("%d patches, %v", len(pa), err)
	}
	again2, err := firehose.ParsePatches(firehose.AppendPatches(nil, pa))
	if err != nil || !reflect.DeepEqual(again2, pa) {
		t.Errorf("round trip: %v", err)
	}
	for _, bad := range []string{
		`<data><program SECTOR_SIZE_IN_BYTES="4095" start_sector="0"/></data>`,
		`<data><program SECTOR_SIZE_IN_BYTES="4096" physical_partition_number="900" start_sector="0"/></data>`,
		`<data><program SECTOR_SIZE_IN_BYTES="4096"/></data>`,
		`<data><patch/></data>`,
	} {
		if _, err := firehose.ParseRawprogram([]byte(bad)); !errors.Is(err, firehose.ErrSyntax) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := firehose.ParsePatches([]byte(`<patches><patch SECTOR_SIZE_IN_BYTES="512" size_in_bytes="9" start_sector="1" value="0"/></patches>`)); !errors.Is(err, firehose.ErrSyntax) {
		t.Errorf("9-byte patch: %v", err)
	}
}

func FuzzParseDocument(f *testing.F) {
	f.Add(firehose.AppendDocument(nil, firehose.Elem("response", "value", "ACK", "rawmode", "true")))
	f.Add([]byte(`<?xml version="1.0"?><data><log value="a&amp;b"/></data>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := firehose.ParseDocument(b)
		if err != nil {
			return
		}
		again, err := firehose.ParseDocument(firehose.AppendDocument(nil, es...))
		if err != nil || len(again) != len(es) {
			t.Fatalf("re-encoded %+v: %+v, %v", es, again, err)
		}
		for i := range es {
			if es[i].Name != again[i].Name || len(es[i].Attrs) != len(again[i].Attrs) {
				t.Fatalf("element %d: %+v became %+v", i, es[i], again[i])
			}
		}
	})
}

func FuzzParseRawprogram(f *testing.F) {
	b, _ := os.ReadFile("testdata/rawprogram0.xml")
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := firehose.ParseRawprogram(b)
		if err != nil {
			return
		}
		again, err := firehose.ParseRawprogram(firehose.AppendRawprogram(nil, ps))
		if err != nil || !reflect.DeepEqual(again, ps) && !(len(ps) == 0 && len(again) == 0) {
			t.Fatalf("round trip of %+v: %+v, %v", ps, again, err)
		}
	})
}

func FuzzParsePatches(f *testing.F) {
	b, _ := os.ReadFile("testdata/patch0.xml")
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := firehose.ParsePatches(b)
		if err != nil {
			return
		}
		again, err := firehose.ParsePatches(firehose.AppendPatches(nil, ps))
		if err != nil || !reflect.DeepEqual(again, ps) && !(len(ps) == 0 && len(again) == 0) {
			t.Fatalf("round trip of %+v: %+v, %v", ps, again, err)
		}
	})
}

func FuzzEval(f *testing.F) {
	for _, s := range []string{"NUM_DISK_SECTORS-5.", "CRC32(NUM_DISK_SECTORS-1.,92)", "(4096*NUM_DISK_SECTORS)-20480."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		calls := 0
		env := firehose.Env{NumDiskSectors: 1 << 20, CRC32: func(a, b uint64) (uint32, error) {
			calls++
			if calls > 100 {
				t.Fatalf("CRC32 called %d times for %q", calls, s)
			}
			return 1, nil
		}}
		_, _ = firehose.Eval(s, env)
	})
}

// script is a Transport playing target messages.
type script struct {
	in   [][]byte
	sent int
}

func (s *script) Send(context.Context, []byte) error { s.sent++; return nil }
func (s *script) Recv(context.Context) ([]byte, error) {
	if len(s.in) == 0 {
		return nil, context.DeadlineExceeded
	}
	b := s.in[0]
	s.in = s.in[1:]
	return b, nil
}

// FuzzClientAgainstHostileTarget: whatever the target writes, each
// command ends with a result or an error (here the script running dry
// stands for the timeout), never a panic or more bytes than asked for.
func FuzzClientAgainstHostileTarget(f *testing.F) {
	ack := firehose.AppendDocument(nil, firehose.Elem("response", "value", "ACK", "rawmode", "true"))
	f.Add(ack, []byte("0123"), ack)
	f.Add([]byte(`<data><log value='INFO: {"storage_info": {"total_blocks":1}}'/><response value="ACK"/></data>`), []byte{}, []byte("</data>"))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		ctx := context.Background()
		for op := 0; op < 4; op++ {
			cl := firehose.NewClient(&script{in: [][]byte{a, b, c}}, firehose.Options{})
			sec := firehose.Sectors{SectorSize: 512, StartSector: "0", NumSectors: 1}
			switch op {
			case 0:
				_, _ = cl.Configure(ctx, firehose.MemoryUFS)
			case 1:
				var w bytes.Buffer
				if err := cl.Read(ctx, sec, &w, nil); w.Len() > 512 || err == nil && w.Len() != 512 {
					t.Fatalf("read returned %d bytes (err %v)", w.Len(), err)
				}
			case 2:
				_ = cl.Program(ctx, sec, "x", bytes.NewReader(make([]byte, 512)), nil)
			case 3:
				_, _ = cl.GetStorageInfo(ctx, 0)
			}
		}
	})
}

// chatty is a target that logs forever and never answers.
type chatty struct{}

func (chatty) Send(context.Context, []byte) error { return nil }
func (chatty) Recv(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return firehose.AppendDocument(nil, firehose.Elem("log", "value", "INFO: still busy")), nil
}

// TestReplyWaitIsBoundedEvenWhileTheTargetLogs: logs do not extend the
// wait for a response beyond Timeout.
func TestReplyWaitIsBoundedEvenWhileTheTargetLogs(t *testing.T) {
	c := firehose.NewClient(chatty{}, firehose.Options{Timeout: 100 * time.Millisecond})
	if err := c.Nop(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Nop against an endlessly logging target = %v, want DeadlineExceeded", err)
	}
}
