package cache

import (
	"math"
	"math/bits"
	"slices"
	"sync"

	"github.com/viterin/vek/vek32"
)

// ivf is an inverted file over binary codes: one scope's vectors, by slot,
// partitioned into lists of similar codes. A search ranks the lists by the
// Hamming distance of their centroids to the query, scans the nearest
// `probes` lists whole, and keeps the candidates nearest by Hamming for a
// re-rank by cosine. It is not safe for concurrent use: VectorIndex's lock
// guards it; searches only read it.
//
// Each slot stores its vector twice, compactly: a binary code, kept in its
// list so that a scan reads memory in order (a few popcounts an entry), and
// int8 codes with one scale (dims+4 bytes), on which the candidates are
// re-ranked. The binary code is the sign bits of the vector after a fixed
// random rotation (three rounds of random sign flips and a fast
// Walsh-Hadamard transform), so the Hamming distance of two codes estimates
// the angle between the vectors (SimHash). It has at least 512 bits: a
// shorter vector is zero-padded before the rotation.
//
// Lists are built by splitting, not by training: an insert appends to the
// list of the nearest centroid, and a list past listSize is split in two by
// a few rounds of 2-medians on its codes (a centroid is the majority bit of
// its members). Inserting is thus one pass over the centroids plus an
// append; a split costs about a millisecond every listSize/2 inserts.
// Removal swaps the slot's code out of its list; an empty list is dropped.
type ivf struct {
	dims, words int
	listSize    int // a list past this splits
	rot         rotation

	codes  rows[int8]   // dims a slot
	bin    rows[uint64] // words a slot: the binary code
	scales []float32    // by slot
	loc    []ivfLoc     // by slot; list -1: free

	cents []float32 // dims a list: the list's mean, normalised
	lists []*ivfList

	buf []float32 // insert scratch (the write lock is held)
}

// splitScratch holds a splitting list's vectors (2 MB at the defaults),
// shared by all scopes rather than kept by each.
var splitScratch sync.Pool // *[]float32

type ivfLoc struct{ list, pos int32 }

type ivfList struct {
	codes   []uint64 // preWords a member, in member order: the code's first bits
	slots   []int32
	sum     []float32 // of the members' vectors
	splitAt int       // the list splits past this many members
}

func newIVF(dims, listSize int) *ivf {
	padded := 512
	for padded < dims {
		padded *= 2
	}
	return &ivf{dims: dims, words: padded / 64, listSize: listSize, rot: newRotation(padded), buf: make([]float32, padded)}
}

// grow appends a free slot and returns it.
func (x *ivf) grow() int32 {
	s := int32(len(x.loc))
	x.codes.grow(s, x.dims)
	x.bin.grow(s, x.words)
	x.scales = append(x.scales, 0)
	x.loc = append(x.loc, ivfLoc{-1, -1})
	return s
}

// insert stores vec (L2-normalised, len dims) in the free slot s.
func (x *ivf) insert(s int32, vec []float32) {
	x.quantize(s, vec)
	code := x.bin.row(s, x.words)
	x.rot.code(code, vec, x.buf)
	li := x.nearestList(vec)
	if li < 0 {
		x.cents = append(x.cents, make([]float32, x.dims)...)
		x.lists = append(x.lists, &ivfList{sum: make([]float32, x.dims), splitAt: x.listSize})
		li = len(x.lists) - 1
	}
	l := x.lists[li]
	x.loc[s] = ivfLoc{int32(li), int32(len(l.slots))}
	l.codes = append(l.codes, code[:preWords]...)
	l.slots = append(l.slots, s)
	vek32.Add_Inplace(l.sum, vec)
	x.center(li)
	if len(l.slots) > l.splitAt {
		x.split(li)
	}
}

func (x *ivf) quantize(s int32, vec []float32) {
	var maxAbs float32
	for _, v := range vec {
		maxAbs = max(maxAbs, abs32(v))
	}
	scale := maxAbs / 127
	codes := x.codes.row(s, x.dims)
	if scale == 0 {
		clear(codes)
	} else {
		inv := 1 / scale
		for i, v := range vec {
			codes[i] = int8(math.Round(float64(v * inv)))
		}
	}
	x.scales[s] = scale
}

// remove takes slot s out of its list; s becomes free.
func (x *ivf) remove(s int32) {
	at := x.loc[s]
	x.loc[s] = ivfLoc{-1, -1}
	l := x.lists[at.list]
	x.cut(l, at.pos)
	if len(l.slots) == 0 {
		x.dropList(int(at.list))
		return
	}
	x.vector(s, x.buf[:x.dims])
	vek32.Sub_Inplace(l.sum, x.buf[:x.dims])
	x.center(int(at.list))
}

