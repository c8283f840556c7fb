package router

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/reply"
	"frontdoor/internal/streambody"
	"frontdoor/internal/telemetry"
	"frontdoor/router/reuse"
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
	req, apiErr := adapters.ParseRequestWith(x.endpoint, ctx.PostBody(), g.bodies.parseOptions(&g.conf().Limits))
	if apiErr != nil {
		g.bodies.note(x, apiErr)
		reply.Error(ctx, apiErr)
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
	cr := cacheRequest(g.rt.Load(), x, ctx.PostBody())
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
		reply.OnlyMethod(ctx, fasthttp.MethodPost)
		return false
	}
	t, apiErr := g.rt.Load().tenants.resolve(ctx)
	if apiErr != nil {
		reply.Error(ctx, apiErr)
		return false
	}
	x.tenant = t
	as := x.obs.Admission("admission")
	pass, rej := g.adm.Enter(context.Background(), t.name)
	if rej != nil {
		as.Rejected(rej.Limit)
		reply.Error(ctx, reply.Rejected(rej))
		return false
	}
	as.End()
	x.pass = pass
	q, limited := pass.Quota()
	if limited {
		reply.RateLimit(&ctx.Response.Header, "requests", q.Limit, q.Remaining, q.Reset)
	}
	if json && !isJSON(ctx.Request.Header.ContentType()) {
		reply.Error(ctx, reply.UnsupportedMediaType(ctx.Request.Header.ContentType()))
		return false
	}
	if len(ctx.PostBody()) > int(g.conf().Limits.MaxBodyBytes) {
		reply.Error(ctx, reply.BodyTooLarge(int64(g.conf().Limits.MaxBodyBytes)))
		return false
	}
	return true
}

// resolveModel checks that x's tenant may use model and maps it to the
// model served (x.model): an alias picks its target. It writes the error
// and returns false otherwise.
func (g *Gateway) resolveModel(ctx *fasthttp.RequestCtx, x *exchange, model string) bool {
	if !x.tenant.allows(model) {
		reply.Error(ctx, reply.ModelNotAllowed(x.tenant.name, model))
		return false
	}
	served, ok := g.pool.Resolve(model, x.id)
	if !ok {
		reply.Error(ctx, adapters.NotFound("model", "The model `"+model+"` does not exist"))
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
		x.failFlight()
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
		reply.Error(ctx, adapters.BadRequest("messages", fmt.Sprintf(
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
		reply.Error(ctx, reply.Rejected(rej))
		return false
	}
	as.End()
	x.charge = charge
	q, limited := charge.Quota()
	if limited {
		reply.RateLimit(&ctx.Response.Header, "tokens", q.Limit, q.Remaining, q.Reset)
	}
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

// bodyRefusals counts and logs the request bodies refused because two
// readers could take them to mean different things (see
// adapters.ParseRequest): a duplicate key, invalid UTF-8 or a lone
// surrogate escape. Other JSON errors are only counted in
// frontdoor_requests_total.
//
// It is also the gate of every body's parse (adapters.ParseGate): the
// bodies parsed at once share limits.parse_budget_bytes (see parseOptions).
type bodyRefusals struct {
	bodyMetrics
	log    *telemetry.RateLog
	budget *admission.ByteBudget
	// collecting: a collection started by ReleaseParse runs.
	collecting atomic.Bool
}

func newBodyRefusals(set *metrics.Set, log *slog.Logger) *bodyRefusals {
	def := DefaultConfig().Limits
	b := &bodyRefusals{log: telemetry.NewRateLog(log, 10*time.Second),
		budget: admission.NewByteBudget(int64(def.ParseBudgetBytes), def.ParseWait.D())}
	b.bodyMetrics = newBodyMetrics(set, b.budget)
	return b
}

// parseOptions are the bounds and the gate of a request body's parse: the
// one point where every body (inference, embeddings, pass-through) meets
// limits.max_messages, max_content_parts, max_token_ids and the parse
// budget.
func (b *bodyRefusals) parseOptions(l *Limits) adapters.ParseOptions {
	b.budget.Set(int64(l.ParseBudgetBytes), l.ParseWait.D()) // a no-op unless a reload changed them
	return adapters.ParseOptions{
		Limits: adapters.BodyLimits{MaxMessages: l.MaxMessages, MaxContentParts: l.MaxContentParts, MaxTokenIDs: l.MaxTokenIDs},
		Gate:   b,
	}
}

// AcquireParse implements adapters.ParseGate: a body is parsed once its
// estimated cost fits the parse budget. A body that never fits is a 413;
// a budget that stays full for limits.parse_wait is a 503 with
// Retry-After, counted (frontdoor_parse_budget_refused_total) and logged.
func (b *bodyRefusals) AcquireParse(cost int64) *adapters.APIError {
	err := b.budget.Acquire(context.Background(), cost)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, admission.ErrOverBudget):
		return &adapters.APIError{Status: 413, Type: adapters.TypeInvalidRequest, Code: "request_too_complex",
			Message: "the request body would take about " + mib(cost) + " of memory to parse, more than limits.parse_budget_bytes (" +
				mib(b.budget.Capacity()) + ") allows: send fewer messages, inputs or token ids"}
	}
	st := b.budget.Status()
	b.log.Warn("body:parse-budget", "request body refused: the parse budget stayed full",
		"cost_bytes", cost, "in_use_bytes", st.InUseBytes, "capacity_bytes", st.CapacityBytes, "refused", st.Refused)
	return &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "parse_budget_full", RetryAfter: 1,
		Message: "the gateway is holding too many large request bodies at once (limits.parse_budget_bytes, " +
			mib(st.CapacityBytes) + "); retry after the Retry-After delay"}
}

// mib is n bytes in MiB, for a message.
func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }

