package reuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"

	"frontdoor/adapters"
	"frontdoor/cache"
	"frontdoor/embed"
	"frontdoor/internal/redisconn"
	"frontdoor/internal/telemetry"
	"frontdoor/internal/warm"
	"frontdoor/router/admin"
)

// JudgeSender asks the judge model: the router implements it with its
// own attempts on the nodes and spill-over, as a client's request goes.
// body builds the request for the model name the node serves.
type JudgeSender interface {
	SendJudge(ctx context.Context, model string, body func(served string) []byte) (*adapters.Answer, error)
}

// Options are what New builds the cache side from. Nil Store, Embedder
// and RedisClient are built from the configuration.
type Options struct {
	// Conf is the cache section in force; a reload swaps what it returns.
	Conf       func() *cache.Config
	Redis      redisconn.Config // the redis: section, for a store of backend redis
	HotEntries int              // warm.hot_entries: the hot list's size; 0: no list
	Logger     *slog.Logger
	Metrics    *metrics.Set

	Store       cache.Store
	Embedder    embed.Embedder
	RedisClient redis.UniversalClient

	// Judge asks the judge model (cache.semantic.verify); Configured is the
	// threshold configured for a tenant and model, before evidence moves it.
	Judge      JudgeSender
	Configured func(tenant, model string) float64
}

// Cache is the cache side of every request: plan, lookups, flights,
// write-back, the hot list, imports and the judge's audit. With
// cache.backend off it still plans (every request a bypass).
type Cache struct {
	conf     func() *cache.Config
	log      *slog.Logger
	warn     *telemetry.RateLog
	store    cache.Store    // nil: the cache is off
	backend  *cache.Backend // lookups and write-back, behind breakers
	ownStore bool
	embedder embed.Embedder
	flights  flightGroup
	m        *cacheMetrics
	emb      *embeddingMetrics
	hot      *hotTracker // hits per entry, for /admin/cache/hot; nil when off
	params   paramSets   // what chat requests send besides their question, for frontdoor warm
	verify   *verifier   // the judge's audit of semantic hits; nil without a judge
	writes   redis.UniversalClient
	clients  []redis.UniversalClient // clients New built, closed by Close
}

var _ admin.CacheOps = (*Cache)(nil)

// New builds the cache side: the store, the embedder, the backend that
// guards the store (breakers, timeouts, the write-back queue), the hot
// list and the verifier. A Redis store connects in the background: a
// gateway whose Redis is down at start serves uncached.
func New(o Options) (*Cache, error) {
	c := &Cache{conf: o.Conf, log: o.Logger, warn: telemetry.NewRateLog(o.Logger, 10*time.Second),
		m: newCacheMetrics(o.Metrics), emb: newEmbeddingMetrics(o.Metrics)}
	conf := o.Conf()
	c.embedder = o.Embedder
	if c.embedder == nil && conf.Semantic.Enabled && conf.Backend != "off" {
		e, err := embed.New(conf.Embedder)
		if err != nil {
			return nil, fmt.Errorf("cache.embedder: %w", err)
		}
		c.embedder = e
	}
	c.store = o.Store
	if c.store == nil && conf.Backend != "off" {
		if err := c.buildStore(o); err != nil {
			return nil, err
		}
		c.ownStore = true
	}
	if c.store == nil {
		return c, nil
	}
	var embedderName string
	if c.embedder != nil {
		embedderName = c.embedder.Name()
	}
	c.backend = cache.NewBackend(c.store, conf.Reads, conf.Writes, newCacheObserver(o.Metrics, c.m, c.log, embedderName))
	if c.embedder != nil {
		c.backend.UseEmbedder(c.embedder)
	}
	c.registerBackendGauges(o.Metrics)
	c.hot = newHotTracker(o.HotEntries)
	if v := conf.Semantic.Verify; c.embedder != nil && conf.Semantic.Enabled && v.Enabled() {
		ttl := max(conf.TTL.D(), conf.MaxTTL.D())
		var shared *cache.SharedEvidence
		if c.writes != nil {
			shared = &cache.SharedEvidence{Redis: c.writes, Prefix: o.Redis.KeyPrefix + "v:", Timeout: conf.Writes.Timeout.D(), TTL: ttl}
		}
		entries, _ := c.store.(cache.EntryGetter)
		d := verifierDeps{judge: o.Judge, entries: entries, writes: c.backend, logger: c.log, entryTTL: ttl, configured: o.Configured}
		c.verify = newVerifier(d, v, o.Metrics, shared)
	}
	return c, nil
}

