package cache

import (
	"math"
	"math/bits"
	"slices"
)

// hnsw is a hierarchical navigable small-world graph (Malkov and Yashunin,
// 2016) over one scope's vectors, addressed by slot number. It is not safe
// for concurrent use: VectorIndex's lock guards it.
//
// Each slot stores its vector twice, compactly: a binary code (one bit a
// dimension), on which the graph is built and walked by Hamming distance
// (a few popcounts a step), and int8 codes with one scale (dims+4 bytes),
// on which the candidates the walk found are re-ranked by cosine. That is
// about 3.5x less memory than float32 vectors, and a walk step costs a few
// nanoseconds where an int8 dot product in Go costs about a microsecond.
//
// The binary code is the sign bits of the vector after a fixed random
// rotation (three rounds of random sign flips and a fast Walsh-Hadamard
// transform), so the Hamming distance of two codes estimates the angle
// between the vectors (SimHash). Without the rotation, sparse vectors such
// as the local embedder's (about 40 non-zero dimensions of 512) would
// differ only in a few bits, and unrelated texts would look close.
//
// A deleted slot is unlinked at once: each neighbour that linked to it
// drops the link and picks anew among its remaining links and the deleted
// slot's, so the graph stays connected around the hole. Insert reuses the
// slot, so the graph does not grow past the scope's peak size; a reused
// slot keeps its level, so the level distribution stays geometric. Links
// to it that were not symmetric (rare) now lead to the new vector, which
// costs a little recall under heavy churn (tested).
type hnsw struct {
	dims, words int
	m, m0       int     // links per node on upper layers, on layer 0
	efBuild     int     // candidate list size while inserting
	levelMult   float64 // 1/ln(m)
	rot         rotation

	signs  rows[uint64] // words a slot
	codes  rows[int8]   // dims a slot
	scales []float32    // by slot
	levels []uint8
	dead   []bool            // unlinked, free for reuse; walks skip it
	links0 rows[int32]       // m0 a slot, -1 padded
	upper  map[int32][]int32 // slot -> layers 1..level, m each, -1 padded
	entry  int32             // -1 when empty
	top    int               // entry's level
	rng    uint64

	// scratch, reused between calls (the caller holds the write lock for
	// inserts; searches use their own visited sets)
	visited []uint32
	epoch   uint32
}

func newHNSW(dims, m, efBuild int) *hnsw {
	padded := 64
	for padded < dims {
		padded *= 2
	}
	return &hnsw{
		dims: dims, words: padded / 64, m: m, m0: 2 * m, efBuild: efBuild, rot: newRotation(padded),
		levelMult: 1 / math.Log(float64(m)),
		upper:     map[int32][]int32{}, entry: -1, rng: 0x9e3779b97f4a7c15,
	}
}

func (h *hnsw) slots() int { return len(h.levels) }

// grow appends a slot with a random level and returns it.
func (h *hnsw) grow() int32 {
	s := int32(len(h.levels))
	h.signs.grow(s, h.words)
	h.codes.grow(s, h.dims)
	h.links0.grow(s, h.m0)
	h.scales = append(h.scales, 0)
	lvl := h.randomLevel()
	h.levels = append(h.levels, uint8(lvl))
	h.dead = append(h.dead, false)
	for i, ls := 0, h.links0.row(s, h.m0); i < len(ls); i++ {
		ls[i] = -1
	}
	if lvl > 0 {
		up := make([]int32, lvl*h.m)
		for i := range up {
			up[i] = -1
		}
		h.upper[s] = up
	}
	return s
}

func (h *hnsw) randomLevel() int {
	// xorshift64*: deterministic, so an index built twice is the same.
	h.rng ^= h.rng >> 12
	h.rng ^= h.rng << 25
	h.rng ^= h.rng >> 27
	r := float64((h.rng*2685821657736338717)>>11) / (1 << 53)
	lvl := int(-math.Log(1-r) * h.levelMult)
	return min(lvl, 15)
}

// links returns slot s's link list on layer l (fixed length, -1 padded).
func (h *hnsw) links(s int32, l int) []int32 {
	if l == 0 {
		return h.links0.row(s, h.m0)
	}
	up := h.upper[s]
	return up[(l-1)*h.m : l*h.m]
}

