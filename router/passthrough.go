package router

import (
	"errors"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
)

// Passthrough is the passthrough: section: the paths nodes serve that the
// gateway forwards without knowing them (/v1/rerank, /v1/score,
// /tokenize, /v1/audio/*), each opted in by name. A request to one is
// routed by its body's model to a node that lists the model, with the
// tenant's key and allow-list, admission by requests, retries on another
// node and metrics, but no cache.
type Passthrough struct {
	// Paths are exact paths, or prefixes written as /path/* (every path
	// below /path/).
	Paths []string `yaml:"paths"`
}

// gatewayRoutes are the paths the gateway answers itself: no pass-through
// pattern may take them.
var gatewayRoutes = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
	"/v1/responses", "/v1/responses/", "/healthz", "/readyz", "/metrics", "/status", "/dashboard", "/admin/", "/debug/"}

// Validate checks each path: an absolute path of letters, digits and
// "/_.-", optionally ending in /* (a prefix), none twice, none taking a
// route of the gateway's own.
func (p Passthrough) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, path := range p.Paths {
		base := strings.TrimSuffix(path, "*")
		switch {
		case !strings.HasPrefix(path, "/") || !safePath(base) || strings.Contains(base, "*"):
			errs = append(errs, fmt.Errorf("paths[%d]: %q must be a path of letters, digits and /_.- such as /v1/rerank, or a prefix such as /v1/audio/*", i, path))
			continue
		case strings.HasSuffix(path, "*") && !strings.HasSuffix(base, "/"):
			errs = append(errs, fmt.Errorf("paths[%d]: %q: a prefix ends in /*", i, path))
			continue
		case seen[path]:
			errs = append(errs, fmt.Errorf("paths[%d]: %q is listed twice", i, path))
			continue
		}
		seen[path] = true
		for _, r := range gatewayRoutes {
			if pathMatches(path, r) || strings.HasSuffix(r, "/") && strings.HasPrefix(base, r) {
				errs = append(errs, fmt.Errorf("paths[%d]: %q would take %s, which the gateway answers itself", i, path, strings.TrimSuffix(r, "/")))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// safePath reports whether p holds only letters, digits and "/_.-", and
// no empty or dot-only segment.
func safePath(p string) bool {
	for _, c := range []byte(p) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "" && p != "/" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// pathMatches reports whether path is pattern, or lies below a /* prefix.
func pathMatches(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return len(path) > len(prefix) && strings.HasPrefix(path, prefix)
	}
	return path == pattern
}

// passthroughPattern returns the configured pattern path falls under, or
// "" when none does (or the path has a character no pattern allows).
func (g *Gateway) passthroughPattern(path string) string {
	for _, p := range g.conf().Passthrough.Paths {
		if pathMatches(p, path) && safePath(path) {
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
	pr, apiErr := adapters.ParsePassthroughWith(ct, ctx.PostBody(), g.parseOptions())
	if apiErr != nil {
		g.bodies.note(x, apiErr)
		g.writeError(ctx, apiErr)
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
	st := g.waitCandidates(x)
	a, ok := g.tryNodes(x, &ur, st)
	if !ok {
		g.writeError(ctx, g.noNodeError(x, st))
		return
	}
	g.metrics.upstreamAnswers.Add(1)
	setUpstream(&ctx.Response.Header, x.upstream, x.attempts)
	g.passOn(ctx, a.resp)
	a.resp.Close()
	x.slot.release()
}