// buildStore builds the configured store.
func (c *Cache) buildStore(o Options) error {
	conf := o.Conf()
	dims, name := conf.Embedder.Dims, "none"
	if c.embedder != nil {
		dims, name = c.embedder.Dims(), c.embedder.Name()
	}
	switch conf.Backend {
	case "memory":
		c.store = cache.NewMemoryStoreWith(int64(conf.MaxBytes), dims, conf.LocalIndex)
	case "redis":
		reads, writes := o.RedisClient, o.RedisClient
		if reads == nil {
			// Two clients: lookups keep their short timeout and their own
			// connections; writes and the index's sync take longer ones.
			var err error
			rc, wc := o.Redis, o.Redis
			rc.Timeout, wc.Timeout = conf.Reads.Timeout, conf.Writes.Timeout
			if reads, err = redisconn.New(rc, redisconn.Password(rc)); err != nil {
				return err
			}
			if writes, err = redisconn.New(wc, redisconn.Password(wc)); err != nil {
				return err
			}
			c.clients = append(c.clients, reads, writes)
		}
		c.writes = writes
		errs := newIndexSyncErrors(o.Metrics)
		onSyncError := func(err error) {
			errs.Inc()
			c.warn.Warn("index-sync", "cache: the in-process index's sync with Redis failed; semantic lookups miss what other replicas store until it recovers", "error", err.Error())
		}
		// The cache's keys live under <key_prefix>c:, apart from admission's.
		opts := cache.RedisOptions{Prefix: o.Redis.KeyPrefix + "c:", Dims: dims, Embedder: name,
			VectorSearch: conf.VectorSearch, Index: conf.RedisIndex, LocalIndex: conf.LocalIndex,
			ReadTimeout: conf.Reads.Timeout.D(), WriteTimeout: conf.Writes.Timeout.D(), Writer: writes,
			OnSyncError: onSyncError}
		ix := conf.RedisIndex
		c.store = cache.NewLazyStore(func(ctx context.Context) (cache.Store, error) {
			st, err := cache.NewRedisStore(ctx, reads, opts)
			if err != nil {
				return nil, err
			}
			if why := st.Fallback(); why != "" {
				c.log.Warn("cache: vector_search auto chose the in-process index", "why", why)
			} else {
				args := []any{"vector_search", st.Mode()}
				if st.Mode() == "redisearch" {
					args = append(args, "index", st.IndexName())
					if ix.InitialCap > 0 {
						args = append(args, "initial_cap", ix.InitialCap,
							"reserved_mb", ix.InitialCap*(4*dims+150)>>20) // counts against maxmemory
					}
				}
				c.log.Info("cache: redis store ready", args...)
			}
			return st, nil
		}, 2*time.Second, func(err error) {
			c.log.Warn("cache: redis store not ready; serving uncached and retrying", "error", err.Error())
		})
	}
	return nil
}

// Run refreshes the store's statistics and runs the judge's workers until
// ctx ends.
func (c *Cache) Run(ctx context.Context) {
	if c.store == nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.refreshStats(ctx) }()
	if c.verify != nil {
		for range judgeWorkers {
			wg.Add(1)
			go func() { defer wg.Done(); c.verify.run(ctx) }()
		}
		if c.verify.shared != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.verify.sync(ctx) }()
		}
	}
	wg.Wait()
}

// Close gives queued write-backs what is left of ctx, then closes what
// New built.
func (c *Cache) Close(ctx context.Context) {
	if c.backend != nil {
		_ = c.backend.Close(ctx)
	}
	if c.ownStore {
		_ = c.store.Close()
	}
	for _, cl := range c.clients {
		_ = cl.Close()
	}
}

// On reports whether there is a cache (cache.backend is not off).
func (c *Cache) On() bool { return c.store != nil }

