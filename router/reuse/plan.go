package reuse

import (
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/cache"
)

// Request is what the cache needs to know of one request to plan for it.
// Its Req and Body are read only until Lookup returns.
type Request struct {
	ID        string // the request's id, for log lines
	Endpoint  adapters.Endpoint
	Req       *adapters.Request
	Body      []byte // the client's body, for the hot list
	Tenant    string
	Namespace string // the tenant's cache namespace
	Model     string // the model served (after alias resolution)
	// Threshold is the configured least similarity for a semantic hit, for
	// this tenant and model (the verifier may have raised it).
	Threshold float64
	// ClientThreshold: the tenant may set its own with X-Cache-Threshold.
	ClientThreshold bool
	// Bypass is a feature's reason not to use the cache (the Responses
	// API's state), ReasonNone when it has none: the hook before lookup.
	Bypass Reason
}

// Plan is what the cache does for one request, decided before any
// lookup. Once Lookup has returned it holds copies only, so it outlives
// the request's parse tree (the write-back runs after the handler has
// returned).
type Plan struct {
	req          *adapters.Request // until Lookup returns
	body         []byte            // likewise
	id, tenant   string
	lookup       bool   // look up before going upstream
	store        bool   // write the answer back
	reason       Reason // why lookup or store is off
	keys         cache.Keys
	keyOpt       cache.KeyOptions // as planned: a reload between the two keys must not split them
	namespace    string
	endpoint     string
	apiEndpoint  adapters.Endpoint
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

// Reason is why the plan's lookup or store is off (ReasonNone: neither).
func (p *Plan) Reason() Reason { return p.reason }

// LookupOnly reports whether the request never goes upstream
// (X-Cache-Only).
func (p *Plan) LookupOnly() bool { return p.only != 0 }

// Stores reports whether the answer is written back.
func (p *Plan) Stores() bool { return p.store }

// Lookup-only requests (X-Cache-Only: 1, or exact for exact hits only) are
// answered from the cache or with 204 No Content, and never go upstream.
const (
	onlyAny   byte = 1
	onlyExact byte = 2
)

// Hints are the request headers that shape its cache plan.
type Hints struct {
	noStore, noCache bool
	ttl, threshold   []byte
	only             byte
	tag              string
	curated          bool
}

// HintsOf reads a request's cache headers; curated marks an operator's
// request (warm-up, import): its entry is a vetted answer. The hints hold
// h's bytes: use them within the handler.
func HintsOf(h *fasthttp.RequestHeader, curated bool) Hints {
	var ph Hints
	if v := h.Peek(fasthttp.HeaderCacheControl); len(v) > 0 {
		s := string(v)
		ph.noStore, ph.noCache = containsToken(s, "no-store"), containsToken(s, "no-cache")
	}
	ph.ttl, ph.threshold = h.Peek("X-Cache-TTL"), h.Peek("X-Cache-Threshold")
	switch string(h.Peek("X-Cache-Only")) {
	case "":
	case "exact":
		ph.only = onlyExact
	default:
		ph.only = onlyAny
	}
	ph.tag = cache.ValidTag(h.Peek("X-Cache-Tag"))
	ph.curated = curated
	return ph
}

// ImportHints are the hints of an imported answer tagged tag.
func ImportHints(tag string) Hints {
	return Hints{tag: cache.ValidTag([]byte(tag)), curated: true}
}

func containsToken(list, tok string) bool {
	for _, part := range strings.Split(list, ",") {
		if strings.EqualFold(strings.TrimSpace(part), tok) {
			return true
		}
	}
	return false
}

// Plan decides how the cache treats the request r with headers h.
func (c *Cache) Plan(r Request, h Hints) *Plan {
	conf := c.conf()
	req := r.Req
	p := &Plan{req: r.Req, body: r.Body, id: r.ID, tenant: r.Tenant, namespace: r.Namespace, model: r.Model, apiEndpoint: r.Endpoint,
		ttl: conf.TTL.D(), only: h.only, tag: h.tag, curated: h.curated}
	p.endpoint = cacheEndpoint[r.Endpoint]
	switch {
	case c.store == nil:
		p.reason = ReasonOff
	case h.noStore:
		p.reason = ReasonNoStore
	case r.Bypass != ReasonNone:
		p.reason = r.Bypass
	case req.Multimodal && !conf.Eligibility.CacheMultimodal:
		p.reason = ReasonMultimodal
	case req.N > 1:
		p.reason = ReasonN
	case req.HasTemperature && req.Temperature > conf.Eligibility.MaxTemperature:
		p.reason = ReasonTemperature
	case r.Endpoint == adapters.EndpointCompletion && len(req.Root().GetArray("prompt")) > 1:
		p.reason = ReasonBatchPrompt
	case !conf.Exact.Enabled && !conf.Semantic.Enabled:
		p.reason = ReasonDisabled
	default:
		p.store = true
		p.lookup = !h.noCache
		if h.noCache {
			p.reason = ReasonNoCache
		}
	}
	if !p.store {
		return p
	}
	p.ttl = planTTL(conf, h)
	p.keyOpt = conf.KeyOptions()
	p.keys.Exact = cache.ExactKey(p.namespace, p.model, p.endpoint, req.Root(), p.keyOpt)
	p.semantic = conf.Semantic.Enabled && c.embedder != nil && r.Endpoint != adapters.EndpointCompletion
	if p.semantic {
		thr := c.verify.threshold(r.Tenant, r.Model, r.Threshold)
		if v := h.threshold; len(v) > 0 && r.ClientThreshold {
			if t, err := strconv.ParseFloat(string(v), 64); err == nil && t > 0 && t <= 1 {
				thr = t
			}
		}
		p.threshold = float32(thr)
	}
	return p
}

// cacheEndpoint names an endpoint in the cache's keys and entries (Plan's:
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
func planTTL(c *cache.Config, h Hints) time.Duration {
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

// semanticScope computes the scope on first use (an exact hit never needs
// it) and reports whether a semantic lookup or store applies. A last user
// turn longer than the embedder reads (cache.embedder.max_input_bytes) is
// left to the exact key: its vector would stand for its head and tail
// only, and two texts that differ in the middle must not match.
func (c *Cache) semanticScope(p *Plan) bool {
	if p.semantic && p.keys.Scope == "" {
		p.keys.Scope, p.keys.Query = cache.SemanticScope(p.namespace, p.model, p.endpoint, p.req.Root(), p.keyOpt)
		p.semantic = p.keys.Scope != ""
		if p.semantic && len(p.keys.Query) > c.conf().Embedder.MaxInputBytes {
			c.m.longQueries.Inc()
			p.semantic, p.keys.Scope, p.keys.Query = false, "", ""
		}
	}
	return p.semantic
}
