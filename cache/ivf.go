package cache

import (
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
	rot         *rotation
	// layout counts the renumberings of the lists (a dropped list's
	// number goes to the last one). A split only appends a list.
	layout uint64

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
	return &ivf{dims: dims, words: padded / 64, listSize: listSize, rot: sharedRotation(padded), buf: make([]float32, padded)}
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

// insert stores q's vector (L2-normalised, len dims) in the free slot s.
// Its codes come from q, computed before the index was locked, and its list
// is the nearest of those q's last search ranked nearest, re-measured now,
// while no list has been added or dropped since (else all are ranked).
func (x *ivf) insert(s int32, q *VecQuery) {
	vec := q.vec
	q8, scale := q.int8Codes()
	copy(x.codes.row(s, x.dims), q8)
	x.scales[s] = scale
	code := x.bin.row(s, x.words)
	copy(code, q.codeOf(x.words))
	li := x.nearestOf(q)
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
	x.layout++
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

// nearestOf is the list whose centroid is nearest q's vector (-1: none):
// while q holds a ranking of x's lists and none was renumbered since, the
// nearest of the lists it ranked and of those split off since, measured
// now; else the nearest of all.
func (x *ivf) nearestOf(q *VecQuery) int {
	if !q.ranked(x) {
		return x.nearestList(q.vec)
	}
	best, bestSim := -1, float32(-2)
	try := func(i int) {
		if sim := vek32.Dot(q.vec, x.cent(i)); sim > bestSim || sim == bestSim && i < best {
			best, bestSim = i, sim
		}
	}
	for _, i := range q.rank.lists {
		try(int(i))
	}
	for i := q.rank.nLists; i < len(x.lists); i++ {
		try(i)
	}
	return best
}

// rank keeps in q the n lists nearest q's vector, for its insert.
func (x *ivf) rank(q *VecQuery, n int) {
	var h minHeap
	x.rankLists(q.vec, n, &h)
	q.setRank(x, h)
}

// rankLists sets h to the n lists whose centroids are nearest vec, by
// similarity x 2^20, the least similar on top.
func (x *ivf) rankLists(vec []float32, n int, h *minHeap) {
	*h = (*h)[:0]
	for i := range x.lists {
		sim := int(vek32.Dot(vec, x.cent(i)) * (1 << 20))
		if len(*h) < n {
			h.push(cand{sim, int32(i)})
		} else if sim > (*h)[0].d {
			h.replaceTop(cand{sim, int32(i)})
		}
	}
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
