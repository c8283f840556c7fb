package reuse

// Every metric family of the cache side is declared here, once, beside
// its help text, and every series of them is made here, into the fields of
// the struct that counts it (cacheMetrics, the observer's, the
// embeddings', the verifier's, and the gauges that read the backend's
// health). The rest only counts. The store's observer, which counts and
// logs what the backend reports, is here too.

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/cache"
	"frontdoor/internal/telemetry"
)

// Every metric family of the cache side is declared here, once, beside
// its help text, and every series of them is made here, into the fields of
// the struct that counts it (cacheMetrics, the observer's, the
// embeddings', the verifier's, and the gauges that read the backend's
// health). The rest only counts. The store's observer, which counts and
// logs what the backend reports, is here too.

var (
	// The cache (cacheMetrics, cacheObserver, embeddingMetrics, the backend's gauges).
	cacheRequestsFamily = telemetry.NewFamily("frontdoor_cache_requests_total",
		"Cache outcomes of inference requests, by result (hit_exact, hit_semantic, miss, bypass, partial: an embeddings batch partly cached) and reason.")
	cacheErrorsFamily = telemetry.NewFamily("frontdoor_cache_errors_total",
		"Cache store and embedder errors, by operation.")
	cacheGuardRejectionsFamily = telemetry.NewFamily("frontdoor_cache_guard_rejections_total",
		"Semantic candidates refused by a guard (numbers, negation, order, entity).")
	cacheSimilarityFamily = telemetry.NewFamily("frontdoor_cache_similarity",
		"Cosine similarity of the best semantic candidate of each semantic lookup that has one at or above the threshold less the grey zone less 0.1 (the near misses a threshold is tuned by).")
	cacheTokensSavedFamily = telemetry.NewFamily("frontdoor_cache_tokens_saved_total",
		"Upstream tokens (prompt + completion) not spent because the cache answered.")
	cacheSemanticSkippedFamily = telemetry.NewFamily("frontdoor_cache_semantic_skipped_total",
		"Requests looked up and stored by their exact key only, by reason: query_too_long (a last user turn longer than cache.embedder.max_input_bytes).")
	cacheEntriesFamily = telemetry.NewFamily("frontdoor_cache_entries",
		"Entries in the cache store (refreshed every few seconds).")
	cacheVectorEntriesFamily = telemetry.NewFamily("frontdoor_cache_vector_entries",
		"Entries with an embedding in the cache store (refreshed every few seconds).")
	cacheBytesFamily = telemetry.NewFamily("frontdoor_cache_bytes",
		"Bytes used by the cache store, as the store reports them.")
	cacheEmbeddingInputsFamily = telemetry.NewFamily("frontdoor_cache_embedding_inputs_total",
		"Inputs of embeddings requests looked up in the cache, by result (hit, miss).")
	cacheEmbedSkippedFamily = telemetry.NewFamily("frontdoor_cache_embed_skipped_total",
		"Semantic lookups skipped because the embedder failed, timed out or its breaker was open.")
	cacheLookupFamily = telemetry.NewFamily("frontdoor_cache_lookup_seconds",
		"Latency of cache store lookups, by operation (get, search).")
	cacheWritesFamily = telemetry.NewFamily("frontdoor_cache_writes_total",
		"Cache write-backs, by result (stored, failed).")
	cacheWritesDroppedFamily = telemetry.NewFamily("frontdoor_cache_writes_dropped_total",
		"Cache write-backs dropped before reaching the store, by reason: the store's (queue_full, breaker_open, shutdown) or an answer unfit to store (stream_error, stream_incomplete, stream_cut, client_gone).")
	cacheBreakerTransitionsFamily = telemetry.NewFamily("frontdoor_cache_breaker_transitions_total",
		"State changes of the cache store's read and write breakers.")
	cacheIndexSyncErrorsFamily = telemetry.NewFamily("frontdoor_cache_index_sync_errors_total",
		"Failed steps of the in-process vector index's sync with Redis (backend redis without RediSearch): it misses other replicas' entries until it recovers.")
	cacheEmbedderUpFamily = telemetry.NewFamily("frontdoor_cache_embedder_up",
		"1 when the embedder answered lately, 0 while it fails.")
	cacheBackendUpFamily = telemetry.NewFamily("frontdoor_cache_backend_up",
		"1 while the cache store answers, 0 while it is bypassed.")
	cacheBackendStateFamily = telemetry.NewFamily("frontdoor_cache_backend_state",
		"1 for the cache backend's current state (ok, degraded, bypassed).")
	cacheWriteQueueFamily = telemetry.NewFamily("frontdoor_cache_write_queue",
		"Cache write-backs waiting in the queue.")

	// The judge (verifier).
	verifyFamily = telemetry.NewFamily("frontdoor_cache_verify_total",
		"Semantic hits re-checked by the judge model, by verdict (yes: the cached answer served the question; no: a false hit; unsure; error).")
	verifyDroppedFamily = telemetry.NewFamily("frontdoor_cache_verify_dropped_total",
		"Audits of semantic hits and checks of near-misses dropped because the judge queue was full.")
	verifyPromotedFamily = telemetry.NewFamily("frontdoor_cache_verify_promoted_total",
		"Approved near-misses stored with a curated answer (promotions; docs/verify.md).")
	verifyPromoteRefusedFamily = telemetry.NewFamily("frontdoor_cache_verify_promote_refused_total",
		"Promotions of a judged near-miss to a curated answer refused, by reason: lookup_only (no upstream call), not_stored (its own answer was not stored), per_minute and max (the tenant's promote_per_minute and promote_max), unavailable (the shared count in Redis failed).")
	falseHitRatioFamily = telemetry.NewFamily("frontdoor_cache_false_hit_ratio",
		"Share of judged semantic hits that were wrong (no over yes+no), since start.")
)

