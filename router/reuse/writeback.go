package reuse

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"frontdoor/adapters"
	"frontdoor/cache"
)

// writeBack hands a finished answer to the backend's write queue; the
// flight is retired once the answer is stored or dropped. It runs after the
// client has its answer.
func (c *Cache) writeBack(f *Flight, a *adapters.Answer) {
	p := f.plan
	if c.flights.stale(f) {
		c.flights.leave(f)
		c.writtenBack(p.promote, nil)
		return
	}
	w, ok := c.cacheWrite(f.entryID, p, a)
	if !ok {
		c.flights.leave(f)
		c.writtenBack(p.promote, nil)
		return
	}
	c.backend.Enqueue(w, func(err error) {
		c.flights.leave(f)
		if err != nil {
			c.writtenBack(p.promote, nil)
		} else {
			c.writtenBack(p.promote, &w)
		}
	})
}

// Storable reports whether the answer a to a request of plan p may be
// stored (and so served to an identical request before it is).
func (c *Cache) Storable(p *Plan, a *adapters.Answer) bool {
	return a != nil && p != nil && p.store && (len(a.ToolCalls) == 0 || c.conf().Eligibility.CacheToolCalls)
}

// cacheWrite builds the write for an answer, embedding the query when the
// lookup did not. ok is false when there is nothing to store.
func (c *Cache) cacheWrite(id string, p *Plan, a *adapters.Answer) (w cache.Write, ok bool) {
	if !c.Storable(p, a) {
		return w, false
	}
	vec := p.vec
	if p.semantic && vec == nil {
		vec, _ = c.backend.Embed(context.Background(), p.keys.Query)
	}
	e := &cache.Entry{ID: id, Namespace: p.namespace, Model: a.Model, Endpoint: p.endpoint,
		Content: a.Content, Reasoning: a.Reasoning, ToolCalls: a.ToolCalls, Finish: a.Finish,
		Usage:   cache.Usage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens, TotalTokens: a.Usage.TotalTokens},
		Created: time.Now(), ExactKey: p.keys.Exact, Tag: p.tag, Curated: p.curated}
	if e.Model == "" {
		e.Model = p.model
	}
	if !c.conf().Exact.Enabled {
		e.ExactKey = ""
	}
	if p.semantic && vec != nil {
		e.Query, e.Scope = p.keys.Query, p.keys.Scope
	} else {
		vec = nil
	}
	if e.ExactKey == "" && vec == nil {
		return w, false
	}
	w = cache.Write{Entry: e, Vec: vec, TTL: p.ttl}
	if vec != nil {
		w.Query = p.vq // the lookup's (a store uses it only for this very vec)
	}
	return w, true
}

// Why a stream's answer was not stored, for
// frontdoor_cache_writes_dropped_total{reason}: the node reported an error
// in it, it ended without [DONE] or a finish_reason, reading it failed
// (idle, total, the connection), or every reader left and so the gateway
// stopped reading.
const (
	NotStoredError      = "stream_error"
	NotStoredIncomplete = "stream_incomplete"
	NotStoredCut        = "stream_cut"
	NotStoredClientGone = "client_gone"
)

var notStoredReasons = []string{NotStoredError, NotStoredIncomplete, NotStoredCut, NotStoredClientGone}

// NotStoredReason names an Assembler's refusal; "" when there is none, or
// when it is a policy (several choices) rather than a fault.
func NotStoredReason(err error) string {
	switch {
	case errors.Is(err, adapters.ErrStreamError):
		return NotStoredError
	case errors.Is(err, adapters.ErrStreamIncomplete):
		return NotStoredIncomplete
	}
	return ""
}

// NotStored counts a streamed answer of request id from node that was
// headed for the cache and is not stored, and logs it. The cache is doing
// its job, so the line is DEBUG when the fault is loud already (a cut
// stream has its "upstream stream broke" WARN, a client gone is a
// client_aborts_total); a node that put an error in its stream or ended it
// without [DONE] is an upstream fault nothing else reports, so that is a
// WARN naming the node, at most one per node and reason every 10 s.
func (c *Cache) NotStored(id, node, why string) {
	c.m.notStored[why].Inc()
	switch why {
	case NotStoredError, NotStoredIncomplete:
		c.warn.Warn(why+":"+node, "upstream stream not clean; its answer is not cached", "reason", why, "node", node, "request_id", id)
	default:
		if c.log.Enabled(context.Background(), slog.LevelDebug) {
			c.log.Debug("cache: streamed answer not stored", "reason", why, "node", node, "request_id", id)
		}
	}
}
