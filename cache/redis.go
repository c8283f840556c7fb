package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/redis/go-redis/v9"
)

// Key layout under RedisOptions.Prefix (p):
//
//	p e:{exact key}  STRING  payload, PX ttl
//	p id:{id}        STRING  ref: namespace + exact key, PX ttl (for Delete and Purge)
//	p v:{id}         HASH    vec (LE float32), entry (payload), scope, ns; PEXPIRE ttl
//	p ns:{ns}        ZSET    ids of the namespace scored by expiry (unix ms), for Purge
//	p tag:{tag}      ZSET    ids of entries tagged tag, scored likewise, for PurgeTag
//	p namespaces     SET     namespace names, for Stats
//	p events         STREAM  op=add|del id=..., keeps local-mode replicas in sync
//	p idx            FT index over p v:* (redisearch mode)
//
// A payload is one header byte (payloadRaw or payloadS2) followed by
// Entry.Marshal(), s2-compressed when it is larger than compressMin.
// Commands that go together are sent as one non-transactional pipeline, which
// also works on a cluster (keys of one Put live in different slots). On a
// cluster the masters run their parts concurrently, so the events that
// announce new vectors go in a second round trip, after the vectors.
// Namespace sets are trimmed of expired ids on every Put, so they stay as big
// as the namespace's live entries; Purge walks the set (never KEYS) in batches.
// The SCANs at start and after a Redis outage match p v:* only.

const (
	payloadRaw byte = 0
	payloadS2  byte = 1

	compressMin   = 1 << 10
	maxPayloadLen = 64 << 20 // refuse to inflate anything larger

	eventsMaxLen = 100000
	nsTrimSlack  = time.Minute // tolerance for clock skew between replicas
	purgeBatch   = 500
	scanCount    = 500
	syncCount    = 1000

	modeLocal      = "local"
	modeRedisearch = "redisearch"
)

// RedisOptions configures a RedisStore.
type RedisOptions struct {
	Prefix       string // key prefix, e.g. "fd:" (redis.key_prefix)
	Dims         int    // embedder dims
	Embedder     string // embedder name (embed.Embedder.Name); names the vector keys and the index
	VectorSearch string // "auto" (default) | "redisearch" | "local"
	Index        RedisIndexConfig
	LocalIndex   IndexConfig   // the in-process index of local mode; zero: the defaults
	ReadTimeout  time.Duration // Get and Search; default 100ms
	WriteTimeout time.Duration // Put, Delete, Purge and the index's set-up; default 2s
	SyncInterval time.Duration // local mode: stream poll block time; default 1s
	// Writer, when set, carries the writes and the background work (the
	// local index's sync), so that they neither wait for nor hold the
	// lookups' connections. Default: the store's client.
	Writer redis.UniversalClient

	sweepEvery time.Duration // local mode: how often expired vectors are dropped; default 30s
}

