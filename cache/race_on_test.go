//go:build race

package cache

// raceEnabled: the race detector slows the graph down about tenfold, so
// the largest index tests shrink under it.
const raceEnabled = true
