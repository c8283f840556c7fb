//go:build race

package cache

// raceEnabled: the race detector slows the index down about tenfold, so
// the largest index tests shrink under it.
const raceEnabled = true
