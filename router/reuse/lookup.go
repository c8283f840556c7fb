package reuse

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/cache"
	"frontdoor/internal/telemetry"
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
	if r.Endpoint == adapters.EndpointChat && r.Body != nil && c.store != nil && !h.curated && h.tag == "" && h.only == 0 && // a warm-up (tagged, or a lookup) is not the app
		c.params.seen.Add(1)%paramSample == 1 {
		c.params.add(r.Body)
	}
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

// Kind is what Lookup found for a request.
type Kind uint8

const (
	// Bypass: go upstream alone; the answer is not stored.
	Bypass Kind = iota
	// Hit: Found.Answer answers the request.
	Hit
	// Lead: go upstream; Found.Flight takes the answer, for identical
	// requests and the write-back.
	Lead
	// Follow: an identical request is upstream; wait for Found.Flight
	// (FollowFailed when it gets no answer).
	Follow
	// Absent: a lookup-only request missed: it never goes upstream.
	Absent
)

// Found is the result of Lookup.
type Found struct {
	Kind    Kind
	Outcome Outcome // what X-Cache says
	Entry   string  // the entry that answered, or that will hold a Lead's answer
	Flight  *Flight // Lead, Follow
	// A hit's answer, with its usage as stored (the caller marks it cached),
	// its age, and for a semantic hit the similarity.
	Answer     *adapters.Answer
	Age        time.Duration
	Similarity float32
}

// Lookup runs the plan's lookups, exact then semantic, each traced when
// the request is, and tells the caller what to do: answer a Hit, Lead or
// Follow a flight, go upstream alone (Bypass), or answer 204 (Absent).
func (c *Cache) Lookup(obs *telemetry.Request, p *Plan) (f Found) {
	defer func() {
		if f.Kind != Follow { // a follower's hit still counts in the hot list (Flight.Hit)
			p.req, p.body = nil, nil
		}
	}()
	f = Found{Kind: Bypass, Outcome: Outcome{ResultBypass, p.reason}}
	if p.lookup {
		s := obs.Lookup("exact")
		hit := c.lookupExact(p, &f)
		s.LookedUp(hit)
		if !hit && p.lookup && p.semantic { // else lookupSemantic would not look
			s = obs.Lookup("semantic")
			hit = c.lookupSemantic(p, &f)
			s.LookedUpSemantic(hit, p.similarity, p.threshold)
		}
		if hit {
			c.served(p, &f)
			return f
		}
	}
	if p.only != 0 {
		f.Kind, f.Outcome = Absent, Outcome{ResultMiss, ReasonLookupOnly}
		return f
	}
	if !p.store {
		return f
	}
	c.semanticScope(p) // the write-back needs it; the request is gone by then
	if !p.lookupFailed {
		f.Outcome = Outcome{ResultMiss, p.reason} // else a bypass whose answer is still written back
	}
	fl, leader := (*Flight)(nil), true
	if c.conf().Coalesce && p.lookup { // no-cache wants a fresh answer of its own
		fl, leader = c.flights.join(c, p)
	} else {
		fl = c.flights.newFlight(c, p, false)
	}
	if !leader {
		f.Kind, f.Flight = Follow, fl
		return f
	}
	f.Kind, f.Flight, f.Entry = Lead, fl, fl.entryID
	return f
}

// FollowFailed is what a follower of a flight that got no answer does:
// it leads a flight of its own, that no identical request joins.
func (c *Cache) FollowFailed(p *Plan) *Flight {
	p.req, p.body = nil, nil
	return c.flights.newFlight(c, p, false)
}

// Hit is a flight's answer as the exact hit it is about to be, for the
// follower of plan p, once the flight has ended with an answer that its
// write-back stores: the hit is counted as Lookup counts one.
func (f *Flight) Hit(p *Plan) (Found, bool) {
	a := f.Finished()
	if a == nil {
		return Found{}, false
	}
	found := Found{Kind: Hit, Outcome: Outcome{Result: ResultHitExact}, Entry: f.entryID, Answer: a}
	f.c.served(p, &found)
	p.req, p.body = nil, nil
	return found, true
}

