//go:build !race

package simnet

const underRace = false
