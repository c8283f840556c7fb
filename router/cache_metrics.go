package router

import (
	"context"
	"frontdoor/cache"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// cacheMetrics are the cache's Prometheus series.
type cacheMetrics struct {
	set         *metrics.Set
	requests    [numResults][numReasons]*metrics.Counter
	errs        map[string]*metrics.Counter
	guards      map[string]*metrics.Counter
	similarity  *metrics.PrometheusHistogram
	tokensSaved *metrics.Counter
	results     [numResults]atomic.Int64
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
		m.notStored[r] = set.NewCounter(`frontdoor_cache_writes_dropped_total{reason="` + r + `"}`)
	}
	// Only the outcomes that can happen have a series: a dashboard or an
	// alert never sees pairs such as hit_exact with temperature.
	for _, o := range cacheOutcomes {
		if o.result != resultNone {
			m.requests[o.result][o.reason] = set.NewCounter(cacheRequestsSeries(o))
		}
	}
	for _, op := range cacheErrOps {
		m.errs[op] = set.NewCounter(`frontdoor_cache_errors_total{op="` + op + `"}`)
	}
	for _, g := range cache.GuardReasons {
		m.guards[g] = set.NewCounter(`frontdoor_cache_guard_rejections_total{guard="` + g + `"}`)
	}
	m.similarity = set.NewPrometheusHistogramExt(`frontdoor_cache_similarity`,
		[]float64{0.5, 0.6, 0.7, 0.8, 0.85, 0.88, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1})
	m.tokensSaved = set.NewCounter(`frontdoor_cache_tokens_saved_total`)
	m.longQueries = set.NewCounter(`frontdoor_cache_semantic_skipped_total{reason="query_too_long"}`)
	set.NewGauge(`frontdoor_cache_entries`, func() float64 { return float64(m.entries.Load()) })
	set.NewGauge(`frontdoor_cache_vector_entries`, func() float64 { return float64(m.vectors.Load()) })
	set.NewGauge(`frontdoor_cache_bytes`, func() float64 { return float64(m.bytes.Load()) })
	return m
}

// request counts a request's cache outcome; nothing when the cache was
// not consulted.
func (m *cacheMetrics) request(o cacheOutcome) {
	if o.result == resultNone {
		return
	}
	m.results[o.result].Add(1)
	c := m.requests[o.result][o.reason]
	if c == nil {
		// An outcome missing from cacheOutcomes: counted all the same
		// (TestCacheRequestSeriesCanHappen fails on it).
		c = m.set.GetOrCreateCounter(cacheRequestsSeries(o))
	}
	c.Inc()
}

func cacheRequestsSeries(o cacheOutcome) string {
	return `frontdoor_cache_requests_total{result="` + o.result.label() + `",reason="` + o.reason.label() + `"}`
}

// totals returns the request counts by result since start.
func (m *cacheMetrics) totals() map[string]int64 {
	out := map[string]int64{}
	for r := resultNone + 1; r < numResults; r++ {
		out[r.label()] = m.results[r].Load()
	}
	return out
}

// hitRatio is hits over lookups (hits, misses and the partial hits of
// embeddings batches, which went upstream) since start.
func (m *cacheMetrics) hitRatio() float64 {
	hits := m.results[resultHitExact].Load() + m.results[resultHitSemantic].Load()
	if total := hits + m.results[resultMiss].Load() + m.results[resultPartial].Load(); total > 0 {
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
func (g *Gateway) refreshStats(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		if st, err := g.store.Stats(ctx); err == nil {
			g.cm.entries.Store(st.Entries)
			g.cm.vectors.Store(st.VectorEntries)
			g.cm.bytes.Store(st.Bytes)
		} else if ctx.Err() == nil {
			g.cm.errors("stats").Inc()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