// RedisStore is a Store in Redis, shared by every replica. Semantic search
// runs in RediSearch when the server has it (vector_search auto or
// redisearch), else in an in-process VectorIndex per replica that is loaded
// with SCAN at start and kept in sync through the p events stream.
type RedisStore struct {
	c, w     redis.UniversalClient // lookups; writes
	opt      RedisOptions
	mode     string
	fallback string // why auto chose local, if it did

	keyEvents, keyNamespaces, keyIndex, keyVec string
	reindexAt                                  atomic.Int64 // unix ns of the last index re-creation

	sizesMu sync.Mutex
	sizes   map[string]scopeSize // redisearch: vectors per scope, counted lately

	idx atomic.Pointer[VectorIndex] // local mode; swapped whole on a resync
	// own maps ids this store indexed in Put to the index it used, so that
	// the sync goroutine skips refetching them when their event comes back.
	own sync.Map

	cancel    context.CancelFunc
	done      chan struct{} // closed when the sync goroutine returns
	closeOnce sync.Once
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore connects the store to client, picks the vector search mode
// and, in local mode, loads the vectors and starts the sync goroutine. The
// client is not closed by Close: it is shared.
func NewRedisStore(ctx context.Context, client redis.UniversalClient, opt RedisOptions) (*RedisStore, error) {
	if client == nil {
		return nil, errors.New("cache: redis: nil client")
	}
	if opt.Dims <= 0 {
		return nil, fmt.Errorf("cache: redis: dims must be > 0, got %d", opt.Dims)
	}
	if opt.VectorSearch == "" {
		opt.VectorSearch = "auto"
	}
	if opt.ReadTimeout <= 0 {
		opt.ReadTimeout = 100 * time.Millisecond
	}
	if opt.WriteTimeout <= 0 {
		opt.WriteTimeout = 2 * time.Second
	}
	if opt.Index.Type == "" {
		opt.Index = DefaultConfig().RedisIndex
	}
	if opt.LocalIndex == (IndexConfig{}) {
		opt.LocalIndex = DefaultIndexConfig()
	}
	if opt.Embedder == "" {
		opt.Embedder = "vec"
	}
	if opt.SyncInterval <= 0 {
		opt.SyncInterval = time.Second
	}
	if opt.sweepEvery <= 0 {
		opt.sweepEvery = 30 * time.Second
	}
	if opt.Writer == nil {
		opt.Writer = client
	}
	// Vectors and their index are named after the embedder and its dims:
	// a changed embedder gets a new index instead of mixing vector spaces.
	space := keySafe(opt.Embedder) + ":" + strconv.Itoa(opt.Dims)
	r := &RedisStore{
		c: client, w: opt.Writer, opt: opt,
		keyEvents: opt.Prefix + "events", keyNamespaces: opt.Prefix + "namespaces",
		keyIndex: opt.Prefix + "idx:" + space, keyVec: opt.Prefix + "v:" + space + ":",
		done: make(chan struct{}), sizes: map[string]scopeSize{},
	}
	switch opt.VectorSearch {
	case modeLocal:
		r.mode = modeLocal
	case modeRedisearch, "auto":
		if _, ok := client.(*redis.ClusterClient); ok {
			// Open-source Redis Cluster has no distributed search; a module
			// on each master would search that master's slots only.
			if opt.VectorSearch == "auto" {
				r.mode, r.fallback = modeLocal, "a Redis Cluster has no RediSearch across its masters"
				break
			}
			return nil, errors.New("cache: redis: vector_search redisearch: a Redis Cluster has no RediSearch across its masters; use auto or local")
		}
		err := r.ensureIndex(ctx)
		switch {
		case err == nil:
			r.mode = modeRedisearch
		case errors.Is(err, errNoVectorSearch) && opt.VectorSearch == "auto":
			r.mode, r.fallback = modeLocal, err.Error()
		default:
			return nil, fmt.Errorf("cache: redis: vector_search %s: %w", opt.VectorSearch, err)
		}
	default:
		return nil, fmt.Errorf("cache: redis: vector_search %q is not one of auto, redisearch, local", opt.VectorSearch)
	}
	if r.mode != modeLocal {
		close(r.done)
		return r, nil
	}
	r.idx.Store(NewVectorIndexWith(opt.Dims, opt.LocalIndex))
	lastID, err := r.resync(ctx)
	if err != nil {
		return nil, fmt.Errorf("cache: redis: load vectors: %w", err)
	}
	syncCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.syncLoop(syncCtx, lastID)
	return r, nil
}

// Mode returns "local" or "redisearch": where semantic search runs.
func (r *RedisStore) Mode() string { return r.mode }

// Fallback says why vector_search auto chose the in-process index, or "".
func (r *RedisStore) Fallback() string { return r.fallback }

// IndexName is the RediSearch index (redisearch mode).
func (r *RedisStore) IndexName() string { return r.keyIndex }

func (r *RedisStore) exactKey(k string) string { return r.opt.Prefix + "e:" + k }
func (r *RedisStore) idKey(id string) string   { return r.opt.Prefix + "id:" + id }
func (r *RedisStore) vecKey(id string) string  { return r.keyVec + id }
func (r *RedisStore) nsKey(ns string) string   { return r.opt.Prefix + "ns:" + ns }
func (r *RedisStore) tagKey(tag string) string { return r.opt.Prefix + "tag:" + tag }

func (r *RedisStore) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.opt.ReadTimeout)
}

