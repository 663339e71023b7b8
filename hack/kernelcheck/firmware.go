package main

// The PBL runs' firmware: the made-up image the kernel downloads over BHI
// from the guest's /lib/firmware, and the modem's record of what it
// received.

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
)

// firmware returns the made-up image the guest offers as name.
func firmware(name string) []byte {
	return qh.Firmware(name, 192<<10+123) // not a multiple of any page or segment size
}

// firmwareFiles places fw at lib/firmware/name, where the kernel's
// firmware loader finds it without user space.
func firmwareFiles(name string, fw []byte) map[string]initramfs.Entry {
	files := map[string]initramfs.Entry{}
	dir := "lib/firmware"
	files[dir] = initramfs.Entry{Mode: initramfs.Dir}
	parts := strings.Split(name, "/")
	for _, d := range parts[:len(parts)-1] {
		dir += "/" + d
		files[dir] = initramfs.Entry{Mode: initramfs.Dir}
	}
	files["lib/firmware/"+name] = initramfs.Entry{Mode: initramfs.File, Data: fw}
	return files
}

// firmwareDownloads checks the modem received fw over BHI want times (at
// power-up and after each crash), intact each time.
func firmwareDownloads(log string, fw []byte, want int) (bool, string) {
	sum := fmt.Sprintf("%x", sha256.Sum256(fw))
	var got []string
	good := 0
	for _, m := range qh.ImageRE.FindAllStringSubmatch(log, -1) {
		if m[1] == "BHI" && m[2] == fmt.Sprint(len(fw)) && m[3] == sum {
			good++
			got = append(got, "intact")
		} else {
			got = append(got, fmt.Sprintf("%s %s bytes sha256 %.12s", m[1], m[2], m[3]))
		}
	}
	detail := fmt.Sprintf("%d BHI downloads of the %d-byte image, %d expected (%s)", len(got), len(fw), want, strings.Join(got, ", "))
	return good == want && len(got) == want, detail
}