// lookupExact fills f from the exact cache on a hit.
func (c *Cache) lookupExact(p *Plan, f *Found) bool {
	if !c.conf().Exact.Enabled {
		return false
	}
	// An identical request may have just been answered, with its write-back
	// still under way: that answer is the exact hit. Look before the store:
	// a flight leaves only once its answer is stored, so one of the two
	// lookups always sees it.
	if fl := c.flights.peek(p.keys.Exact); fl != nil {
		if a := fl.Finished(); a != nil {
			*f = Found{Kind: Hit, Outcome: Outcome{Result: ResultHitExact}, Entry: fl.entryID, Answer: a}
			return true // an answer whose write-back is under way: age 0
		}
	}
	e, err := c.backend.Get(context.Background(), p.keys.Exact)
	if err != nil {
		// A store that is down or bypassed is a bypass; its writes go to the
		// queue, which drops them while the write breaker is open.
		f.Outcome = Outcome{ResultBypass, storeErrorReason(err)}
		p.lookup, p.lookupFailed = false, true
		return false
	}
	if e != nil && e.Namespace == p.namespace {
		*f = Found{Kind: Hit, Outcome: Outcome{Result: ResultHitExact}, Entry: e.ID, Answer: EntryAnswer(e), Age: time.Since(e.Created)}
		return true
	}
	return false
}

// storeErrorReason is the reason of a bypass the store's error caused.
func storeErrorReason(err error) Reason {
	if errors.Is(err, cache.ErrBypassed) || errors.Is(err, cache.ErrUnavailable) {
		return ReasonStoreDown
	}
	return ReasonStoreError
}

// similarityWindow is how far under the lowest similarity that could be
// served or judged a semantic lookup still looks, for the similarity
// histogram.
const similarityWindow = 0.1

// lookupSemantic fills f from a similar cached question on a hit.
func (c *Cache) lookupSemantic(p *Plan, f *Found) bool {
	if !p.lookup || p.only == onlyExact || !c.semanticScope(p) {
		return false
	}
	vec, err := c.backend.Embed(context.Background(), p.keys.Query)
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
	grey := p.threshold - c.verify.greyZone()
	matches, err := c.backend.SearchQuery(context.Background(), p.keys.Scope, p.vq, 4, grey-similarityWindow)
	if err != nil {
		return false
	}
	if len(matches) > 0 {
		c.m.similarity.Update(float64(matches[0].Similarity))
		p.similarity = matches[0].Similarity
	}
	for _, m := range matches {
		if m.Similarity < grey {
			break
		}
		if m.Entry.Namespace != p.namespace {
			continue // the scope hash covers the namespace; this is defence in depth
		}
		if ok, reason := cache.GuardsAllow(c.conf().Semantic.Guards, p.keys.Query, m.Entry.Query); !ok {
			if m.Similarity >= p.threshold {
				c.m.guardRejects(reason).Inc()
				c.log.Debug("cache: semantic candidate rejected", "request_id", p.id, "reason", reason, "entry", m.Entry.ID, "similarity", m.Similarity)
			}
			continue
		}
		a := audit{tenant: p.tenant, model: p.model, cached: m.Entry.Query, asked: p.keys.Query,
			entry: m.Entry.ID, similarity: m.Similarity}
		if c.verify.refused(m.Entry.ID, m.Similarity) {
			continue // judged wrong for a question at least this close
		}
		if m.Similarity < p.threshold {
			if m.Entry.Anchor() && c.verify != nil { // an operator's entry; a promoted one never anchors
				a.promote = c.newPromotion(p)
				p.promote = a.promote
			}
			c.verify.nearMiss(a) // after the miss goes upstream, the judge says whether it would have served
			break
		}
		*f = Found{Kind: Hit, Outcome: Outcome{Result: ResultHitSemantic}, Entry: m.Entry.ID, Answer: EntryAnswer(m.Entry),
			Age: time.Since(m.Entry.Created), Similarity: m.Similarity}
		c.verify.hit(a)
		return true
	}
	return false
}

// served counts a hit: the tokens it saved, and the entry's place in the
// hot list.
func (c *Cache) served(p *Plan, f *Found) {
	c.m.tokensSaved.Add(f.Answer.Usage.TotalTokens)
	if c.hot == nil || p.only != 0 {
		return
	}
	body := p.body
	if p.apiEndpoint == adapters.EndpointResponses {
		body = nil // counted, but not exported: warm files are chat requests
	}
	c.hot.hit(f.Entry, p.tenant, body)
}

// EntryAnswer is the answer an entry holds.
func EntryAnswer(e *cache.Entry) *adapters.Answer {
	return &adapters.Answer{Model: e.Model, Content: e.Content, Reasoning: e.Reasoning, ToolCalls: e.ToolCalls, Finish: e.Finish,
		Usage: adapters.Usage{PromptTokens: e.Usage.PromptTokens, CompletionTokens: e.Usage.CompletionTokens, TotalTokens: e.Usage.TotalTokens}}
}