// Store is the store (nil when the cache is off).
func (c *Cache) Store() cache.Store { return c.store }

// Redis is the cache's Redis writer (nil unless backend redis), where the
// replicas share what they learn.
func (c *Cache) Redis() redis.UniversalClient { return c.writes }

// EntryByID returns a stored entry by id, or nil.
func (c *Cache) EntryByID(ctx context.Context, id string) *cache.Entry {
	e, _ := c.Get(ctx, id)
	return e
}

// FinishedByEntry returns the answer of a finished flight that will be
// stored under entry id, or nil: the entry of an answer served from a
// flight may not be stored yet.
func (c *Cache) FinishedByEntry(id string) *adapters.Answer { return c.flights.finishedByEntry(id) }

// Totals are the request counts by result label since start, and the
// upstream tokens hits saved.
func (c *Cache) Totals() (results map[string]int64, tokensSaved uint64) {
	return c.m.totals(), c.m.tokensSaved.Get()
}

// Status is /status's cache section; nil when the cache is off.
func (c *Cache) Status() *admin.CacheStatus {
	if c.store == nil {
		return nil
	}
	st := &admin.CacheStatus{Backend: c.conf().Backend, Results: c.m.totals(), HitRatio: c.m.hitRatio(),
		Entries: c.m.entries.Load(), Vectors: c.m.vectors.Load(), Bytes: c.m.bytes.Load(),
		Saved: c.m.tokensSaved.Get(), Health: c.backend.Health(), Dropped: c.m.dropped()}
	st.Embedder = c.backend.EmbedderHealth()
	if s, ok := c.store.(cache.IndexSyncer); ok {
		st.IndexSync = s.IndexSync()
	}
	st.Verify = c.verify.status()
	return st
}

// VerifyStatus is the judge's audit in /status; nil without a judge.
func (c *Cache) VerifyStatus() *admin.VerifyStatus { return c.verify.status() }

// Hot is the top hot entries, of tenant ("" all); nil without a hot list.
func (c *Cache) Hot(top int, tenant string) []admin.HotEntry {
	if c.hot == nil {
		return nil
	}
	return c.hot.top(top, tenant)
}

// ParamSets is GET /admin/cache/params: the n parameter sets sampled most
// among the chat requests, and how many requests were sampled.
func (c *Cache) ParamSets(n int) (int64, []warm.ParamSet) { return c.params.top(n) }

// WaitReady waits until the store is connected.
func (c *Cache) WaitReady(ctx context.Context) error {
	if c.store == nil {
		return errors.New("the cache is off (cache.backend: off)")
	}
	for !c.backend.Health().Up {
		select {
		case <-ctx.Done():
			return fmt.Errorf("cache store not connected: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Stats is GET /admin/cache/stats.
func (c *Cache) Stats(ctx context.Context) (admin.CacheStats, error) {
	st, err := c.store.Stats(ctx)
	if err != nil {
		return admin.CacheStats{}, err
	}
	return admin.CacheStats{Backend: c.conf().Backend, Store: st, Health: c.backend.Health(),
		Requests: c.m.totals(), HitRatio: c.m.hitRatio()}, nil
}

// Get returns an entry by id.
func (c *Cache) Get(ctx context.Context, id string) (*cache.Entry, error) {
	getter, ok := c.store.(cache.EntryGetter)
	if !ok {
		return nil, cache.ErrNotFound
	}
	return getter.GetByID(ctx, id)
}

// Every deletion retires the flights in progress first (flightGroup.retire):
// no answer produced across it is served or stored.

// Forget deletes an entry by id.
func (c *Cache) Forget(ctx context.Context, id string) error {
	c.flights.retire()
	return c.store.Delete(ctx, id)
}

// Purge deletes a namespace's entries.
func (c *Cache) Purge(ctx context.Context, namespace string) (int, error) {
	c.flights.retire()
	return c.store.Purge(ctx, namespace)
}

// PurgeTag deletes the entries tagged tag.
func (c *Cache) PurgeTag(ctx context.Context, tag string) (int, error) {
	c.flights.retire()
	return c.store.PurgeTag(ctx, tag)
}
