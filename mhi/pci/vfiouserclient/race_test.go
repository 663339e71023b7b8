//go:build linux && race

package vfiouserclient

// underRace: sync.Pool drops a quarter of its Puts under the race
// detector, so the pooled calls of a BAR access allocate there.
const underRace = true
