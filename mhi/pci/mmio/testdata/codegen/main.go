// Command codegen is disassembled by TestCodegenKeepsEveryAccess: a caller
// that writes one register twice and reads it back.
package main

import (
	"os"

	"github.com/mhistack/mhistack/mhi/pci/mmio"
)

//go:noinline
func twoWritesOneRead(a uintptr) uint32 {
	mmio.Write32(a, 1)
	mmio.Write32(a, 2)    // as a plain store, this would make the first one dead
	return mmio.Read32(a) // and this would be answered with 2, not loaded
}

func main() {
	var w [2]uint64
	if len(os.Args) > 1 { // never true in the test: only the code matters
		os.Exit(int(twoWritesOneRead(uintptr(0))) + int(w[0]))
	}
}
