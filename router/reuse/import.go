package reuse

import (
	"context"
	"errors"
	"fmt"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/cache"
	"frontdoor/internal/warm"
)

// Import results: stored now, already cached, or (a check) not cached.
const (
	importImported = "imported"
	importCached   = "cached"
	importMissing  = "missing"
)

// Import stores answer as the curated answer of the chat request r,
// tagged tag, unless an entry answers it already; check only looks. The
// caller has resolved r's tenant and model.
func (c *Cache) Import(ctx context.Context, r Request, tag, answer string, check bool) (warm.ImportResponse, error) {
	p := c.Plan(r, ImportHints(tag))
	defer func() { p.req, p.body = nil, nil }()
	if !p.store {
		return warm.ImportResponse{}, fmt.Errorf("%w: the request is not cacheable (%s)", warm.ErrImportRefused, p.reason.Label())
	}
	if !c.conf().Exact.Enabled {
		return warm.ImportResponse{}, fmt.Errorf("%w: imports need cache.exact", warm.ErrImportRefused)
	}
	e, err := c.store.Get(ctx, p.keys.Exact)
	switch {
	case err == nil && e.Namespace == p.namespace:
		return warm.ImportResponse{ID: e.ID, Result: importCached}, nil
	case err != nil && !errors.Is(err, cache.ErrNotFound):
		return warm.ImportResponse{}, fmt.Errorf("cache store: %w", err)
	case check:
		return warm.ImportResponse{Result: importMissing}, nil
	}
	c.semanticScope(p)
	prompt := 0
	for _, m := range r.Req.Root().GetArray("messages") {
		prompt += admission.CountTokens(string(m.GetStringBytes("content")))
	}
	completion := admission.CountTokens(answer)
	a := &adapters.Answer{Model: r.Model, Content: answer, Finish: "stop",
		Usage: adapters.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}}
	w, ok := c.cacheWrite(cache.NewEntryID(), p, a)
	if !ok {
		return warm.ImportResponse{}, fmt.Errorf("%w: nothing to store", warm.ErrImportRefused)
	}
	if err := c.store.Put(ctx, w.Entry, w.Vec, w.TTL); err != nil {
		return warm.ImportResponse{}, fmt.Errorf("cache store: %w", err)
	}
	return warm.ImportResponse{ID: w.Entry.ID, Result: importImported}, nil
}

// Cached reports whether an import's result says the answer was cached
// already.
func Cached(r warm.ImportResponse) bool { return r.Result == importCached }
