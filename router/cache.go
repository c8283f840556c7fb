package router

import (
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/cache"
	"frontdoor/router/reuse"
)

// The cache side of a request lives in router/reuse; this file turns
// what it found into headers and a replay.

// cacheRequest is what the cache needs to know of x to plan for it; body
// is the client's body (for the hot list), nil when not needed.
func (g *Gateway) cacheRequest(x *exchange, body []byte) reuse.Request {
	rt := g.rt.Load()
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
