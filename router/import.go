package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/cache"
	"frontdoor/internal/warm"
)

// Import results.
const (
	importImported = "imported"
	importCached   = "cached"
	importMissing  = "missing"
)

// ImportAnswer stores an answered pair, the curated answer of a chat
// request, in the tenant's namespace as an exact and (when the semantic
// cache applies) a semantic entry, with no upstream call. The request is
// keyed exactly as the gateway keys it, so the same request, or a similar
// one, is then a hit. An existing exact entry is kept: the result is
// "cached". With Check, nothing is stored: the result is "cached" or
// "missing".
func (g *Gateway) ImportAnswer(ctx context.Context, in warm.ImportRequest) (warm.ImportResponse, error) {
	if g.store == nil {
		return warm.ImportResponse{}, fmt.Errorf("%w: the cache is off", warm.ErrImportRefused)
	}
	name := in.Tenant
	if name == "" {
		name = DefaultTenant
	}
	t := g.rt.Load().tenants.byName[name]
	if t == nil {
		return warm.ImportResponse{}, fmt.Errorf("%w: unknown tenant %q", warm.ErrImportRefused, name)
	}
	if in.Answer == "" {
		return warm.ImportResponse{}, fmt.Errorf("%w: empty answer", warm.ErrImportRefused)
	}
	req, apiErr := adapters.ParseRequest(adapters.EndpointChat, in.Request)
	if apiErr != nil {
		return warm.ImportResponse{}, fmt.Errorf("%w: %s", warm.ErrImportRefused, apiErr.Message)
	}
	defer req.Release()
	if !t.allows(req.Model) {
		return warm.ImportResponse{}, fmt.Errorf("%w: tenant %q may not use model %q", warm.ErrImportRefused, t.name, req.Model)
	}
	model, ok := g.pool.Resolve(req.Model, "import")
	if !ok {
		return warm.ImportResponse{}, fmt.Errorf("%w: unknown model %q", warm.ErrImportRefused, req.Model)
	}
	x := &exchange{endpoint: adapters.EndpointChat, req: req, tenant: t, model: model}
	p := g.plan(x, planHints{tag: cache.ValidTag([]byte(in.Tag)), curated: true})
	if !p.store {
		return warm.ImportResponse{}, fmt.Errorf("%w: the request is not cacheable (%s)", warm.ErrImportRefused, p.reason.label())
	}
	if !g.conf().Cache.Exact.Enabled {
		return warm.ImportResponse{}, fmt.Errorf("%w: imports need cache.exact", warm.ErrImportRefused)
	}
	e, err := g.store.Get(ctx, p.keys.Exact)
	switch {
	case err == nil && e.Namespace == p.namespace:
		return warm.ImportResponse{ID: e.ID, Result: importCached}, nil
	case err != nil && !errors.Is(err, cache.ErrNotFound):
		return warm.ImportResponse{}, fmt.Errorf("cache store: %w", err)
	case in.Check:
		return warm.ImportResponse{Result: importMissing}, nil
	}
	g.semanticScope(x, p)
	prompt := 0
	for _, m := range req.Root().GetArray("messages") {
		prompt += admission.CountTokens(string(m.GetStringBytes("content")))
	}
	completion := admission.CountTokens(in.Answer)
	a := &adapters.Answer{Model: model, Content: in.Answer, Finish: "stop",
		Usage: adapters.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}}
	w, ok := g.cacheWrite(g.flights.solo(p.keys.Exact), p, a)
	if !ok {
		return warm.ImportResponse{}, fmt.Errorf("%w: nothing to store", warm.ErrImportRefused)
	}
	if err := g.store.Put(ctx, w.Entry, w.Vec, w.TTL); err != nil {
		return warm.ImportResponse{}, fmt.Errorf("cache store: %w", err)
	}
	return warm.ImportResponse{ID: w.Entry.ID, Result: importImported}, nil
}

// ImportTarget imports answered pairs straight into the gateway's store,
// for frontdoor warm --config. Chat requests fail: their answers need a
// node (frontdoor warm --target). Entries are tagged tag, or with their
// file's name.
func (g *Gateway) ImportTarget(tag string) warm.Target { return &importTarget{g: g, tag: tag} }

type importTarget struct {
	g   *Gateway
	tag string
}

var errNeedsTarget = errors.New("a chat request needs a gateway to answer it: use --target (--config imports answered pairs only)")

func (t *importTarget) Lookup(ctx context.Context, it *warm.Item) (bool, error) {
	if it.Kind != warm.KindPair {
		return false, errNeedsTarget
	}
	r, err := t.g.ImportAnswer(ctx, warm.ImportRequest{Tenant: it.Tenant, Request: it.Request, Answer: it.Answer, Check: true})
	return r.Result == importCached, err
}

func (t *importTarget) Warm(ctx context.Context, it *warm.Item) (warm.Result, error) {
	tag := t.tag
	if tag == "" {
		tag = warm.TagFor(it.File)
	}
	r, err := t.g.ImportAnswer(ctx, warm.ImportRequest{Tenant: it.Tenant, Tag: tag, Request: it.Request, Answer: it.Answer})
	if r.Result == importCached {
		return warm.Cached, err
	}
	return warm.Warmed, err
}

// WaitCache waits until the cache store is connected (a Redis store
// connects in the background), or ctx ends.
func (g *Gateway) WaitCache(ctx context.Context) error {
	if g.store == nil {
		return errors.New("the cache is off (cache.backend: off)")
	}
	for !g.backend.Health().Up {
		select {
		case <-ctx.Done():
			return fmt.Errorf("cache store not connected: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
