package router

import (
	"context"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/cache"
)

// cachePlan is what the cache does for one request, decided before any
// lookup. It holds copies only, so it outlives the request's parse tree
// (the write-back runs after the handler has returned).
type cachePlan struct {
	lookup       bool        // look up before going upstream
	store        bool        // write the answer back
	reason       cacheReason // why lookup or store is off
	keys         cache.Keys
	keyOpt       cache.KeyOptions // as planned: a reload between the two keys must not split them
	namespace    string
	endpoint     string
	model        string
	semantic     bool    // a semantic lookup/store applies
	threshold    float32 // least similarity for a semantic hit
	ttl          time.Duration
	vec          []float32       // embedding of keys.Query, once computed
	vq           *cache.VecQuery // vec as the lookup searched it: the write-back reuses its codes and list ranking
	lookupFailed bool            // the lookup failed: a bypass, but the answer is still written back
	only         byte            // X-Cache-Only: onlyAny or onlyExact; the request never goes upstream
	tag          string          // X-Cache-Tag: the stored entry's tag
	curated      bool            // an import or warm-up: the entry is a vetted answer
	similarity   float32         // of the best semantic candidate, for the trace
	promote      *promotion      // a near-miss on a curated entry, for the judge to approve
}

// Lookup-only requests (X-Cache-Only: 1, or exact for exact hits only) are
// answered from the cache or with 204 No Content, and never go upstream.
const (
	onlyAny   byte = 1
	onlyExact byte = 2
)

// planHints are the request headers that shape its cache plan.
type planHints struct {
	noStore, noCache bool
	ttl, threshold   []byte
	only             byte
	tag              string
	curated          bool
}

func hintsOf(ctx *fasthttp.RequestCtx) planHints {
	h := &ctx.Request.Header
	var ph planHints
	ph.noStore, ph.noCache = cacheControl(ctx)
	ph.ttl, ph.threshold = h.Peek("X-Cache-TTL"), h.Peek("X-Cache-Threshold")
	switch string(h.Peek("X-Cache-Only")) {
	case "":
	case "exact":
		ph.only = onlyExact
	default:
		ph.only = onlyAny
	}
	ph.tag = cache.ValidTag(h.Peek("X-Cache-Tag"))
	return ph
}

// cacheControl reads the client's Cache-Control directives.
func cacheControl(ctx *fasthttp.RequestCtx) (noStore, noCache bool) {
	v := ctx.Request.Header.Peek(fasthttp.HeaderCacheControl)
	if len(v) == 0 {
		return false, false
	}
	s := string(v)
	return containsToken(s, "no-store"), containsToken(s, "no-cache")
}

func containsToken(list, tok string) bool {
	for _, part := range strings.Split(list, ",") {
		if strings.EqualFold(strings.TrimSpace(part), tok) {
			return true
		}
	}
	return false
}

// planCache decides how the cache treats the request.
func (g *Gateway) planCache(ctx *fasthttp.RequestCtx, x *exchange) *cachePlan {
	h := hintsOf(ctx)
	h.curated = g.rt.Load().tenants.operator(ctx)
	return g.plan(x, h)
}

// plan decides how the cache treats the request x with headers h.
func (g *Gateway) plan(x *exchange, h planHints) *cachePlan {
	c := &g.conf().Cache
	req := x.req
	p := &cachePlan{namespace: x.tenant.namespace, model: x.model, ttl: c.TTL.D(), only: h.only, tag: h.tag, curated: h.curated}
	p.endpoint = cacheEndpoint[x.endpoint]
	noStore, noCache := h.noStore, h.noCache
	stateful := responsesBypass(x)
	switch {
	case g.store == nil:
		p.reason = reasonOff
	case noStore:
		p.reason = reasonNoStore
	case stateful != reasonNone:
		p.reason = stateful
	case req.Multimodal && !c.Eligibility.CacheMultimodal:
		p.reason = reasonMultimodal
	case req.N > 1:
		p.reason = reasonN
	case req.HasTemperature && req.Temperature > c.Eligibility.MaxTemperature:
		p.reason = reasonTemperature
	case x.endpoint == adapters.EndpointCompletion && len(req.Root().GetArray("prompt")) > 1:
		p.reason = reasonBatchPrompt
	case !c.Exact.Enabled && !c.Semantic.Enabled:
		p.reason = reasonDisabled
	default:
		p.store = true
		p.lookup = !noCache
		if noCache {
			p.reason = reasonNoCache
		}
	}
	if !p.store {
		return p
	}
	p.ttl = planTTL(c, h)
	p.keyOpt = c.KeyOptions()
	p.keys.Exact = cache.ExactKey(p.namespace, p.model, p.endpoint, req.Root(), p.keyOpt)
	p.semantic = c.Semantic.Enabled && g.embedder != nil && x.endpoint != adapters.EndpointCompletion
	if p.semantic {
		thr := g.verify.threshold(x.tenant.name, x.model, semanticThreshold(c.Semantic, x.tenant.cfg, x.model))
		if v := h.threshold; len(v) > 0 && x.tenant.allowThreshold {
			if t, err := strconv.ParseFloat(string(v), 64); err == nil && t > 0 && t <= 1 {
				thr = t
			}
		}
		p.threshold = float32(thr)
	}
	return p
}