// ReleaseParse implements adapters.ParseGate. A large parse's memory (its
// tree, the copies of its body) is collected at once rather than when the
// heap has doubled: with the default GOGC a few large bodies in a row would
// otherwise take twice their memory (bench/bodymem).
func (b *bodyRefusals) ReleaseParse(cost int64) {
	b.budget.Release(cost)
	if cost >= collectAfterCost && b.collecting.CompareAndSwap(false, true) {
		go func() {
			runtime.GC()
			b.collecting.Store(false)
		}()
	}
}

// collectAfterCost is the parse cost from which its release runs the
// garbage collector (see ReleaseParse): a body of a few MB.
const collectAfterCost = 8 << 20

// note counts e when it refused an ambiguous body.
func (b *bodyRefusals) note(x *exchange, e *adapters.APIError) {
	c := b.counts[e.Code]
	if c == nil {
		return
	}
	c.Inc()
	b.log.Warn("body:"+e.Code, "request body refused: two JSON readers could read it differently",
		"request_id", x.id, "tenant", x.tenant.name, "reason", e.Code, "error", e.Message)
}

// The cache side of a request lives in router/reuse; this file turns
// what it found into headers and a replay.

// cacheConf reads the cache section of the configuration in force.
func cacheConf(rt *atomic.Pointer[liveConfig]) func() *cache.Config {
	return func() *cache.Config { return &rt.Load().cfg.Cache }
}

// cacheRequest is what the cache needs to know of x to plan for it; body
// is the client's body (for the hot list), nil when not needed.
func cacheRequest(rt *liveConfig, x *exchange, body []byte) reuse.Request {
	return reuse.Request{ID: x.id, Endpoint: x.endpoint, Req: x.req, Body: body, Tenant: x.tenant.name,
		Namespace: x.tenant.namespace, Model: x.model, ClientThreshold: x.tenant.allowThreshold,
		Threshold: semanticThreshold(rt.cfg.Cache.Semantic, x.tenant.cfg, x.model)}
}

// semanticThreshold is the least similarity for a semantic hit, most
// specific first: the tenant's for the model, the tenant's, the cache's
// for the model, the cache's.
func semanticThreshold(c cache.SemanticConfig, t Tenant, model string) float64 {
	if v, ok := t.CacheModelThresholds[model]; ok {
		return v
	}
	if t.CacheThreshold > 0 {
		return t.CacheThreshold
	}
	if v, ok := c.ModelThresholds[model]; ok {
		return v
	}
	return c.Threshold
}

