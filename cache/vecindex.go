package cache

import (
	"fmt"
	"sync"
	"time"

	"github.com/viterin/vek/vek32"
)

// IndexConfig tunes a VectorIndex.
type IndexConfig struct {
	// ExactMax is the scope size up to which search scans every float32
	// vector exactly (SIMD dot products). A scope that grows past it
	// moves to an HNSW graph over compact codes (see hnsw).
	ExactMax int `yaml:"exact_max"`
	// M is the graph's links per node (2*M on the bottom layer).
	M int `yaml:"m"`
	// EfConstruction is the candidate list size while inserting.
	EfConstruction int `yaml:"ef_construction"`
	// EfSearch is the candidate list size of a search; the candidates
	// are then re-ranked by cosine.
	EfSearch int `yaml:"ef_search"`
}

// DefaultIndexConfig returns the settings measured by bench/semantic-scale.
func DefaultIndexConfig() IndexConfig {
	return IndexConfig{ExactMax: 1024, M: 16, EfConstruction: 100, EfSearch: 64}
}

// Validate reports settings that cannot work.
func (c IndexConfig) Validate() error {
	switch {
	case c.ExactMax < 0:
		return fmt.Errorf("exact_max must be >= 0, got %d", c.ExactMax)
	case c.M < 4 || c.M > 64:
		return fmt.Errorf("m must be within 4..64, got %d", c.M)
	case c.EfConstruction < c.M:
		return fmt.Errorf("ef_construction must be >= m (%d), got %d", c.M, c.EfConstruction)
	case c.EfSearch < 1 || c.EfSearch > 4096:
		return fmt.Errorf("ef_search must be within 1..4096, got %d", c.EfSearch)
	}
	return nil
}

// IndexHit is one search result of a VectorIndex.
type IndexHit struct {
	ID         string
	Similarity float32
}

// VectorIndex is an in-process nearest-neighbour index over L2-normalised
// vectors, partitioned by scope. Search never crosses scopes. Scopes of up
// to ExactMax vectors keep float32 vectors and are scanned exactly with
// SIMD dot products; larger ones move to an HNSW graph over sign bits and
// int8 codes (about 3.5x smaller), whose candidates are re-ranked by
// cosine on the int8 codes (error about 0.002; see hnsw). It is safe for
// concurrent use: searches share a read lock, writers take the write lock.
type VectorIndex struct {
	dims int
	cfg  IndexConfig

	mu     sync.RWMutex
	scopes map[string]scopeIndex
	where  map[string]scopeIndex // id -> its scope
}

// scopeIndex is one scope's vectors, flat or in a graph.
type scopeIndex interface {
	add(id string, vec []float32, exp int64)
	remove(id string) bool
	search(vec []float32, k int, nowNs int64) []IndexHit
	appendExpired(dst []string, nowNs int64) []string
	expiry(id string) int64
	size() int
}

// NewVectorIndex makes an index for vectors of dims floats with the
// default settings.
func NewVectorIndex(dims int) *VectorIndex {
	return NewVectorIndexWith(dims, DefaultIndexConfig())
}

// NewVectorIndexWith makes an index with cfg (assumed valid).
func NewVectorIndexWith(dims int, cfg IndexConfig) *VectorIndex {
	return &VectorIndex{dims: dims, cfg: cfg, scopes: map[string]scopeIndex{}, where: map[string]scopeIndex{}}
}

// Dims returns the vector length.
func (x *VectorIndex) Dims() int { return x.dims }

// SetEfSearch changes the candidate list size of searches, at once and for
// every scope (like RediSearch's EF_RUNTIME): recall against latency.
func (x *VectorIndex) SetEfSearch(ef int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cfg.EfSearch = ef
	for _, s := range x.scopes {
		if g, ok := s.(*graphScope); ok {
			g.efSearch = ef
		}
	}
}

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
		s = &flatScope{dims: x.dims, pos: map[string]int{}}
		x.scopes[scope] = s
	}
	if f, ok := s.(*flatScope); ok && f.size() >= x.cfg.ExactMax {
		g := f.toGraph(x.cfg)
		for _, fid := range f.ids {
			x.where[fid] = g
		}
		s = g
		x.scopes[scope] = s
	}
	s.add(id, vec, exp)
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
	s.remove(id)
	delete(x.where, id)
	if s.size() == 0 {
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
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.scopes[scope]
	if s == nil {
		return nil
	}
	return s.search(vec, k, now.UnixNano())
}

// flatScope keeps float32 vectors, scanned exactly.
type flatScope struct {
	dims    int
	ids     []string
	vecs    []float32 // len(ids) * dims
	expires []int64   // unix nanoseconds; 0 = never
	pos     map[string]int
}

func (s *flatScope) size() int { return len(s.ids) }

func (s *flatScope) add(id string, vec []float32, exp int64) {
	s.pos[id] = len(s.ids)
	s.ids = append(s.ids, id)
	s.vecs = append(s.vecs, vec...)
	s.expires = append(s.expires, exp)
}

