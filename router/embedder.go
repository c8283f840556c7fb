package router

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/cache"
	"frontdoor/embed"
	"frontdoor/router/admin"
)

// embedWatch puts the embedder behind what the request path needs: a
// failure or timeout makes that request skip the semantic lookup (the exact
// cache still answers), never an error. Failures are counted
// (frontdoor_cache_errors_total{op="embed"}), logged at WARN at most once
// per 10 s, and shown in /status. A breaker (the cache.reads.breaker
// settings) stops calling an embedder that keeps failing, so that requests
// do not each wait for its timeout; it probes again after open_for.
type embedWatch struct {
	e       embed.Embedder
	breaker *cache.Breaker
	errs    *metrics.Counter
	skipped *metrics.Counter
	log     *rateLog

	calls, failures atomic.Int64
	lastFail        atomic.Int64 // unix ns
	lastErr         atomic.Pointer[string]
}

// errEmbedBypassed is returned while the embedder's breaker is open.
var errEmbedBypassed = errors.New("embedder bypassed (breaker open)")

// embedTroubleMemory is how long a failure keeps the embedder "failing" in
// /status and frontdoor_cache_embedder_up.
const embedTroubleMemory = 30 * time.Second

func newEmbedWatch(e embed.Embedder, bc cache.BreakerConfig, set *metrics.Set, errs *metrics.Counter, log *slog.Logger) *embedWatch {
	w := &embedWatch{e: e, errs: errs, log: newRateLog(log, 10*time.Second),
		skipped: set.NewCounter(`frontdoor_cache_embed_skipped_total`)}
	w.breaker = cache.NewBreaker(bc, func(from, to cache.BreakerState) {
		w.log.warn("embed-breaker:"+to.String(), "cache: embedder breaker "+to.String(), "embedder", e.Name(), "from", from.String())
	})
	set.NewGauge(`frontdoor_cache_embedder_up`, func() float64 {
		if w.status().State == "ok" {
			return 1
		}
		return 0
	})
	return w
}

// embed returns the text's vector, or an error after which the caller skips
// the semantic part of the cache for this request.
func (w *embedWatch) embed(ctx context.Context, text string) ([]float32, error) {
	if !w.breaker.Allow() {
		w.skipped.Inc()
		return nil, errEmbedBypassed
	}
	w.calls.Add(1)
	vec, err := w.e.Embed(ctx, text)
	if err != nil {
		w.failures.Add(1)
		w.lastFail.Store(time.Now().UnixNano())
		msg := err.Error()
		w.lastErr.Store(&msg)
		w.errs.Inc()
		w.skipped.Inc()
		w.breaker.Failure()
		w.log.warn("embed-failed", "cache: embedder failed; the semantic lookup is skipped", "embedder", w.e.Name(), "error", msg)
		return nil, err
	}
	w.breaker.Success()
	return vec, nil
}

func (w *embedWatch) status() admin.EmbedderStatus {
	bs, _ := w.breaker.State()
	st := admin.EmbedderStatus{Name: w.e.Name(), State: "ok", Breaker: bs.String(), Calls: w.calls.Load(), Failures: w.failures.Load()}
	if t := w.lastFail.Load(); t != 0 {
		st.LastFail = time.Unix(0, t)
		if p := w.lastErr.Load(); p != nil {
			st.LastError = *p
		}
		if time.Since(st.LastFail) < embedTroubleMemory {
			st.State = "failing"
		}
	}
	if bs != cache.BreakerClosed {
		st.State = "bypassed"
	}
	return st
}
