package cache

import (
	"math"
	"sync"
)

// VecQuery is a vector prepared once for a VectorIndex, so that a cache
// miss computes each thing once: the lookup searches with it and the
// write-back inserts the same vector with it. It carries the vector's
// rotation code and int8 codes (computed on first use) and the lists the
// last search of a large scope ranked nearest, which the insert re-measures
// instead of ranking every list again.
//
// A VecQuery is used by one goroutine at a time (the lookup, then the
// write-back it hands the query to); its vector must not change.
type VecQuery struct {
	vec []float32

	code  []uint64 // sign bits after the rotation; nil until needed
	q8    []int8   // int8 codes of vec, by scale; nil until an insert needs them
	scale float32

	// rank is the lists of one ivf nearest vec, as of that ivf's layout
	// version (valid while no list was renumbered) when it had nLists.
	rank struct {
		x      *ivf
		layout uint64
		nLists int
		lists  []int32
	}
}

// NewVecQuery prepares vec (L2-normalised) for searches and an insert.
func NewVecQuery(vec []float32) *VecQuery { return &VecQuery{vec: vec} }

// Vec returns the query's vector.
func (q *VecQuery) Vec() []float32 { return q.vec }

// codeOf returns the query's binary code of words 64-bit words (the index's
// rotation of that width), computing it on first use.
func (q *VecQuery) codeOf(words int) []uint64 {
	if len(q.code) != words {
		r := sharedRotation(words * 64)
		bp, _ := rotScratch.Get().(*[]float32)
		if bp == nil || len(*bp) < r.n {
			b := make([]float32, r.n)
			bp = &b
		}
		q.code = make([]uint64, words)
		r.code(q.code, q.vec, *bp)
		rotScratch.Put(bp)
	}
	return q.code
}

// int8Codes returns vec as int8 codes and their scale (vec[i] is about
// codes[i]*scale), computing them on first use.
func (q *VecQuery) int8Codes() ([]int8, float32) {
	if q.q8 == nil {
		q.q8 = make([]int8, len(q.vec))
		var maxAbs float32
		for _, v := range q.vec {
			maxAbs = max(maxAbs, abs32(v))
		}
		q.scale = maxAbs / 127
		if q.scale != 0 {
			inv := 1 / q.scale
			for i, v := range q.vec {
				q.q8[i] = int8(math.Round(float64(v * inv)))
			}
		}
	}
	return q.q8, q.scale
}

// ranked reports whether the query holds a ranking of x's lists that is
// still valid.
func (q *VecQuery) ranked(x *ivf) bool {
	return q.rank.x == x && q.rank.layout == x.layout && len(q.rank.lists) > 0 && q.rank.nLists <= len(x.lists)
}

// setRank keeps lists, the lists of x nearest the query, in any order.
func (q *VecQuery) setRank(x *ivf, lists minHeap) {
	q.rank.x, q.rank.layout, q.rank.nLists = x, x.layout, len(x.lists)
	q.rank.lists = q.rank.lists[:0]
	for _, c := range lists {
		q.rank.lists = append(q.rank.lists, c.s)
	}
}

// rotScratch holds rotation buffers for queries prepared outside any lock.
var rotScratch sync.Pool // *[]float32

// rotations holds one rotation per width: every index of that width uses
// the same fixed rotation, so a code computed for one is valid for all.
var rotations sync.Map // int -> *rotation

func sharedRotation(n int) *rotation {
	if r, ok := rotations.Load(n); ok {
		return r.(*rotation)
	}
	r := newRotation(n)
	got, _ := rotations.LoadOrStore(n, &r)
	return got.(*rotation)
}