// set stores vec (L2-normalised, len dims) in slot s.
func (h *hnsw) set(s int32, vec []float32) {
	h.dead[s] = false
	h.rot.code(h.signsOf(s), vec)
	var maxAbs float32
	for _, v := range vec {
		maxAbs = max(maxAbs, abs32(v))
	}
	scale := maxAbs / 127
	codes := h.codes.row(s, h.dims)
	if scale == 0 {
		clear(codes)
	} else {
		inv := 1 / scale
		for i, v := range vec {
			codes[i] = int8(math.Round(float64(v * inv)))
		}
	}
	h.scales[s] = scale
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// similarity is the cosine of q (float32, normalised) and slot s's codes.
func (h *hnsw) similarity(q []float32, s int32) float32 {
	c := h.codes.row(s, h.dims)
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
	return (s0 + s1 + s2 + s3) * h.scales[s]
}

// hamming is the distance between sign words q and slot s's.
func (h *hnsw) hamming(q []uint64, s int32) int {
	if len(q) == 8 { // 512 dims, the default: unrolled
		r := (*[8]uint64)(h.signs.row(s, 8))
		return bits.OnesCount64(q[0]^r[0]) + bits.OnesCount64(q[1]^r[1]) + bits.OnesCount64(q[2]^r[2]) + bits.OnesCount64(q[3]^r[3]) +
			bits.OnesCount64(q[4]^r[4]) + bits.OnesCount64(q[5]^r[5]) + bits.OnesCount64(q[6]^r[6]) + bits.OnesCount64(q[7]^r[7])
	}
	r := h.signsOf(s)
	r = r[:len(q)]
	d := 0
	for i, w := range q {
		d += bits.OnesCount64(w ^ r[i])
	}
	return d
}

func (h *hnsw) signsOf(s int32) []uint64 { return h.signs.row(s, h.words) }

// rows is a table of fixed-width rows in chunks of rowsPerChunk, so that
// growing it neither copies what it holds (a stall under the index's
// lock at a million rows) nor leaves append's slack.
type rows[T any] struct{ chunks [][]T }

const rowsPerChunk = 1024

// grow makes room for row s (the next one).
func (r *rows[T]) grow(s int32, width int) {
	if int(s)/rowsPerChunk == len(r.chunks) {
		r.chunks = append(r.chunks, make([]T, rowsPerChunk*width))
	}
}

func (r *rows[T]) row(s int32, width int) []T {
	c := r.chunks[s/rowsPerChunk]
	i := int(s%rowsPerChunk) * width
	return c[i : i+width : i+width]
}

// cand is a slot and its Hamming distance to the query.
type cand struct {
	d int
	s int32
}

// visitSet marks visited slots by epoch, so it needs no clearing.
type visitSet struct {
	marks []uint32
	epoch uint32
}

func (v *visitSet) reset(n int) {
	if len(v.marks) < n {
		v.marks = append(v.marks, make([]uint32, n-len(v.marks))...)
	}
	v.epoch++
	if v.epoch == 0 { // wrapped: old marks could collide
		clear(v.marks)
		v.epoch = 1
	}
}

func (v *visitSet) visit(s int32) bool {
	if v.marks[s] == v.epoch {
		return false
	}
	v.marks[s] = v.epoch
	return true
}

// greedy walks layer l from ep to the slot nearest q.
func (h *hnsw) greedy(q []uint64, ep cand, l int) cand {
	for changed := true; changed; {
		changed = false
		for _, n := range h.links(ep.s, l) {
			if n < 0 {
				break
			}
			if h.dead[n] {
				continue
			}
			if d := h.hamming(q, n); d < ep.d {
				ep, changed = cand{d, n}, true
			}
		}
	}
	return ep
}

// layerSearch is the beam search of one layer: the ef slots nearest q
// found from the entry points, nearest first. keep says which slots may be
// returned (nil: all); the others are walked through but not returned.
func (h *hnsw) layerSearch(q []uint64, eps []cand, ef, l int, vs *visitSet, keep func(int32) bool) []cand {
	var frontier minHeap // to expand, nearest first
	var found maxHeap    // the best ef, farthest on top
	for _, ep := range eps {
		if !vs.visit(ep.s) {
			continue
		}
		frontier.push(ep)
		if keep == nil || keep(ep.s) {
			found.push(ep)
		}
	}
	for len(frontier) > 0 {
		c := frontier.pop()
		if len(found.h) >= ef && c.d > found.farthest() {
			break
		}
		for _, n := range h.links(c.s, l) {
			if n < 0 {
				break
			}
			if h.dead[n] || !vs.visit(n) {
				continue
			}
			d := h.hamming(q, n)
			if len(found.h) < ef || d < found.farthest() {
				frontier.push(cand{d, n})
				if keep == nil || keep(n) {
					found.push(cand{d, n})
					if len(found.h) > ef {
						found.pop()
					}
				}
			}
		}
	}
	out := make([]cand, len(found.h))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = found.pop()
	}
	return out
}

