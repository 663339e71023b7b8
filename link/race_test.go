//go:build race

package link_test

// underRace: sync.Pool drops a quarter of its Puts under the race
// detector, so steady-state allocation counts mean nothing there.
const underRace = true