// cacheMetrics are the cache's Prometheus series.
type cacheMetrics struct {
	set         *metrics.Set
	requests    [NumResults][NumReasons]*metrics.Counter
	errs        map[string]*metrics.Counter
	guards      map[string]*metrics.Counter
	similarity  *metrics.PrometheusHistogram
	tokensSaved *metrics.Counter
	results     [NumResults]atomic.Int64
	entries     atomic.Int64
	vectors     atomic.Int64
	bytes       atomic.Int64
	drops       atomic.Uint64 // write-backs dropped since start (the store's reasons)
	// notStored counts streamed answers unfit to store, by notStoredReasons;
	// not in drops, which is the store's health.
	notStored map[string]*metrics.Counter
	// longQueries counts requests whose last user turn is longer than the
	// embedder reads (cache.embedder.max_input_bytes): exact only.
	longQueries *metrics.Counter
}

var (
	cacheErrOps = []string{"get", "put", "search", "embed", "stats"}
)

func newCacheMetrics(set *metrics.Set) *cacheMetrics {
	m := &cacheMetrics{set: set, errs: map[string]*metrics.Counter{}, guards: map[string]*metrics.Counter{},
		notStored: map[string]*metrics.Counter{}}
	for _, r := range notStoredReasons {
		m.notStored[r] = cacheWritesDroppedFamily.NewCounter(set, "reason", r)
	}
	// Only the outcomes that can happen have a series: a dashboard or an
	// alert never sees pairs such as hit_exact with temperature.
	for _, o := range Outcomes {
		if o.Result != ResultNone {
			m.requests[o.Result][o.Reason] = set.NewCounter(cacheRequestsSeries(o))
		}
	}
	for _, op := range cacheErrOps {
		m.errs[op] = cacheErrorsFamily.NewCounter(set, "op", op)
	}
	for _, g := range cache.GuardReasons {
		m.guards[g] = cacheGuardRejectionsFamily.NewCounter(set, "guard", g)
	}
	m.similarity = cacheSimilarityFamily.NewHistogram(set,
		[]float64{0.5, 0.6, 0.7, 0.8, 0.85, 0.88, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1})
	m.tokensSaved = cacheTokensSavedFamily.NewCounter(set)
	m.longQueries = cacheSemanticSkippedFamily.NewCounter(set, "reason", "query_too_long")
	cacheEntriesFamily.NewGauge(set, func() float64 { return float64(m.entries.Load()) })
	cacheVectorEntriesFamily.NewGauge(set, func() float64 { return float64(m.vectors.Load()) })
	cacheBytesFamily.NewGauge(set, func() float64 { return float64(m.bytes.Load()) })
	return m
}

