package reuse

import (
	"cmp"
	"encoding/json"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"frontdoor/internal/warm"
	"frontdoor/router/admin"
)

// hotShards splits the hit counter so that concurrent hits rarely share a
// lock.
const hotShards = 16

// hotMaxBody is the largest request kept for export; a larger one is
// counted but can't be exported.
const hotMaxBody = 32 << 10

// hotTracker counts cache hits per entry, in this process, for
// GET /admin/cache/hot. A hit costs a map lookup and an increment under one
// of 16 shard locks; the first hit of an entry also copies its request body
// (up to 32 KiB), which the export replays. Each shard holds at most
// capacity/16 entries: when one is full, every count in it is halved and
// the entries left at zero are dropped, then the least-hit ones until it is
// three quarters full. Counts are therefore approximate (a decayed count,
// favouring what is hot now), per replica, and start at zero on restart.
type hotTracker struct {
	seed   maphash.Seed
	perCap int
	shards [hotShards]hotShard
}

type hotShard struct {
	mu sync.Mutex
	m  map[string]*hotItem
}

type hotItem struct {
	hits   uint64
	tenant string
	req    []byte // nil when too large
}

func newHotTracker(capacity int) *hotTracker {
	if capacity <= 0 {
		return nil
	}
	h := &hotTracker{seed: maphash.MakeSeed(), perCap: max(capacity/hotShards, 4)}
	for i := range h.shards {
		h.shards[i].m = map[string]*hotItem{}
	}
	return h
}

func (h *hotTracker) hit(id, tenant string, body []byte) {
	s := &h.shards[maphash.String(h.seed, id)%hotShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.m[id]; it != nil {
		it.hits++
		return
	}
	if len(s.m) >= h.perCap {
		s.shrink(h.perCap)
	}
	it := &hotItem{hits: 1, tenant: tenant}
	if len(body) <= hotMaxBody {
		it.req = append([]byte(nil), body...)
	}
	s.m[id] = it
}

// shrink halves every count, drops the zeros and, if still more than
// three quarters full, the least-hit entries. The caller holds s.mu.
func (s *hotShard) shrink(perCap int) {
	for id, it := range s.m {
		if it.hits /= 2; it.hits == 0 {
			delete(s.m, id)
		}
	}
	keep := perCap * 3 / 4
	if len(s.m) <= keep {
		return
	}
	type kv struct {
		id   string
		hits uint64
	}
	all := make([]kv, 0, len(s.m))
	for id, it := range s.m {
		all = append(all, kv{id, it.hits})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(a.hits, b.hits) })
	for _, e := range all[:len(all)-keep] {
		delete(s.m, e.id)
	}
}

// top returns up to n exportable entries (of tenant, unless ""), most hit
// first. Requests are exported without their stream fields.
func (h *hotTracker) top(n int, tenant string) []admin.HotEntry {
	var out []admin.HotEntry
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		for id, it := range s.m {
			if it.req != nil && (tenant == "" || it.tenant == tenant) {
				out = append(out, admin.HotEntry{Tenant: it.tenant, Hits: it.hits, Entry: id, Request: it.req})
			}
		}
		s.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b admin.HotEntry) int { return cmp.Compare(b.Hits, a.Hits) })
	if len(out) > n {
		out = out[:n]
	}
	for i := range out {
		if tenant != "" {
			out[i].Tenant = ""
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(out[i].Request, &m) == nil {
			delete(m, "stream")
			delete(m, "stream_options")
			out[i].Request, _ = json.Marshal(m)
		}
	}
	return out
}

// paramSets counts the parameter sets of a sample of the chat requests
// planned (one in paramSample), for frontdoor warm: warmed entries answer
// only the requests of their own set (see warm.ParamSet).
type paramSets struct {
	seen atomic.Int64 // chat requests planned
	mu   sync.Mutex
	n    int64 // requests sampled
	m    map[string]*warm.ParamSet
}

const (
	paramSample = 8  // one request in paramSample is read
	paramCap    = 64 // sets kept; past it the counts halve and the ones at 0 go
)

// add counts the parameter set of a chat request's body (Plan samples
// one in paramSample); a body over hotMaxBody is not read.
func (s *paramSets) add(body []byte) {
	if len(body) > hotMaxBody {
		return
	}
	ps, err := warm.ParamSetOf(body)
	if err != nil {
		return
	}
	key := ps.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if e := s.m[key]; e != nil {
		e.Requests++
		return
	}
	if s.m == nil {
		s.m = map[string]*warm.ParamSet{}
	}
	if len(s.m) >= paramCap {
		for k, e := range s.m {
			if e.Requests /= 2; e.Requests == 0 {
				delete(s.m, k)
			}
		}
	}
	ps.Requests = 1
	s.m[key] = &ps
}

// top returns the n sets sampled most, most first, and how many requests
// were sampled.
func (s *paramSets) top(n int) (int64, []warm.ParamSet) {
	s.mu.Lock()
	out := make([]warm.ParamSet, 0, len(s.m))
	for _, e := range s.m {
		out = append(out, *e)
	}
	sampled := s.n
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b warm.ParamSet) int {
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		return strings.Compare(a.Key(), b.Key())
	})
	if len(out) > n {
		out = out[:n]
	}
	return sampled, out
}
