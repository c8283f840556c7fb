package cache

import (
	"math/bits"
	"sync"
	"time"

	"github.com/viterin/vek/vek32"
)

// exactScanMax is the scope size up to which search scans every vector
// exactly. Larger scopes are pre-filtered by Hamming distance over sign bits
// and the best candidates re-ranked exactly (see VectorIndex).
const exactScanMax = 1024

// rerankMin is how many prefiltered candidates are re-ranked exactly at least.
const rerankMin = 64

// IndexHit is one search result of a VectorIndex.
type IndexHit struct {
	ID         string
	Similarity float32
}

// VectorIndex is an in-process nearest-neighbour index over L2-normalised
// vectors, partitioned by scope. Search never crosses scopes. Small scopes
// are scanned exactly with SIMD dot products; large ones are first ranked by
// the Hamming distance of the vectors' sign bits (8 words for 512 dims) and
// then the best max(8k, 64) are scored exactly. Vectors with a cosine above
// ~0.8 sit at the head of the Hamming ranking, which is the range a semantic
// cache acts on. It is safe for concurrent use.
type VectorIndex struct {
	dims  int
	words int // uint64 words of sign bits per vector

	mu     sync.RWMutex
	scopes map[string]*scopeVectors
	where  map[string]*scopeVectors // id -> its scope
}

type scopeVectors struct {
	ids     []string
	vecs    []float32 // len(ids) * dims
	signs   []uint64  // len(ids) * words
	expires []int64   // unix nanoseconds; 0 = never
	pos     map[string]int
}

// NewVectorIndex makes an index for vectors of dims floats.
func NewVectorIndex(dims int) *VectorIndex {
	return &VectorIndex{dims: dims, words: (dims + 63) / 64, scopes: map[string]*scopeVectors{}, where: map[string]*scopeVectors{}}
}

// Dims returns the vector length.
func (x *VectorIndex) Dims() int { return x.dims }

