package router

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/balancer"
	"frontdoor/internal/telemetry"
	"frontdoor/router/reuse"

	"github.com/valyala/fasthttp"
)

type exchange struct {
	start        time.Time
	id           string
	endpoint     adapters.Endpoint
	req          *adapters.Request
	tenant       *tenant
	model        string // after alias resolution
	upstream     string
	attempts     int
	status       int
	cache        reuse.Outcome     // set through setCache
	spillRefused bool              // spill-over would have applied but the tenant may not leave
	spillSkipped bool              // spill-over would have applied but not to this endpoint
	pass         *admission.Pass   // the tenant's rate and concurrency admission
	charge       *admission.Charge // the token charge of a miss
	streamOwned  bool              // a stream writer settles and releases at its end
	streamEvents int               // events pumped to the client, for the per-token time
	slot         heldSlot          // the node or spill-over slot of the current attempt
	plan         *reuse.Plan
	flight       *reuse.Flight            // the flight x leads
	finished     bool                     // finish ran
	tries        attempts                 // where forward stands
	prefix       *balancer.Prefix         // the prompt's prefix hashes (prefix weight > 0)
	prefixDone   bool                     // prefix was computed
	hints        balancer.Hints           // what the picker and the TTFT predictor know of the prompt
	pred         balancer.Prediction      // the TTFT predicted on the node of the current attempt
	upstreamReq  adapters.UpstreamRequest // what toUpstream built
	entryID      string                   // the cache entry that answered, or will hold the answer
	obs          *telemetry.Request       // the request's trace; nil (a no-op) when untraced
	upCtx        context.Context          // bounds the waits and calls upstream (the judge's timeout); nil: none
}

// upstreamCtx is what bounds x's waits for a slot and its calls upstream:
// a client's request is bounded by the timeouts alone.
func (x *exchange) upstreamCtx() context.Context {
	if x.upCtx != nil {
		return x.upCtx
	}
	return context.Background()
}

// newExchange starts a request's exchange with ep, traced when tracing is
// on.
func (g *Gateway) newExchange(ctx *fasthttp.RequestCtx, ep adapters.Endpoint, id string) *exchange {
	x := &exchange{start: time.Now(), id: id, endpoint: ep}
	x.obs = g.tracer.StartRequest(&ctx.Request.Header, ep, id, ctx.Path(), x.start)
	return x
}

func (g *Gateway) serveInference(ctx *fasthttp.RequestCtx, ep adapters.Endpoint, id string) {
	x := g.newExchange(ctx, ep, id)
	defer func() { g.finish(ctx, x, recover()) }()
	ur, leader := g.prepare(ctx, x)
	if leader != nil {
		ur = g.rejoin(ctx, x, leader)
	}
	if ur != nil {
		g.forward(ctx, x, ur)
	}
}

// prepare runs a request up to its trip upstream: it validates, admits and
// looks it up in the cache. It returns the upstream request, or nil when
// the client has its answer already, or the flight of an identical request
// in progress that x must follow (see rejoin).
func (g *Gateway) prepare(ctx *fasthttp.RequestCtx, x *exchange) (*adapters.UpstreamRequest, *reuse.Flight) {
	if !g.admitAndPlan(ctx, x) {
		return nil, nil
	}
	found := g.cache.Lookup(x.obs, x.plan)
	x.setCache(&ctx.Response.Header, found.Outcome, found.Entry)
	switch found.Kind {
	case reuse.Hit:
		g.serveHit(ctx, x, found)
		return nil, nil
	case reuse.Absent:
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return nil, nil
	case reuse.Follow:
		return nil, found.Flight
	}
	x.flight = found.Flight // nil on a bypass
	return g.toUpstream(ctx, x), nil
}

// admitAndPlan validates and admits the request and plans its cache use
// (x.plan). It returns false when the client has its answer (an error).
func (g *Gateway) admitAndPlan(ctx *fasthttp.RequestCtx, x *exchange) bool {
	if !g.enter(ctx, x, true) {
		return false
	}
	req, apiErr := adapters.ParseRequestWith(x.endpoint, ctx.PostBody(), g.parseOptions())
	if apiErr != nil {
		g.bodies.note(x, apiErr)
		g.writeError(ctx, apiErr)
		return false
	}
	x.req = req // finish releases it
	x.obs.Parsed(x.endpoint, req, x.tenant.name)
	if !g.resolveModel(ctx, x, req.Model) {
		return false
	}
	bypass, ok := g.hooks.beforeLookup(ctx, x)
	if !ok {
		return false
	}
	curated := g.rt.Load().tenants.operator(ctx)
	cr := g.cacheRequest(x, ctx.PostBody())
	cr.Bypass = bypass
	x.plan = g.cache.Plan(cr, reuse.HintsOf(&ctx.Request.Header, curated))
	x.setCache(&ctx.Response.Header, reuse.Outcome{Result: reuse.ResultBypass, Reason: x.plan.Reason()}, "")
	return true
}