func (r *RedisStore) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.opt.WriteTimeout)
}

// keySafe keeps letters, digits and "._-" of s, for a key or index name.
func keySafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Get returns the entry stored under the exact key.
func (r *RedisStore) Get(ctx context.Context, key string) (*Entry, error) {
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	b, err := r.c.Get(ctx, r.exactKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("cache: redis get: %w", err)
	}
	e, err := decodePayload(b)
	if err != nil {
		return nil, fmt.Errorf("cache: redis get: %w", err)
	}
	return e, nil
}

// Put stores e under e.ExactKey (when set) and, with vec, in e.Scope for
// semantic search, all in one pipeline. An empty e.ID is set to
// NewEntryID(). ttl must be > 0: nothing in Redis lives forever. A later Put
// under the same exact key replaces the exact entry; the earlier one's vector
// stays searchable until its own TTL.
func (r *RedisStore) Put(ctx context.Context, e *Entry, vec []float32, ttl time.Duration) error {
	return r.PutBatch(ctx, []Write{{Entry: e, Vec: vec, TTL: ttl}})
}

// PutBatch stores ws in one pipeline, as Put stores one. An invalid write
// fails alone; the others are stored.
func (r *RedisStore) PutBatch(ctx context.Context, ws []Write) error {
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	var errs []error
	pipe := r.w.Pipeline()
	// A cluster pipeline runs on the masters concurrently: the "add" events
	// go after the vectors they announce, in a second round trip.
	events := pipe
	if _, ok := r.w.(*redis.ClusterClient); ok {
		events = r.w.Pipeline()
	}
	type added struct {
		w       Write
		idx     *VectorIndex
		expires time.Time
	}
	var adds []added
	for _, w := range ws {
		idx, expires, err := r.queuePut(ctx, pipe, events, w)
		if err != nil {
			errs = append(errs, fmt.Errorf("cache: redis put: %w", err))
			continue
		}
		if idx != nil {
			adds = append(adds, added{w, idx, expires})
		}
	}
	if pipe.Len() == 0 {
		return errors.Join(errs...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for _, a := range adds {
			r.own.CompareAndDelete(a.w.Entry.ID, a.idx)
		}
		return errors.Join(append(errs, fmt.Errorf("cache: redis put: %w", err))...)
	}
	if events != pipe && events.Len() > 0 {
		if _, err := events.Exec(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cache: redis put: events: %w", err))
		}
	}
	for _, a := range adds {
		a.idx.Add(a.w.Entry.Scope, a.w.Entry.ID, a.w.Vec, a.expires)
	}
	return errors.Join(errs...)
}

// queuePut checks w and adds its commands to pipe. In local mode it returns
// the index to add the vector to once the pipeline has run.
func (r *RedisStore) queuePut(ctx context.Context, pipe, events redis.Pipeliner, w Write) (*VectorIndex, time.Time, error) {
	e, vec, ttl := w.Entry, w.Vec, w.TTL
	switch {
	case e == nil:
		return nil, time.Time{}, errors.New("nil entry")
	case ttl <= 0:
		return nil, time.Time{}, errors.New("ttl must be > 0")
	case vec != nil && len(vec) != r.opt.Dims:
		return nil, time.Time{}, fmt.Errorf("vector has %d dims, want %d", len(vec), r.opt.Dims)
	case vec == nil && e.ExactKey == "":
		return nil, time.Time{}, errors.New("entry has neither an exact key nor a vector")
	case vec != nil && (e.Scope == "" || strings.ContainsRune(e.Scope, ',')):
		// ',' would split the RediSearch TAG into several scopes.
		return nil, time.Time{}, errors.New("a vector needs a scope without ','")
	}
	if e.ID == "" {
		e.ID = NewEntryID()
	}
	ttl = max(ttl, time.Millisecond)
	payload, err := encodePayload(e)
	if err != nil {
		return nil, time.Time{}, err
	}
	now := time.Now()
	expires := now.Add(ttl)
	nk := r.nsKey(e.Namespace)
	if e.ExactKey != "" {
		pipe.Set(ctx, r.exactKey(e.ExactKey), payload, ttl)
	}
	pipe.Set(ctx, r.idKey(e.ID), encodeRef(e.Namespace, e.ExactKey), ttl)
	if vec != nil {
		vk := r.vecKey(e.ID)
		pipe.HSet(ctx, vk, "vec", vecBytes(vec), "entry", payload, "scope", e.Scope, "ns", e.Namespace)
		pipe.PExpire(ctx, vk, ttl)
	}
	sets := []string{nk}
	if e.Tag != "" {
		sets = append(sets, r.tagKey(e.Tag))
	}
	for _, k := range sets {
		pipe.ZAdd(ctx, k, redis.Z{Score: float64(expires.UnixMilli()), Member: e.ID})
		pipe.ZRemRangeByScore(ctx, k, "-inf", "("+strconv.FormatInt(now.Add(-nsTrimSlack).UnixMilli(), 10))
		// The set lives as long as its longest-lived id: NX sets a first
		// expiry, GT only ever extends it (Redis >= 7).
		pipe.ExpireNX(ctx, k, ttl+nsTrimSlack)
		pipe.ExpireGT(ctx, k, ttl+nsTrimSlack)
	}
	pipe.SAdd(ctx, r.keyNamespaces, e.Namespace)
	if vec == nil {
		return nil, expires, nil
	}
	// Also in redisearch mode, so that a replica forced to local mode on
	// the same server stays in sync.
	events.XAdd(ctx, r.eventArgs("add", e.ID))
	if r.mode != modeLocal {
		return nil, expires, nil
	}
	// Marked before Exec: the event may come back before Exec returns.
	idx := r.idx.Load()
	r.own.Store(e.ID, idx)
	return idx, expires, nil
}

func (r *RedisStore) eventArgs(op, id string) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: r.keyEvents, MaxLen: eventsMaxLen, Approx: true, Values: []any{"op", op, "id", id}}
}