// cut takes the vector at pos out of list l, moving the list's last one
// into its place.
func (x *ivf) cut(l *ivfList, pos int32) {
	w := preWords
	last := int32(len(l.slots) - 1)
	if pos != last {
		moved := l.slots[last]
		l.slots[pos] = moved
		copy(l.codes[int(pos)*w:int(pos+1)*w], l.codes[int(last)*w:])
		x.loc[moved].pos = pos
	}
	l.slots, l.codes = l.slots[:last], l.codes[:int(last)*w]
}

// vector writes slot s's vector, as its int8 codes hold it, to dst.
func (x *ivf) vector(s int32, dst []float32) {
	scale := x.scales[s]
	for i, c := range x.codes.row(s, x.dims) {
		dst[i] = float32(c) * scale
	}
}

// center sets list li's centroid to its normalised sum.
func (x *ivf) center(li int) { normalize(x.cent(li), x.lists[li].sum) }

// normalize sets dst to v over its norm (to v when that is zero).
func normalize(dst, v []float32) {
	copy(dst, v)
	if n := vek32.Norm(dst); n > 0 {
		vek32.MulNumber_Inplace(dst, 1/n)
	}
}

// dropList removes the empty list li; the last list takes its place.
func (x *ivf) dropList(li int) {
	d := x.dims
	end := len(x.lists) - 1
	if li != end {
		x.lists[li] = x.lists[end]
		copy(x.cents[li*d:(li+1)*d], x.cents[end*d:])
		for _, s := range x.lists[li].slots {
			x.loc[s].list = int32(li)
		}
	}
	x.lists[end] = nil
	x.lists, x.cents = x.lists[:end], x.cents[:end*d]
}

// nearestList is the list whose centroid is nearest vec (-1: none).
func (x *ivf) nearestList(vec []float32) int {
	best, bestSim := -1, float32(-2)
	for i := range x.lists {
		if sim := vek32.Dot(vec, x.cent(i)); sim > bestSim {
			best, bestSim = i, sim
		}
	}
	return best
}

func (x *ivf) cent(i int) []float32 { return x.cents[i*x.dims : (i+1)*x.dims : (i+1)*x.dims] }

// split divides list li in two by 2-means (spherical, on the members'
// int8 vectors): seeds far apart, then a few rounds of assigning each
// member to the nearer centroid and recomputing both. A list that cannot
// be divided (all vectors alike) waits until it has doubled to try again.
func (x *ivf) split(li int) {
	l := x.lists[li]
	w, d, n := preWords, x.dims, len(l.slots)
	tmp, _ := splitScratch.Get().(*[]float32)
	if tmp == nil {
		tmp = new([]float32)
	}
	defer splitScratch.Put(tmp)
	if cap(*tmp) < n*d {
		*tmp = make([]float32, n*d)
	}
	vecs := (*tmp)[:n*d]
	vec := func(i int) []float32 { return vecs[i*d : (i+1)*d : (i+1)*d] }
	for i, s := range l.slots {
		x.vector(s, vec(i))
	}
	farthest := func(from []float32) int {
		best, bestSim := 0, float32(2)
		for i := range n {
			if sim := vek32.Dot(vec(i), from); sim < bestSim {
				best, bestSim = i, sim
			}
		}
		return best
	}
	a := farthest(x.cent(li))
	b := farthest(vec(a))
	ca, cb := append([]float32(nil), vec(a)...), append([]float32(nil), vec(b)...)
	sa, sb := make([]float32, d), make([]float32, d)
	side := make([]bool, n) // true: b's
	var na, nb int
	for round := 0; ; round++ {
		na, nb = 0, 0
		clear(sa)
		clear(sb)
		for i := range n {
			v := vec(i)
			side[i] = vek32.Dot(v, cb) > vek32.Dot(v, ca)
			if side[i] {
				nb++
				vek32.Add_Inplace(sb, v)
			} else {
				na++
				vek32.Add_Inplace(sa, v)
			}
		}
		if na == 0 || nb == 0 || round == 4 {
			break
		}
		normalize(ca, sa)
		normalize(cb, sb)
	}
	if na == 0 || nb == 0 {
		l.splitAt *= 2
		return
	}
	nl := &ivfList{codes: make([]uint64, 0, nb*w), slots: make([]int32, 0, nb), sum: sb, splitAt: x.listSize}
	nli := int32(len(x.lists))
	keep := 0
	for i := range n {
		s := l.slots[i]
		code := l.codes[i*w : (i+1)*w]
		if side[i] {
			x.loc[s] = ivfLoc{nli, int32(len(nl.slots))}
			nl.slots = append(nl.slots, s)
			nl.codes = append(nl.codes, code...)
			continue
		}
		if keep != i {
			l.slots[keep] = s
			copy(l.codes[keep*w:(keep+1)*w], code)
		}
		x.loc[s] = ivfLoc{int32(li), int32(keep)}
		keep++
	}
	l.slots, l.codes = l.slots[:keep], l.codes[:keep*w]
	if cap(l.codes) > 2*len(l.codes) { // give back what the split emptied
		l.codes = append([]uint64(nil), l.codes...)
		l.slots = append([]int32(nil), l.slots...)
	}
	l.sum, l.splitAt = sa, x.listSize
	x.cents = append(x.cents, make([]float32, d)...)
	x.lists = append(x.lists, nl)
	x.center(li)
	x.center(int(nli))
	x.reassign(li, int(nli))
}

