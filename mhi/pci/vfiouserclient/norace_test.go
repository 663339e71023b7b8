//go:build linux && !race

package vfiouserclient

const underRace = false
