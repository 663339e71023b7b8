//go:build race

package stack_test

// raceOn: the race detector slows the emulated pipeline about tenfold,
// so bulk tests move less data.
const raceOn = true
