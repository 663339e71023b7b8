//go:build !race

package stack_test

const raceOn = false