// reassignNear is the number of lists, nearest a split's two, whose
// members reassign considers.
const reassignNear = 8

// reassign keeps lists consistent with their centroids after list a split
// into a and b: a vector belongs in the list of its nearest centroid, but
// the split moved two centroids. Members of a and b move to the nearest of
// the lists around them, and members of those lists to a or b when nearer.
// Without it, a fifth of the vectors ended up outside their nearest list
// and a query needed more probes to find them.
func (x *ivf) reassign(a, b int) {
	near := x.nearLists(x.cent(a), reassignNear, []int{a, b})
	near = x.nearLists(x.cent(b), reassignNear, near)
	type move struct{ s, from, to int32 }
	var moves []move
	v := x.buf[:x.dims]
	for _, li := range near {
		cands := near
		if li != a && li != b {
			cands = []int{a, b}
		}
		for _, s := range x.lists[li].slots {
			x.vector(s, v)
			best, bestSim := li, vek32.Dot(v, x.cent(li))
			for _, c := range cands {
				if c == li {
					continue
				}
				if sim := vek32.Dot(v, x.cent(c)); sim > bestSim {
					best, bestSim = c, sim
				}
			}
			if best != li {
				moves = append(moves, move{s, int32(li), int32(best)})
			}
		}
	}
	if len(moves) == 0 {
		return
	}
	w := preWords
	for _, m := range moves {
		at := x.loc[m.s]
		from, to := x.lists[m.from], x.lists[m.to]
		x.loc[m.s] = ivfLoc{m.to, int32(len(to.slots))}
		to.slots = append(to.slots, m.s)
		to.codes = append(to.codes, from.codes[int(at.pos)*w:int(at.pos+1)*w]...)
		x.cut(from, at.pos)
		x.vector(m.s, v)
		vek32.Sub_Inplace(from.sum, v)
		vek32.Add_Inplace(to.sum, v)
	}
	for _, li := range near {
		x.center(li)
	}
	// a list emptied by the moves is dropped, highest number first so
	// that dropping one does not renumber another still to check
	slices.Sort(near)
	for i := len(near) - 1; i >= 0; i-- {
		if len(x.lists[near[i]].slots) == 0 {
			x.dropList(near[i])
		}
	}
}

// nearLists appends to dst the k lists whose centroids are nearest c,
// leaving out those already in dst.
func (x *ivf) nearLists(c []float32, k int, dst []int) []int {
	var h minHeap // by similarity x 2^20, the least similar on top
	for i := range x.lists {
		if slices.Contains(dst, i) {
			continue
		}
		sim := int(vek32.Dot(c, x.cent(i)) * (1 << 20))
		if len(h) < k {
			h.push(cand{sim, int32(i)})
		} else if sim > h[0].d {
			h.replaceTop(cand{sim, int32(i)})
		}
	}
	for _, c := range h {
		dst = append(dst, int(c.s))
	}
	return dst
}

