package cache

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// sweepInterval is how often the sweeper of a MemoryStore drops expired
// entries; sweepBatch bounds how many it removes per lock hold.
const (
	sweepInterval = time.Second
	sweepBatch    = 1024
)

// ErrEntryTooLarge means an entry (with its vector) exceeds the whole byte
// budget of a MemoryStore and was not stored.
var ErrEntryTooLarge = errors.New("cache: entry larger than the byte budget")

// MemoryStore is the in-process Store: a byte-budgeted LRU over exact keys
// with per-entry TTLs, plus a VectorIndex for semantic search. Entries are
// charged Entry.Size() plus 4*dims bytes for a vector; when the total exceeds
// the budget the least recently used entries (by Get) are evicted. Expired
// entries are dropped lazily by Get and by a sweeper goroutine about every
// second; Close stops it.
//
// Gets never wait for the vector index: mu guards the maps and the LRU list
// and is never held while the index is locked. Writers (Put, Delete, Purge,
// the sweeper) are serialised by wmu, update the maps under mu and then
// apply their index changes, removals first, after releasing mu.
//
// Put takes ownership of the *Entry and Get and Search return that same
// pointer: callers must not modify an entry once it is stored. Vectors are
// copied and must be L2-normalised, as embed.Embedder returns them.
type MemoryStore struct {
	maxBytes int64 // <= 0: unbounded
	dims     int
	index    *VectorIndex

	wmu sync.Mutex // serialises writers and their index updates

	mu        sync.Mutex
	byKey     map[string]*memItem // exact key -> item
	byID      map[string]*memItem // entry id -> item (every item)
	lru       memItem             // list sentinel: lru.next is the most recently used
	exp       expiryHeap          // items with a TTL, soonest first
	bytes     int64
	exact     int64 // items with an exact key
	vectors   int64 // items with a vector
	evictions int64
	unindex   []string // ids whose vectors the next writer removes from index

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var (
	_ Store       = (*MemoryStore)(nil)
	_ BatchPutter = (*MemoryStore)(nil)
)

// memItem is one stored entry. Its key, id and scope are those of e.
type memItem struct {
	e          *Entry
	size       int64
	expires    int64 // unix nanoseconds; 0 = never
	hasVec     bool
	heapIdx    int // position in MemoryStore.exp; -1 when not in it
	prev, next *memItem
}

// cancelled is ctx's error when it was cancelled. A passed deadline is not
// an error here: the store's calls are bounded work in this process, so a
// call that starts late was held up by the scheduler or the collector, not by
// the store, and failing it would only open the read breaker over a store
// that cannot be down.
func cancelled(ctx context.Context) error {
	if err := ctx.Err(); errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (it *memItem) expired(now int64) bool { return it.expires != 0 && it.expires <= now }

// NewMemoryStore returns a store holding at most maxBytes (<= 0: no limit)
// for vectors of dims floats, and starts its sweeper.
func NewMemoryStore(maxBytes int64, dims int) *MemoryStore {
	return NewMemoryStoreWith(maxBytes, dims, DefaultIndexConfig())
}

// NewMemoryStoreWith is NewMemoryStore with the vector index's settings.
func NewMemoryStoreWith(maxBytes int64, dims int, ic IndexConfig) *MemoryStore {
	m := &MemoryStore{
		maxBytes: maxBytes,
		dims:     dims,
		index:    NewVectorIndexWith(dims, ic),
		byKey:    map[string]*memItem{},
		byID:     map[string]*memItem{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	m.lru.next, m.lru.prev = &m.lru, &m.lru
	go m.sweeper()
	return m
}

// Get returns the live entry stored under key, or ErrNotFound, and marks it
// recently used. An expired entry is removed (its vector, already invisible
// to Search, by the next writer).
func (m *MemoryStore) Get(ctx context.Context, key string) (*Entry, error) {
	if err := cancelled(ctx); err != nil {
		return nil, fmt.Errorf("cache: memory get: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.getLocked(key, time.Now().UnixNano()); e != nil {
		return e, nil
	}
	return nil, ErrNotFound
}

// getLocked returns the live entry under key (nil: none) and marks it
// recently used; an expired one is removed.
func (m *MemoryStore) getLocked(key string, now int64) *Entry {
	it := m.byKey[key]
	if it == nil {
		return nil
	}
	if it.expired(now) {
		m.removeLocked(it)
		return nil
	}
	if m.lru.next != it {
		unlink(it)
		m.pushFront(it)
	}
	return it.e
}

// GetMany is Get for each key, nil where there is no live entry, under
// one hold of the lock.
func (m *MemoryStore) GetMany(ctx context.Context, keys []string) ([]*Entry, error) {
	if err := cancelled(ctx); err != nil {
		return nil, fmt.Errorf("cache: memory get many: %w", err)
	}
	out := make([]*Entry, len(keys))
	now := time.Now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range keys {
		out[i] = m.getLocked(k, now)
	}
	return out, nil
}

// Put stores e under e.ExactKey (when not empty) and, when vec is not nil,
// indexes it for Search in e.Scope; it replaces an entry with the same exact
// key or id. A ttl <= 0 never expires. An empty e.ID is set to NewEntryID().
// An entry needs an exact key, a vector or both.
func (m *MemoryStore) Put(ctx context.Context, e *Entry, vec []float32, ttl time.Duration) error {
	return m.put(ctx, e, vec, nil, ttl)
}

// PutBatch stores each write as Put does, indexing a write's vector with
// its prepared query (Write.Query) when it has one.
func (m *MemoryStore) PutBatch(ctx context.Context, ws []Write) error {
	var errs []error
	for i := range ws {
		w := &ws[i]
		var q *VecQuery
		if w.Vec != nil {
			q = w.query()
		}
		if err := m.put(ctx, w.Entry, w.Vec, q, w.TTL); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// put is Put; q (nil: none yet) is vec prepared for the index.
func (m *MemoryStore) put(ctx context.Context, e *Entry, vec []float32, q *VecQuery, ttl time.Duration) error {
	if err := cancelled(ctx); err != nil {
		return fmt.Errorf("cache: memory put: %w", err)
	}
	switch {
	case e == nil:
		return errors.New("cache: memory put: nil entry")
	case vec == nil && e.ExactKey == "":
		return errors.New("cache: memory put: entry has neither an exact key nor a vector")
	case vec != nil && (len(vec) != m.dims || m.dims <= 0):
		return fmt.Errorf("cache: memory put: vector has %d dims, want %d", len(vec), m.dims)
	}
	if e.ID == "" {
		e.ID = NewEntryID()
	}
	it := &memItem{e: e, size: e.Size(), hasVec: vec != nil, heapIdx: -1}
	if it.hasVec {
		it.size += 4 * int64(m.dims)
	}
	if m.maxBytes > 0 && it.size > m.maxBytes {
		return fmt.Errorf("cache: memory put %s: %w (%d > %d bytes)", e.ID, ErrEntryTooLarge, it.size, m.maxBytes)
	}
	now := time.Now()
	var expires time.Time
	if ttl > 0 {
		expires = now.Add(ttl)
		it.expires = expires.UnixNano()
	}

	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	if e.ExactKey != "" {
		if old := m.byKey[e.ExactKey]; old != nil {
			m.removeLocked(old)
		}
	}
	if old := m.byID[e.ID]; old != nil {
		m.removeLocked(old)
	}
	m.byID[e.ID] = it
	if e.ExactKey != "" {
		m.byKey[e.ExactKey] = it
		m.exact++
	}
	if it.hasVec {
		m.vectors++
	}
	if it.expires != 0 {
		heap.Push(&m.exp, it)
	}
	m.pushFront(it)
	m.bytes += it.size
	if m.maxBytes > 0 && m.bytes > m.maxBytes {
		m.sweepLocked(now.UnixNano(), -1) // expired entries go first, uncounted
		for m.bytes > m.maxBytes && m.lru.prev != it {
			m.removeLocked(m.lru.prev)
			m.evictions++
		}
	}
	m.unlockAndUnindex()
	if it.hasVec {
		if q == nil {
			q = NewVecQuery(vec)
		}
		m.index.AddQuery(e.Scope, e.ID, q, expires)
	}
	return nil
}

// Search returns up to k live entries indexed in scope, most similar to vec
// first. It does not mark them used. An entry removed while the search runs
// is left out; one re-Put under the same id may be paired with the
// similarity of its old vector.
func (m *MemoryStore) Search(ctx context.Context, scope string, vec []float32, k int) ([]Match, error) {
	return m.SearchQuery(ctx, scope, NewVecQuery(vec), k, -1)
}

// SearchQuery is Search for the entries of similarity at least minSim
// only; the index skips the candidates too far to reach it.
func (m *MemoryStore) SearchQuery(ctx context.Context, scope string, q *VecQuery, k int, minSim float32) ([]Match, error) {
	if err := cancelled(ctx); err != nil {
		return nil, fmt.Errorf("cache: memory search: %w", err)
	}
	if len(q.vec) != m.dims {
		return nil, fmt.Errorf("cache: memory search: vector has %d dims, want %d", len(q.vec), m.dims)
	}
	if k <= 0 {
		return nil, nil
	}
	now := time.Now()
	// The index has its own lock: Gets are not held up by the scan.
	hits := m.index.SearchQuery(scope, q, k, minSim, now)
	if len(hits) == 0 {
		return nil, nil
	}
	nowNs := now.UnixNano()
	out := make([]Match, 0, len(hits))
	m.mu.Lock()
	for _, h := range hits {
		it := m.byID[h.ID]
		if it == nil || !it.hasVec || it.e.Scope != scope || it.expired(nowNs) {
			continue
		}
		out = append(out, Match{Entry: it.e, Similarity: h.Similarity})
	}
	m.mu.Unlock()
	return out, nil
}

// Delete removes the entry with id, its exact key and its vector. It returns
// ErrNotFound when no live entry has that id.
func (m *MemoryStore) Delete(ctx context.Context, id string) error {
	if err := cancelled(ctx); err != nil {
		return fmt.Errorf("cache: memory delete: %w", err)
	}
	now := time.Now().UnixNano()
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	it := m.byID[id]
	if it != nil {
		m.removeLocked(it)
	}
	m.unlockAndUnindex()
	if it == nil || it.expired(now) {
		return ErrNotFound
	}
	return nil
}

// GetByID returns the live entry with this id. It does not touch the LRU
// order: an audit is no use.
func (m *MemoryStore) GetByID(ctx context.Context, id string) (*Entry, error) {
	if err := cancelled(ctx); err != nil {
		return nil, fmt.Errorf("cache: memory get by id: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.byID[id]
	if it == nil || it.expired(time.Now().UnixNano()) {
		return nil, ErrNotFound
	}
	return it.e, nil
}

// Purge removes every entry of namespace and returns how many were live.
func (m *MemoryStore) Purge(ctx context.Context, namespace string) (int, error) {
	if err := cancelled(ctx); err != nil {
		return 0, fmt.Errorf("cache: memory purge: %w", err)
	}
	return m.purgeWhere(func(e *Entry) bool { return e.Namespace == namespace }), nil
}

// PurgeTag removes every entry tagged tag and returns how many were live.
func (m *MemoryStore) PurgeTag(ctx context.Context, tag string) (int, error) {
	if err := cancelled(ctx); err != nil {
		return 0, fmt.Errorf("cache: memory purge tag: %w", err)
	}
	if tag == "" {
		return 0, nil
	}
	return m.purgeWhere(func(e *Entry) bool { return e.Tag == tag }), nil
}

// purgeWhere removes the entries match selects and returns how many were
// live. It walks every entry: purges are rare admin calls.
func (m *MemoryStore) purgeWhere(match func(*Entry) bool) int {
	now := time.Now().UnixNano()
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	defer m.unlockAndUnindex()
	n := 0
	for _, it := range m.byID {
		if !match(it.e) {
			continue
		}
		if !it.expired(now) {
			n++
		}
		m.removeLocked(it)
	}
	return n
}

// Stats reports what the store holds, including expired entries the sweeper
// has not removed yet. It waits for a write in progress, so that a vector
// it counts is in the index: searchable.
func (m *MemoryStore) Stats(ctx context.Context) (Stats, error) {
	if err := cancelled(ctx); err != nil {
		return Stats{}, fmt.Errorf("cache: memory stats: %w", err)
	}
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	st := Stats{
		Entries:        m.exact,
		VectorEntries:  m.vectors,
		Bytes:          m.bytes,
		Evictions:      m.evictions,
		VectorSearchBy: "local",
	}
	m.mu.Unlock()
	st.Scopes = int64(m.index.Scopes())
	return st, nil
}

// Close stops the sweeper and waits for it to exit. The store stays usable;
// expired entries are then only dropped lazily. Close is idempotent.
func (m *MemoryStore) Close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		<-m.done
	})
	return nil
}

func (m *MemoryStore) sweeper() {
	defer close(m.done)
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			// Release the lock between batches so a mass expiry does not
			// stall Gets.
			for {
				m.wmu.Lock()
				m.mu.Lock()
				n := m.sweepLocked(now.UnixNano(), sweepBatch)
				m.unlockAndUnindex() // also vectors of entries Get removed
				m.wmu.Unlock()
				if n < sweepBatch {
					break
				}
			}
		}
	}
}

// sweepLocked removes up to limit (< 0: all) entries expired at now and
// returns how many it removed.
func (m *MemoryStore) sweepLocked(now int64, limit int) int {
	n := 0
	for len(m.exp) > 0 && m.exp[0].expired(now) && n != limit {
		m.removeLocked(m.exp[0])
		n++
	}
	return n
}

// unlockAndUnindex releases mu and removes the vectors of removed entries
// from the index. The caller holds wmu.
func (m *MemoryStore) unlockAndUnindex() {
	ids := m.unindex
	m.unindex = nil
	m.mu.Unlock()
	for _, id := range ids {
		m.index.Remove(id)
	}
}

// removeLocked drops it from the maps, the list and the heap, and queues its
// vector for removal from the index.
func (m *MemoryStore) removeLocked(it *memItem) {
	e := it.e
	if e.ExactKey != "" && m.byKey[e.ExactKey] == it {
		delete(m.byKey, e.ExactKey)
		m.exact--
	}
	if m.byID[e.ID] == it {
		delete(m.byID, e.ID)
	}
	if it.hasVec {
		m.unindex = append(m.unindex, e.ID)
		m.vectors--
	}
	if it.heapIdx >= 0 {
		heap.Remove(&m.exp, it.heapIdx)
	}
	unlink(it)
	m.bytes -= it.size
}

func (m *MemoryStore) pushFront(it *memItem) {
	it.prev, it.next = &m.lru, m.lru.next
	m.lru.next.prev = it
	m.lru.next = it
}

func unlink(it *memItem) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
}

// expiryHeap is a container/heap of items ordered by expiry.
type expiryHeap []*memItem

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *expiryHeap) Push(x any) {
	it := x.(*memItem)
	it.heapIdx = len(*h)
	*h = append(*h, it)
}
func (h *expiryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	it.heapIdx = -1
	*h = old[:len(old)-1]
	return it
}
