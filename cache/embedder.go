package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"frontdoor/embed"
)

// ErrEmbedBypassed is Embed's error while the embedder's breaker is open.
var ErrEmbedBypassed = errors.New("embedder bypassed (breaker open)")

// embedTroubleMemory is how long a failure keeps the embedder "failing" in
// its health.
const embedTroubleMemory = 30 * time.Second

// guardedEmbedder puts the embedder behind what the request path needs: a
// failure or timeout makes that request skip the semantic lookup (the exact
// cache still answers), never an error. A breaker (the reads breaker's
// settings) stops calling an embedder that keeps failing, so that requests
// do not each wait for its timeout; it probes again after open_for.
type guardedEmbedder struct {
	e       embed.Embedder
	breaker *Breaker

	calls, failures atomic.Int64
	lastFail        atomic.Int64 // unix ns
	lastErr         atomic.Pointer[string]
}

// EmbedderHealth is the embedder's part of the cache's health.
type EmbedderHealth struct {
	Name      string    `json:"name"`
	State     string    `json:"state"` // ok | failing | bypassed
	Breaker   string    `json:"breaker"`
	Calls     int64     `json:"calls"`
	Failures  int64     `json:"failures"`
	LastError string    `json:"last_error,omitempty"`
	LastFail  time.Time `json:"last_failure,omitzero"`
}

// UseEmbedder puts e on the backend's request path (Embed), behind a
// breaker with the reads breaker's settings. Call it before serving.
func (b *Backend) UseEmbedder(e embed.Embedder) {
	w := &guardedEmbedder{e: e}
	w.breaker = NewBreaker(b.reads.Breaker, func(from, to BreakerState) { b.obs.BreakerChanged("embed", from, to, nil) })
	b.embedder = w
}

// Embed returns the text's vector, or an error after which the caller skips
// the semantic part of the cache for this request. Every failure and skip
// goes to the Observer.
func (b *Backend) Embed(ctx context.Context, text string) ([]float32, error) {
	w := b.embedder
	if w == nil {
		return nil, ErrEmbedBypassed
	}
	if !w.breaker.Allow() {
		b.obs.EmbedSkipped(nil)
		return nil, ErrEmbedBypassed
	}
	w.calls.Add(1)
	vec, err := w.e.Embed(ctx, text)
	if err != nil {
		w.failures.Add(1)
		w.lastFail.Store(time.Now().UnixNano())
		msg := err.Error()
		w.lastErr.Store(&msg)
		w.breaker.Failure()
		b.obs.EmbedSkipped(err)
		return nil, err
	}
	w.breaker.Success()
	return vec, nil
}

// EmbedderHealth reports the embedder's health; nil without one.
func (b *Backend) EmbedderHealth() *EmbedderHealth {
	w := b.embedder
	if w == nil {
		return nil
	}
	bs, _ := w.breaker.State()
	st := &EmbedderHealth{Name: w.e.Name(), State: "ok", Breaker: bs.String(), Calls: w.calls.Load(), Failures: w.failures.Load()}
	if t := w.lastFail.Load(); t != 0 {
		st.LastFail = time.Unix(0, t)
		if p := w.lastErr.Load(); p != nil {
			st.LastError = *p
		}
		if time.Since(st.LastFail) < embedTroubleMemory {
			st.State = "failing"
		}
	}
	if bs != BreakerClosed {
		st.State = "bypassed"
	}
	return st
}