// semanticThreshold is the package's semanticThreshold for the tenant
// named tenant (none: the cache's) and model.
func (rt *liveConfig) semanticThreshold(tenant, model string) float64 {
	var tc Tenant
	if t := rt.tenants.byName[tenant]; t != nil {
		tc = t.cfg
	}
	return semanticThreshold(rt.cfg.Cache.Semantic, tc, model)
}

// headerCacheEntry names the entry that answered, or that will hold the
// answer of a miss.
var headerCacheEntry = []byte("X-Cache-Entry")

// setCache records what the cache did for x, and the response headers
// that say it: X-Cache, and X-Cache-Entry when entry is not "". The
// metric and the trace take the outcome from x when the request ends
// (finish), so the three always agree.
func (x *exchange) setCache(h *fasthttp.ResponseHeader, o reuse.Outcome, entry string) {
	x.cache = o
	if o.Result != reuse.ResultNone {
		h.SetCanonical(headerCache, o.Result.HeaderBytes())
	}
	if entry != "" {
		x.entryID = entry
		h.SetCanonical(headerCacheEntry, []byte(entry))
	}
}

// serveHit answers from the cache, as SSE or JSON as the client asked,
// with a fresh id and created time.
func (g *Gateway) serveHit(ctx *fasthttp.RequestCtx, x *exchange, f reuse.Found) {
	h := &ctx.Response.Header
	x.setCache(h, f.Outcome, f.Entry)
	h.Set("X-Cache-Age", strconv.FormatInt(int64(f.Age.Seconds()), 10))
	if f.Outcome.Result == reuse.ResultHitSemantic {
		h.Set("X-Cache-Similarity", strconv.FormatFloat(float64(f.Similarity), 'f', 4, 32))
		h.Set("X-Cache-Matched", f.Entry) // GET /admin/cache/{id} shows what it answered
	}
	g.metrics.countTokens(x.tenant.name, "cache", f.Answer.Usage.PromptTokens, f.Answer.Usage.CompletionTokens)
	g.replay(ctx, x, servedFromCache(h, f.Answer))
}

// headerCached names the prompt tokens the cache served, on a hit (a
// partly cached embeddings batch included) and only then.
const headerCached = "X-Frontdoor-Cached"

// servedFromCache is a hit's answer as it is replayed: its original usage,
// every prompt token marked cached (usage.prompt_tokens_details.cached_tokens,
// and the X-Frontdoor-Cached header). a is not changed: a flight's answer
// is shared. See docs/endpoints.md#usage-on-cache-hits.
func servedFromCache(h *fasthttp.ResponseHeader, a *adapters.Answer) *adapters.Answer {
	c := *a
	c.Usage.CachedTokens = c.Usage.PromptTokens
	h.Set(headerCached, strconv.Itoa(c.Usage.CachedTokens))
	return &c
}

func newCompletionID(ep adapters.Endpoint) string {
	var b [12]byte
	for i := 0; i < len(b); i += 8 {
		v := rand.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	switch ep {
	case adapters.EndpointCompletion:
		return "cmpl-" + hex.EncodeToString(b[:])
	case adapters.EndpointResponses:
		return "resp_" + hex.EncodeToString(b[:])
	}
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

// replay renders an assembled answer to the client.
func (g *Gateway) replay(ctx *fasthttp.RequestCtx, x *exchange, a *adapters.Answer) {
	id, now := newCompletionID(x.endpoint), time.Now().Unix()
	g.hooks.replayed(x, id, now, a)
	if !x.req.Stream {
		ctx.SetContentType("application/json")
		ctx.Response.SetBodyRaw(adapters.AppendCompletionJSON(make([]byte, 0, 256+len(a.Content)), x.endpoint, id, now, a))
		return
	}
	events := adapters.StreamEvents(x.endpoint, id, now, a, g.conf().Cache.StreamReplay.ChunkTokens, x.req.IncludeUsage)
	pace := g.conf().Cache.StreamReplay.Pace.D()
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	handed := x.handOff()
	streambody.Set(ctx, func(w streambody.Writer) {
		defer handed.done(-1)
		for i, ev := range events {
			if _, err := w.Write(ev); err != nil {
				return
			}
			if pace > 0 && i < len(events)-1 {
				if w.Flush() != nil {
					return
				}
				time.Sleep(pace)
			}
		}
		_ = w.Flush()
	})
}
