package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	// OnSyncError, when set, is called from the local index's sync
	// goroutine with each failed step (the index then misses what other
	// replicas store until the sync recovers). See IndexSync.
	OnSyncError func(err error)

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

	// The local index's sync: see IndexSync.
	syncFailing  atomic.Bool
	syncFailures atomic.Int64
	syncResyncs  atomic.Int64
	syncLastErr  atomic.Pointer[string]
	syncLastFail atomic.Int64 // unix ns

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
		return nil, err // says "index reload"
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

// IndexSyncHealth is the health of a local-mode store's in-process index,
// kept in step with Redis through the events stream.
type IndexSyncHealth struct {
	State     string    `json:"state"`    // ok, failing (the index misses what other replicas store)
	Failures  int64     `json:"failures"` // failed sync steps
	Resyncs   int64     `json:"resyncs"`  // full reloads after events were lost
	LastError string    `json:"last_error,omitempty"`
	LastFail  time.Time `json:"last_failure,omitzero"`
}

// IndexSyncer is a store with an in-process index synced from elsewhere.
type IndexSyncer interface {
	// IndexSync reports the sync's health; nil when there is none (vector
	// search in RediSearch, or not connected yet).
	IndexSync() *IndexSyncHealth
}

var _ IndexSyncer = (*RedisStore)(nil)

// IndexSync implements IndexSyncer.
func (r *RedisStore) IndexSync() *IndexSyncHealth {
	if r.mode != modeLocal {
		return nil
	}
	h := &IndexSyncHealth{State: "ok", Failures: r.syncFailures.Load(), Resyncs: r.syncResyncs.Load()}
	if r.syncFailing.Load() {
		h.State = "failing"
	}
	if p := r.syncLastErr.Load(); p != nil {
		h.LastError = *p
		h.LastFail = time.Unix(0, r.syncLastFail.Load())
	}
	return h
}

// syncFailed records a failed sync step.
func (r *RedisStore) syncFailed(err error) {
	r.syncFailing.Store(true)
	r.syncFailures.Add(1)
	msg := err.Error()
	r.syncLastErr.Store(&msg)
	r.syncLastFail.Store(time.Now().UnixNano())
	if r.opt.OnSyncError != nil {
		r.opt.OnSyncError(err)
	}
}

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
