package qemuharness

import (
	"fmt"
	"regexp"
	"strings"
)

// What the emulated modem's log (mhictl sim serve) says, for the checks
// that judge the modem's side of a run.

var (
	// SummaryRE matches the summary line sim serve logs at exit:
	// host protocol violations and refused DMAs.
	SummaryRE = regexp.MustCompile(`msg=summary violations=(\d+) dma_faults=(\d+)`)
	stateRE   = regexp.MustCompile(`msg="modem state" state=(\S+) ee=(\S+)`)
	// ImageRE matches a boot image the modem received: via (BHI or
	// BHIe), size, sha256.
	ImageRE = regexp.MustCompile(`msg="boot image received" via=(\S+) size=(\d+) sha256=([0-9a-f]+)`)
)

// SysErrCycle reports whether the modem went SYS_ERR → … → M0 in AMSS,
// i.e. the host reset it and brought it back to mission mode.
func SysErrCycle(log string) bool {
	crashed := false
	for _, m := range stateRE.FindAllStringSubmatch(log, -1) {
		switch {
		case m[1] == "SYS_ERR":
			crashed = true
		case crashed && m[1] == "M0" && m[2] == "AMSS":
			return true
		}
	}
	return false
}

// StateTrail is the modem's state sequence, compressed, at most n states.
func StateTrail(log string, n int) string {
	var s []string
	for _, m := range stateRE.FindAllStringSubmatch(log, -1) {
		st := m[1] + "/" + m[2]
		if len(s) == 0 || s[len(s)-1] != st {
			s = append(s, st)
		}
	}
	return strings.Join(Limit(s, n), " → ")
}

// Limit keeps the first n of s and says how many more there were.
func Limit(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("(%d more)", len(s)-n))
	}
	return s
}

// FirstLines returns the lines of s matching pattern, at most n, joined.
func FirstLines(s, pattern string, n int) string {
	re := regexp.MustCompile(pattern)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(Limit(out, n), " | ")
}

// Firmware returns the made-up boot image a run offers as name: size
// pseudo-random bytes the emulated boot ROM checks arrive intact, not a
// boot loader.
func Firmware(name string, size int) []byte {
	b := make([]byte, size)
	x := uint32(2166136261)
	for _, c := range []byte(name) {
		x = (x ^ uint32(c)) * 16777619
	}
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}
