package router

import (
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/internal/reply"
	"frontdoor/router/config"
)

// passthroughPattern returns the configured pattern path falls under, or
// "" when none does (or the path has a character no pattern allows).
func passthroughPattern(paths []string, path string) string {
	for _, p := range paths {
		if config.PathMatches(p, path) && config.SafePath(path) {
			return p
		}
	}
	return ""
}

// servePassthrough forwards a request to a pass-through path (pattern
// names the entry of passthrough.paths it falls under) to a node serving
// its model, and the node's answer back as it is.
func (g *Gateway) servePassthrough(ctx *fasthttp.RequestCtx, id, pattern string) {
	x := g.newExchange(ctx, adapters.EndpointPassthrough, id)
	defer func() { g.finish(ctx, x, recover()) }()
	g.passthroughs.inc(pattern)
	if !g.enter(ctx, x, false) {
		return
	}
	ct := ctx.Request.Header.ContentType()
	pr, apiErr := adapters.ParsePassthroughWith(ct, ctx.PostBody(), g.bodies.parseOptions(&g.conf().Limits))
	if apiErr != nil {
		g.bodies.note(x, apiErr)
		reply.Error(ctx, apiErr)
		return
	}
	defer pr.Release()
	x.obs.ParsedModel(x.endpoint, pr.Model, x.tenant.name)
	if !g.resolveModel(ctx, x, pr.Model) || !g.chargeTokens(ctx, x, 0) {
		return
	}
	path := string(ctx.Path())
	if q := ctx.URI().QueryString(); len(q) > 0 {
		path += "?" + string(q)
	}
	body, upstreamCT := pr.UpstreamBody(x.model, ct)
	ur := adapters.UpstreamRequest{Endpoint: x.endpoint, Path: path, ContentType: upstreamCT, Body: body, RequestID: x.id, Model: x.model}
	st := g.up.waitCandidates(x)
	a, ok := g.up.tryNodes(x, &ur, st)
	if !ok {
		reply.Error(ctx, g.up.noNodeError(x, st))
		return
	}
	g.metrics.upstreamAnswers.Add(1)
	setUpstream(&ctx.Response.Header, x.upstream, x.attempts)
	passOn(ctx, a.resp)
	a.resp.Close()
	x.slot.release()
}
