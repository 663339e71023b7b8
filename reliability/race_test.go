//go:build race

package reliability

// underRace shrinks the default sizes: the race detector slows the
// emulated modem and the stack by 5–10×.
const underRace = true