// Search returns up to k live entries of scope, most similar first.
func (r *RedisStore) Search(ctx context.Context, scope string, vec []float32, k int) ([]Match, error) {
	if k <= 0 {
		return nil, nil
	}
	if len(vec) != r.opt.Dims {
		return nil, fmt.Errorf("cache: redis search: vector has %d dims, want %d", len(vec), r.opt.Dims)
	}
	if r.mode == modeRedisearch {
		return r.searchKNN(ctx, scope, vec, k)
	}
	idx := r.idx.Load()
	hits := idx.Search(scope, vec, k, time.Now())
	if len(hits) == 0 {
		return nil, nil
	}
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	pipe := r.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(hits))
	for i, h := range hits {
		cmds[i] = pipe.HGet(ctx, r.vecKey(h.ID), "entry")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cache: redis search: %w", err)
	}
	out := make([]Match, 0, len(hits))
	for i, h := range hits {
		b, err := cmds[i].Bytes()
		if errors.Is(err, redis.Nil) {
			idx.Remove(h.ID) // expired or deleted behind our back
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cache: redis search: %w", err)
		}
		e, err := decodePayload(b)
		if err != nil {
			continue // a corrupt entry is a miss
		}
		out = append(out, Match{Entry: e, Similarity: h.Similarity})
	}
	return out, nil
}