// Add indexes vec under id in scope, replacing an earlier vector of id.
// A zero expires never expires.
func (x *VectorIndex) Add(scope, id string, vec []float32, expires time.Time) {
	if len(vec) != x.dims {
		return
	}
	var exp int64
	if !expires.IsZero() {
		exp = expires.UnixNano()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(id)
	s := x.scopes[scope]
	if s == nil {
		s = &scopeVectors{pos: map[string]int{}}
		x.scopes[scope] = s
	}
	s.pos[id] = len(s.ids)
	s.ids = append(s.ids, id)
	s.vecs = append(s.vecs, vec...)
	s.signs = appendSigns(s.signs, vec, x.words)
	s.expires = append(s.expires, exp)
	x.where[id] = s
}

// Remove drops id and reports whether it was there.
func (x *VectorIndex) Remove(id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.removeLocked(id)
}

func (x *VectorIndex) removeLocked(id string) bool {
	s := x.where[id]
	if s == nil {
		return false
	}
	i, last := s.pos[id], len(s.ids)-1
	if i != last {
		moved := s.ids[last]
		s.ids[i] = moved
		copy(s.vecs[i*x.dims:(i+1)*x.dims], s.vecs[last*x.dims:])
		copy(s.signs[i*x.words:(i+1)*x.words], s.signs[last*x.words:])
		s.expires[i] = s.expires[last]
		s.pos[moved] = i
	}
	s.ids, s.vecs, s.signs, s.expires = s.ids[:last], s.vecs[:last*x.dims], s.signs[:last*x.words], s.expires[:last]
	delete(s.pos, id)
	delete(x.where, id)
	if len(s.ids) == 0 {
		for name, sv := range x.scopes {
			if sv == s {
				delete(x.scopes, name)
				break
			}
		}
	}
	return true
}

// Search returns up to k live vectors of scope, most similar first.
func (x *VectorIndex) Search(scope string, vec []float32, k int, now time.Time) []IndexHit {
	if len(vec) != x.dims || k <= 0 {
		return nil
	}
	nowNs := now.UnixNano()
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.scopes[scope]
	if s == nil {
		return nil
	}
	n := len(s.ids)
	live := func(i int) bool { return s.expires[i] == 0 || s.expires[i] > nowNs }
	var cand []int
	if n > exactScanMax {
		cand = x.prefilter(s, vec, max(8*k, rerankMin), live)
	}
	hits := make([]IndexHit, 0, k+1)
	for c := 0; c < n; c++ {
		i := c
		if cand != nil {
			if c >= len(cand) {
				break
			}
			i = cand[c]
		} else if !live(i) {
			continue
		}
		sim := vek32.Dot(vec, s.vecs[i*x.dims:(i+1)*x.dims])
		if len(hits) == k && sim <= hits[k-1].Similarity {
			continue
		}
		j := len(hits)
		if j < k {
			hits = append(hits, IndexHit{})
		} else {
			j = k - 1
		}
		for j > 0 && hits[j-1].Similarity < sim {
			hits[j] = hits[j-1]
			j--
		}
		hits[j] = IndexHit{ID: s.ids[i], Similarity: sim}
	}
	return hits
}

// prefilter returns the r live vectors whose sign bits are nearest to vec's.
func (x *VectorIndex) prefilter(s *scopeVectors, vec []float32, r int, live func(int) bool) []int {
	q := appendSigns(make([]uint64, 0, x.words), vec, x.words)
	type cd struct{ i, d int }
	heap := make([]cd, 0, r) // max-heap on d
	push := func(c cd) {
		heap = append(heap, c)
		for j := len(heap) - 1; j > 0; {
			p := (j - 1) / 2
			if heap[p].d >= heap[j].d {
				break
			}
			heap[p], heap[j] = heap[j], heap[p]
			j = p
		}
	}
	replaceTop := func(c cd) {
		heap[0] = c
		for j := 0; ; {
			l, big := 2*j+1, j
			if l < len(heap) && heap[l].d > heap[big].d {
				big = l
			}
			if l+1 < len(heap) && heap[l+1].d > heap[big].d {
				big = l + 1
			}
			if big == j {
				break
			}
			heap[j], heap[big] = heap[big], heap[j]
			j = big
		}
	}
	w := x.words
	var q8 [8]uint64
	copy(q8[:], q)
	for i := 0; i < len(s.ids); i++ {
		d := 0
		if w == 8 {
			r := (*[8]uint64)(s.signs[i*8 : i*8+8])
			d = bits.OnesCount64(r[0]^q8[0]) + bits.OnesCount64(r[1]^q8[1]) + bits.OnesCount64(r[2]^q8[2]) + bits.OnesCount64(r[3]^q8[3]) +
				bits.OnesCount64(r[4]^q8[4]) + bits.OnesCount64(r[5]^q8[5]) + bits.OnesCount64(r[6]^q8[6]) + bits.OnesCount64(r[7]^q8[7])
		} else {
			row := s.signs[i*w : (i+1)*w]
			for j, v := range row {
				d += bits.OnesCount64(v ^ q[j])
			}
		}
		if len(heap) < r {
			if live(i) {
				push(cd{i, d})
			}
		} else if d < heap[0].d && live(i) {
			replaceTop(cd{i, d})
		}
	}
	out := make([]int, len(heap))
	for j, c := range heap {
		out[j] = c.i
	}
	return out
}

// Sweep removes expired vectors and returns their ids.
func (x *VectorIndex) Sweep(now time.Time) []string {
	nowNs := now.UnixNano()
	var dead []string
	x.mu.RLock()
	for _, s := range x.scopes {
		for i, e := range s.expires {
			if e != 0 && e <= nowNs {
				dead = append(dead, s.ids[i])
			}
		}
	}
	x.mu.RUnlock()
	if len(dead) == 0 {
		return nil
	}
	x.mu.Lock()
	removed := dead[:0]
	for _, id := range dead {
		// Re-check under the write lock: the id may have been re-added
		// with a later expiry since the scan.
		if s := x.where[id]; s != nil {
			if e := s.expires[s.pos[id]]; e != 0 && e <= nowNs {
				x.removeLocked(id)
				removed = append(removed, id)
			}
		}
	}
	x.mu.Unlock()
	return removed
}

// Len returns the number of vectors; Scopes the number of non-empty scopes.
func (x *VectorIndex) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.where)
}

// Scopes returns the number of non-empty scopes.
func (x *VectorIndex) Scopes() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.scopes)
}

func appendSigns(dst []uint64, vec []float32, words int) []uint64 {
	start := len(dst)
	for i := 0; i < words; i++ {
		dst = append(dst, 0)
	}
	for i, v := range vec {
		if v > 0 {
			dst[start+i/64] |= 1 << (i % 64)
		}
	}
	return dst
}