// ivfScratch is one search's working memory, pooled.
type ivfScratch struct {
	buf   []float32
	q     []uint64
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

// search appends to sc.out up to n slots that keep accepts, of Hamming
// distance at most maxD to vec's code, nearest first, from the probes lists
// nearest vec. minSim bounds the distances as maxD does.
func (x *ivf) search(vec []float32, probes, n int, minSim float32, sc *ivfScratch, keep func(int32) bool) []cand {
	if len(sc.buf) != len(x.buf) {
		sc.buf, sc.q = make([]float32, len(x.buf)), make([]uint64, x.words)
	}
	q := sc.q
	x.rot.code(q, vec, sc.buf)
	sc.lists, sc.dist, sc.pre, sc.found.h, sc.out = sc.lists[:0], sc.dist[:0], sc.pre[:0], sc.found.h[:0], sc.out[:0]
	for i := range x.lists {
		sim := int(vek32.Dot(vec, x.cent(i)) * (1 << 20))
		if len(sc.lists) < probes {
			sc.lists.push(cand{sim, int32(i)})
		} else if sim > sc.lists[0].d {
			sc.lists.pop()
			sc.lists.push(cand{sim, int32(i)})
		}
	}
	// Two passes instead of a heap: the prefix distances and their
	// histogram, then the members at or under the distance that admits
	// n*preFactor of them.
	var hist [preWords*64 + 1]int32
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
	j := 0
	for _, lc := range sc.lists {
		l := x.lists[lc.s]
		dist := sc.dist[j : j+len(l.slots)]
		j += len(l.slots)
		for i, d := range dist {
			if int(d) < cut || int(d) == cut && atCut > 0 {
				if int(d) == cut {
					atCut--
				}
				sc.pre = append(sc.pre, cand{int(d), l.slots[i]})
			}
		}
	}
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

// scanPrefix appends to dist the distances of q to list l's members by
// their codes' first preWords words, and counts them in hist. Expiry is
// checked later, on the few kept.
func scanPrefix(q []uint64, l *ivfList, dist []uint8, hist *[preWords*64 + 1]int32) []uint8 {
	q0, q1 := q[0], q[1]
	codes := l.codes[:2*len(l.slots)]
	for i := range l.slots {
		d := bits.OnesCount64(q0^codes[2*i]) + bits.OnesCount64(q1^codes[2*i+1])
		dist = append(dist, uint8(d))
		hist[d]++
	}
	return dist
}

// keep adds c to a heap of at most n and returns the distance a newcomer
// must beat: bound until the heap is full, then its farthest.
func (p *maxHeap) keep(c cand, n, bound int) int {
	if len(p.h) < n {
		p.push(c)
	} else {
		p.h.replaceTop(cand{-c.d, c.s})
	}
	if len(p.h) == n {
		return min(bound, p.farthest())
	}
	return bound
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

// cand is a slot (or a list) and its Hamming distance to the query.
type cand struct {
	d int
	s int32
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

// code writes the sign bits of the rotated vec (zero-padded to n) to dst,
// using buf (len n) as scratch.
func (r rotation) code(dst []uint64, vec []float32, buf []float32) {
	buf = buf[:r.n]
	copy(buf, vec)
	clear(buf[len(vec):])
	for _, sg := range r.signs {
		sg = sg[:len(buf)]
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
	h := 1
	if len(a)%8 == 0 { // the first three rounds at once, eight values at a time
		for i := 0; i+8 <= len(a); i += 8 {
			v := (*[8]float32)(a[i : i+8])
			a0, a1 := v[0]+v[1], v[0]-v[1]
			a2, a3 := v[2]+v[3], v[2]-v[3]
			a4, a5 := v[4]+v[5], v[4]-v[5]
			a6, a7 := v[6]+v[7], v[6]-v[7]
			b0, b1, b2, b3 := a0+a2, a1+a3, a0-a2, a1-a3
			b4, b5, b6, b7 := a4+a6, a5+a7, a4-a6, a5-a7
			v[0], v[1], v[2], v[3] = b0+b4, b1+b5, b2+b6, b3+b7
			v[4], v[5], v[6], v[7] = b0-b4, b1-b5, b2-b6, b3-b7
		}
		h = 8
	}
	for ; h < len(a); h *= 2 {
		for i := 0; i < len(a); i += 2 * h {
			x, y := a[i:i+h], a[i+h:i+2*h]
			y = y[:len(x)]
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
	*p = a[:last]
	p.down()
	return top
}

// replaceTop puts c in place of the top: a pop and a push in one pass.
func (p *minHeap) replaceTop(c cand) {
	(*p)[0] = c
	p.down()
}

// down moves the top down to its place.
func (p *minHeap) down() {
	a := *p
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
}

// maxHeap keeps the farthest on top: a minHeap of negated distances.
type maxHeap struct{ h minHeap }

func (p *maxHeap) push(c cand) { p.h.push(cand{-c.d, c.s}) }

func (p *maxHeap) pop() cand {
	c := p.h.pop()
	return cand{-c.d, c.s}
}

func (p *maxHeap) farthest() int { return -p.h[0].d }
