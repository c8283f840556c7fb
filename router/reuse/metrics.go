package reuse

// Every metric family of the cache side is declared here, once, beside
// its help text, and every series of them is made here, into the fields of
// the struct that counts it (cacheMetrics, the observer's, the
// embeddings', the verifier's, and the gauges that read the backend's
// health). The rest only counts.

import (
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/cache"
	"frontdoor/internal/telemetry"
)

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
