package cache

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTakeUpToMatchesByteByByte holds the word-at-a-time skip of the
// search's second pass to the plain loop it replaced: the same members, in
// the same order, for distances anywhere in 0..128 (128 included, whose
// byte has its high bit set) and every cut.
func TestTakeUpToMatchesByteByByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		x := &ivf{}
		sc := &ivfScratch{}
		slot := int32(0)
		for range 1 + rng.IntN(6) {
			l := &ivfList{}
			for range rng.IntN(40) {
				l.slots = append(l.slots, slot)
				slot++
				var d uint8
				switch rng.IntN(4) {
				case 0:
					d = uint8(rng.IntN(129))
				case 1:
					d = 128
				default:
					d = uint8(40 + rng.IntN(30))
				}
				sc.dist = append(sc.dist, d)
			}
			sc.lists = append(sc.lists, cand{0, int32(len(x.lists))})
			x.lists = append(x.lists, l)
		}
		cut, atCut := rng.IntN(130), rng.IntN(5)
		var want []cand
		left := atCut
		j := 0
		for _, lc := range sc.lists {
			l := x.lists[lc.s]
			for i, d := range sc.dist[j : j+len(l.slots)] {
				if int(d) < cut || int(d) == cut && left > 0 {
					if int(d) == cut {
						left--
					}
					want = append(want, cand{int(d), l.slots[i]})
				}
			}
			j += len(l.slots)
		}
		if got := takeUpTo(x, sc, cut, atCut); !slices.Equal(got, want) {
			t.Fatalf("round %d, cut %d, atCut %d: took %v, want %v", round, cut, atCut, got, want)
		}
	}
}
