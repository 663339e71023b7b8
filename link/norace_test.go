//go:build !race

package link_test

const underRace = false
