package cache

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
)

// ivfScratch is one search's working memory, pooled.
type ivfScratch struct {
	lists minHeap // the probes nearest lists by similarity (x 2^20), the least similar on top
	dist  []uint8 // prefix distances of the scanned members, in scan order
	pre   []cand  // the best candidates by their codes' first bits
	found maxHeap // the best candidates by their whole codes, farthest on top
	out   []cand
}

// preWords is the part of a code that a scan reads (128 bits): the nearest
// by it, preFactor times as many as wanted, are then ranked by whole codes.
const (
	preWords  = 2
	preFactor = 4
)

// search appends to sc.out up to n slots that keep accepts, nearest first
// by Hamming distance to the query's code, from the probes lists nearest
// the query: those that could still have cosine minSim with it (see
// hammingBound). It leaves the lists it ranked in the query, for its insert.
func (x *ivf) search(vq *VecQuery, probes, n int, minSim float32, sc *ivfScratch, keep func(int32) bool) []cand {
	q := vq.codeOf(x.words)
	sc.dist, sc.pre, sc.found.h, sc.out = sc.dist[:0], sc.pre[:0], sc.found.h[:0], sc.out[:0]
	x.rankLists(vq.vec, probes, &sc.lists)
	vq.setRank(x, sc.lists)
	// Two passes instead of a heap: the prefix distances and their
	// histogram, then the members at or under the distance that admits
	// n*preFactor of them.
	var hist [256]int32 // by prefix distance (at most preWords*64); a uint8 indexes it unchecked
	for _, lc := range sc.lists {
		sc.dist = scanPrefix(q, x.lists[lc.s], sc.dist, &hist)
	}
	want, limit := n*preFactor, hammingBound(minSim, preWords*64)
	cut, below := 0, 0 // take every distance under cut, and atCut at cut
	for cut < limit && below+int(hist[cut]) < want {
		below += int(hist[cut])
		cut++
	}
	atCut := want - below
	if cut == limit {
		atCut = int(hist[cut])
	}
	sc.pre = takeUpTo(x, sc, cut, atCut)
	worst := hammingBound(minSim, x.words*64) + 1
	for _, c := range sc.pre {
		if d := hamming(q, x.bin.row(c.s, x.words)); d < worst && keep(c.s) {
			worst = sc.found.keep(cand{d, c.s}, n, worst)
		}
	}
	for len(sc.found.h) > 0 {
		sc.out = append(sc.out, sc.found.pop())
	}
	for i, j := 0, len(sc.out)-1; i < j; i, j = i+1, j-1 {
		sc.out[i], sc.out[j] = sc.out[j], sc.out[i]
	}
	return sc.out
}

// takeUpTo appends to sc.pre, in scan order, the scanned members at a
// prefix distance under cut and the first atCut at cut. Most members are
// farther: eight distances at a time are skipped while none is at or
// under cut.
func takeUpTo(x *ivf, sc *ivfScratch, cut, atCut int) []cand {
	pre := sc.pre
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	swar := cut < 128 // a distance is at most 128; the test below needs cut+1 <= 128
	under := uint64(cut+1) * ones
	j := 0
	for _, lc := range sc.lists {
		l := x.lists[lc.s]
		dist := sc.dist[j : j+len(l.slots)]
		j += len(l.slots)
		for i := 0; i < len(dist); {
			if swar && i+8 <= len(dist) {
				// a byte under cut+1 sets its high bit here (and only
				// then, or above one that does): "haszero" on w-under
				if w := binary.LittleEndian.Uint64(dist[i:]); (w-under)&^w&highs == 0 {
					i += 8
					continue
				}
			}
			for end := min(i+8, len(dist)); i < end; i++ {
				if d := int(dist[i]); d < cut || d == cut && atCut > 0 {
					if d == cut {
						atCut--
					}
					pre = append(pre, cand{d, l.slots[i]})
				}
			}
		}
	}
	return pre
}

// scanPrefix appends to dist the distances of q to list l's members by
// their codes' first preWords words, and counts them in hist. Expiry is
// checked later, on the few kept.
func scanPrefix(q []uint64, l *ivfList, dist []uint8, hist *[256]int32) []uint8 {
	q0, q1 := q[0], q[1]
	n := len(l.slots)
	codes := l.codes[:2*n]
	at := len(dist)
	dist = slices.Grow(dist, n)[:at+n]
	out := dist[at : at+n]
	for i := range out {
		c := codes[2*i : 2*i+2 : 2*i+2]
		d := uint8(bits.OnesCount64(q0^c[0]) + bits.OnesCount64(q1^c[1]))
		out[i] = d
		hist[d]++
	}
	return dist
}

// similarity is the cosine of q (float32, normalised) and slot s's codes.
func (x *ivf) similarity(q []float32, s int32) float32 {
	c := x.codes.row(s, x.dims)
	c = c[:len(q)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(q); i += 4 {
		s0 += q[i] * float32(c[i])
		s1 += q[i+1] * float32(c[i+1])
		s2 += q[i+2] * float32(c[i+2])
		s3 += q[i+3] * float32(c[i+3])
	}
	for ; i < len(q); i++ {
		s0 += q[i] * float32(c[i])
	}
	return (s0 + s1 + s2 + s3) * x.scales[s]
}

// hammingBound is the largest Hamming distance, of bitsN-bit codes, at
// which a vector could still have cosine minSim with the query: the
// expected distance at that angle plus a wide margin (6 standard
// deviations and 8 bits) for the code's noise.
func hammingBound(minSim float32, bitsN int) int {
	if minSim <= -1 {
		return bitsN
	}
	p := math.Acos(math.Min(1, float64(minSim))) / math.Pi
	n := float64(bitsN)
	return min(bitsN, int(n*p+6*math.Sqrt(n*p*(1-p))+8))
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// hamming is the number of bits that differ between a and b (same length).
func hamming(a, b []uint64) int {
	b = b[:len(a)]
	d := 0
	for i, w := range a {
		d += bits.OnesCount64(w ^ b[i])
	}
	return d
}
