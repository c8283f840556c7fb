package router

import (
	"context"
	"errors"
	"fmt"

	"frontdoor/adapters"
	"frontdoor/internal/warm"
	"frontdoor/router/reuse"
)

// ImportAnswer stores an answered pair, the curated answer of a chat
// request, in the tenant's namespace as an exact and (when the semantic
// cache applies) a semantic entry, with no upstream call. The request is
// keyed exactly as the gateway keys it, so the same request, or a similar
// one, is then a hit. An existing exact entry is kept: the result is
// "cached". With Check, nothing is stored: the result is "cached" or
// "missing".
func (g *Gateway) ImportAnswer(ctx context.Context, in warm.ImportRequest) (warm.ImportResponse, error) {
	if !g.cache.On() {
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
	return g.cache.Import(ctx, cacheRequest(g.rt.Load(), &exchange{endpoint: adapters.EndpointChat, req: req, tenant: t, model: model}, nil),
		in.Tag, in.Answer, in.Check)
}

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
	return reuse.Cached(r), err
}

func (t *importTarget) Warm(ctx context.Context, it *warm.Item) (warm.Result, error) {
	tag := t.tag
	if tag == "" {
		tag = warm.TagFor(it.File)
	}
	r, err := t.g.ImportAnswer(ctx, warm.ImportRequest{Tenant: it.Tenant, Tag: tag, Request: it.Request, Answer: it.Answer})
	if reuse.Cached(r) {
		return warm.Cached, err
	}
	return warm.Warmed, err
}

// WaitCache waits until the cache store is connected (a Redis store
// connects in the background).
func (g *Gateway) WaitCache(ctx context.Context) error { return g.cache.WaitReady(ctx) }