func (s *flatScope) remove(id string) bool {
	i, ok := s.pos[id]
	if !ok {
		return false
	}
	last := len(s.ids) - 1
	if i != last {
		moved := s.ids[last]
		s.ids[i] = moved
		copy(s.vecs[i*s.dims:(i+1)*s.dims], s.vecs[last*s.dims:])
		s.expires[i] = s.expires[last]
		s.pos[moved] = i
	}
	s.ids, s.vecs, s.expires = s.ids[:last], s.vecs[:last*s.dims], s.expires[:last]
	delete(s.pos, id)
	return true
}

func (s *flatScope) expiry(id string) int64 { return s.expires[s.pos[id]] }

func (s *flatScope) appendExpired(dst []string, nowNs int64) []string {
	for i, e := range s.expires {
		if e != 0 && e <= nowNs {
			dst = append(dst, s.ids[i])
		}
	}
	return dst
}

func (s *flatScope) search(vec []float32, k int, nowNs int64) []IndexHit {
	hits := make([]IndexHit, 0, min(k, len(s.ids))+1)
	for i := range s.ids {
		if e := s.expires[i]; e != 0 && e <= nowNs {
			continue
		}
		hits = pushHit(hits, k, IndexHit{ID: s.ids[i], Similarity: vek32.Dot(vec, s.vecs[i*s.dims:(i+1)*s.dims])})
	}
	return hits
}

// pushHit inserts h into hits (most similar first, at most k).
func pushHit(hits []IndexHit, k int, h IndexHit) []IndexHit {
	if len(hits) == k && h.Similarity <= hits[k-1].Similarity {
		return hits
	}
	j := len(hits)
	if j < k {
		hits = append(hits, IndexHit{})
	} else {
		j = k - 1
	}
	for j > 0 && hits[j-1].Similarity < h.Similarity {
		hits[j] = hits[j-1]
		j--
	}
	hits[j] = h
	return hits
}

// toGraph moves the scope's vectors into a graph with cfg, the index's current settings (SetEfSearch included).
func (s *flatScope) toGraph(cfg IndexConfig) *graphScope {
	g := newGraphScope(s.dims, cfg)
	for i, id := range s.ids {
		g.add(id, s.vecs[i*s.dims:(i+1)*s.dims], s.expires[i])
	}
	return g
}

// graphScope keeps a scope's vectors in an HNSW graph, by slot.
type graphScope struct {
	g        *hnsw
	efSearch int
	ids      []string // slot -> id; "" for a free slot
	expires  []int64
	pos      map[string]int32
	free     []int32
	visits   sync.Pool // *visitSet, one per concurrent search
}

func newGraphScope(dims int, cfg IndexConfig) *graphScope {
	return &graphScope{g: newHNSW(dims, cfg.M, cfg.EfConstruction), efSearch: cfg.EfSearch, pos: map[string]int32{}}
}

func (s *graphScope) size() int { return len(s.pos) }

func (s *graphScope) alive(slot int32) bool { return s.ids[slot] != "" }

func (s *graphScope) add(id string, vec []float32, exp int64) {
	var slot int32
	if n := len(s.free); n > 0 {
		slot, s.free = s.free[n-1], s.free[:n-1]
		s.ids[slot], s.expires[slot] = id, exp
	} else {
		slot = s.g.grow()
		s.ids = append(s.ids, id)
		s.expires = append(s.expires, exp)
	}
	s.pos[id] = slot
	s.g.set(slot, vec)
	s.g.insert(slot, s.alive)
}

func (s *graphScope) remove(id string) bool {
	slot, ok := s.pos[id]
	if !ok {
		return false
	}
	delete(s.pos, id)
	s.ids[slot], s.expires[slot] = "", 0
	s.g.unlink(slot, s.alive)
	s.free = append(s.free, slot)
	return true
}

func (s *graphScope) expiry(id string) int64 { return s.expires[s.pos[id]] }

func (s *graphScope) appendExpired(dst []string, nowNs int64) []string {
	for i, e := range s.expires {
		if e != 0 && e <= nowNs && s.ids[i] != "" {
			dst = append(dst, s.ids[i])
		}
	}
	return dst
}

func (s *graphScope) search(vec []float32, k int, nowNs int64) []IndexHit {
	q := make([]uint64, s.g.words)
	s.g.rot.code(q, vec)
	vs, _ := s.visits.Get().(*visitSet)
	if vs == nil {
		vs = &visitSet{}
	}
	live := func(slot int32) bool {
		e := s.expires[slot]
		return s.ids[slot] != "" && (e == 0 || e > nowNs)
	}
	found := s.g.search(q, max(s.efSearch, k), vs, live)
	s.visits.Put(vs)
	hits := make([]IndexHit, 0, min(k, len(found))+1)
	for _, c := range found {
		hits = pushHit(hits, k, IndexHit{ID: s.ids[c.s], Similarity: s.g.similarity(vec, c.s)})
	}
	return hits
}

// Sweep removes expired vectors and returns their ids.
func (x *VectorIndex) Sweep(now time.Time) []string {
	nowNs := now.UnixNano()
	var dead []string
	x.mu.RLock()
	for _, s := range x.scopes {
		dead = s.appendExpired(dead, nowNs)
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
			if e := s.expiry(id); e != 0 && e <= nowNs {
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
