package cache

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound means no live entry is stored under the key or id.
var ErrNotFound = errors.New("cache: not found")

// Match is a semantic search result.
type Match struct {
	Entry      *Entry
	Similarity float32 // cosine similarity in [-1, 1]
}

// Stats describes a store's content.
type Stats struct {
	Entries        int64  `json:"entries"`        // exact entries
	VectorEntries  int64  `json:"vector_entries"` // semantic entries
	Bytes          int64  `json:"bytes"`          // approximate memory (memory store) or 0 when unknown
	Scopes         int64  `json:"scopes"`         // semantic scopes with at least one vector
	Evictions      int64  `json:"evictions"`      // entries dropped for the byte budget
	VectorSearchBy string `json:"vector_search"`  // "local" or "redisearch"
}

// Store keeps answers under exact keys and, for semantic lookups, under
// vectors grouped by scope. Implementations are safe for concurrent use.
// Every method respects ctx; a remote store returns its errors (the caller
// fails open) and never blocks longer than its configured timeout.
type Store interface {
	// Get returns the entry stored under the exact key.
	Get(ctx context.Context, key string) (*Entry, error)
	// Put stores e under the exact key e.ExactKey for ttl. When vec is not
	// nil, e is also indexed for semantic search in e.Scope.
	Put(ctx context.Context, e *Entry, vec []float32, ttl time.Duration) error
	// Search returns up to k live entries of scope, most similar first.
	Search(ctx context.Context, scope string, vec []float32, k int) ([]Match, error)
	// Delete removes an entry by id: its exact key and its vector.
	Delete(ctx context.Context, id string) error
	// Purge removes every entry of a namespace and returns how many.
	Purge(ctx context.Context, namespace string) (int, error)
	// PurgeTag removes every entry whose Tag is tag, in every namespace,
	// and returns how many.
	PurgeTag(ctx context.Context, tag string) (int, error)
	// Stats reports the content.
	Stats(ctx context.Context) (Stats, error)
	// Close stops background work.
	Close() error
}

// QuerySearcher is a Store whose semantic search takes a prepared query
// (NewVecQuery) and a least similarity: it returns up to k live entries of
// scope of similarity at least minSim, most similar first, and may skip the
// work that candidates too far to reach minSim would cost. The query keeps
// what the search computed, for a Write of the same vector (Write.Query).
type QuerySearcher interface {
	SearchQuery(ctx context.Context, scope string, q *VecQuery, k int, minSim float32) ([]Match, error)
}

// searchQuery searches s for q: with SearchQuery when s has it, else with
// Search and a filter, so that both give the hits at or above minSim.
func searchQuery(ctx context.Context, s Store, scope string, q *VecQuery, k int, minSim float32) ([]Match, error) {
	if qs, ok := s.(QuerySearcher); ok {
		return qs.SearchQuery(ctx, scope, q, k, minSim)
	}
	ms, err := s.Search(ctx, scope, q.Vec(), k)
	return atLeast(ms, minSim), err
}

// atLeast keeps the matches of similarity at least minSim (all when minSim
// is -1 or less).
func atLeast(ms []Match, minSim float32) []Match {
	if minSim <= -1 {
		return ms
	}
	kept := ms[:0]
	for _, m := range ms {
		if m.Similarity >= minSim {
			kept = append(kept, m)
		}
	}
	return kept
}

var (
	_ QuerySearcher = (*MemoryStore)(nil)
	_ QuerySearcher = (*RedisStore)(nil)
	_ QuerySearcher = (*LazyStore)(nil)
)

// EntryGetter is a Store that can return an entry by its id, for an
// operator auditing a hit (GET /admin/cache/{id}).
type EntryGetter interface {
	// GetByID returns the live entry with this id, or ErrNotFound.
	GetByID(ctx context.Context, id string) (*Entry, error)
}

// MultiGetter is a Store that looks several exact keys up at once (an
// embeddings request's inputs): in one round trip, for a remote store.
type MultiGetter interface {
	// GetMany returns the live entry under each key, nil where there is
	// none, in the order of keys.
	GetMany(ctx context.Context, keys []string) ([]*Entry, error)
}

// getAll looks keys up in s: at once when s can, else one by one.
func getAll(ctx context.Context, s Store, keys []string) ([]*Entry, error) {
	if mg, ok := s.(MultiGetter); ok {
		return mg.GetMany(ctx, keys)
	}
	out := make([]*Entry, len(keys))
	for i, k := range keys {
		e, err := s.Get(ctx, k)
		switch {
		case err == nil:
			out[i] = e
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

var (
	_ MultiGetter = (*MemoryStore)(nil)
	_ MultiGetter = (*RedisStore)(nil)
	_ MultiGetter = (*LazyStore)(nil)
)

var (
	_ EntryGetter = (*MemoryStore)(nil)
	_ EntryGetter = (*RedisStore)(nil)
	_ EntryGetter = (*LazyStore)(nil)
)