// Result is what the cache did for a request. It is the X-Cache header,
// the result label of frontdoor_cache_requests_total, the frontdoor.cache
// trace attribute and the access log's cache field.
type Result uint8

const (
	ResultNone        Result = iota // the cache was not consulted (refused before)
	ResultHitExact                  // answered from an identical request's answer
	ResultHitSemantic               // answered from a similar question's answer
	ResultMiss                      // looked up, not found; the answer is stored
	ResultBypass                    // not looked up (Reason says why)
	ResultPartial                   // embeddings: some inputs from the cache, the others from a node
	NumResults                      // how many results there are
)

var (
	resultHeaders = [NumResults]string{"", "hit-exact", "hit-semantic", "miss", "bypass", "partial"}
	resultLabels  = [NumResults]string{"", "hit_exact", "hit_semantic", "miss", "bypass", "partial"}
	// resultHeaderBytes are resultHeaders as bytes, for SetCanonical.
	resultHeaderBytes = func() (b [NumResults][]byte) {
		for i, h := range resultHeaders {
			b[i] = []byte(h)
		}
		return b
	}()
)

// Header is the X-Cache value ("" for ResultNone: no header).
func (r Result) Header() string { return resultHeaders[r] }

// HeaderBytes is Header as bytes; the caller must not change them.
func (r Result) HeaderBytes() []byte { return resultHeaderBytes[r] }

// Label is the metric label value.
func (r Result) Label() string { return resultLabels[r] }

// Reason says why a request's cache use was not the plain one: the reason
// label of frontdoor_cache_requests_total and the frontdoor.cache.reason
// trace attribute.
type Reason uint8

const (
	ReasonNone        Reason = iota // the plain lookup and store
	ReasonOff                       // cache.backend: off
	ReasonNoStore                   // Cache-Control: no-store
	ReasonNoCache                   // Cache-Control: no-cache: stored, not looked up
	ReasonMultimodal                // images or audio, without cache_multimodal
	ReasonN                         // n > 1
	ReasonTemperature               // above eligibility.max_temperature
	ReasonBatchPrompt               // a completion with several prompts
	ReasonDisabled                  // neither exact nor semantic is on
	ReasonStoreError                // the store failed the lookup
	ReasonStoreDown                 // the store is down or its breaker open
	ReasonCoalesced                 // served from an identical request in flight
	ReasonLookupOnly                // X-Cache-Only: answered 204 on a miss
	ReasonPrevResp                  // Responses: previous_response_id continues a stored response
	ReasonServerState               // Responses: a conversation, stored prompt template or item_reference
	ReasonBackground                // Responses: background: true
	ReasonTools                     // Responses: tools, whose calls have effects
	NumReasons                      // how many reasons there are
)

var reasonLabels = [NumReasons]string{"", "off", "no_store", "no_cache", "multimodal", "n", "temperature",
	"batch_prompt", "disabled", "store_error", "store_down", "coalesced", "lookup_only",
	"previous_response_id", "server_state", "background", "tools"}

// Label is the metric label value.
func (r Reason) Label() string { return reasonLabels[r] }

// Outcome is a request's result and reason.
type Outcome struct {
	Result Result
	Reason Reason
}

// Outcomes are the outcomes a request can have; the router's
// TestCacheOutcomes makes each happen, and each has its series from the
// start.
var Outcomes = []Outcome{
	{ResultNone, ReasonNone},
	{ResultHitExact, ReasonNone},
	{ResultHitSemantic, ReasonNone},
	{ResultMiss, ReasonNone},
	{ResultPartial, ReasonNone},
	{ResultMiss, ReasonNoCache},
	{ResultMiss, ReasonCoalesced},
	{ResultMiss, ReasonLookupOnly},
	{ResultBypass, ReasonOff},
	{ResultBypass, ReasonNoStore},
	{ResultBypass, ReasonMultimodal},
	{ResultBypass, ReasonN},
	{ResultBypass, ReasonTemperature},
	{ResultBypass, ReasonBatchPrompt},
	{ResultBypass, ReasonDisabled},
	{ResultBypass, ReasonStoreError},
	{ResultBypass, ReasonStoreDown},
	{ResultBypass, ReasonPrevResp},
	{ResultBypass, ReasonServerState},
	{ResultBypass, ReasonBackground},
	{ResultBypass, ReasonTools},
}
