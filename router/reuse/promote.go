package reuse

import (
	"context"
	"errors"
	"sync"
	"time"

	"frontdoor/cache"
)

// promotion stores a near-miss the judge approved against a curated entry
// (imported or warmed: cache.Entry.Anchor) as an entry of the asked
// question that repeats the curated answer, so that the question is
// answered from the vetted text from then on. Only a request that went
// upstream and whose own answer was stored is promoted: the promotion
// replaces that entry (same id), whichever of the write-back and the
// verdict comes first, so the question never has two entries. A lookup-only
// request (X-Cache-Only) is judged, as evidence, but never promoted. The
// promoted entry is not curated (Via names the curated entry), so it never
// anchors another promotion, and each tenant's promotions are limited
// (cache.PromoteLimits).
type promotion struct {
	asked    cache.Write // the asked question's keys, vector and TTL; no answer
	upstream bool        // the request went upstream: its answer is written back

	mu       sync.Mutex
	curated  *cache.Entry // the curated entry, once the judge approved
	tenant   string       // whose promotion limits apply, set with curated
	settled  bool         // the write-back is stored, or will never be
	stored   bool         // the write-back is stored
	promoted bool
}

// newPromotion is the promotion of p's question, nil when the question
// would not be stored (no semantic store, no vector).
func (c *Cache) newPromotion(p *Plan) *promotion {
	if !p.store || !p.semantic || p.vec == nil {
		return nil
	}
	e := &cache.Entry{Namespace: p.namespace, Model: p.model, Endpoint: p.endpoint, ExactKey: p.keys.Exact,
		Query: p.keys.Query, Scope: p.keys.Scope}
	if !c.conf().Exact.Enabled {
		e.ExactKey = ""
	}
	return &promotion{asked: cache.Write{Entry: e, Vec: p.vec, TTL: p.ttl}, upstream: p.only == 0}
}

// writtenBack reports the write-back of the question's own answer after
// the request went upstream: w, or nil when none was stored (the question
// is then not promoted). It runs on
// the write queue's callback, so a due promotion (which may ask Redis for
// the tenant's count) runs on its own goroutine.
func (c *Cache) writtenBack(pr *promotion, w *cache.Write) {
	if pr == nil {
		return
	}
	pr.mu.Lock()
	if w != nil {
		pr.asked.Entry.ID = w.Entry.ID
		pr.asked.Entry.ExactKey = w.Entry.ExactKey
		pr.stored = true
	}
	pr.settled = true
	due := pr.curated != nil
	pr.mu.Unlock()
	if due {
		go c.verify.promote(pr)
	}
}

// Why an approved near-miss is not promoted, besides the tenant's limits
// (cache.PromoteRefused*).
const (
	promoteRefusedLookupOnly  = "lookup_only" // X-Cache-Only: the request never went upstream
	promoteRefusedNotStored   = "not_stored"  // the request's own answer was not stored (none, or not storable)
	promoteRefusedUnavailable = "unavailable" // the shared count in Redis could not be read
)

// approve records the judge's yes for a near-miss of tenant on curatedID.
func (v *verifier) approve(ctx context.Context, pr *promotion, tenant, curatedID string) {
	if pr == nil || v.entries == nil {
		return
	}
	if !pr.upstream {
		v.refusePromotion(promoteRefusedLookupOnly)
		return
	}
	e, err := v.entries.GetByID(ctx, curatedID)
	if err != nil {
		if !errors.Is(err, cache.ErrNotFound) {
			v.log.Warn("verify-promote", "cache verify: reading the curated entry of an approved near-miss failed", "error", err.Error())
		}
		return // gone (purged, expired): nothing to point at
	}
	if !e.Anchor() {
		return // replaced meanwhile by an entry that is not the operator's
	}
	pr.mu.Lock()
	pr.curated, pr.tenant = e, tenant
	due := pr.settled
	pr.mu.Unlock()
	if due {
		v.promote(pr)
	}
}

// promote stores the asked question with the curated answer, once, when
// the tenant's promotion limits allow.
func (v *verifier) promote(pr *promotion) {
	pr.mu.Lock()
	if pr.promoted {
		pr.mu.Unlock()
		return
	}
	pr.promoted = true
	c, e, tenant, stored := pr.curated, *pr.asked.Entry, pr.tenant, pr.stored
	pr.mu.Unlock()
	if !stored {
		v.refusePromotion(promoteRefusedNotStored)
		return
	}
	if !v.admitPromotion(tenant) {
		return
	}
	if e.ID == "" {
		e.ID = cache.NewEntryID()
	}
	e.Model, e.Content, e.Reasoning, e.ToolCalls, e.Finish = c.Model, c.Content, c.Reasoning, c.ToolCalls, c.Finish
	e.Usage, e.Tag, e.Curated, e.Via = c.Usage, c.Tag, false, c.ID
	e.Created = time.Now()
	v.writes.Enqueue(cache.Write{Entry: &e, Vec: pr.asked.Vec, TTL: pr.asked.TTL}, func(err error) {
		if err != nil {
			return // the backend counts and logs dropped writes
		}
		v.promoted.Inc()
		v.logger.Info("cache verify: an approved near-miss now answers with a curated entry", "entry", e.ID, "via", c.ID)
	})
}

// admitPromotion counts a promotion of tenant against its limits, or
// counts why it is refused.
func (v *verifier) admitPromotion(tenant string) bool {
	refused, err := v.limits.Take(context.Background(), tenant, time.Now())
	if err != nil {
		v.sharedErrs.Inc()
		v.log.Warn("verify-promote-limit", "cache verify: the shared promotion count in Redis is unavailable; approved near-misses are not promoted",
			"error", err.Error())
		refused = promoteRefusedUnavailable
	}
	if refused != "" {
		v.refusePromotion(refused)
		v.logger.Debug("cache verify: an approved near-miss was not promoted", "tenant", tenant, "reason", refused)
		return false
	}
	return true
}

// refusePromotion counts an approved near-miss not promoted, by reason.
func (v *verifier) refusePromotion(reason string) {
	if c := v.promoteRefused[reason]; c != nil {
		c.Inc()
	}
}
