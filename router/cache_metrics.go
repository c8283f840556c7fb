package router

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// request counts a request's cache outcome; nothing when the cache was
// not consulted.
func (m *cacheMetrics) request(o cacheOutcome) {
	if o.result == resultNone {
		return
	}
	m.results[o.result].Add(1)
	m.requestCounter(o).Inc()
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