// insert links slot s (its vector already set) into the graph. alive says
// which other slots hold live vectors; s is linked only to those.
func (h *hnsw) insert(s int32, alive func(int32) bool) {
	lvl := int(h.levels[s])
	for l := 0; l <= lvl; l++ {
		ls := h.links(s, l)
		for i := range ls {
			ls[i] = -1
		}
	}
	if h.entry < 0 || h.entry == s {
		h.entry, h.top = s, lvl
		return
	}
	q := h.signsOf(s)
	ep := cand{h.hamming(q, h.entry), h.entry}
	for l := h.top; l > lvl; l-- {
		ep = h.greedy(q, ep, l)
	}
	vs := visitSet{marks: h.visited, epoch: h.epoch}
	eps := []cand{ep}
	notSelf := func(n int32) bool { return n != s && alive(n) }
	for l := min(lvl, h.top); l >= 0; l-- {
		vs.reset(h.slots())
		found := h.layerSearch(q, eps, h.efBuild, l, &vs, notSelf)
		width := h.m
		if l == 0 {
			width = h.m0
		}
		chosen := h.selectNeighbours(found, width)
		copy(h.links(s, l), chosen)
		for _, n := range chosen {
			h.addLink(n, s, l, width)
		}
		if len(found) > 0 {
			eps = found
		}
	}
	h.visited, h.epoch = vs.marks, vs.epoch
	if lvl > h.top {
		h.entry, h.top = s, lvl
	}
}

// selectNeighbours is HNSW's heuristic: take candidates nearest first, and
// keep one only if it is nearer the new node than to every one already
// kept, so links spread in all directions instead of into one cluster.
// Free places are then filled with the nearest of the rest.
func (h *hnsw) selectNeighbours(found []cand, width int) []int32 {
	chosen := make([]int32, 0, width)
	var skipped []int32
	for _, c := range found {
		if len(chosen) == width {
			break
		}
		ok := true
		cs := h.signsOf(c.s)
		for _, k := range chosen {
			if h.hamming(cs, k) < c.d {
				ok = false
				break
			}
		}
		if ok {
			chosen = append(chosen, c.s)
		} else {
			skipped = append(skipped, c.s)
		}
	}
	for _, s := range skipped {
		if len(chosen) == width {
			break
		}
		chosen = append(chosen, s)
	}
	return chosen
}

// addLink links n to s on layer l. A full list is pruned back to width
// by the same heuristic that chose it, unless s is farther than all of it.
func (h *hnsw) addLink(n, s int32, l, width int) {
	ls := h.links(n, l)
	for i, x := range ls {
		if x == s {
			return
		}
		if x < 0 {
			ls[i] = s
			return
		}
	}
	ns := h.signsOf(n)
	all := make([]cand, 0, len(ls)+1)
	far := 0
	for _, x := range ls {
		d := h.hamming(ns, x)
		far = max(far, d)
		all = append(all, cand{d, x})
	}
	d := h.hamming(ns, s)
	if d >= far {
		return // the heuristic would keep s only in place of a filler: not worth width² distances
	}
	all = append(all, cand{d, s})
	slices.SortFunc(all, func(a, b cand) int { return a.d - b.d })
	chosen := h.selectNeighbours(all, width)
	copy(ls, chosen)
	for i := len(chosen); i < len(ls); i++ {
		ls[i] = -1
	}
}

