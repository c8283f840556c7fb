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
	// moves to lists of compact codes (see ivf).
	ExactMax int `yaml:"exact_max"`
	// ListSize is the size past which a list splits in two.
	ListSize int `yaml:"list_size"`
	// Probes is the number of lists, nearest the query first, that a
	// search scans.
	Probes int `yaml:"probes"`
	// Rerank is the number of candidates, nearest by Hamming distance,
	// that a search re-ranks by cosine (at least k).
	Rerank int `yaml:"rerank"`
}

// DefaultIndexConfig returns the settings measured by bench/semantic-scale.
func DefaultIndexConfig() IndexConfig {
	return IndexConfig{ExactMax: 1024, ListSize: 1024, Probes: 32, Rerank: 32}
}

// Validate reports settings that cannot work.
func (c IndexConfig) Validate() error {
	switch {
	case c.ExactMax < 0:
		return fmt.Errorf("exact_max must be >= 0, got %d", c.ExactMax)
	case c.ListSize < 16 || c.ListSize > 1<<20:
		return fmt.Errorf("list_size must be within 16..1048576, got %d", c.ListSize)
	case c.Probes < 1 || c.Probes > 1<<16:
		return fmt.Errorf("probes must be within 1..65536, got %d", c.Probes)
	case c.Rerank < 1 || c.Rerank > 4096:
		return fmt.Errorf("rerank must be within 1..4096, got %d", c.Rerank)
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
// SIMD dot products; larger ones move to an inverted file over sign bits
// and int8 codes (about 3.5x smaller), whose candidates are re-ranked by
// cosine on the int8 codes (error about 0.002; see ivf). It is safe for
// concurrent use: searches share a read lock, writers take the write lock.
type VectorIndex struct {
	dims int
	cfg  IndexConfig

	mu     sync.RWMutex
	scopes map[string]scopeIndex
	where  map[string]scopeIndex // id -> its scope
}

// scopeIndex is one scope's vectors, flat or in lists.
type scopeIndex interface {
	add(id string, q *VecQuery, exp int64)
	remove(id string) bool
	search(q *VecQuery, k int, minSim float32, nowNs int64) []IndexHit
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

// SetSearch changes the lists a search scans and the candidates it
// re-ranks, at once and for every scope: recall against latency.
func (x *VectorIndex) SetSearch(probes, rerank int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cfg.Probes, x.cfg.Rerank = probes, rerank
	for _, s := range x.scopes {
		if g, ok := s.(*listScope); ok {
			g.probes, g.rerank = probes, rerank
		}
	}
}

// Add indexes vec under id in scope, replacing an earlier vector of id.
// A zero expires never expires.
func (x *VectorIndex) Add(scope, id string, vec []float32, expires time.Time) {
	x.AddQuery(scope, id, NewVecQuery(vec), expires)
}

// insertRank is how many lists an insert that no search ranked for ranks
// nearest (under the read lock), to pick the nearest under the write lock.
const insertRank = 8

// AddQuery is Add for a prepared query: a search's query, whose codes and
// list ranking the insert reuses. The write lock is held only to place the
// vector: its codes are computed before, and the lists are ranked before
// under the read lock when no search ranked them; under the write lock the
// insert re-measures only the few nearest ranked.
func (x *VectorIndex) AddQuery(scope, id string, q *VecQuery, expires time.Time) {
	if len(q.vec) != x.dims {
		return
	}
	var exp int64
	if !expires.IsZero() {
		exp = expires.UnixNano()
	}
	q.int8Codes()
	x.mu.RLock()
	if g, ok := x.scopes[scope].(*listScope); ok {
		q.codeOf(g.x.words)
		if !q.ranked(g.x) {
			g.x.rank(q, insertRank)
		}
	}
	x.mu.RUnlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(id)
	s := x.scopes[scope]
	if s == nil {
		s = &flatScope{dims: x.dims, pos: map[string]int{}}
		x.scopes[scope] = s
	}
	if f, ok := s.(*flatScope); ok && f.size() >= x.cfg.ExactMax {
		g := f.toLists(x.cfg)
		for _, fid := range f.ids {
			x.where[fid] = g
		}
		s = g
		x.scopes[scope] = s
	}
	s.add(id, q, exp)
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
	return x.SearchMin(scope, vec, k, -1, now)
}

// SearchMin is Search for hits of similarity at least minSim only. It is
// cheaper than Search followed by a filter: in a large scope, candidates
// too far by Hamming distance to reach minSim are never re-ranked, so a
// query without a close match (a cache miss) costs only the scan.
func (x *VectorIndex) SearchMin(scope string, vec []float32, k int, minSim float32, now time.Time) []IndexHit {
	return x.SearchQuery(scope, NewVecQuery(vec), k, minSim, now)
}

// SearchQuery is SearchMin for a prepared query, which keeps what the
// search computed for an insert of the same vector (AddQuery).
func (x *VectorIndex) SearchQuery(scope string, q *VecQuery, k int, minSim float32, now time.Time) []IndexHit {
	if len(q.vec) != x.dims || k <= 0 {
		return nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.scopes[scope]
	if s == nil {
		return nil
	}
	return s.search(q, k, minSim, now.UnixNano())
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

func (s *flatScope) add(id string, q *VecQuery, exp int64) {
	s.pos[id] = len(s.ids)
	s.ids = append(s.ids, id)
	s.vecs = append(s.vecs, q.vec...)
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

func (s *flatScope) search(q *VecQuery, k int, minSim float32, nowNs int64) []IndexHit {
	vec := q.vec
	hits := make([]IndexHit, 0, min(k, len(s.ids))+1)
	for i := range s.ids {
		if e := s.expires[i]; e != 0 && e <= nowNs {
			continue
		}
		if sim := vek32.Dot(vec, s.vecs[i*s.dims:(i+1)*s.dims]); sim >= minSim {
			hits = pushHit(hits, k, IndexHit{ID: s.ids[i], Similarity: sim})
		}
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

// toLists moves the scope's vectors into lists with cfg, the index's
// current settings (SetSearch included).
func (s *flatScope) toLists(cfg IndexConfig) *listScope {
	g := newListScope(s.dims, cfg)
	for i, id := range s.ids {
		g.add(id, NewVecQuery(s.vecs[i*s.dims:(i+1)*s.dims]), s.expires[i])
	}
	return g
}

// listScope keeps a scope's vectors in an inverted file, by slot.
type listScope struct {
	x              *ivf
	probes, rerank int
	ids            []string // slot -> id; "" for a free slot
	expires        []int64
	pos            map[string]int32
	free           []int32
	scratch        sync.Pool // *ivfScratch, one per concurrent search
}

func newListScope(dims int, cfg IndexConfig) *listScope {
	return &listScope{x: newIVF(dims, cfg.ListSize), probes: cfg.Probes, rerank: cfg.Rerank, pos: map[string]int32{}}
}

func (s *listScope) size() int { return len(s.pos) }

func (s *listScope) add(id string, q *VecQuery, exp int64) {
	var slot int32
	if n := len(s.free); n > 0 {
		slot, s.free = s.free[n-1], s.free[:n-1]
		s.ids[slot], s.expires[slot] = id, exp
	} else {
		slot = s.x.grow()
		s.ids = append(s.ids, id)
		s.expires = append(s.expires, exp)
	}
	s.pos[id] = slot
	s.x.insert(slot, q)
}

func (s *listScope) remove(id string) bool {
	slot, ok := s.pos[id]
	if !ok {
		return false
	}
	delete(s.pos, id)
	s.ids[slot], s.expires[slot] = "", 0
	s.x.remove(slot)
	s.free = append(s.free, slot)
	return true
}

func (s *listScope) expiry(id string) int64 { return s.expires[s.pos[id]] }

func (s *listScope) appendExpired(dst []string, nowNs int64) []string {
	for i, e := range s.expires {
		if e != 0 && e <= nowNs && s.ids[i] != "" {
			dst = append(dst, s.ids[i])
		}
	}
	return dst
}

func (s *listScope) search(q *VecQuery, k int, minSim float32, nowNs int64) []IndexHit {
	sc, _ := s.scratch.Get().(*ivfScratch)
	if sc == nil {
		sc = &ivfScratch{}
	}
	defer s.scratch.Put(sc)
	live := func(slot int32) bool {
		e := s.expires[slot]
		return e == 0 || e > nowNs
	}
	found := s.x.search(q, s.probes, max(s.rerank, k), minSim, sc, live)
	hits := make([]IndexHit, 0, min(k, len(found))+1)
	for _, c := range found {
		if sim := s.x.similarity(q.vec, c.s); sim >= minSim {
			hits = pushHit(hits, k, IndexHit{ID: s.ids[c.s], Similarity: sim})
		}
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
