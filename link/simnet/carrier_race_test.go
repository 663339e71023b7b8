//go:build race

package simnet

// underRace: sync.Pool drops a quarter of its Puts under the race
// detector, so a pooled chunk is allocated again now and then.
const underRace = true