// requestCounter is the series of a cache outcome; one missing from
// Outcomes is made on first use, and counted all the same
// (TestCacheRequestSeriesCanHappen fails on it).
func (m *cacheMetrics) requestCounter(o Outcome) *metrics.Counter {
	if c := m.requests[o.Result][o.Reason]; c != nil {
		return c
	}
	return m.set.GetOrCreateCounter(cacheRequestsSeries(o))
}

func cacheRequestsSeries(o Outcome) string {
	return cacheRequestsFamily.Series("result", o.Result.Label(), "reason", o.Reason.Label())
}

// embeddingMetrics count inputs, each a hit or a miss.
type embeddingMetrics struct {
	hits, misses *metrics.Counter
}

func newEmbeddingMetrics(set *metrics.Set) *embeddingMetrics {
	return &embeddingMetrics{
		hits:   cacheEmbeddingInputsFamily.NewCounter(set, "result", "hit"),
		misses: cacheEmbeddingInputsFamily.NewCounter(set, "result", "miss"),
	}
}

// cacheObserverMetrics are cacheObserver's series.
type cacheObserverMetrics struct {
	look map[string]*metrics.PrometheusHistogram
	// writes: stored entries, failed entries
	stored, failed *metrics.Counter
	dropped        map[string]*metrics.Counter
	transitions    map[string]*metrics.Counter // path + ":" + to
	skipped        *metrics.Counter            // semantic lookups skipped for the embedder; nil without one
}

// lookupBuckets resolve the 0.1–10 ms range that a store on the same network
// answers in, and the timeouts above it.
var lookupBuckets = []float64{0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1}

func newCacheObserverMetrics(set *metrics.Set, embedder bool) cacheObserverMetrics {
	m := cacheObserverMetrics{look: map[string]*metrics.PrometheusHistogram{},
		dropped: map[string]*metrics.Counter{}, transitions: map[string]*metrics.Counter{}}
	if embedder {
		m.skipped = cacheEmbedSkippedFamily.NewCounter(set)
	}
	for _, op := range []string{"get", "search"} {
		m.look[op] = cacheLookupFamily.NewHistogram(set, lookupBuckets, "op", op)
	}
	m.stored = cacheWritesFamily.NewCounter(set, "result", "stored")
	m.failed = cacheWritesFamily.NewCounter(set, "result", "failed")
	for _, r := range []string{cache.DropQueueFull, cache.DropBreakerOpen, cache.DropShutdown} {
		m.dropped[r] = cacheWritesDroppedFamily.NewCounter(set, "reason", r)
	}
	for _, path := range []string{"read", "write"} {
		for _, to := range []cache.BreakerState{cache.BreakerOpen, cache.BreakerHalfOpen, cache.BreakerClosed} {
			m.transitions[path+":"+to.String()] = cacheBreakerTransitionsFamily.NewCounter(set, "path", path, "to", to.String())
		}
	}
	return m
}

// newIndexSyncErrors makes frontdoor_cache_index_sync_errors_total (an
// in-process index synced with Redis).
func newIndexSyncErrors(set *metrics.Set) *metrics.Counter {
	return cacheIndexSyncErrorsFamily.NewCounter(set)
}