// cacheEndpoint names an endpoint in the cache's keys and entries (plan's:
// chat, completions and the Responses API; embeddings have their own plan,
// pass-through paths no cache).
var cacheEndpoint = [adapters.NumEndpoints]string{
	adapters.EndpointChat:       "chat",
	adapters.EndpointCompletion: "completion",
	adapters.EndpointResponses:  "responses",
	adapters.EndpointEmbeddings: cache.EndpointEmbeddings,
}

// planTTL is the TTL of what a request stores: cache.ttl, or the client's
// X-Cache-TTL capped by cache.max_ttl.
func planTTL(c *cache.Config, h planHints) time.Duration {
	if v := h.ttl; len(v) > 0 {
		if secs, err := strconv.Atoi(string(v)); err == nil && secs > 0 {
			maxTTL := c.MaxTTL.D()
			if maxTTL <= 0 {
				maxTTL = c.TTL.D()
			}
			return min(time.Duration(secs)*time.Second, maxTTL)
		}
	}
	return c.TTL.D()
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

// lookup runs the cache lookups, exact then semantic, each traced when the
// request is.
func (g *Gateway) lookup(ctx *fasthttp.RequestCtx, x *exchange, p *cachePlan) bool {
	s := x.obs.Lookup("exact")
	hit := g.lookupExact(ctx, x, p)
	s.LookedUp(hit)
	if hit || !p.lookup || !p.semantic { // lookupSemantic would not look
		return hit
	}
	s = x.obs.Lookup("semantic")
	hit = g.lookupSemantic(ctx, x, p)
	s.LookedUpSemantic(hit, p.similarity, p.threshold)
	return hit
}

// lookupExact answers the request from the exact cache on a hit.
func (g *Gateway) lookupExact(ctx *fasthttp.RequestCtx, x *exchange, p *cachePlan) bool {
	if g.conf().Cache.Exact.Enabled {
		// An identical request may have just been answered, with its
		// write-back still under way: that answer is the exact hit. Look
		// before the store: a flight leaves only once its answer is stored,
		// so one of the two lookups always sees it.
		if f := g.flights.peek(p.keys.Exact); f != nil {
			if a := f.finished(); a != nil {
				g.serveFlightAnswer(ctx, x, f, a)
				return true
			}
		}
		e, err := g.storeGet(p.keys.Exact)
		if err != nil {
			// A store that is down or bypassed is a bypass; its writes go to
			// the queue, which drops them while the write breaker is open.
			reason := reasonStoreError
			if errors.Is(err, cache.ErrBypassed) || errors.Is(err, cache.ErrUnavailable) {
				reason = reasonStoreDown
			}
			x.setCache(&ctx.Response.Header, cacheOutcome{resultBypass, reason}, "")
			p.lookup, p.lookupFailed = false, true
			return false
		}
		if e != nil && e.Namespace == p.namespace {
			g.serveEntry(ctx, x, e, resultHitExact, 0)
			return true
		}
	}
	return false
}

// lookupSemantic answers the request from a similar cached one on a hit.
func (g *Gateway) lookupSemantic(ctx *fasthttp.RequestCtx, x *exchange, p *cachePlan) bool {
	if !p.lookup || p.only == onlyExact || !g.semanticScope(x, p) {
		return false
	}
	vec, err := g.backend.Embed(context.Background(), p.keys.Query)
	if err != nil {
		p.semantic = false // the exact cache still works; counted and logged by the backend's observer
		return false
	}
	p.vec, p.vq = vec, cache.NewVecQuery(vec)
	// A candidate from grey up is judged even when it misses; one below it
	// is neither served nor judged (the guards only see candidates at or
	// above grey too). The search still looks similarityWindow lower, so
	// that frontdoor_cache_similarity shows the near misses a threshold is
	// tuned by; below that it skips (the threshold search's saving).
	grey := p.threshold - g.verify.greyZone()
	matches, err := g.storeSearch(p.keys.Scope, p.vq, grey-similarityWindow)
	if err != nil {
		return false
	}
	if len(matches) > 0 {
		g.cm.similarity.Update(float64(matches[0].Similarity))
		p.similarity = matches[0].Similarity
	}
	for _, m := range matches {
		if m.Similarity < grey {
			break
		}
		if m.Entry.Namespace != p.namespace {
			continue // the scope hash covers the namespace; this is defence in depth
		}
		if ok, reason := cache.GuardsAllow(g.conf().Cache.Semantic.Guards, p.keys.Query, m.Entry.Query); !ok {
			if m.Similarity >= p.threshold {
				g.cm.guardRejects(reason).Inc()
				g.log.Debug("cache: semantic candidate rejected", "request_id", x.id, "reason", reason,
					"entry", m.Entry.ID, "similarity", m.Similarity)
			}
			continue
		}
		a := audit{tenant: x.tenant.name, model: x.model, cached: m.Entry.Query, asked: p.keys.Query,
			entry: m.Entry.ID, similarity: m.Similarity}
		if g.verify.refused(m.Entry.ID, m.Similarity) {
			continue // judged wrong for a question at least this close
		}
		if m.Similarity < p.threshold {
			if m.Entry.Anchor() && g.verify != nil { // an operator's entry; a promoted one never anchors
				a.promote = g.newPromotion(p)
				p.promote = a.promote
			}
			g.verify.nearMiss(a) // after the miss goes upstream, the judge says whether it would have served
			break
		}
		g.serveEntry(ctx, x, m.Entry, resultHitSemantic, m.Similarity)
		g.verify.hit(a)
		return true
	}
	return false
}

// semanticScope computes the scope on first use (an exact hit never needs
// it) and reports whether a semantic lookup or store applies. A last user
// turn longer than the embedder reads (cache.embedder.max_input_bytes) is
// left to the exact key: its vector would stand for its head and tail
// only, and two texts that differ in the middle must not match.
func (g *Gateway) semanticScope(x *exchange, p *cachePlan) bool {
	if p.semantic && p.keys.Scope == "" {
		p.keys.Scope, p.keys.Query = cache.SemanticScope(p.namespace, p.model, p.endpoint, x.req.Root(), p.keyOpt)
		p.semantic = p.keys.Scope != ""
		if p.semantic && len(p.keys.Query) > g.conf().Cache.Embedder.MaxInputBytes {
			g.cm.longQueries.Inc()
			p.semantic, p.keys.Scope, p.keys.Query = false, "", ""
		}
	}
	return p.semantic
}

func (g *Gateway) storeGet(key string) (*cache.Entry, error) {
	return g.backend.Get(context.Background(), key)
}

// similarityWindow is how far under the lowest similarity that could be
// served or judged a semantic lookup still looks, for the similarity
// histogram.
const similarityWindow = 0.1

// storeSearch returns up to 4 candidates of scope of similarity at least
// minSim, most similar first.
func (g *Gateway) storeSearch(scope string, q *cache.VecQuery, minSim float32) ([]cache.Match, error) {
	return g.backend.SearchQuery(context.Background(), scope, q, 4, minSim)
}

func entryAnswer(e *cache.Entry) *adapters.Answer {
	return &adapters.Answer{Model: e.Model, Content: e.Content, Reasoning: e.Reasoning, ToolCalls: e.ToolCalls, Finish: e.Finish,
		Usage: adapters.Usage{PromptTokens: e.Usage.PromptTokens, CompletionTokens: e.Usage.CompletionTokens, TotalTokens: e.Usage.TotalTokens}}
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

// serveEntry answers from a cache entry, as SSE or JSON as the client asked,
// with a fresh id and created time.
func (g *Gateway) serveEntry(ctx *fasthttp.RequestCtx, x *exchange, e *cache.Entry, result cacheResult, similarity float32) {
	h := &ctx.Response.Header
	x.setCache(h, cacheOutcome{result: result}, e.ID)
	h.Set("X-Cache-Age", strconv.FormatInt(int64(time.Since(e.Created).Seconds()), 10))
	if result == resultHitSemantic {
		h.Set("X-Cache-Similarity", strconv.FormatFloat(float64(similarity), 'f', 4, 32))
		h.Set("X-Cache-Matched", e.ID) // GET /admin/cache/{id} shows what it answered
	}
	g.cm.tokensSaved.Add(e.Usage.TotalTokens)
	g.metrics.countTokens(x.tenant.name, "cache", e.Usage.PromptTokens, e.Usage.CompletionTokens)
	g.countHit(ctx, x, e.ID)
	g.replay(ctx, x, servedFromCache(h, entryAnswer(e)))
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

// serveFlightAnswer answers from a finished flight whose answer is being
// stored: the hit it is about to be.
func (g *Gateway) serveFlightAnswer(ctx *fasthttp.RequestCtx, x *exchange, f *flight, a *adapters.Answer) {
	x.setCache(&ctx.Response.Header, cacheOutcome{result: resultHitExact}, f.entryID)
	ctx.Response.Header.Set("X-Cache-Age", "0")
	g.cm.tokensSaved.Add(a.Usage.TotalTokens)
	g.metrics.countTokens(x.tenant.name, "cache", a.Usage.PromptTokens, a.Usage.CompletionTokens)
	g.countHit(ctx, x, f.entryID)
	g.replay(ctx, x, servedFromCache(&ctx.Response.Header, a))
}

// replay renders an assembled answer to the client.
func (g *Gateway) replay(ctx *fasthttp.RequestCtx, x *exchange, a *adapters.Answer) {
	id, now := newCompletionID(x.endpoint), time.Now().Unix()
	g.noteReplayed(x, id, now, a)
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
	setStreamBody(ctx, func(w flushWriter) {
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

// writeBack hands a finished answer to the backend's write queue; the
// flight is retired once the answer is stored or dropped. It runs after the
// client has its answer.
func (g *Gateway) writeBack(f *flight, p *cachePlan, a *adapters.Answer) {
	if g.flights.stale(f) {
		g.flights.leave(f)
		g.writtenBack(p.promote, nil)
		return
	}
	w, ok := g.cacheWrite(f, p, a)
	if !ok {
		g.flights.leave(f)
		g.writtenBack(p.promote, nil)
		return
	}
	g.backend.Enqueue(w, func(err error) {
		g.flights.leave(f)
		if err != nil {
			g.writtenBack(p.promote, nil)
		} else {
			g.writtenBack(p.promote, &w)
		}
	})
}

// storable reports whether the answer a to a request of plan p may be
// stored (and so served to an identical request before it is).
func (g *Gateway) storable(p *cachePlan, a *adapters.Answer) bool {
	return a != nil && p != nil && p.store && (len(a.ToolCalls) == 0 || g.conf().Cache.Eligibility.CacheToolCalls)
}

// cacheWrite builds the write for an answer, embedding the query when the
// lookup did not. ok is false when there is nothing to store.
func (g *Gateway) cacheWrite(f *flight, p *cachePlan, a *adapters.Answer) (w cache.Write, ok bool) {
	if !g.storable(p, a) {
		return w, false
	}
	vec := p.vec
	if p.semantic && vec == nil {
		vec, _ = g.backend.Embed(context.Background(), p.keys.Query)
	}
	e := &cache.Entry{ID: f.entryID, Namespace: p.namespace, Model: a.Model, Endpoint: p.endpoint,
		Content: a.Content, Reasoning: a.Reasoning, ToolCalls: a.ToolCalls, Finish: a.Finish,
		Usage:   cache.Usage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens, TotalTokens: a.Usage.TotalTokens},
		Created: time.Now(), ExactKey: p.keys.Exact, Tag: p.tag, Curated: p.curated}
	if e.Model == "" {
		e.Model = p.model
	}
	if !g.conf().Cache.Exact.Enabled {
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