// GetByID returns the entry with this id: from its vector record, or for an
// exact-only entry through its id record and exact key.
func (r *RedisStore) GetByID(ctx context.Context, id string) (*Entry, error) {
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	b, err := r.c.HGet(ctx, r.vecKey(id), "entry").Bytes()
	if errors.Is(err, redis.Nil) {
		ref, rerr := r.c.Get(ctx, r.idKey(id)).Bytes()
		if errors.Is(rerr, redis.Nil) {
			return nil, ErrNotFound
		}
		if rerr != nil {
			return nil, fmt.Errorf("cache: redis get by id: %w", rerr)
		}
		_, key := decodeRef(ref)
		if key == "" {
			return nil, ErrNotFound
		}
		b, err = r.c.Get(ctx, r.exactKey(key)).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, ErrNotFound
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cache: redis get by id: %w", err)
	}
	e, err := decodePayload(b)
	if err != nil {
		return nil, fmt.Errorf("cache: redis get by id: %w", err)
	}
	if e.ID != id {
		return nil, ErrNotFound // the exact key now holds a later entry
	}
	return e, nil
}

// Delete removes an entry by id: its exact key, its vector and its id record.
// When the exact key was overwritten by a later entry, that one goes too: a
// cache miss, never a wrong answer.
func (r *RedisStore) Delete(ctx context.Context, id string) error {
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	ref, err := r.w.Get(ctx, r.idKey(id)).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("cache: redis delete: %w", err)
	}
	found := err == nil
	ns, key := decodeRef(ref)
	pipe := r.w.Pipeline()
	var dels []*redis.IntCmd
	if key != "" {
		dels = append(dels, pipe.Del(ctx, r.exactKey(key)))
	}
	dels = append(dels, pipe.Del(ctx, r.idKey(id)), pipe.Del(ctx, r.vecKey(id)))
	if found {
		pipe.ZRem(ctx, r.nsKey(ns), id)
	}
	pipe.XAdd(ctx, r.eventArgs("del", id))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("cache: redis delete: %w", err)
	}
	if r.mode == modeLocal {
		r.idx.Load().Remove(id)
	}
	var n int64
	for _, d := range dels {
		n += d.Val()
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Purge removes every entry of namespace, walking its id set in batches,
// and returns how many live entries it removed.
func (r *RedisStore) Purge(ctx context.Context, namespace string) (int, error) {
	n, err := r.purgeSet(ctx, r.nsKey(namespace))
	if err != nil {
		return n, fmt.Errorf("cache: redis purge: %w", err)
	}
	return n, nil
}

// PurgeTag removes every entry tagged tag, walking the tag's id set in
// batches, and returns how many live entries it removed.
func (r *RedisStore) PurgeTag(ctx context.Context, tag string) (int, error) {
	if tag == "" {
		return 0, nil
	}
	n, err := r.purgeSet(ctx, r.tagKey(tag))
	if err != nil {
		return n, fmt.Errorf("cache: redis purge tag: %w", err)
	}
	return n, nil
}

func (r *RedisStore) purgeSet(ctx context.Context, set string) (int, error) {
	total := 0
	for {
		n, more, err := r.purgeBatch(ctx, set)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// purgeBatch removes the first purgeBatch ids of the id set nk (a
// namespace's or a tag's) and their entries; an id leaves its namespace's
// set too.
func (r *RedisStore) purgeBatch(ctx context.Context, nk string) (n int, more bool, err error) {
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	ids, err := r.w.ZRange(ctx, nk, 0, purgeBatch-1).Result()
	if err != nil || len(ids) == 0 {
		return 0, false, err
	}
	pipe := r.w.Pipeline()
	refs := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		refs[i] = pipe.Get(ctx, r.idKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, err
	}
	pipe = r.w.Pipeline()
	vdels := make([]*redis.IntCmd, len(ids))
	members := make([]any, len(ids))
	for i, id := range ids {
		if ref, err := refs[i].Bytes(); err == nil {
			ns, key := decodeRef(ref)
			if key != "" {
				pipe.Del(ctx, r.exactKey(key))
			}
			if k := r.nsKey(ns); k != nk {
				pipe.ZRem(ctx, k, id)
			}
		}
		pipe.Del(ctx, r.idKey(id))
		vdels[i] = pipe.Del(ctx, r.vecKey(id))
		pipe.XAdd(ctx, r.eventArgs("del", id))
		members[i] = id
	}
	pipe.ZRem(ctx, nk, members...)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, false, err
	}
	idx := r.idx.Load()
	for i, id := range ids {
		if refs[i].Err() == nil || vdels[i].Val() > 0 {
			n++
		}
		if idx != nil {
			idx.Remove(id)
		}
	}
	return n, len(ids) == purgeBatch, nil
}

// Stats reports the content. Entries counts the live ids of every namespace
// (exact and semantic entries alike); Bytes is unknown (0).
func (r *RedisStore) Stats(ctx context.Context) (Stats, error) {
	st := Stats{VectorSearchBy: r.mode}
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	names, err := r.w.SMembers(ctx, r.keyNamespaces).Result()
	if err != nil {
		return st, fmt.Errorf("cache: redis stats: %w", err)
	}
	if len(names) > 0 {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		pipe := r.w.Pipeline()
		counts := make([]*redis.IntCmd, len(names))
		for i, ns := range names {
			counts[i] = pipe.ZCount(ctx, r.nsKey(ns), "("+now, "+inf")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return st, fmt.Errorf("cache: redis stats: %w", err)
		}
		for _, c := range counts {
			st.Entries += c.Val()
		}
	}
	if r.mode == modeLocal {
		idx := r.idx.Load()
		st.VectorEntries, st.Scopes = int64(idx.Len()), int64(idx.Scopes())
		return st, nil
	}
	n, err := r.indexDocs(ctx)
	if err != nil {
		return st, fmt.Errorf("cache: redis stats: %w", err)
	}
	st.VectorEntries = n
	return st, nil
}

// Close stops the sync goroutine and waits for it; it may take up to
// SyncInterval (a blocked XREAD cannot be interrupted). The client stays open.
func (r *RedisStore) Close() error {
	r.closeOnce.Do(func() {
		if r.cancel != nil {
			r.cancel()
		}
	})
	<-r.done
	return nil
}

// syncLoop applies the events stream to the local index from lastID on,
// sweeps expired vectors, and after an outage resumes where it stopped, or
// reloads everything when events were lost (stream trimmed or Redis restarted
// empty).
func (r *RedisStore) syncLoop(ctx context.Context, lastID string) {
	defer close(r.done)
	var backoff time.Duration
	failing := false
	lastSweep := time.Now()
	for ctx.Err() == nil {
		if now := time.Now(); now.Sub(lastSweep) >= r.opt.sweepEvery {
			r.idx.Load().Sweep(now)
			lastSweep = now
		}
		var err error
		if failing {
			lastID, err = r.recoverSync(ctx, lastID)
		} else {
			lastID, err = r.syncOnce(ctx, lastID)
		}
		if err == nil {
			failing, backoff = false, 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		failing = true
		backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// syncOnce waits up to SyncInterval for events after lastID, applies them and
// returns the id to read from next.
func (r *RedisStore) syncOnce(ctx context.Context, lastID string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, r.opt.SyncInterval+r.opt.WriteTimeout)
	streams, err := r.w.XRead(rctx, &redis.XReadArgs{
		Streams: []string{r.keyEvents, lastID}, Count: syncCount, Block: r.opt.SyncInterval,
	}).Result()
	cancel()
	if errors.Is(err, redis.Nil) {
		return lastID, nil
	}
	if err != nil {
		return lastID, err
	}
	for _, s := range streams {
		if len(s.Messages) == 0 {
			continue
		}
		if err := r.applyEvents(ctx, s.Messages); err != nil {
			return lastID, err // read the batch again
		}
		lastID = s.Messages[len(s.Messages)-1].ID
	}
	return lastID, nil
}

// applyEvents fetches the vectors of added ids in one pipeline and applies
// the events in order.
func (r *RedisStore) applyEvents(ctx context.Context, msgs []redis.XMessage) error {
	idx := r.idx.Load()
	var adds []string
	skip := make([]bool, len(msgs))
	for i, m := range msgs {
		if op, _ := m.Values["op"].(string); op == "add" {
			id, _ := m.Values["id"].(string)
			// Our own Put, already in this index (not in one a resync replaced).
			if at, ok := r.own.LoadAndDelete(id); ok && at == idx {
				skip[i] = true
			} else if id != "" {
				adds = append(adds, id)
			}
		}
	}
	got, err := r.fetchVectors(ctx, adds)
	if err != nil {
		return err
	}
	for i, m := range msgs {
		op, _ := m.Values["op"].(string)
		id, _ := m.Values["id"].(string)
		switch op {
		case "add":
			if skip[i] {
				continue
			}
			if v, ok := got[id]; ok {
				idx.Add(v.scope, id, v.vec, v.expires)
			} else {
				idx.Remove(id)
			}
		case "del":
			idx.Remove(id)
		}
	}
	return nil
}

// recoverSync runs once Redis answers again after errors: it resumes from
// lastID when the stream still holds everything after it, else reloads.
func (r *RedisStore) recoverSync(ctx context.Context, lastID string) (string, error) {
	cctx, cancel := r.writeCtx(ctx)
	info, err := r.w.XInfoStream(cctx, r.keyEvents).Result()
	cancel()
	gap := false
	switch {
	case err == nil:
		gap = info.Length > 0 && compareStreamIDs(info.FirstEntry.ID, lastID) > 0
	case isNoSuchKey(err):
		gap = true // Redis restarted empty, or the stream was deleted
	default:
		return lastID, err
	}
	if !gap {
		return lastID, nil
	}
	return r.resync(ctx)
}

// resync loads every vector into a fresh index and swaps it in. It returns
// the stream id to read events from, captured before the scan so that no
// change is missed (events replayed twice are harmless).
func (r *RedisStore) resync(ctx context.Context) (string, error) {
	cctx, cancel := r.writeCtx(ctx)
	last, err := r.w.XRevRangeN(cctx, r.keyEvents, "+", "-", 1).Result()
	cancel()
	if err != nil {
		return "", err
	}
	lastID := "0-0"
	if len(last) > 0 {
		lastID = last[0].ID
	}
	fresh := NewVectorIndexWith(r.opt.Dims, r.opt.LocalIndex)
	prefix := r.vecKey("")
	err = r.scanKeys(ctx, escapeGlob(prefix)+"*", func(ctx context.Context, keys []string) error {
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = strings.TrimPrefix(k, prefix)
		}
		got, err := r.fetchVectors(ctx, ids)
		if err != nil {
			return err
		}
		for id, v := range got {
			fresh.Add(v.scope, id, v.vec, v.expires)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	r.idx.Store(fresh)
	r.own.Clear() // marks of the old index would never match again
	return lastID, nil
}

// scanKeys calls fn with batches of the keys matching pattern, on every
// master of a cluster.
func (r *RedisStore) scanKeys(ctx context.Context, pattern string, fn func(context.Context, []string) error) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			cctx, cancel := r.writeCtx(ctx)
			keys, next, err := c.Scan(cctx, cursor, pattern, scanCount).Result()
			cancel()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				if err := fn(ctx, keys); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := r.w.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, r.w)
}

type storedVec struct {
	scope   string
	vec     []float32
	expires time.Time
}

// fetchVectors reads the vector, scope and remaining TTL of ids in one
// pipeline. Ids whose hash is gone or malformed are left out.
func (r *RedisStore) fetchVectors(ctx context.Context, ids []string) (map[string]storedVec, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	pipe := r.w.Pipeline()
	fields := make([]*redis.SliceCmd, len(ids))
	ttls := make([]*redis.DurationCmd, len(ids))
	for i, id := range ids {
		k := r.vecKey(id)
		fields[i] = pipe.HMGet(ctx, k, "vec", "scope")
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isServerError(err) {
		return nil, err
	}
	now := time.Now()
	out := make(map[string]storedVec, len(ids))
	for i, id := range ids {
		if fields[i].Err() != nil || ttls[i].Err() != nil {
			continue // e.g. WRONGTYPE: not ours
		}
		vals := fields[i].Val()
		if len(vals) != 2 {
			continue
		}
		raw, _ := vals[0].(string)
		scope, _ := vals[1].(string)
		vec, ok := bytesVec([]byte(raw), r.opt.Dims)
		if !ok {
			continue // gone, or written with other dims
		}
		var expires time.Time
		switch ttl := ttls[i].Val(); {
		case ttl == -2: // expired between the two commands
			continue
		case ttl > 0:
			expires = now.Add(ttl)
		}
		out[id] = storedVec{scope: scope, vec: vec, expires: expires}
	}
	return out, nil
}

// isServerError reports an error reply of the server, as opposed to a
// connection problem.
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func isNoSuchKey(err error) bool {
	return isServerError(err) && strings.Contains(strings.ToLower(err.Error()), "no such key")
}

// escapeGlob escapes the characters SCAN MATCH treats specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// compareStreamIDs orders two stream ids "ms-seq".
func compareStreamIDs(a, b string) int {
	am, as := parseStreamID(a)
	bm, bs := parseStreamID(b)
	switch {
	case am != bm:
		if am < bm {
			return -1
		}
		return 1
	case as != bs:
		if as < bs {
			return -1
		}
		return 1
	}
	return 0
}

func parseStreamID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

// encodePayload marshals e behind a header byte, s2-compressed when large.
func encodePayload(e *Entry) ([]byte, error) {
	raw, err := e.Marshal()
	if err != nil {
		return nil, err
	}
	if len(raw) > compressMin {
		buf := make([]byte, 1+s2.MaxEncodedLen(len(raw)))
		if z := s2.Encode(buf[1:], raw); len(z) < len(raw) {
			buf[0] = payloadS2
			return buf[:1+len(z)], nil
		}
	}
	out := make([]byte, 1+len(raw))
	out[0] = payloadRaw
	copy(out[1:], raw)
	return out, nil
}

// decodePayload reverses encodePayload. Its errors never quote the content.
func decodePayload(b []byte) (*Entry, error) {
	if len(b) == 0 {
		return nil, errors.New("empty payload")
	}
	body := b[1:]
	switch b[0] {
	case payloadRaw:
	case payloadS2:
		n, err := s2.DecodedLen(body)
		if err != nil || n > maxPayloadLen {
			return nil, errors.New("corrupt compressed payload")
		}
		if body, err = s2.Decode(make([]byte, n), body); err != nil {
			return nil, errors.New("corrupt compressed payload")
		}
	default:
		return nil, fmt.Errorf("unknown payload encoding %d", b[0])
	}
	e, err := UnmarshalEntry(body)
	if err != nil {
		return nil, errors.New("corrupt payload: not an entry")
	}
	return e, nil
}

// encodeRef packs a namespace and an exact key: uvarint len(ns), ns, key.
func encodeRef(ns, key string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(ns)+len(key)), uint64(len(ns)))
	return append(append(b, ns...), key...)
}

func decodeRef(b []byte) (ns, key string) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", ""
	}
	return string(b[w : w+int(n)]), string(b[w+int(n):])
}

// vecBytes encodes v as little-endian float32s, the layout RediSearch reads.
func vecBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func bytesVec(b []byte, dims int) ([]float32, bool) {
	if len(b) != 4*dims {
		return nil, false
	}
	v := make([]float32, dims)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, true
}