// registerBackendGauges makes the gauges that read the cache backend's
// health (and the embedder's, when there is one) at every scrape.
func (c *Cache) registerBackendGauges(set *metrics.Set) {
	if c.embedder != nil {
		cacheEmbedderUpFamily.NewGauge(set, func() float64 {
			if c.backend.EmbedderHealth().State == "ok" {
				return 1
			}
			return 0
		})
	}
	cacheBackendUpFamily.NewGauge(set, func() float64 {
		if c.backend.Health().Up {
			return 1
		}
		return 0
	})
	for _, st := range []cache.BackendState{cache.StateOK, cache.StateDegraded, cache.StateBypassed} {
		cacheBackendStateFamily.NewGauge(set, func() float64 {
			if c.backend.Health().State == st {
				return 1
			}
			return 0
		}, "state", string(st))
	}
	cacheWriteQueueFamily.NewGauge(set, func() float64 { return float64(c.backend.Health().WriteQueue) })
}

// verifyMetrics are the verifier's series.
type verifyMetrics struct {
	verdict        map[[2]string]*metrics.Counter // kind, verdict
	dropped        *metrics.Counter
	promoted       *metrics.Counter
	promoteRefused map[string]*metrics.Counter // approved near-misses not promoted, by reason
	sharedErrs     *metrics.Counter
}

// newVerifyMetrics makes the verifier's series; falseHitRatio is read at
// every scrape.
func newVerifyMetrics(set *metrics.Set, falseHitRatio func() float64) verifyMetrics {
	m := verifyMetrics{verdict: map[[2]string]*metrics.Counter{}, promoteRefused: map[string]*metrics.Counter{}}
	for _, kind := range []string{"audit", "near_miss"} {
		for _, vd := range []string{"yes", "no", "unsure", "error"} {
			m.verdict[[2]string{kind, vd}] = verifyFamily.NewCounter(set, "kind", kind, "verdict", vd)
		}
	}
	m.dropped = verifyDroppedFamily.NewCounter(set)
	m.promoted = verifyPromotedFamily.NewCounter(set)
	for _, reason := range []string{promoteRefusedLookupOnly, promoteRefusedNotStored, cache.PromoteRefusedPerMinute,
		cache.PromoteRefusedMax, promoteRefusedUnavailable} {
		m.promoteRefused[reason] = verifyPromoteRefusedFamily.NewCounter(set, "reason", reason)
	}
	m.sharedErrs = cacheErrorsFamily.NewCounter(set, "op", "verify_shared")
	falseHitRatioFamily.NewGauge(set, falseHitRatio)
	return m
}

// Count counts a request's outcome, once, when it ends.
func (c *Cache) Count(o Outcome) { c.m.request(o) }

// request counts a request's cache outcome; nothing when the cache was
// not consulted.
func (m *cacheMetrics) request(o Outcome) {
	if o.Result == ResultNone {
		return
	}
	m.results[o.Result].Add(1)
	m.requestCounter(o).Inc()
}

// totals returns the request counts by result since start.
func (m *cacheMetrics) totals() map[string]int64 {
	out := map[string]int64{}
	for r := ResultNone + 1; r < NumResults; r++ {
		out[r.Label()] = m.results[r].Load()
	}
	return out
}

// hitRatio is hits over lookups (hits, misses and the partial hits of
// embeddings batches, which went upstream) since start.
func (m *cacheMetrics) hitRatio() float64 {
	hits := m.results[ResultHitExact].Load() + m.results[ResultHitSemantic].Load()
	if total := hits + m.results[ResultMiss].Load() + m.results[ResultPartial].Load(); total > 0 {
		return float64(hits) / float64(total)
	}
	return 0
}

func (m *cacheMetrics) errors(op string) *metrics.Counter { return m.errs[op] }

func (m *cacheMetrics) dropped() uint64 { return m.drops.Load() }

func (m *cacheMetrics) guardRejects(reason string) *metrics.Counter {
	if c := m.guards[reason]; c != nil {
		return c
	}
	return m.errs["search"]
}

