package router

import (
	"context"
	"errors"
	"sync"
	"time"

	"frontdoor/cache"
)

// promotion stores a near-miss the judge approved against a curated entry
// (imported or warmed) as an entry of the asked question that repeats the
// curated answer, so that the question is answered from the vetted text
// from then on. A near-miss that went upstream has its own answer written
// back; the promotion replaces that entry (same id) whichever of the two
// comes first, so the question never has two entries.
type promotion struct {
	asked    cache.Write // the asked question's keys, vector and TTL; no answer
	upstream bool        // an answer went upstream and is written back

	mu       sync.Mutex
	curated  *cache.Entry // the curated entry, once the judge approved
	settled  bool         // the write-back is stored, or will never be
	promoted bool
}

// newPromotion is the promotion of p's question, nil when the question
// would not be stored (no semantic store, no vector).
func (g *Gateway) newPromotion(p *cachePlan) *promotion {
	if !p.store || !p.semantic || p.vec == nil {
		return nil
	}
	e := &cache.Entry{Namespace: p.namespace, Model: p.model, Endpoint: p.endpoint, ExactKey: p.keys.Exact,
		Query: p.keys.Query, Scope: p.keys.Scope}
	if !g.conf().Cache.Exact.Enabled {
		e.ExactKey = ""
	}
	return &promotion{asked: cache.Write{Entry: e, Vec: p.vec, TTL: p.ttl}, upstream: p.only == 0}
}

// writtenBack reports the write-back of the question's own answer: w, or
// nil when none was stored.
func (g *Gateway) writtenBack(pr *promotion, w *cache.Write) {
	if pr == nil {
		return
	}
	pr.mu.Lock()
	if w != nil {
		pr.asked.Entry.ID = w.Entry.ID
		pr.asked.Entry.ExactKey = w.Entry.ExactKey
	}
	pr.settled = true
	due := pr.curated != nil
	pr.mu.Unlock()
	if due {
		g.promote(pr)
	}
}

// approve records the judge's yes for a near-miss on curatedID.
func (v *verifier) approve(ctx context.Context, pr *promotion, curatedID string) {
	getter, ok := v.g.store.(cache.EntryGetter)
	if pr == nil || !ok {
		return
	}
	e, err := getter.GetByID(ctx, curatedID)
	if err != nil {
		if !errors.Is(err, cache.ErrNotFound) {
			v.log.Warn("verify-promote", "cache verify: reading the curated entry of an approved near-miss failed", "error", err.Error())
		}
		return // gone (purged, expired): nothing to point at
	}
	pr.mu.Lock()
	pr.curated = e
	due := pr.settled || !pr.upstream
	pr.mu.Unlock()
	if due {
		v.g.promote(pr)
	}
}

// promote stores the asked question with the curated answer, once.
func (g *Gateway) promote(pr *promotion) {
	pr.mu.Lock()
	if pr.promoted {
		pr.mu.Unlock()
		return
	}
	pr.promoted = true
	c, e := pr.curated, *pr.asked.Entry
	pr.mu.Unlock()
	if e.ID == "" {
		e.ID = cache.NewEntryID()
	}
	e.Model, e.Content, e.Reasoning, e.ToolCalls, e.Finish = c.Model, c.Content, c.Reasoning, c.ToolCalls, c.Finish
	e.Usage, e.Tag, e.Curated, e.Via = c.Usage, c.Tag, true, c.ID
	e.Created = time.Now()
	g.backend.Enqueue(cache.Write{Entry: &e, Vec: pr.asked.Vec, TTL: pr.asked.TTL}, func(err error) {
		if err != nil {
			return // the backend counts and logs dropped writes
		}
		if v := g.verify; v != nil {
			v.promoted.Inc()
		}
		g.log.Info("cache verify: an approved near-miss now answers with a curated entry", "entry", e.ID, "via", c.ID)
	})
}
