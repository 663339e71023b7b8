//go:build !race

package reliability

const underRace = false
