package reuse

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

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