// unlink removes slot s from the graph before its reuse: every neighbour
// linking back to it is repaired from s's own links, and s's links are
// cleared. alive says which slots hold live vectors (s no longer does).
func (h *hnsw) unlink(s int32, alive func(int32) bool) {
	lvl := int(h.levels[s])
	for l := 0; l <= lvl; l++ {
		width := h.m
		if l == 0 {
			width = h.m0
		}
		mine := h.links(s, l)
		for _, n := range mine {
			if n < 0 {
				break
			}
			ls := h.links(n, l)
			if !slices.Contains(ls, s) {
				continue
			}
			ns := h.signsOf(n)
			var cs []cand
			for _, x := range ls {
				if x >= 0 && x != s && alive(x) {
					cs = append(cs, cand{h.hamming(ns, x), x})
				}
			}
			for _, x := range mine {
				if x >= 0 && x != n && alive(x) && !slices.Contains(ls, x) {
					cs = append(cs, cand{h.hamming(ns, x), x})
				}
			}
			slices.SortFunc(cs, func(a, b cand) int { return a.d - b.d })
			chosen := h.selectNeighbours(cs, width)
			copy(ls, chosen)
			for i := len(chosen); i < len(ls); i++ {
				ls[i] = -1
			}
		}
	}
	h.dead[s] = true
	if h.entry == s {
		h.newEntry(s, alive)
	}
	for l := 0; l <= lvl; l++ {
		ls := h.links(s, l)
		for i := range ls {
			ls[i] = -1
		}
	}
}

// newEntry picks the live slot of the highest level, other than old, as
// the entry point (-1 when none is left).
func (h *hnsw) newEntry(old int32, alive func(int32) bool) {
	h.entry, h.top = -1, 0
	for s, lvl := range h.levels {
		if int32(s) != old && alive(int32(s)) && (h.entry < 0 || int(lvl) > h.top) {
			h.entry, h.top = int32(s), int(lvl)
		}
	}
}

// search returns up to ef slots that keep accepts, nearest q first by
// Hamming distance.
func (h *hnsw) search(q []uint64, ef int, vs *visitSet, keep func(int32) bool) []cand {
	if h.entry < 0 {
		return nil
	}
	ep := cand{h.hamming(q, h.entry), h.entry}
	for l := h.top; l > 0; l-- {
		ep = h.greedy(q, ep, l)
	}
	vs.reset(h.slots())
	return h.layerSearch(q, []cand{ep}, ef, 0, vs, keep)
}

// rotation is a fixed pseudo-random rotation of R^n (n a power of two):
// three rounds of sign flips, each followed by a Walsh-Hadamard transform.
type rotation struct {
	n     int
	signs [3][]float32
}

func newRotation(n int) rotation {
	r := rotation{n: n}
	state := uint64(0x2545f4914f6cdd1d)
	for k := range r.signs {
		r.signs[k] = make([]float32, n)
		for i := range r.signs[k] {
			state ^= state << 13
			state ^= state >> 7
			state ^= state << 17
			r.signs[k][i] = float32(1 - 2*int(state&1))
		}
	}
	return r
}

// code writes the sign bits of the rotated vec (zero-padded to n) to dst.
func (r rotation) code(dst []uint64, vec []float32) {
	buf := make([]float32, r.n)
	copy(buf, vec)
	for _, sg := range r.signs {
		for i := range buf {
			buf[i] *= sg[i]
		}
		fwht(buf)
	}
	clear(dst)
	for i, v := range buf {
		if v > 0 {
			dst[i/64] |= 1 << (i % 64)
		}
	}
}

// fwht is the in-place, unnormalised fast Walsh-Hadamard transform.
func fwht(a []float32) {
	for h := 1; h < len(a); h *= 2 {
		for i := 0; i < len(a); i += 2 * h {
			x, y := a[i:i+h], a[i+h:i+2*h]
			for j := range x {
				x[j], y[j] = x[j]+y[j], x[j]-y[j]
			}
		}
	}
}

// minHeap and maxHeap order candidates by distance.
type minHeap []cand

func (p *minHeap) push(c cand) {
	*p = append(*p, c)
	a := *p
	for j := len(a) - 1; j > 0; {
		i := (j - 1) / 2
		if a[i].d <= a[j].d {
			break
		}
		a[i], a[j] = a[j], a[i]
		j = i
	}
}

func (p *minHeap) pop() cand {
	a := *p
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for j := 0; ; {
		l, m := 2*j+1, j
		if l < len(a) && a[l].d < a[m].d {
			m = l
		}
		if l+1 < len(a) && a[l+1].d < a[m].d {
			m = l + 1
		}
		if m == j {
			break
		}
		a[j], a[m] = a[m], a[j]
		j = m
	}
	*p = a
	return top
}

// maxHeap keeps the farthest on top: a minHeap of negated distances.
type maxHeap struct{ h minHeap }

func (p *maxHeap) push(c cand) { p.h.push(cand{-c.d, c.s}) }

func (p *maxHeap) pop() cand {
	c := p.h.pop()
	return cand{-c.d, c.s}
}

func (p *maxHeap) farthest() int { return -p.h[0].d }