// enter takes a POST request in: it names its tenant (x.tenant), admits
// it by the tenant's rate and concurrency (x.pass), and checks the body's
// size and, when json, its content type. It writes the error and returns
// false when the request may not go on.
func (g *Gateway) enter(ctx *fasthttp.RequestCtx, x *exchange, json bool) bool {
	if !ctx.IsPost() {
		g.onlyMethod(ctx, fasthttp.MethodPost)
		return false
	}
	t, apiErr := g.rt.Load().tenants.resolve(ctx)
	if apiErr != nil {
		g.writeError(ctx, apiErr)
		return false
	}
	x.tenant = t
	as := x.obs.Admission("admission")
	pass, rej := g.adm.Enter(context.Background(), t.name)
	if rej != nil {
		as.Rejected(rej.Limit)
		g.writeError(ctx, errRejected(rej))
		return false
	}
	as.End()
	x.pass = pass
	q, limited := pass.Quota()
	setRateLimit(&ctx.Response.Header, "requests", q, limited)
	if json && !isJSON(ctx.Request.Header.ContentType()) {
		g.writeError(ctx, errUnsupportedMediaType(ctx.Request.Header.ContentType()))
		return false
	}
	if len(ctx.PostBody()) > int(g.conf().Limits.MaxBodyBytes) {
		g.writeError(ctx, g.tooLarge())
		return false
	}
	return true
}

// resolveModel checks that x's tenant may use model and maps it to the
// model served (x.model): an alias picks its target. It writes the error
// and returns false otherwise.
func (g *Gateway) resolveModel(ctx *fasthttp.RequestCtx, x *exchange, model string) bool {
	if !x.tenant.allows(model) {
		g.writeError(ctx, errModelNotAllowed(x.tenant.name, model))
		return false
	}
	served, ok := g.pool.Resolve(model, x.id)
	if !ok {
		g.writeError(ctx, adapters.NotFound("model", "The model `"+model+"` does not exist"))
		return false
	}
	x.model = served
	return true
}

// rejoin waits for the flight f of an identical request and serves its
// answer; when f got none, x goes upstream itself. It blocks.
func (g *Gateway) rejoin(ctx *fasthttp.RequestCtx, x *exchange, f *reuse.Flight) *adapters.UpstreamRequest {
	if g.follow(ctx, x, f) {
		return nil
	}
	x.flight = g.cache.FollowFailed(x.plan) // the leader failed: go alone
	ctx.Response.Header.Del("X-Coalesced")
	x.setCache(&ctx.Response.Header, x.cache, x.flight.EntryID())
	return g.toUpstream(ctx, x)
}

// toUpstream admits a miss and builds its upstream request (nil: refused,
// the error is written).
func (g *Gateway) toUpstream(ctx *fasthttp.RequestCtx, x *exchange) *adapters.UpstreamRequest {
	if !g.admitMiss(ctx, x) {
		g.failFlight(x)
		return nil
	}
	req, model := x.req, x.model
	body := req.UpstreamBody(model)
	x.upstreamReq = adapters.UpstreamRequest{Endpoint: x.endpoint, Body: body, Stream: req.Stream, RequestID: x.id, Model: model}
	return &x.upstreamReq
}

// admitMiss charges a request that is going upstream against the token and
// global budgets, after checking it fits the model's context window. It
// writes the error and returns false when the request may not go on.
func (g *Gateway) admitMiss(ctx *fasthttp.RequestCtx, x *exchange) bool {
	req := x.req
	maxLen := g.rt.Load().maxModelLen[x.model]
	promptTokens := 0
	if maxLen > 0 || g.adm.CountsTokens(x.tenant.name) {
		promptTokens = admission.CountTokens(req.PromptText())
	}
	if maxLen > 0 && promptTokens+req.MaxTokens > maxLen {
		g.writeError(ctx, adapters.BadRequest("messages", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, promptTokens+req.MaxTokens, promptTokens, req.MaxTokens)))
		return false
	}
	return g.chargeTokens(ctx, x, g.adm.UpfrontTokens(promptTokens, req.MaxTokens, req.N))
}

// chargeTokens admits a request going upstream against the global request
// rate and the token budgets, charging tokens up front (x.charge, settled
// when the answer ends). It writes the error and returns false when the
// request may not go on.
func (g *Gateway) chargeTokens(ctx *fasthttp.RequestCtx, x *exchange, tokens int) bool {
	as := x.obs.Admission("admission tokens")
	charge, rej := g.adm.AdmitMiss(context.Background(), x.tenant.name, tokens)
	if rej != nil {
		as.Rejected(rej.Limit)
		g.writeError(ctx, errRejected(rej))
		return false
	}
	as.End()
	x.charge = charge
	q, limited := charge.Quota()
	setRateLimit(&ctx.Response.Header, "tokens", q, limited)
	return true
}

// handOff moves the admission release and the settlement to a stream
// writer, which calls done on what it returns when the stream ends with
// the total tokens used (negative: unknown).
func (x *exchange) handOff() handedOff {
	x.streamOwned = true
	return handedOff{x.pass, x.charge, x.obs}
}

// handedOff is what a stream writer settles and releases at its end.
type handedOff struct {
	pass   *admission.Pass
	charge *admission.Charge
	obs    *telemetry.Request
}

func (h handedOff) done(usage int) {
	if h.charge != nil {
		h.charge.Settle(usage)
	}
	h.pass.Release()
	h.obs.End()
}

// attempts is how far forward has got through the candidate nodes.
// heldSlot is the node or spill-over slot an exchange holds; release frees
// it once, whichever path (answer, error, stream end, panic) gets there
// first.
type heldSlot struct {
	node     *balancer.Node
	inflight *atomic.Int64
	held     atomic.Bool
}

func (s *heldSlot) hold(n *balancer.Node, inflight *atomic.Int64) {
	s.node, s.inflight = n, inflight
	s.held.Store(true)
}

func (s *heldSlot) release() {
	if !s.held.CompareAndSwap(true, false) {
		return
	}
	if s.node != nil {
		s.node.Release()
	}
	if s.inflight != nil {
		s.inflight.Add(-1)
	}
}
