package mmio

import (
	"encoding/binary"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// buf returns a 16-byte, 8-aligned scratch area filled with a marker so that
// a too-wide access shows up in the neighbouring bytes.
func buf() (*[2]uint64, []byte) {
	w := new([2]uint64)
	b := unsafe.Slice((*byte)(unsafe.Pointer(w)), 16)
	for i := range b {
		b[i] = 0xa5
	}
	return w, b
}

func TestWrite32StoresFourLittleEndianBytes(t *testing.T) {
	w, b := buf()
	Write32(uintptr(unsafe.Pointer(&b[4])), 0x11223344)
	runtime.KeepAlive(w)
	want := []byte{0xa5, 0xa5, 0xa5, 0xa5, 0x44, 0x33, 0x22, 0x11, 0xa5, 0xa5}
	if got := b[:10]; string(got) != string(want) {
		t.Fatalf("memory after Write32 = % x, want % x", got, want)
	}
}

func TestRead32LoadsFourLittleEndianBytes(t *testing.T) {
	w, b := buf()
	binary.LittleEndian.PutUint32(b[8:], 0xdeadbeef)
	if got := Read32(uintptr(unsafe.Pointer(&b[8]))); got != 0xdeadbeef {
		t.Fatalf("Read32 = %#x, want 0xdeadbeef", got)
	}
	if got := Read32(uintptr(unsafe.Pointer(&b[4]))); got != 0xa5a5a5a5 {
		t.Fatalf("Read32 of the neighbour = %#x, want 0xa5a5a5a5", got)
	}
	runtime.KeepAlive(w)
}

func TestWrite64AndRead64AreEightByteLittleEndian(t *testing.T) {
	w, b := buf()
	Write64(uintptr(unsafe.Pointer(&b[8])), 0x0102030405060708)
	if got := binary.LittleEndian.Uint64(b[8:]); got != 0x0102030405060708 {
		t.Fatalf("memory after Write64 = % x", b[8:])
	}
	if got := binary.LittleEndian.Uint64(b[:8]); got != 0xa5a5a5a5a5a5a5a5 {
		t.Fatalf("Write64 touched the previous word: % x", b[:8])
	}
	binary.LittleEndian.PutUint64(b[:8], 0xfedcba9876543210)
	if got := Read64(uintptr(unsafe.Pointer(&b[0]))); got != 0xfedcba9876543210 {
		t.Fatalf("Read64 = %#x", got)
	}
	runtime.KeepAlive(w)
}

func TestWriteThenReadGoesToMemory(t *testing.T) {
	// A plain Go store followed by a load of the same word is forwarded
	// by the compiler; through the accessors the second call must see
	// what memory holds, including a change made behind its back.
	w, b := buf()
	a := uintptr(unsafe.Pointer(&b[0]))
	Write32(a, 5)
	b[0] = 6 // "the device" changes the register
	if got := Read32(a); got != 6 {
		t.Fatalf("Read32 after an outside change = %d, want 6", got)
	}
	runtime.KeepAlive(w)
}

func TestBarriersReturn(t *testing.T) {
	DMAWriteBarrier()
	DMAReadBarrier()
}

func TestAccessorsDoNotAllocate(t *testing.T) {
	w, b := buf()
	a := uintptr(unsafe.Pointer(&b[0]))
	// One run of 100 accesses: AllocsPerRun's average is an integer
	// division, which would read 99 allocations in 100 accesses as 0.
	n := testing.AllocsPerRun(1, func() {
		for range 100 {
			Write32(a, Read32(a)+1)
			Write64(a+8, Read64(a+8)+1)
			DMAWriteBarrier()
		}
	})
	runtime.KeepAlive(w)
	if n != 0 {
		t.Fatalf("%v allocations in 100 rounds of accesses, want 0", n)
	}
}

// TestCodegenKeepsEveryAccess disassembles testdata/codegen and checks what
// the package promises: a caller doing write, write, read of one address
// still makes three calls (nothing elided or forwarded), and the accessors
// are single plain moves, not locked XCHG as sync/atomic stores are on
// amd64.
func TestCodegenKeepsEveryAccess(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("no assembly accessors on %s", runtime.GOARCH)
	}
	if testing.Short() {
		t.Skip("disassembles the test binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = runtime.GOROOT() + "/bin/go"
		if _, err := os.Stat(goTool); err != nil {
			t.Skip("go command not found; cannot disassemble")
		}
	}
	// go test strips its binaries, so build a small program with symbols.
	exe := t.TempDir() + "/codegen"
	if out, err := exec.Command(goTool, "build", "-o", exe, "./testdata/codegen").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(goTool, "tool", "objdump", "-s", `(main\.twoWritesOneRead|mmio\.)`, exe).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool objdump: %v\n%s", err, out)
	}
	funcs := splitFuncs(string(out))

	caller := funcs["main.twoWritesOneRead"]
	if caller == "" {
		t.Fatalf("twoWritesOneRead not found in:\n%s", out)
	}
	writes := regexp.MustCompile(`CALL .*mmio\.Write32`).FindAllString(caller, -1)
	reads := regexp.MustCompile(`CALL .*mmio\.Read32`).FindAllString(caller, -1)
	if len(writes) != 2 || len(reads) != 1 {
		t.Errorf("twoWritesOneRead makes %d Write32 and %d Read32 calls, want 2 and 1:\n%s", len(writes), len(reads), caller)
	}

	store := map[string]string{"amd64": `MOVL BX, 0\(AX\)`, "arm64": `MOVW R1, \(R0\)`}[runtime.GOARCH]
	w32 := funcs["mmio.Write32.abi0"]
	if !regexp.MustCompile(store).MatchString(w32) {
		t.Errorf("Write32 has no plain 32-bit store %q:\n%s", store, w32)
	}
	for name, body := range funcs {
		if strings.Contains(name, "mmio.") && regexp.MustCompile(`XCHG|LOCK|STLR|LDAR`).MatchString(body) {
			t.Errorf("%s uses a locked or acquire/release access:\n%s", name, body)
		}
	}
}

// splitFuncs maps "pkg.Func" (the last path element) to its disassembly.
func splitFuncs(dump string) map[string]string {
	m := map[string]string{}
	var name string
	for _, line := range strings.Split(dump, "\n") {
		if rest, ok := strings.CutPrefix(line, "TEXT "); ok {
			sym := strings.Fields(rest)[0]
			sym = strings.TrimSuffix(sym, "(SB)")
			name = sym[strings.LastIndex(sym, "/")+1:]
			continue
		}
		if name != "" {
			m[name] += line + "\n"
		}
	}
	return m
}
