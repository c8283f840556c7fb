package reuse

import (
	"errors"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/cache"
	"frontdoor/internal/telemetry"
)

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