// refreshStats keeps the entry gauges current without a store call per scrape.
func (c *Cache) refreshStats(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		if st, err := c.store.Stats(ctx); err == nil {
			c.m.entries.Store(st.Entries)
			c.m.vectors.Store(st.VectorEntries)
			c.m.bytes.Store(st.Bytes)
		} else if ctx.Err() == nil {
			c.m.errors("stats").Inc()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// cacheObserver turns what the cache backend does into metrics and
// rate-limited log lines: every breaker, dropped write and state change is
// loud.
type cacheObserver struct {
	log *telemetry.RateLog
	cm  *cacheMetrics
	cacheObserverMetrics
	// the embedder: its name and failures (in frontdoor_cache_errors_total)
	embedder  string
	embedErrs *metrics.Counter
}

var _ cache.Observer = (*cacheObserver)(nil)

func newCacheObserver(set *metrics.Set, cm *cacheMetrics, log *slog.Logger, embedder string) *cacheObserver {
	return &cacheObserver{log: telemetry.NewRateLog(log, 10*time.Second), cm: cm, embedder: embedder, embedErrs: cm.errors("embed"),
		cacheObserverMetrics: newCacheObserverMetrics(set, embedder != "")}
}

func (o *cacheObserver) Lookup(op string, d time.Duration, err error) {
	if h := o.look[op]; h != nil {
		h.Update(d.Seconds())
	}
	if err == nil || errors.Is(err, cache.ErrNotFound) || errors.Is(err, cache.ErrUnavailable) {
		return
	}
	o.cm.errors(op).Inc()
	o.log.Warn("lookup:"+op, "cache: a lookup failed; answered as a miss", "op", op, "error", err.Error())
}

func (o *cacheObserver) WriteBatch(n int, _ time.Duration, err error) {
	if err == nil {
		o.stored.Add(n)
		return
	}
	o.failed.Add(n)
	if errors.Is(err, cache.ErrUnavailable) {
		o.log.Warn("write:unavailable", "cache: writes not stored: the store is not connected", "entries", n)
		return
	}
	o.cm.errors("put").Add(n)
	o.log.Warn("write:error", "cache: a write-back batch failed", "entries", n, "error", err.Error())
}

func (o *cacheObserver) WriteDropped(reason string, n int) {
	if c := o.dropped[reason]; c != nil {
		c.Add(n)
	}
	o.cm.drops.Add(uint64(n))
	o.log.Warn("drop:"+reason, "cache: write-back dropped", "reason", reason, "entries", n)
}

func (o *cacheObserver) BreakerChanged(path string, from, to cache.BreakerState, lastErr error) {
	if path == "embed" {
		o.log.Warn("embed-breaker:"+to.String(), "cache: embedder breaker "+to.String(), "embedder", o.embedder, "from", from.String())
		return
	}
	if c := o.transitions[path+":"+to.String()]; c != nil {
		c.Inc()
	}
	if to == cache.BreakerHalfOpen {
		return // a probe: counted, not logged
	}
	what := map[string]string{"read": "lookups bypass the store", "write": "write-backs are dropped"}[path]
	if to == cache.BreakerClosed {
		what = map[string]string{"read": "lookups reach the store again", "write": "write-backs are stored again"}[path]
	}
	args := []any{"from", from.String()}
	if lastErr != nil && to == cache.BreakerOpen {
		args = append(args, "last_error", lastErr.Error())
	}
	o.log.Warn("breaker:"+path+":"+to.String(), "cache: "+path+" breaker "+to.String()+"; "+what, args...)
}

// EmbedSkipped counts a semantic lookup skipped, and makes an embedder's
// failure loud: frontdoor_cache_errors_total{op="embed"} and a WARN at most
// once per 10 s.
func (o *cacheObserver) EmbedSkipped(err error) {
	o.skipped.Inc()
	if err == nil {
		return
	}
	o.embedErrs.Inc()
	o.log.Warn("embed-failed", "cache: embedder failed; the semantic lookup is skipped", "embedder", o.embedder, "error", err.Error())
}

func (o *cacheObserver) StateChanged(from, to cache.BackendState, why string) {
	if to == cache.StateOK {
		o.log.Info("state:ok", "cache: backend ok", "from", string(from))
		return
	}
	o.log.Warn("state:"+string(to), "cache: backend "+string(to), "from", string(from), "why", why)
}
